//! The pipeline seen from the admin API: the backlog (lag) and a tenant's parked rows and events.

use axum::extract::State;

use super::*;
use crate::api::params::ApiPath as Path;
use crate::api::problem::{ApiError, Problem};
use crate::api::AppState;
use crate::bus::Topology;
use crate::ops::history::Series;
use crate::upkeep::lag::{ParkedRows, PipelineLag};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The pipeline's lag and parked work.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(lag)).routes(routes!(parked)).routes(routes!(history))
}

/// The answering node's last hour of its pipeline, for the console's charts.
#[derive(Debug, Serialize, ToSchema)]
pub struct History {
    /// Seconds between two points.
    pub every_seconds: u64,
    /// One per chart, each with the alert rule's threshold where one pages on it.
    pub series: Vec<Series>,
}

/// The last hour of the answering node's relay backlog, projection lag, writes, denials and plugin failures
/// (a point every 10 s, kept in memory: no Prometheus needed). Behind a balancer each node answers with its
/// own: its writes and plugin calls, and the relay's figures where it runs one (every relay exports the
/// outbox's backlog, standbys too). Platform admin only: the figures are every tenant's together.
#[utoipa::path(get, path = "/admin/v1/history", tag = "admin",
    responses((status = 200, body = History), (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("admin" = [])))]
pub async fn history(operator: Operator) -> Result<axum::Json<History>, ApiError> {
    operator.admin_only()?;
    Ok(axum::Json(History {
        every_seconds: crate::ops::history::EVERY.as_secs(),
        series: crate::ops::history::charts(),
    }))
}

/// How far behind the relay (outbox) and each projection (events not yet committed) are.
#[utoipa::path(get, path = "/admin/v1/lag", tag = "admin",
    responses((status = 200, body = PipelineLag), (status = 401, body = Problem),
        (status = 503, description = "the database or the broker does not answer", body = Problem)),
    security(("admin" = [])))]
pub async fn lag(State(state): State<AppState>, operator: Operator) -> Result<axum::Json<PipelineLag>, ApiError> {
    let mut projections = vec!["follower".to_owned()];
    let projectors = match operator.own_tenant() {
        None => state.plugins.projector_names(),
        // A tenant's team sees the projections its events go through.
        Some(own) => state.plugins.projectors(own).iter().map(|p| p.name.clone()).collect(),
    };
    projections.extend(projectors.iter().map(|name| Topology::projector_projection(name)));
    Ok(axum::Json(state.lag.measure(projections).await?))
}
/// The tenant's outbox rows the relay parked — its router ran past the relay's time budget, or the broker
/// refused a destination it routed to — and why: they are retried with backoff, in order. And its events
/// each projection parked (its projector failing or over budget, its space being built or at its quota).
#[utoipa::path(get, path = "/admin/v1/tenants/{tenant}/parked", tag = "admin", params(("tenant" = String, Path)),
    responses((status = 200, body = ParkedRows), (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("admin" = [])))]
pub async fn parked(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<TenantPath>,
) -> Result<axum::Json<ParkedRows>, ApiError> {
    let tenant = operator.reach(&path.tenant)?;
    Ok(axum::Json(crate::upkeep::lag::parked_rows(&state.db, tenant.as_str()).await?))
}
