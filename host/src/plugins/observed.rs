//! Plugin calls as operators see them: per tenant and plugin, how long each call took
//! (`strand_plugin_call_seconds`) and how it ended (`strand_plugin_calls_total` by `outcome`: `ok`,
//! `timeout`, `out_of_fuel`, `trap`, `invalid_output`, `host`).

use std::time::Instant;

use super::registry::{blocking, ActivePlugin};
use super::runtime::PluginError;

/// Runs `call` of `plugin` for `tenant` off the async workers, and records it.
pub async fn observed<R: Send + 'static>(
    tenant: &str,
    plugin: &ActivePlugin,
    call: impl FnOnce() -> Result<R, PluginError> + Send + 'static,
) -> Result<R, PluginError> {
    let started = Instant::now();
    let result = blocking(call).await;
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
    if let Err(PluginError::Trap(trap)) = &result {
        // With the wasm backtrace; per call, so at debug (`STRAND_LOG=strand=debug`): the outcome is counted.
        tracing::debug!(tenant, plugin = %plugin.name, version = plugin.version, trap = ?trap, "plugin trapped");
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
