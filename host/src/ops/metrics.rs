//! Every metric the host exports, in one catalogue by subsystem: its name, kind and help text. Call sites
//! record through the `metrics` facade by these names (`metrics::counter!(RELAY_PUBLISHED.name, …)`), so a
//! name is spelt once, the alert rules and dashboard are checked against this list, and `/metrics` carries
//! a `# HELP` line for each.

/// What a metric counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One exported metric.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
}

const fn counter(name: &'static str, help: &'static str) -> Metric {
    Metric { name, kind: Kind::Counter, help }
}

const fn gauge(name: &'static str, help: &'static str) -> Metric {
    Metric { name, kind: Kind::Gauge, help }
}

const fn histogram(name: &'static str, help: &'static str) -> Metric {
    Metric { name, kind: Kind::Histogram, help }
}

// The API.
pub const HTTP_REQUESTS: Metric =
    counter("strand_http_requests_total", "HTTP requests answered, by method, route template and status.");
pub const HTTP_REQUEST_SECONDS: Metric =
    histogram("strand_http_request_seconds", "HTTP request latency, by method, route template and status.");
pub const HTTP_PANICS: Metric = counter("strand_http_panics_total", "Requests whose handler panicked (answered 500).");
pub const RATE_LIMIT_DECISIONS: Metric =
    counter("strand_rate_limit_decisions_total", "Write requests decided, by tenant and decision.");
pub const WRITE_REQUESTS_UNSAMPLED: Metric = counter(
    "strand_write_requests_unsampled_total",
    "Decided write requests not kept for replay (the sample's rate or queue was full), by tenant.",
);

pub const FOLLOW_ATTEMPTS_UNSAMPLED: Metric = counter(
    "strand_follow_attempts_unsampled_total",
    "Follow attempts a relation policy decided, not kept for replay (the sample's rate or queue was full), by tenant.",
);

// The relay.
pub const RELAY_PUBLISHED: Metric = counter("strand_relay_published_total", "Outbox rows published, by tenant.");
pub const RELAY_LAG_SECONDS: Metric =
    gauge("strand_relay_lag_seconds", "Seconds from the commit of the newest published row to its publication.");
pub const RELAY_PARKED_ROWS: Metric = gauge("strand_relay_parked_rows", "Outbox rows parked now, by tenant.");
pub const RELAY_PARKED_ROWS_TOTAL: Metric = counter(
    "strand_relay_parked_rows_total",
    "Outbox rows ever parked (router over budget, destination refused), by tenant.",
);
pub const RELAY_ACTIVE: Metric = gauge("strand_relay_active", "1 on the relay that holds the lead and publishes.");
pub const RELAY_BINLOG_FILE: Metric =
    gauge("strand_relay_binlog_file", "The sequence number of the binlog file the checkpoint is in.");
pub const RELAY_BINLOG_POSITION: Metric =
    gauge("strand_relay_binlog_position", "The checkpoint's offset in its binlog file.");
pub const RELAY_SERVER_CHANGES: Metric = counter(
    "strand_relay_server_changes_total",
    "Starts on a server other than the checkpoint's (a failover): the outbox was published from its head.",
);
pub const OUTBOX_OLDEST_SECONDS: Metric =
    gauge("strand_outbox_oldest_seconds", "Age of the oldest outbox row not yet published.");
pub const OUTBOX_ROWS: Metric = gauge("strand_outbox_rows", "Outbox rows not yet published.");
pub const OUTBOX_BACKLOG_READ_FAILURES: Metric = counter(
    "strand_outbox_backlog_read_failures_total",
    "Failed reads of the outbox backlog for the two gauges above.",
);

// The projections.
pub const PROJECTION_EVENTS: Metric = counter("strand_projection_events_total", "Events applied, by projection.");
pub const PROJECTION_LAG_SECONDS: Metric =
    gauge("strand_projection_lag_seconds", "Seconds from a change's commit to its projection, by projection.");
pub const PROJECTION_RETRIES: Metric =
    counter("strand_projection_retries_total", "Batches retried after a failure, by projection.");
pub const PROJECTOR_RETRIES: Metric =
    counter("strand_projector_retries_total", "Projector calls retried after a failure, by projection.");
pub const DEAD_LETTERS: Metric =
    counter("strand_dead_letters_total", "Events sent to the dead-letter topic, by projection and tenant.");
pub const PROJECTION_PARKED_EVENTS: Metric =
    counter("strand_projection_parked_events_total", "Events parked for a tenant (failing, over budget, being built).");
pub const PROJECTION_PARTITIONS: Metric =
    gauge("strand_projection_partitions", "Partitions this worker holds, by consumer group.");
pub const PROJECTION_COMMIT_FAILURES: Metric =
    counter("strand_projection_commit_failures_total", "Failed commits of consumed offsets, by consumer group.");
pub const PROJECTION_SHADOW_SKIPPED_EVENTS: Metric = counter(
    "strand_projection_shadow_skipped_events_total",
    "Events a shadow projector failed on, left out of its space.",
);
pub const PROJECTION_RETIRE_FAILURES: Metric =
    counter("strand_projection_retire_failures_total", "Failed drops of a retired version's space.");

// Plugins.
pub const PLUGIN_CALLS: Metric =
    counter("strand_plugin_calls_total", "Plugin calls, by tenant, kind, plugin and outcome.");
pub const PLUGIN_CALL_SECONDS: Metric =
    histogram("strand_plugin_call_seconds", "Plugin call latency, by tenant, kind and plugin.");
pub const PLUGIN_INVALID_OUTPUT: Metric =
    counter("strand_plugin_invalid_output_total", "Plugin output the host refused, by tenant, kind, plugin and stage.");
pub const PLUGIN_LOG_LINES_DROPPED: Metric =
    counter("strand_plugin_log_lines_dropped_total", "Plugin log lines not kept, by reason.");
pub const PLUGIN_POOL_EXHAUSTED: Metric =
    counter("strand_plugin_pool_exhausted_total", "Calls that found the node's plugin instance pool full.");
pub const PLUGIN_PAUSED: Metric = counter(
    "strand_plugin_paused_microseconds_total",
    "Time plugin calls were paused for their tenant's share of the cores (plugin_tenant_cpu_share), by tenant and kind.",
);
pub const HELD_CONNECTION_WAITS: Metric = counter(
    "strand_held_connection_waits_total",
    "Waits on another service (plugin, Redis, Kafka) while holding a database connection: bugs, by what was waited on.",
);
pub const ROLLOUT_AUTOMATIC_ROLLBACKS: Metric = counter(
    "strand_rollout_automatic_rollbacks_total",
    "Canaries and shadows the host rolled back for failing more than their stable version, by tenant and kind.",
);

// Account jobs.
pub const ACCOUNT_JOB_EDGES: Metric =
    counter("strand_account_job_edges_total", "Edges account jobs changed (each with its event), by kind.");
pub const ACCOUNT_JOB_RETRIES: Metric =
    counter("strand_account_job_retries_total", "Account job batches that failed and were tried again, by kind.");
pub const ACCOUNT_JOBS_FAILED: Metric =
    counter("strand_account_jobs_failed_total", "Account jobs that stopped on an error, by kind.");
pub const ACCOUNT_JOB_SHARE: Metric = gauge(
    "strand_account_job_share",
    "The share of its node's time the account job runner works now, as it paces on the live writes' latency.",
);
pub const ACCOUNT_JOB_QUIET: Metric = gauge(
    "strand_account_job_quiet_seconds",
    "The live writes' p99 without an account job, as its runner last measured it: what it keeps them near.",
);

// Background tasks.
pub const TASK_UP: Metric = gauge("strand_task_up", "1 while a supervised task runs, by task.");
pub const TASK_RESTARTS: Metric = counter("strand_task_restarts_total", "Restarts of a supervised task, by task.");

/// Every metric above.
pub const ALL: &[Metric] = &[
    HTTP_REQUESTS,
    HTTP_REQUEST_SECONDS,
    HTTP_PANICS,
    RATE_LIMIT_DECISIONS,
    WRITE_REQUESTS_UNSAMPLED,
    FOLLOW_ATTEMPTS_UNSAMPLED,
    RELAY_PUBLISHED,
    RELAY_LAG_SECONDS,
    RELAY_PARKED_ROWS,
    RELAY_PARKED_ROWS_TOTAL,
    RELAY_ACTIVE,
    RELAY_BINLOG_FILE,
    RELAY_BINLOG_POSITION,
    RELAY_SERVER_CHANGES,
    OUTBOX_OLDEST_SECONDS,
    OUTBOX_ROWS,
    OUTBOX_BACKLOG_READ_FAILURES,
    PROJECTION_EVENTS,
    PROJECTION_LAG_SECONDS,
    PROJECTION_RETRIES,
    PROJECTOR_RETRIES,
    DEAD_LETTERS,
    PROJECTION_PARKED_EVENTS,
    PROJECTION_PARTITIONS,
    PROJECTION_COMMIT_FAILURES,
    PROJECTION_SHADOW_SKIPPED_EVENTS,
    PROJECTION_RETIRE_FAILURES,
    PLUGIN_CALLS,
    PLUGIN_CALL_SECONDS,
    PLUGIN_INVALID_OUTPUT,
    PLUGIN_LOG_LINES_DROPPED,
    PLUGIN_POOL_EXHAUSTED,
    PLUGIN_PAUSED,
    HELD_CONNECTION_WAITS,
    ROLLOUT_AUTOMATIC_ROLLBACKS,
    ACCOUNT_JOB_EDGES,
    ACCOUNT_JOB_RETRIES,
    ACCOUNT_JOBS_FAILED,
    ACCOUNT_JOB_SHARE,
    ACCOUNT_JOB_QUIET,
    TASK_UP,
    TASK_RESTARTS,
];

/// Gives the recorder every metric's help text (`# HELP` on `/metrics`).
pub fn describe_all() {
    for metric in ALL {
        match metric.kind {
            Kind::Counter => metrics::describe_counter!(metric.name, metric.help),
            Kind::Gauge => metrics::describe_gauge!(metric.name, metric.help),
            Kind::Histogram => metrics::describe_histogram!(metric.name, metric.help),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::path::Path;

    use super::*;

    #[test]
    fn names_are_unique_and_prometheus_shaped() {
        let mut seen = HashSet::new();
        for metric in ALL {
            assert!(seen.insert(metric.name), "{} twice", metric.name);
            assert!(
                metric.name.starts_with("strand_") && metric.name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            );
            assert_eq!(metric.name.ends_with("_total"), metric.kind == Kind::Counter, "{}", metric.name);
        }
    }

    /// A metric name spelt anywhere else in the host's code is one this catalogue may not know of.
    #[test]
    fn no_metric_name_is_spelt_outside_the_catalogue() {
        fn visit(dir: &Path, found: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    visit(&path, found);
                } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("ops/metrics.rs") {
                    // The schema record's table (`db/schema.rs`) is the one other name of ours so spelt.
                    let text = std::fs::read_to_string(&path).unwrap().replace("\"strand_schema\"", "");
                    if text.contains("\"strand_") {
                        found.push(path.display().to_string());
                    }
                }
            }
        }
        let mut found = Vec::new();
        visit(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut found);
        assert!(found.is_empty(), "metric names spelt outside ops/metrics.rs: {found:?}");
    }
}
