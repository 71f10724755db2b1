//! The last hour of a few of this process's own metrics, for the console's charts: read every [`EVERY`] from
//! the recorder `/metrics` renders, so the embedded default charts its pipeline with no Prometheus beside it.
//! Each node keeps its own (a chart behind a balancer is the answering node's, which the answer names);
//! gauges the relay exports (the outbox) read the same on every node. The alert thresholds drawn on the
//! charts are read from the shipped alert rules, so a chart and a page never disagree.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use utoipa::ToSchema;

use super::metrics::{
    DEAD_LETTERS, OUTBOX_OLDEST_SECONDS, OUTBOX_ROWS, PLUGIN_CALLS, PROJECTION_LAG_SECONDS, RATE_LIMIT_DECISIONS,
    RELAY_PUBLISHED,
};
use crate::util::time::now_ms;

/// How often the history takes a point.
pub const EVERY: Duration = Duration::from_secs(10);
/// Points kept per series: an hour.
const KEPT: usize = 360;
/// The shipped alert rules (`ops/prometheus/strand-alerts.yml`), for the thresholds drawn on the charts.
const ALERT_RULES: &str = include_str!("../../../ops/prometheus/strand-alerts.yml");

/// One chart: what it shows, its alert threshold if one pages on it, and its points, oldest first.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Series {
    /// A stable name (`outbox_oldest_seconds`, `writes_per_second`…).
    pub name: &'static str,
    pub title: &'static str,
    pub unit: &'static str,
    /// The value past which the shipped alert rule fires (it also asks for a duration), if one does.
    pub threshold: Option<f64>,
    /// `[unix milliseconds, value]`.
    pub points: Vec<(i64, f64)>,
}

/// What the console charts, and from which metrics.
struct Chart {
    name: &'static str,
    title: &'static str,
    unit: &'static str,
    /// The alert rule whose threshold is drawn.
    alert: Option<&'static str>,
    reading: Reading,
}

/// How a chart's value is read from the rendered metrics.
#[derive(Clone, Copy)]
enum Reading {
    /// The largest value of a gauge over its labels.
    Max(&'static str),
    /// A counter's increase per second over its labels (those with `label` = `value` only, if given).
    Rate(&'static str, Option<(&'static str, &'static str)>),
    /// The share of a counter's increase whose `label` is not `value` (failures among calls).
    ShareNot(&'static str, &'static str, &'static str),
}

impl Reading {
    /// The metric it reads.
    fn metric(self) -> &'static str {
        match self {
            Reading::Max(name) | Reading::Rate(name, _) | Reading::ShareNot(name, _, _) => name,
        }
    }
}

const CHARTS: [Chart; 7] = [
    Chart {
        name: "outbox_oldest_seconds",
        title: "Oldest event waiting for the relay",
        unit: "s",
        alert: Some("StrandRelayBehind"),
        reading: Reading::Max(OUTBOX_OLDEST_SECONDS.name),
    },
    Chart {
        name: "outbox_rows",
        title: "Events waiting for the relay",
        unit: "events",
        alert: None,
        reading: Reading::Max(OUTBOX_ROWS.name),
    },
    Chart {
        name: "projection_lag_seconds",
        title: "Projections' lag (the slowest)",
        unit: "s",
        alert: Some("StrandProjectionBehind"),
        reading: Reading::Max(PROJECTION_LAG_SECONDS.name),
    },
    Chart {
        name: "writes_per_second",
        title: "Writes decided by the rate limiters",
        unit: "/s",
        alert: None,
        reading: Reading::Rate(RATE_LIMIT_DECISIONS.name, None),
    },
    Chart {
        name: "writes_denied_per_second",
        title: "Writes the rate limiters denied",
        unit: "/s",
        alert: None,
        reading: Reading::Rate(RATE_LIMIT_DECISIONS.name, Some(("decision", "deny"))),
    },
    Chart {
        name: "published_per_second",
        title: "Events published by the relay",
        unit: "/s",
        alert: None,
        reading: Reading::Rate(RELAY_PUBLISHED.name, None),
    },
    Chart {
        name: "plugin_failure_share",
        title: "Plugin calls that failed",
        unit: "share",
        alert: Some("StrandPluginFailing"),
        reading: Reading::ShareNot(PLUGIN_CALLS.name, "outcome", "ok"),
    },
];

/// A tenant's figures at the last point, for the console's list of tenants.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TenantRates {
    /// Writes its rate limiter decided per second.
    pub writes_per_second: f64,
    /// Of which denied.
    pub denied_per_second: f64,
    /// Its events this process's workers dead-lettered since it started.
    pub dead_letters: f64,
}

/// A tenant's counter totals: (writes decided, denied, dead-lettered).
type TenantTotals = (f64, f64, f64);

/// The points so far, and the counters' last totals (a rate is their change).
#[derive(Default)]
struct Kept {
    points: HashMap<&'static str, VecDeque<(i64, f64)>>,
    totals: HashMap<Total, f64>,
    tenant_totals: HashMap<String, TenantTotals>,
    tenants: HashMap<String, TenantRates>,
    at_ms: Option<i64>,
}

static KEPT_POINTS: Mutex<Option<Kept>> = Mutex::new(None);

/// Takes a point of every chart every [`EVERY`], forever (run once per process).
pub async fn record() -> std::convert::Infallible {
    let mut ticks = tokio::time::interval(EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        take_point(&super::observability::recorder().render(), now_ms());
    }
}

/// Adds a point read from `rendered` (the Prometheus text) at `at_ms`.
fn take_point(rendered: &str, at_ms: i64) {
    let samples = parse(rendered);
    let mut kept = KEPT_POINTS.lock().unwrap_or_else(PoisonError::into_inner);
    let kept = kept.get_or_insert_with(Kept::default);
    if kept.at_ms.is_some_and(|before| at_ms - before < EVERY.as_millis() as i64 / 2) {
        // Another recorder of this process (several servers in one test process) took one just now: rates
        // over a few milliseconds would read as nothing.
        return;
    }
    let totals: HashMap<Total, f64> =
        CHARTS.iter().flat_map(|chart| counters(&chart.reading)).map(|total| (total, sum(&samples, total))).collect();
    let elapsed = kept.at_ms.map(|before| (at_ms - before) as f64 / 1000.0).filter(|s| *s > 0.0);
    for chart in &CHARTS {
        let change = |total: Total| {
            let now = totals.get(&total).copied().unwrap_or(0.0);
            // A counter that went down was reset (it never does within one process): no rate this time.
            kept.totals.get(&total).map(|before| now - before).filter(|change| *change >= 0.0)
        };
        let value = match chart.reading {
            Reading::Max(name) => samples.iter().filter(|s| s.name == name).map(|s| s.value).reduce(f64::max),
            Reading::Rate(name, only) => elapsed.zip(change((name, only))).map(|(seconds, change)| change / seconds),
            Reading::ShareNot(name, label, value) => {
                match (change((name, None)), change((name, Some((label, value))))) {
                    (Some(all), Some(fine)) if all > 0.0 => Some((all - fine) / all),
                    (Some(_), Some(_)) => Some(0.0),
                    _ => None,
                }
            }
        };
        if let Some(value) = value {
            let points = kept.points.entry(chart.name).or_default();
            if points.len() == KEPT {
                points.pop_front();
            }
            points.push_back((at_ms, value));
        }
    }
    let tenant_totals = tenant_totals(&samples);
    kept.tenants = tenant_totals
        .iter()
        .map(|(tenant, &(decided, denied, dead))| {
            // A tenant new since the last point counts from zero.
            let (decided_before, denied_before, _) = kept.tenant_totals.get(tenant).copied().unwrap_or_default();
            let per_second = |now: f64, before: f64| elapsed.map_or(0.0, |seconds| (now - before).max(0.0) / seconds);
            let rates = TenantRates {
                writes_per_second: per_second(decided, decided_before),
                denied_per_second: per_second(denied, denied_before),
                dead_letters: dead,
            };
            (tenant.clone(), rates)
        })
        .collect();
    kept.tenant_totals = tenant_totals;
    kept.totals = totals;
    kept.at_ms = Some(at_ms);
}

/// Each tenant's totals of writes decided, denied and dead-lettered events.
fn tenant_totals(samples: &[Sample]) -> HashMap<String, TenantTotals> {
    let mut totals: HashMap<String, TenantTotals> = HashMap::new();
    for sample in samples {
        let label = |name: &str| sample.labels.iter().find(|(l, _)| l == name).map(|(_, v)| v.as_str());
        let Some(tenant) = label("tenant") else { continue };
        let total = totals.entry(tenant.to_owned()).or_default();
        if sample.name == RATE_LIMIT_DECISIONS.name {
            total.0 += sample.value;
            if label("decision") == Some("deny") {
                total.1 += sample.value;
            }
        } else if sample.name == DEAD_LETTERS.name {
            total.2 += sample.value;
        }
    }
    totals
}

/// Each tenant's figures at the last point (tenants with no write or dead letter on this node are absent).
pub fn tenant_rates() -> HashMap<String, TenantRates> {
    let kept = KEPT_POINTS.lock().unwrap_or_else(PoisonError::into_inner);
    kept.as_ref().map(|kept| kept.tenants.clone()).unwrap_or_default()
}

/// Every chart with its points so far.
pub fn charts() -> Vec<Series> {
    let kept = KEPT_POINTS.lock().unwrap_or_else(PoisonError::into_inner);
    CHARTS
        .iter()
        .map(|chart| Series {
            name: chart.name,
            title: chart.title,
            unit: chart.unit,
            threshold: chart.alert.and_then(|alert| threshold(ALERT_RULES, alert)),
            points: kept
                .as_ref()
                .and_then(|kept| kept.points.get(chart.name))
                .map(|points| points.iter().copied().collect())
                .unwrap_or_default(),
        })
        .collect()
}

/// A counter summed over its labels: its name, and the one label value it is limited to, if any.
type Total = (&'static str, Option<(&'static str, &'static str)>);

/// The counter totals a reading needs.
fn counters(reading: &Reading) -> Vec<Total> {
    match *reading {
        Reading::Max(_) => Vec::new(),
        Reading::Rate(name, only) => vec![(name, only)],
        Reading::ShareNot(name, label, value) => vec![(name, None), (name, Some((label, value)))],
    }
}

fn sum(samples: &[Sample], (name, only): Total) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| only.is_none_or(|(label, value)| s.labels.iter().any(|(l, v)| l == label && v == value)))
        .map(|s| s.value)
        .sum()
}

/// One line of the Prometheus text format.
#[derive(Debug, PartialEq)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// The samples of the charted metrics and the dead letters in a Prometheus text exposition (comments,
/// other metrics — every tenant's request histograms — and lines it cannot read are skipped: the text is
/// the recorder's own).
fn parse(text: &str) -> Vec<Sample> {
    let read = |line: &&str| {
        line.starts_with(DEAD_LETTERS.name) || CHARTS.iter().any(|chart| line.starts_with(chart.reading.metric()))
    };
    text.lines().filter(read).filter_map(sample).collect()
}

fn sample(line: &str) -> Option<Sample> {
    let (name, rest) = match line.find(['{', ' ']) {
        Some(at) => line.split_at(at),
        None => return None,
    };
    let (labels, value) = match rest.strip_prefix('{') {
        Some(inside) => labels(inside)?,
        None => (Vec::new(), rest),
    };
    let value = value.split_whitespace().next()?.parse().ok()?;
    Some(Sample { name: name.to_owned(), labels, value })
}

/// `a="x",b="y"}` → the pairs (values unescaped) and what follows the `}`.
fn labels(mut text: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        text = text.trim_start_matches(',');
        if let Some(after) = text.strip_prefix('}') {
            return Some((labels, after));
        }
        let (label, rest) = text.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next()? {
                (at, '"') => break at,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (_, other) => value.push(other),
            }
        };
        labels.push((label.to_owned(), value));
        text = &rest[end + 1..];
    }
}

/// The number an alert rule's expression compares against (`… > 60`), from the rules file `rules`.
fn threshold(rules: &str, alert: &str) -> Option<f64> {
    let rule = rules.split("- alert: ").find_map(|rule| rule.strip_prefix(alert)?.strip_prefix('\n'))?;
    let (_, expression) = rule.split_once("expr:")?;
    let expression = expression.split("\n        for:").next()?.split("\n        labels:").next()?;
    expression.rsplit_once('>')?.1.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_charts_draw_the_shipped_alert_rules_thresholds() {
        let thresholds: Vec<(&str, Option<f64>)> = CHARTS
            .iter()
            .filter(|c| c.alert.is_some())
            .map(|c| (c.name, threshold(ALERT_RULES, c.alert.unwrap())))
            .collect();
        assert_eq!(
            thresholds,
            [
                ("outbox_oldest_seconds", Some(60.0)),
                ("projection_lag_seconds", Some(60.0)),
                ("plugin_failure_share", Some(0.05))
            ]
        );
    }

    #[test]
    fn a_sample_line_reads_with_escaped_labels() {
        let line = format!(r#"{}{{tenant="a\"b",outcome="ok"}} 42"#, PLUGIN_CALLS.name);
        let expected = vec![("tenant".to_owned(), "a\"b".to_owned()), ("outcome".to_owned(), "ok".to_owned())];
        let read = Sample { name: PLUGIN_CALLS.name.into(), labels: expected, value: 42.0 };
        assert_eq!(sample(&line), Some(read));
        let read = Sample { name: OUTBOX_ROWS.name.into(), labels: vec![], value: 7.0 };
        assert_eq!(sample(&format!("{} 7", OUTBOX_ROWS.name)), Some(read));
        assert_eq!(sample("garbage"), None);
    }

    #[test]
    fn counters_chart_as_rates_and_shares_and_gauges_as_their_largest() {
        let text = |calls: u32, failed: u32, decided: u32| {
            let (calls_name, decisions, lag) =
                (PLUGIN_CALLS.name, RATE_LIMIT_DECISIONS.name, PROJECTION_LAG_SECONDS.name);
            format!(
                "# TYPE x counter\n{calls_name}{{outcome=\"ok\",tenant=\"a\"}} {}\n\
                 {calls_name}{{outcome=\"trap\",tenant=\"a\"}} {failed}\n\
                 {decisions}{{tenant=\"a\",decision=\"allow\"}} {decided}\n\
                 {decisions}{{tenant=\"b\",decision=\"deny\"}} 5\n\
                 {lag}{{projection=\"follower\"}} 0.5\n\
                 {lag}{{projection=\"projector.x\"}} 2.5\n",
                calls - failed
            )
        };
        take_point(&text(100, 10, 50), 1_000_000);
        take_point(&text(200, 30, 250), 1_010_000);
        take_point(&text(900, 900, 900), 1_010_003);
        let charts = charts();
        let last = |name: &str| charts.iter().find(|c| c.name == name).and_then(|c| c.points.last().copied());
        assert_eq!(last("writes_per_second"), Some((1_010_000, 20.0)), "200 more decisions in 10 s (not 3 ms)");
        assert_eq!(last("writes_denied_per_second"), Some((1_010_000, 0.0)));
        assert_eq!(last("plugin_failure_share"), Some((1_010_000, 0.2)), "20 of the 100 new calls failed");
        assert_eq!(last("projection_lag_seconds"), Some((1_010_000, 2.5)));
        let rates = tenant_rates();
        let a = TenantRates { writes_per_second: 20.0, denied_per_second: 0.0, dead_letters: 0.0 };
        assert_eq!(rates.get("a"), Some(&a), "tenant a's 200 decisions in 10 s");
        assert_eq!(rates.get("b").map(|b| b.writes_per_second), Some(0.0), "b's 5 denials are old");
    }
}
