//! Endpoints for operators and orchestrators: liveness, readiness and Prometheus metrics. Liveness and
//! readiness need no token: they tell nothing about users or tenants. Metrics name tenants, their plugins
//! and their write rates: on the API listener they answer the platform admin's token only; the operations
//! listener (`operations_listen`, a port not exposed to users) serves them to anyone who reaches it.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::{ApiError, AppState};
use crate::ops::observability;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Probes and metrics.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(healthz)).routes(routes!(readyz)).routes(routes!(admin_metrics))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Liveness {
    /// Always `ok`: the process answers HTTP.
    pub status: &'static str,
}

/// Liveness: the process serves HTTP (restart it if this fails).
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, body = Liveness)))]
pub async fn healthz() -> Json<Liveness> {
    Json(Liveness { status: "ok" })
}

/// Whether the node is ready, and nothing more: what fails and why is in the node's log (raw errors name
/// hosts and users), and in `strand_task_up` for its tasks.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReadyView {
    pub ready: bool,
}

/// Readiness: the database, the cache, Kafka (when configured) answer and the node's tasks run (send no
/// traffic here while this fails). Checked at most once a second, whoever asks how often.
#[utoipa::path(get, path = "/readyz", tag = "operations", responses(
    (status = 200, body = ReadyView),
    (status = 503, description = "a dependency fails (`not_ready`; which one is in the log)", body = super::Problem,
        content_type = "application/problem+json"),
))]
pub async fn readyz(State(state): State<AppState>) -> Response {
    let report = state.readiness.check().await;
    if report.ready {
        return Json(ReadyView { ready: true }).into_response();
    }
    let failing: Vec<String> =
        report.checks.iter().filter(|(_, c)| !c.ok).map(|(name, c)| format!("{name}: {}", c.detail)).collect();
    tracing::warn!(failing = ?failing, "not ready");
    ApiError::NotReady.into_response()
}

/// Metrics in Prometheus text format: requests by route, relay and projection lag, plugin calls, dead
/// letters, rate-limit decisions. On the API listener, for the platform admin's token only (Prometheus:
/// `authorization: {credentials: …}` in the scrape config), or scrape `operations_listen` instead.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses(
    (status = 200, description = "Prometheus text exposition", body = String, content_type = "text/plain"),
    (status = 401, description = "No credential, or not the admin token", body = super::Problem,
        content_type = "application/problem+json"),
    (status = 403, description = "A tenant key (`forbidden`), or no admin token configured (`admin_disabled`)",
        body = super::Problem, content_type = "application/problem+json"),
), security(("admin" = [])))]
pub async fn admin_metrics(operator: super::admin::Operator) -> Result<impl IntoResponse, ApiError> {
    operator.admin_only()?;
    Ok(metrics().await)
}

/// The metrics as the operations listener serves them, to whoever reaches that port.
pub async fn metrics() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], observability::recorder().render())
}
