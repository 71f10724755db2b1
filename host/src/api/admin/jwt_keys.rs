//! A tenant's own JWT verification keys: set (two at once, by `kid`), listed (never their material), removed.

use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::*;
use crate::api::params::{ApiJson as Json, ApiPath as Path};
use crate::api::problem::{ApiError, Problem};
use crate::api::AppState;
use crate::tenancy::audit::AuditAction;
use crate::tenancy::jwt_keys::{JwtKeyInfo, JwtKeySpec};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Tenants' JWT keys.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(set_jwt_key, remove_jwt_key)).routes(routes!(jwt_keys))
}

#[derive(Deserialize)]
pub struct JwtKeyPath {
    tenant: String,
    kid: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct JwtKeyList {
    pub keys: Vec<JwtKeyInfo>,
}

/// Register (or replace) one of the tenant's own JWT verification keys, chosen by the tokens' `kid`; once
/// it has one, the tenant's tokens verify only with its keys (at most two, for rotation).
#[utoipa::path(put, path = "/admin/v1/tenants/{tenant}/jwt-keys/{kid}", tag = "admin",
    params(("tenant" = String, Path), ("kid" = String, Path)),
    request_body = JwtKeySpec,
    responses((status = 200, body = JwtKeyList), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 409, description = "the tenant has two keys already", body = Problem)),
    security(("admin" = [])))]
pub async fn set_jwt_key(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<JwtKeyPath>,
    Json(spec): Json<JwtKeySpec>,
) -> Result<axum::Json<JwtKeyList>, ApiError> {
    let tenant = operator.reach(&path.tenant)?;
    let set = state.tenants.jwt_keys().set(&tenant, &path.kid, &spec).await.map_err(ApiError::from);
    let change =
        Change { detail: format!("kid {} ({:?})", path.kid, spec.algorithm), ..Change::of(AuditAction::SetJwtKey) };
    audited(&state, &operator, &tenant, change, set).await?;
    Ok(axum::Json(JwtKeyList { keys: state.tenants.jwt_keys().list(&tenant).await? }))
}
/// The tenant's own JWT keys (never their material).
#[utoipa::path(get, path = "/admin/v1/tenants/{tenant}/jwt-keys", tag = "admin", params(("tenant" = String, Path)),
    responses((status = 200, body = JwtKeyList), (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("admin" = [])))]
pub async fn jwt_keys(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<TenantPath>,
) -> Result<axum::Json<JwtKeyList>, ApiError> {
    Ok(axum::Json(JwtKeyList { keys: state.tenants.jwt_keys().list(&operator.reach(&path.tenant)?).await? }))
}

/// Remove one of the tenant's JWT keys; with none left, its tokens verify with the global key again.
#[utoipa::path(delete, path = "/admin/v1/tenants/{tenant}/jwt-keys/{kid}", tag = "admin",
    params(("tenant" = String, Path), ("kid" = String, Path)),
    responses((status = 204), (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem)),
    security(("admin" = [])))]
pub async fn remove_jwt_key(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<JwtKeyPath>,
) -> Result<StatusCode, ApiError> {
    let tenant = operator.reach(&path.tenant)?;
    let removed = state.tenants.jwt_keys().remove(&tenant, &path.kid).await.map_err(ApiError::from);
    let change = Change { detail: format!("kid {}", path.kid), ..Change::of(AuditAction::RemoveJwtKey) };
    audited(&state, &operator, &tenant, change, removed).await?;
    Ok(StatusCode::NO_CONTENT)
}
