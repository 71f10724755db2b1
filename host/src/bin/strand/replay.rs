//! `strand plugin test --replay`: a candidate component beside the tenant's active version (or the
//! bundled one), on the tenant's real recent inputs, before it is deployed — Shopify's `function replay`.
//! A projector's and a router's inputs are the pairs the tenant changed last, read from the truth (as
//! relation events, and as the outbox events their writes published); a rate limiter's are the tenant's
//! sampled write requests, refused ones too (`write_request_samples`, which the API nodes keep), and a
//! relation policy's its sampled follow attempts (`follow_attempt_samples`). Prints, per input whose outputs
//! differ, both outputs; then what both cost.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context;
use serde::Serialize;
use strand::config::Config;
use strand::db::Database;
use strand::graph::TenantId;
use strand::outbox::{ChangeEvent, OutboxRow};
use strand::plugins::{
    CallCost, Called, FollowAttempt, PluginKind, PluginRegistry, PluginRuntime, PreparedPlugin, WriteRequest,
    INPUTS_PER_LIMIT,
};
use strand::projection::recent_changes;
use strand::ratelimit::recent_requests;
use strand::relation_policy::recent_attempts;

/// What a replay found.
#[derive(Serialize)]
struct Summary {
    inputs: usize,
    /// A rate limiter's or relation policy's inputs by what the host answered them when they were made.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    answered: BTreeMap<String, usize>,
    different: usize,
    active: Cost,
    candidate: Cost,
}

#[derive(Serialize, Default)]
struct Cost {
    /// Which version ran (0: the bundled one).
    version: i64,
    elapsed_micros: u128,
    fuel: Option<u64>,
    failed_calls: usize,
}

impl Cost {
    fn add(&mut self, cost: &CallCost) {
        self.elapsed_micros += cost.elapsed.as_micros();
        self.fuel = cost.fuel.map(|fuel| fuel + self.fuel.unwrap_or(0));
    }
}

/// Runs `candidate` beside the active version of `tenant`'s `kind/name` on its `last` recent changes.
pub async fn replay(
    config: &Config,
    tenant: &str,
    kind: PluginKind,
    name: &str,
    last: u32,
    candidate: &[u8],
) -> anyhow::Result<()> {
    let tenant: TenantId = tenant.parse()?;
    // The server's database as it is: a replay never creates or migrates one (outside the server's folder
    // the default SQLite file is missing, and that is said rather than an empty replay).
    let db = Database::open_existing(&config.database_url, 2).await.context("opening the server's database")?;
    let runtime = Arc::new(PluginRuntime::bounded(config.plugin_limits(), config.plugin_maxima(), None)?);
    let registry = PluginRegistry::load(runtime.clone(), db.clone()).await?;
    let active = registry
        .active(&tenant, kind, name)
        .with_context(|| format!("{tenant} has no {kind} {name:?} and none is bundled"))?;
    let candidate = runtime.prepare(kind, candidate)?;
    let mut summary = Summary {
        inputs: 0,
        answered: BTreeMap::new(),
        different: 0,
        active: Cost { version: active.version, ..Cost::default() },
        candidate: Cost::default(),
    };
    if kind == PluginKind::RateLimiter {
        let requests: Vec<WriteRequest> = answered(recent_requests(&db, &tenant, last).await?, &mut summary);
        for batch in requests.chunks(INPUTS_PER_LIMIT) {
            let run = async |p: &PreparedPlugin| runtime.decide(p, runtime.limits(), batch).await;
            compare(batch, run(&active.prepared).await, run(&candidate).await, &mut summary)?;
        }
    } else if kind == PluginKind::RelationPolicy {
        let attempts: Vec<FollowAttempt> = answered(recent_attempts(&db, &tenant, last).await?, &mut summary);
        for batch in attempts.chunks(INPUTS_PER_LIMIT) {
            let run = async |p: &PreparedPlugin| runtime.admit(p, runtime.limits(), batch).await;
            compare(batch, run(&active.prepared).await, run(&candidate).await, &mut summary)?;
        }
    } else {
        // Pending requests as such only when both receive every kind (a projector of follows refuses them).
        let every_kind = active.prepared.receives_every_kind() && candidate.receives_every_kind();
        let changes = recent_changes(&db, &tenant, last, every_kind).await?;
        summary.inputs = changes.len();
        for batch in changes.chunks(INPUTS_PER_LIMIT) {
            if kind == PluginKind::Projector {
                let run = async |p: &PreparedPlugin| runtime.project(p, runtime.limits(), batch).await;
                compare(batch, run(&active.prepared).await, run(&candidate).await, &mut summary)?;
            } else {
                let events: Vec<OutboxRow> =
                    batch.iter().map(|change| OutboxRow::published(0, &tenant, ChangeEvent::from(change))).collect();
                let run = async |p: &PreparedPlugin| runtime.route(p, runtime.limits(), &events).await;
                compare(&events, run(&active.prepared).await, run(&candidate).await, &mut summary)?;
            }
        }
    }
    println!("{}", serde_json::to_string_pretty(&summary)?);
    db.close().await;
    Ok(())
}

/// The sampled inputs, counted in `summary` by what the host answered them when they were made.
fn answered<I>(sampled: Vec<(I, String)>, summary: &mut Summary) -> Vec<I> {
    summary.inputs = sampled.len();
    sampled
        .into_iter()
        .map(|(input, answer)| {
            *summary.answered.entry(answer).or_default() += 1;
            input
        })
        .collect()
}

/// Prints each input whose outputs differ (a failed call's output is its error) and adds up the costs.
fn compare<I: Serialize, O: Serialize>(
    inputs: &[I],
    active: Called<Vec<O>>,
    candidate: Called<Vec<O>>,
    summary: &mut Summary,
) -> anyhow::Result<()> {
    let outputs = |called: Called<Vec<O>>, cost: &mut Cost| match called.result {
        Ok((outputs, spent)) => {
            cost.add(&spent);
            outputs.into_iter().map(serde_json::to_value).collect::<Result<Vec<_>, _>>()
        }
        Err(error) => {
            cost.failed_calls += 1;
            Ok(vec![serde_json::json!({ "error": error.to_string() }); inputs.len()])
        }
    };
    let active: Vec<serde_json::Value> = outputs(active, &mut summary.active)?;
    let candidate: Vec<serde_json::Value> = outputs(candidate, &mut summary.candidate)?;
    for ((input, active), candidate) in inputs.iter().zip(&active).zip(&candidate) {
        if active != candidate {
            summary.different += 1;
            println!("{}", serde_json::json!({ "input": input, "active": active, "candidate": candidate }));
        }
    }
    Ok(())
}
