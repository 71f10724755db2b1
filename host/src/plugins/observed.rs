//! Plugin calls as operators and authors see them: per tenant and plugin, how long each call took
//! (`strand_plugin_call_seconds`) and how it ended (`strand_plugin_calls_total` by `outcome`: `ok`,
//! `timeout`, `out_of_fuel`, `trap`, `invalid_output`, `host`); what the plugin logged, and its traps with
//! their wasm backtrace, in its log.

use std::future::Future;
use std::time::Instant;

use super::logs::{bounded, LogLine, LogSource, PluginLogs};
use super::registry::ActivePlugin;
use super::runtime::{Called, PluginError};
use super::Level;

/// Awaits `call` of `plugin` for `tenant`, and records it.
pub async fn observed<R>(
    logs: &PluginLogs,
    tenant: &str,
    plugin: &ActivePlugin,
    call: impl Future<Output = Called<R>>,
) -> Result<R, PluginError> {
    let started = Instant::now();
    let Called { result, mut lines, dropped } = call.await;
    let result = result.map(|(value, _cost)| value);
    if let Err(
        e
        @ (PluginError::Trap(_) | PluginError::Timeout(_) | PluginError::OutOfFuel(_) | PluginError::InvalidOutput(_)),
    ) = &result
    {
        // The author's concern: in the plugin's own log, a trap with its wasm backtrace.
        let message = match e {
            PluginError::Trap(trap) => format!("trapped: {trap:?}"),
            other => other.to_string(),
        };
        lines.push(LogLine { level: Level::Error, input: None, message: bounded(message) });
    }
    // Most calls say nothing: only those that did are named and kept.
    if !lines.is_empty() || dropped > 0 {
        let source = LogSource {
            tenant: tenant.to_owned(),
            kind: plugin.kind,
            name: plugin.name.clone(),
            version: plugin.version,
        };
        logs.keep(&source, lines, dropped);
    }
    let outcome = match &result {
        Ok(_) => "ok",
        Err(PluginError::Timeout(_)) => "timeout",
        Err(PluginError::OutOfFuel(_)) => "out_of_fuel",
        Err(PluginError::Trap(_)) => "trap",
        Err(PluginError::InvalidOutput(_)) => "invalid_output",
        Err(_) => "host",
    };
    let labels = labels(tenant, plugin);
    metrics::histogram!("strand_plugin_call_seconds", &labels).record(started.elapsed().as_secs_f64());
    let mut counted = labels;
    counted.push(("outcome", outcome.to_owned()));
    metrics::counter!("strand_plugin_calls_total", &counted).increment(1);
    if outcome == "invalid_output" {
        count_invalid_output(tenant, plugin, "call");
    }
    if let Err(host @ PluginError::Host { .. }) = &result {
        // Not the plugin's doing: an operator's concern, with its cause.
        let error = crate::observability::causes(host);
        tracing::error!(tenant, plugin = %plugin.name, version = plugin.version, %error, "the plugin host failed");
    }
    result
}

/// Counts output of `plugin` the host refused to carry out (`strand_plugin_invalid_output_total`), by
/// `stage`: `call` when the output's checks failed, `apply` when the cache found it out of range.
pub fn count_invalid_output(tenant: &str, plugin: &ActivePlugin, stage: &'static str) {
    let mut labels = labels(tenant, plugin);
    labels.push(("stage", stage.to_owned()));
    metrics::counter!("strand_plugin_invalid_output_total", &labels).increment(1);
}

fn labels(tenant: &str, plugin: &ActivePlugin) -> Vec<(&'static str, String)> {
    vec![
        ("tenant", tenant.to_owned()),
        ("kind", plugin.kind.to_string()),
        ("plugin", plugin.name.clone()),
        ("version", plugin.version.to_string()),
    ]
}
