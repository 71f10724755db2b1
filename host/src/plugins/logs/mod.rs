//! What plugins say through the `log` import, their one capability. A call's lines are captured in its
//! store (bounded per call), named by the host — tenant, plugin, version, and the input a line is about —
//! then rate-limited per plugin and kept: in the process log (target `strand::plugin`) and in the
//! database's `plugin_logs`, bounded per tenant, which the admin API pages. Lines beyond a bound are
//! dropped and counted, never queued without end: a chatty plugin cannot slow the host or crowd out another
//! tenant's lines.

mod page;

use serde::{Deserialize, Serialize};

pub use self::page::{page, LogEntry, LogPage, LogQuery, MAX_PAGE};
use super::bindings::Level;
use super::inputs::Input;
use super::PluginKind;
use crate::bus::{Message, Publisher};
use crate::db::Database;
use crate::ops::bounded::{KeyedRate, TenantQueue};
use crate::ops::metrics::PLUGIN_LOG_LINES_DROPPED;
use crate::util::time::{now_ms, rfc3339_millis};

/// Most lines one call keeps.
pub const MAX_LINES_PER_CALL: usize = 32;
/// Longest line kept, in bytes; longer ones are cut (on a character boundary) and marked.
pub const MAX_LINE_BYTES: usize = 1024;
/// Lines per second one plugin (tenant, kind, name) may keep, and the burst above it.
const LINES_PER_SECOND: f64 = 20.0;
const BURST: f64 = 100.0;
/// Lines per second one tenant's plugins may keep together, and the burst above it: many plugin names do
/// not give a tenant more of the shared log.
const TENANT_LINES_PER_SECOND: f64 = 100.0;
const TENANT_BURST: f64 = 500.0;

/// One line as a plugin wrote it, named by the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LogLine {
    /// `debug`, `info`, `warn` or `error`.
    #[schema(value_type = String)]
    #[serde(serialize_with = "serialize_level", deserialize_with = "deserialize_level")]
    pub level: Level,
    /// The input the line is about (event id, `outbox:{id}`, `{user}->{target}`), when the plugin named one.
    pub input: Option<String>,
    pub message: String,
}

/// The lines of one call, in its store: at most [`MAX_LINES_PER_CALL`], each at most [`MAX_LINE_BYTES`].
#[derive(Debug, Default)]
pub struct CallLog {
    lines: Vec<(Level, Option<u32>, String)>,
    dropped: u32,
}

impl CallLog {
    pub(super) fn push(&mut self, level: Level, input: Option<u32>, message: String) {
        if self.lines.len() >= MAX_LINES_PER_CALL {
            self.dropped += 1;
            return;
        }
        self.lines.push((level, input, bounded(message)));
    }

    /// The lines with each input index resolved to that input's id (an index past the batch names none),
    /// and how many were dropped for the per-call bound.
    pub fn named<I: Input>(self, inputs: &[I]) -> (Vec<LogLine>, u32) {
        let lines = self
            .lines
            .into_iter()
            .map(|(level, input, message)| LogLine {
                level,
                input: input.and_then(|i| inputs.get(i as usize)).map(Input::id),
                message,
            })
            .collect();
        (lines, self.dropped)
    }
}

/// `message`, cut to [`MAX_LINE_BYTES`] (on a character boundary) and marked when longer.
pub(super) fn bounded(mut message: String) -> String {
    if message.len() > MAX_LINE_BYTES {
        let mut cut = MAX_LINE_BYTES;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push_str(" [cut]");
    }
    message
}

/// Which plugin wrote a line.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LogSource {
    pub tenant: String,
    pub kind: PluginKind,
    pub name: String,
    pub version: i64,
}

impl LogSource {
    /// Counts `lines` of this plugin's that were not kept, by why: `rate` (per call or per second),
    /// `queue` (the writer was behind), `database` or `kafka` (the write or the publish failed).
    fn count_dropped(&self, reason: &'static str, lines: usize) {
        if lines > 0 {
            let labels = [
                ("tenant", self.tenant.clone()),
                ("kind", self.kind.to_string()),
                ("plugin", self.name.clone()),
                ("reason", reason.to_owned()),
            ];
            metrics::counter!(PLUGIN_LOG_LINES_DROPPED.name, &labels).increment(lines as u64);
        }
    }
}

/// Whose lines share one rate: a plugin of a tenant, across its versions.
type Writer = (String, PluginKind, String);

/// Lines waiting for the database; beyond this they are dropped (and counted).
const QUEUED: usize = 10_000;
/// Lines kept per tenant; older ones are deleted.
pub const KEPT_PER_TENANT: i64 = 10_000;

/// A line on its way to the database.
struct Kept {
    at: i64,
    source: LogSource,
    line: LogLine,
}

/// Keeps plugins' lines within their rate, in the process log and (through [`PluginLogs::write`]) in the
/// database.
pub struct PluginLogs {
    rate: KeyedRate<Writer>,
    tenant_rate: KeyedRate<String>,
    queue: TenantQueue<Kept>,
}

impl Default for PluginLogs {
    fn default() -> Self {
        Self {
            rate: KeyedRate::new(LINES_PER_SECOND, BURST),
            tenant_rate: KeyedRate::new(TENANT_LINES_PER_SECOND, TENANT_BURST),
            queue: TenantQueue::new(QUEUED, tenant_of),
        }
    }
}

fn tenant_of(kept: &Kept) -> &str {
    &kept.source.tenant
}

impl PluginLogs {
    /// Keeps what `source` wrote, within its rate; `dropped` lines were already dropped by the call's bound.
    pub fn keep(&self, source: &LogSource, lines: Vec<LogLine>, dropped: u32) {
        let writer = (source.tenant.clone(), source.kind, source.name.clone());
        let allowed = self.rate.take(writer, lines.len());
        let allowed = self.tenant_rate.take(source.tenant.clone(), allowed);
        source.count_dropped("rate", dropped as usize + lines.len() - allowed);
        let mut queue_full = 0;
        for line in lines.into_iter().take(allowed) {
            let LogSource { tenant, kind, name, version } = source;
            // The plugin's text is escaped (`\n`, `\u{1b}`, …): a newline in it cannot forge another
            // line of the process log, nor a control sequence reach an operator's terminal.
            let input = line.input.as_deref().unwrap_or("");
            let message = line.message.escape_debug();
            match line.level {
                Level::Debug => {
                    tracing::debug!(target: "strand::plugin", %tenant, %kind, plugin = %name, version, input, %message)
                }
                Level::Info => {
                    tracing::info!(target: "strand::plugin", %tenant, %kind, plugin = %name, version, input, %message)
                }
                Level::Warn => {
                    tracing::warn!(target: "strand::plugin", %tenant, %kind, plugin = %name, version, input, %message)
                }
                Level::Error => {
                    tracing::error!(target: "strand::plugin", %tenant, %kind, plugin = %name, version, input, %message)
                }
            }
            if !self.queue.push(Kept { at: now_ms(), source: source.clone(), line }) {
                // The writer is behind (or runs in no task of this process): the database misses the line.
                queue_full += 1;
            }
        }
        source.count_dropped("queue", queue_full);
    }
}

/// Where a Kafka deployment also publishes the lines: the publisher and the topic.
pub struct LogTopic {
    pub publisher: Publisher,
    pub topic: String,
}

impl LogTopic {
    async fn publish(&self, batch: &[Kept]) {
        let messages: Vec<Message> = batch.iter().map(|kept| self.message(kept)).collect();
        if let Err(e) = self.publisher.publish(&messages).await {
            tracing::error!(error = %e, lines = batch.len(), topic = %self.topic, "cannot publish plugin log lines");
            batch.iter().for_each(|kept| kept.source.count_dropped("kafka", 1));
        }
    }

    fn message(&self, kept: &Kept) -> Message {
        let LogSource { tenant, kind, name, version } = &kept.source;
        let payload = serde_json::json!({
            "at": rfc3339_millis(kept.at), "tenant": tenant, "kind": kind, "plugin": name, "version": version,
            "level": level_name(kept.line.level), "input": kept.line.input, "message": kept.line.message,
        });
        Message {
            topic: self.topic.clone(),
            key: tenant.clone(),
            headers: vec![("tenant".into(), tenant.clone()), ("plugin".into(), format!("{kind}/{name}"))],
            payload: payload.to_string(),
        }
    }
}

impl PluginLogs {
    /// Writes queued lines into `db` as they come, and keeps each tenant's newest [`KEPT_PER_TENANT`]; on a
    /// Kafka deployment also publishes them to `topic`. A failed write is logged and its lines counted as
    /// dropped; the writer goes on.
    pub async fn write(&self, db: &Database, topic: Option<&LogTopic>) {
        self.queue
            .drain(db, "plugin_logs", KEPT_PER_TENANT, |batch| {
                Box::pin(async move {
                    if let Err(e) = insert(db, &batch).await {
                        tracing::error!(error = %e, lines = batch.len(), "cannot keep plugin log lines");
                        batch.iter().for_each(|kept| kept.source.count_dropped("database", 1));
                    }
                    if let Some(topic) = topic {
                        topic.publish(&batch).await;
                    }
                    batch
                })
            })
            .await;
    }
}

async fn insert(db: &Database, batch: &[Kept]) -> Result<(), sqlx::Error> {
    let mut insert =
        sqlx::QueryBuilder::new("INSERT INTO plugin_logs (at, tenant_id, kind, name, version, level, input, message) ");
    insert.push_values(batch, |mut row, kept| {
        row.push_bind(kept.at)
            .push_bind(kept.source.tenant.clone())
            .push_bind(kept.source.kind.as_str())
            .push_bind(kept.source.name.clone())
            .push_bind(kept.source.version)
            .push_bind(level_name(kept.line.level))
            .push_bind(kept.line.input.clone())
            .push_bind(kept.line.message.clone());
    });
    insert.build().execute(db.writer()).await?;
    Ok(())
}

const LEVELS: [(Level, &str); 4] =
    [(Level::Debug, "debug"), (Level::Info, "info"), (Level::Warn, "warn"), (Level::Error, "error")];

/// As the API and the CLI spell `level`.
pub fn level_name(level: Level) -> &'static str {
    LEVELS.iter().find(|(l, _)| *l == level).map_or("error", |(_, name)| name)
}

pub(super) fn level_named(name: &str) -> Option<Level> {
    LEVELS.iter().find(|(_, n)| *n == name).map(|(level, _)| *level)
}

fn serialize_level<S: serde::Serializer>(level: &Level, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(level_name(*level))
}

fn deserialize_level<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Level, D::Error> {
    let name = String::deserialize(deserializer)?;
    level_named(&name).ok_or_else(|| serde::de::Error::custom(format!("unknown level {name:?}")))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Collects what the process log prints.
    #[derive(Clone, Default)]
    struct Printed(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Printed {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn source(tenant: &str, name: &str) -> LogSource {
        LogSource { tenant: tenant.into(), kind: PluginKind::Projector, name: name.into(), version: 1 }
    }

    fn line(message: &str) -> LogLine {
        LogLine { level: Level::Warn, input: None, message: message.into() }
    }

    #[test]
    fn a_plugins_newlines_cannot_forge_process_log_lines() {
        let printed = Printed::default();
        let writer = printed.clone();
        let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
        tracing::subscriber::with_default(subscriber, || {
            let forged = "calm\n2026-12-03T00:00:00Z ERROR strand: admin token leaked\u{1b}[2J";
            PluginLogs::default().keep(&source("evil", "p"), vec![line(forged)], 0);
        });
        let printed = String::from_utf8(printed.0.lock().unwrap().clone()).unwrap();
        assert_eq!(printed.lines().count(), 1, "{printed}");
        assert!(printed.contains(r"calm\n2026-12-03T00:00:00Z ERROR") && printed.contains(r"\u{1b}[2J"), "{printed}");
    }

    /// A tenant logging through many plugin names gets no more than its tenant-wide rate, and never more
    /// than its share of the queue to the database: another tenant's lines still find room.
    #[test]
    fn many_plugin_names_do_not_crowd_out_another_tenants_lines() {
        let logs = PluginLogs::default();
        for name in 0..200 {
            let lines = (0..BURST as usize).map(|_| line("flood")).collect();
            logs.keep(&source("evil", &format!("p{name}")), lines, 0);
        }
        let queued = |logs: &PluginLogs| logs.queue.held_by("evil");
        assert!(queued(&logs) <= TENANT_BURST as usize + 10, "evil queued {}", queued(&logs));
        logs.keep(&source("acme", "counts"), vec![line("mine")], 0);
        assert_eq!(logs.queue.held_by("acme"), 1, "acme's line found room");
    }
}
