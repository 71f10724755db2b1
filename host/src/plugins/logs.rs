//! What plugins say through the `log` import, their one capability. A call's lines are captured in its
//! store (bounded per call), named by the host — tenant, plugin, version, and the input a line is about —
//! then rate-limited per plugin and kept. Lines beyond a bound are dropped and counted, never queued: a
//! chatty plugin cannot slow the host or crowd out another tenant's lines.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::bindings::Level;
use super::inputs::Input;
use super::PluginKind;

/// Most lines one call keeps.
pub const MAX_LINES_PER_CALL: usize = 32;
/// Longest line kept, in bytes; longer ones are cut (on a character boundary) and marked.
pub const MAX_LINE_BYTES: usize = 1024;
/// Lines per second one plugin (tenant, kind, name) may keep, and the burst above it.
const LINES_PER_SECOND: f64 = 20.0;
const BURST: f64 = 100.0;

/// One line as a plugin wrote it, named by the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LogLine {
    #[schema(value_type = String)]
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

/// Whose lines share one rate: a plugin of a tenant, across its versions.
type Writer = (String, PluginKind, String);
/// Lines a writer may still keep, and when that was counted.
type Tokens = (f64, Instant);

/// Keeps plugins' lines within their rate: today in the process log (target `strand::plugin`), one line
/// per plugin line with its source as fields.
#[derive(Default)]
pub struct PluginLogs {
    buckets: Mutex<HashMap<Writer, Tokens>>,
}

impl PluginLogs {
    /// Keeps what `source` wrote, within its rate; `dropped` lines were already dropped by the call's bound.
    pub fn keep(&self, source: &LogSource, lines: Vec<LogLine>, dropped: u32) {
        let allowed = self.take(source, lines.len());
        let dropped = dropped as usize + lines.len() - allowed;
        for line in lines.into_iter().take(allowed) {
            let LogSource { tenant, kind, name, version } = source;
            let (input, message) = (line.input.as_deref().unwrap_or(""), &line.message);
            match line.level {
                Level::Debug => {
                    tracing::debug!(target: "strand::plugin", %tenant, %kind, plugin = %name, version, input, message)
                }
                Level::Info => {
                    tracing::info!(target: "strand::plugin", %tenant, %kind, plugin = %name, version, input, message)
                }
                Level::Warn => {
                    tracing::warn!(target: "strand::plugin", %tenant, %kind, plugin = %name, version, input, message)
                }
                Level::Error => {
                    tracing::error!(target: "strand::plugin", %tenant, %kind, plugin = %name, version, input, message)
                }
            }
        }
        if dropped > 0 {
            let labels =
                [("tenant", source.tenant.clone()), ("kind", source.kind.to_string()), ("plugin", source.name.clone())];
            metrics::counter!("strand_plugin_log_lines_dropped_total", &labels).increment(dropped as u64);
        }
    }

    /// How many of `wanted` lines `source` may keep now.
    fn take(&self, source: &LogSource, wanted: usize) -> usize {
        if wanted == 0 {
            return 0;
        }
        let mut buckets = self.buckets.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        let key = (source.tenant.clone(), source.kind, source.name.clone());
        let (tokens, counted) = buckets.entry(key).or_insert((BURST, now));
        *tokens = (*tokens + now.duration_since(*counted).as_secs_f64() * LINES_PER_SECOND).min(BURST);
        *counted = now;
        let allowed = (*tokens as usize).min(wanted);
        *tokens -= allowed as f64;
        allowed
    }
}
