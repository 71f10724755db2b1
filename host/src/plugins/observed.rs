//! Plugin calls as operators and authors see them: per tenant and plugin, how long each call took
//! (`strand_plugin_call_seconds`) and how it ended (`strand_plugin_calls_total` by `outcome`: `ok`,
//! `timeout`, `out_of_fuel`, `trap`, `invalid_output`, `host`); what the plugin logged, and its traps with
//! their wasm backtrace, in its log.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use super::error::PluginError;
use super::logs::{bounded, LogLine, LogSource, PluginLogs};
use super::registry::ActivePlugin;
use super::runtime::Called;
use super::Level;
use crate::ops::metrics::{PLUGIN_CALLS, PLUGIN_CALL_SECONDS, PLUGIN_INVALID_OUTPUT};

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
        Err(PluginError::Busy { .. }) => "busy",
        Err(_) => "host",
    };
    let labels = labels(tenant, plugin);
    metrics::histogram!(PLUGIN_CALL_SECONDS.name, &labels).record(started.elapsed().as_secs_f64());
    let mut counted = labels;
    counted.push(("outcome", outcome.to_owned()));
    metrics::counter!(PLUGIN_CALLS.name, &counted).increment(1);
    if outcome == "invalid_output" {
        count_invalid_output(tenant, plugin, "call");
    }
    if let Err(host @ PluginError::Host { .. }) = &result {
        // Not the plugin's doing: an operator's concern, with its cause.
        let error = crate::ops::observability::causes(host);
        tracing::error!(tenant, plugin = %plugin.name, version = plugin.version, %error, "the plugin host failed");
    }
    result
}

/// Counts output of `plugin` the host refused to carry out (`strand_plugin_invalid_output_total`), by
/// `stage`: `call` when the output's checks failed, `apply` when the cache found it out of range.
pub fn count_invalid_output(tenant: &str, plugin: &ActivePlugin, stage: &'static str) {
    let mut labels = labels(tenant, plugin);
    labels.push(("stage", stage.to_owned()));
    metrics::counter!(PLUGIN_INVALID_OUTPUT.name, &labels).increment(1);
}

/// Labels of a plugin's series: by tenant, kind and plugin name — not by version, so a tenant deploying in
/// a loop adds no series; the version of each call is in the plugin's log and the audit log.
fn labels(tenant: &str, plugin: &ActivePlugin) -> Vec<(&'static str, String)> {
    vec![
        ("tenant", tenant.to_owned()),
        ("kind", plugin.kind.to_string()),
        ("plugin", named_in_metrics(tenant, &plugin.name)),
    ]
}

/// The most plugin names one tenant's series are labelled with; calls of further names (a tenant creating
/// and removing projectors in a loop) count under `plugin="_other"`. The recorder never forgets a series,
/// so this is what keeps one tenant from growing `/metrics` without bound.
pub const MAX_NAMED_PLUGINS_PER_TENANT: usize = 32;

/// `name` as the `plugin` label of `tenant`'s series: itself for the first
/// [`MAX_NAMED_PLUGINS_PER_TENANT`] names seen, else `_other`.
fn named_in_metrics(tenant: &str, name: &str) -> String {
    static NAMED: LazyLock<Mutex<HashMap<String, HashSet<String>>>> = LazyLock::new(Default::default);
    let mut named = NAMED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let names = match named.get_mut(tenant) {
        Some(names) => names,
        None => named.entry(tenant.to_owned()).or_default(),
    };
    if names.contains(name) || (names.len() < MAX_NAMED_PLUGINS_PER_TENANT && names.insert(name.to_owned())) {
        name.to_owned()
    } else {
        "_other".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenants_plugin_names_in_metrics_are_bounded_and_others_unaffected() {
        for i in 0..3 * MAX_NAMED_PLUGINS_PER_TENANT {
            let label = named_in_metrics("looping", &format!("p{i}"));
            assert_eq!(label, if i < MAX_NAMED_PLUGINS_PER_TENANT { format!("p{i}") } else { "_other".to_owned() });
        }
        assert_eq!(named_in_metrics("looping", "p0"), "p0", "a name seen before keeps its series");
        assert_eq!(named_in_metrics("calm", "p99"), "p99", "another tenant's names are its own");
    }
}
