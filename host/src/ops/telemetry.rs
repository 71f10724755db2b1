//! Logs and traces of a process. Logs go to stderr (text, or JSON with `STRAND_LOG_FORMAT=json`), filtered
//! by `STRAND_LOG`. Traces are off unless `[tracing] otlp_endpoint` is set; then a sampled share of requests
//! is exported over OTLP, one trace per change across every process: the HTTP request, its policy call and
//! its transaction; the outbox row keeps the W3C `traceparent` (as Debezium's outbox does), the relay's
//! publish continues it and hands it on as a Kafka header, the worker's apply continues that, and every
//! plugin call inside them is a child span.
//!
//! Trace spans have their own target, [`TARGET`]: logs never see them, and with tracing off no layer wants
//! them, so their callsites are disabled once and cost one atomic load each.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SamplingDecision, SamplingResult, SdkTracerProvider, ShouldSample};
use opentelemetry_sdk::Resource;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// The target of every trace span: `tracing::info_span!(target: TARGET, …)`.
pub const TARGET: &str = "strand::trace";
/// The W3C header (HTTP and Kafka) and outbox column that carry a trace from one process to the next.
pub const TRACEPARENT: &str = "traceparent";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Why traces cannot be exported as configured.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("tracing.sample_ratio must be between 0 and 1, not {0}")]
    SampleRatio(f64),
    #[error("cannot export traces to {endpoint}: {source}")]
    Exporter { endpoint: String, source: opentelemetry_otlp::ExporterBuildError },
    #[error("a global logger is installed already: {0}")]
    Installed(#[from] tracing_subscriber::util::TryInitError),
}

/// Where and how much a process exports traces (`[tracing]`; `Config::trace_export`): the configuration's
/// own values, so that the leaf that every layer traces through imports nothing above it.
#[derive(Debug, Clone)]
pub struct TraceExport {
    /// A collector's OTLP/HTTP base URL; `None`: no traces, at no cost.
    pub endpoint: Option<String>,
    /// The share of new traces kept (0 to 1).
    pub sample_ratio: f64,
    /// The most traces a process keeps per second, whatever callers ask.
    pub max_traces_per_second: u32,
    /// The service name, before the process's role.
    pub service_name: String,
}

/// The process's trace export; [`Telemetry::shutdown`] sends what is still buffered.
#[must_use = "dropping it loses the spans not yet exported; call shutdown before exiting"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports the spans still buffered (waiting at most the exporter's timeout) and stops exporting.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider {
            if let Err(error) = provider.shutdown() {
                tracing::warn!(%error, "traces not exported at shutdown");
            }
        }
    }
}

/// Installs the process's logger and, when configured, its trace export, as service `service` (the
/// configured `tracing.service_name` with the role, e.g. `strand-relay`, so a backend tells processes apart).
pub fn install(export: &TraceExport, role: &str) -> Result<Telemetry, TelemetryError> {
    let filter = EnvFilter::try_from_env("STRAND_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info"))
        .add_directive(format!("{TARGET}=off").parse().expect("a constant directive"));
    // Logs on stderr keep stdout for output, e.g. `TOKEN=$(strand token --sub 1)`; colours only on a
    // terminal, not in a container's or a file's log.
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let logs = if std::env::var("STRAND_LOG_FORMAT").is_ok_and(|format| format == "json") {
        logs.json().with_filter(filter).boxed()
    } else {
        logs.with_filter(filter).boxed()
    };
    let registry = tracing_subscriber::registry().with(logs);
    let Some(endpoint) = export.endpoint.as_deref() else {
        registry.try_init()?;
        return Ok(Telemetry { provider: None });
    };
    let service = format!("{}-{role}", export.service_name);
    let provider = provider(endpoint, export.sample_ratio, export.max_traces_per_second, &service)?;
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("strand"))
        .with_filter(Targets::new().with_target(TARGET, tracing::Level::TRACE));
    registry.with(spans).try_init()?;
    ENABLED.store(true, Ordering::Relaxed);
    tracing::info!(%endpoint, sample_ratio = export.sample_ratio, "exporting traces over OTLP");
    Ok(Telemetry { provider: Some(provider) })
}

fn provider(endpoint: &str, ratio: f64, per_second: u32, service: &str) -> Result<SdkTracerProvider, TelemetryError> {
    if !(0.0..=1.0).contains(&ratio) {
        return Err(TelemetryError::SampleRatio(ratio));
    }
    let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(&url)
        .build()
        .map_err(|source| TelemetryError::Exporter { endpoint: url, source })?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        // A continued trace keeps its caller's decision; a new one is sampled at the ratio; both within the cap.
        .with_sampler(CappedSampler::new(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio))), per_second))
        .with_resource(Resource::builder().with_service_name(service.to_owned()).build())
        .build())
}

/// A sampler keeping at most `per_second` traces a second that begin in this process or continue another's
/// (a span whose parent is this process's follows its parent): whatever callers' `traceparent` headers ask,
/// tracing costs a node a bounded amount.
#[derive(Debug, Clone)]
struct CappedSampler {
    inner: Sampler,
    per_second: u32,
    /// The current second's start and the traces kept in it.
    window: Arc<Mutex<(std::time::Instant, u32)>>,
}

impl CappedSampler {
    fn new(inner: Sampler, per_second: u32) -> Self {
        Self { inner, per_second, window: Arc::new(Mutex::new((std::time::Instant::now(), 0))) }
    }

    /// Whether one more trace fits in the current second.
    fn admit(&self) -> bool {
        let mut window = self.window.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if window.0.elapsed() >= std::time::Duration::from_secs(1) {
            *window = (std::time::Instant::now(), 0);
        }
        window.1 += 1;
        window.1 <= self.per_second
    }
}

impl ShouldSample for CappedSampler {
    fn should_sample(
        &self,
        parent: Option<&opentelemetry::Context>,
        trace_id: opentelemetry::trace::TraceId,
        name: &str,
        kind: &opentelemetry::trace::SpanKind,
        attributes: &[opentelemetry::KeyValue],
        links: &[opentelemetry::trace::Link],
    ) -> SamplingResult {
        let result = self.inner.should_sample(parent, trace_id, name, kind, attributes, links);
        let local_child = parent.is_some_and(|context| {
            let parent = context.span().span_context().clone();
            parent.is_valid() && !parent.is_remote()
        });
        if local_child || result.decision != SamplingDecision::RecordAndSample || self.admit() {
            return result;
        }
        SamplingResult { decision: SamplingDecision::Drop, attributes: Vec::new(), trace_state: result.trace_state }
    }
}

/// Whether traces are exported: the one check on paths that would otherwise do work for them.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The `traceparent` of the current span when it is sampled: what the outbox row and the Kafka message
/// carry. `None` with tracing off, outside a trace, or in an unsampled one.
pub fn current_traceparent() -> Option<String> {
    if !enabled() {
        return None;
    }
    traceparent_of(&Span::current())
}

/// The `traceparent` of `span` when it is sampled.
pub fn traceparent_of(span: &Span) -> Option<String> {
    let context = span.context();
    let span = context.span();
    let span = span.span_context();
    (span.is_valid() && span.is_sampled())
        .then(|| format!("00-{}-{}-{:02x}", span.trace_id(), span.span_id(), span.trace_flags().to_u8()))
}

/// Makes `span` a child of the span `traceparent` names (another process's), when it names one.
pub fn continue_trace(span: &Span, traceparent: &str) {
    let carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
    let parent = TraceContextPropagator::new().extract(&carrier);
    if parent.span().span_context().is_valid() {
        // Fails only when tracing is off or the span has started, and then there is nothing to join.
        let _ = span.set_parent(parent);
    }
}

/// Links `span` to the span `traceparent` names: a batch span's other changes.
pub fn link(span: &Span, traceparent: &str) {
    let carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
    let linked = TraceContextPropagator::new().extract(&carrier);
    let linked = linked.span().span_context().clone();
    if linked.is_valid() {
        span.add_link(linked);
    }
}

/// `make()`'s span when the current span is part of a trace, else a disabled one: the spans of inner steps
/// (a plugin call) exist only inside a traced change, never as roots of their own.
pub fn inner_span(make: impl FnOnce() -> Span) -> Span {
    if enabled() && !Span::current().is_disabled() {
        make()
    } else {
        Span::none()
    }
}

/// The HTTP request's span, continuing a caller's `traceparent`; layered only when tracing is on.
pub async fn trace_requests(request: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    use tracing::Instrument;
    let route = request.extensions().get::<axum::extract::MatchedPath>().map_or("unmatched", |p| p.as_str()).to_owned();
    let span = tracing::info_span!(
        target: TARGET,
        "http.request",
        otel.name = format!("{} {route}", request.method()),
        http.request.method = %request.method(),
        http.route = %route,
        http.response.status_code = tracing::field::Empty,
    );
    if let Some(traceparent) = request.headers().get(TRACEPARENT).and_then(|v| v.to_str().ok()) {
        continue_trace(&span, traceparent);
    }
    let response = next.run(request).instrument(span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_asking_for_every_trace_get_the_cap() {
        let sampler = CappedSampler::new(Sampler::AlwaysOn, 5);
        let id = opentelemetry::trace::TraceId::from_bytes([7; 16]);
        let kept = (0..50)
            .filter(|_| {
                let result =
                    sampler.should_sample(None, id, "request", &opentelemetry::trace::SpanKind::Server, &[], &[]);
                result.decision == SamplingDecision::RecordAndSample
            })
            .count();
        assert_eq!(kept, 5);
    }
}
