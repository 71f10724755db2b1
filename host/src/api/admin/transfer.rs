//! A tenant's whole graph out and in: the NDJSON export (streamed from the truth page by page) and the
//! import of a graph (`transfer::import`).

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::*;
use crate::api::params::ApiPath as Path;
use crate::api::problem::{ApiError, Problem};
use crate::api::AppState;
use crate::transfer::export::tenant_edges;

/// Every edge of the tenant that holds (follows, pending requests, blocks, unexpired mutes) as NDJSON, one
/// `{"relation", "from", "to", "at_ms"[, "requested", "expires_at_ms"]}` per line: what `strand import`
/// reads back.
#[utoipa::path(get, path = "/admin/v1/tenants/{tenant}/export", tag = "admin", params(("tenant" = String, Path)),
    responses((status = 200, description = "the graph, streamed", content_type = "application/x-ndjson"),
        (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("admin" = [])))]
pub async fn export_tenant(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<TenantPath>,
) -> Result<Response, ApiError> {
    let tenant = operator.reach(&path.tenant)?;
    let body = Body::from_stream(tenant_edges(state.db.clone(), tenant));
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}
