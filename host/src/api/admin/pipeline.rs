//! The pipeline seen from the admin API: the backlog (lag) and a tenant's parked rows and events.

use axum::extract::State;

use super::*;
use crate::api::params::ApiPath as Path;
use crate::api::problem::{ApiError, Problem};
use crate::api::AppState;
use crate::bus::Topology;
use crate::upkeep::lag::{ParkedRows, PipelineLag};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The pipeline's lag and parked work.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(lag)).routes(routes!(parked))
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
