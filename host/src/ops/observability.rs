//! Metrics in Prometheus format: one recorder per process (installed by the first server built in it), the
//! `/metrics` rendering, and the HTTP layer timing every request by its route template (not its path, so
//! user ids never become label values). The other metrics are recorded where they happen, through the
//! `metrics` facade: relay, projections, plugins, rate limiting.

use std::sync::OnceLock;
use std::time::Instant;

use crate::ops::metrics::{describe_all, HTTP_REQUESTS, HTTP_REQUEST_SECONDS};
use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Latency buckets, seconds: 0.5 ms to 10 s.
const BUCKETS: [f64; 14] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

static RECORDER: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process's Prometheus recorder, installed on first use. When another recorder was installed first
/// (an embedding program's), metrics go there and `/metrics` renders only what this one saw: nothing.
pub fn recorder() -> &'static PrometheusHandle {
    RECORDER.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &BUCKETS)
            .expect("constant, non-empty buckets")
            .build_recorder();
        let handle = recorder.handle();
        match metrics::set_global_recorder(recorder) {
            Ok(()) => describe_all(),
            Err(error) => tracing::warn!(%error, "another metrics recorder is installed; /metrics stays empty"),
        }
        handle
    })
}

/// Times each request: `strand_http_requests_total` and `strand_http_request_seconds` by method, route and
/// status; a live write's time (one that succeeded) also goes to `live_writes`, which account jobs pace on.
pub async fn time_requests(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().to_string();
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", |p| p.as_str()).to_owned();
    let response = next.run(request).await;
    // Only writes that went through: a flood of refused ones (401, 429) is fast and would lower the value
    // the jobs pace against.
    if response.status().is_success() && super::live_writes::is_live_write(&method, &route) {
        super::live_writes::record(started.elapsed());
    }
    let labels = [("method", method), ("route", route), ("status", response.status().as_u16().to_string())];
    metrics::counter!(HTTP_REQUESTS.name, &labels).increment(1);
    metrics::histogram!(HTTP_REQUEST_SECONDS.name, &labels).record(started.elapsed().as_secs_f64());
    response
}

/// Seconds from `timestamp` (RFC 3339, as events carry it) to now; `None` if it does not parse.
pub fn seconds_since(timestamp: &str) -> Option<f64> {
    let at = chrono::DateTime::parse_from_rfc3339(timestamp).ok()?;
    Some((chrono::Utc::now() - at.to_utc()).num_microseconds()? as f64 / 1e6)
}

/// `error` and its causes, outermost first, as one log field: "cannot read the bus: Kafka failed: …".
pub fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let shown = cause.to_string();
        // A wrapper that prints its cause already (`…: {0}`) is not repeated.
        if !text.ends_with(&shown) {
            text.push_str(": ");
            text.push_str(&shown);
        }
        next = cause.source();
    }
    text
}
