//! Tenant keys: issued by the platform admin (the secret shown once), listed, revoked.

use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::*;
use crate::api::params::{ApiJson as Json, ApiPath as Path};
use crate::api::problem::{ApiError, Problem};
use crate::api::AppState;
use crate::tenancy::audit::AuditAction;
use crate::tenancy::keys::{self, IssuedKey, TenantKey};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Tenant keys.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(create_key, keys)).routes(routes!(revoke_key))
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct KeyRequest {
    /// What the key is for, e.g. `ci` (a-z, 0-9, -; unique per tenant).
    pub name: String,
}

#[derive(Deserialize)]
pub struct KeyPath {
    tenant: String,
    name: String,
}

/// Issue a tenant key (platform admin only): its secret is in this answer and nowhere else.
#[utoipa::path(post, path = "/admin/v1/tenants/{tenant}/keys", tag = "admin", params(("tenant" = String, Path)),
    request_body = KeyRequest,
    responses((status = 201, body = IssuedKey), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 409, description = "a key of that name exists", body = Problem)),
    security(("admin" = [])))]
pub async fn create_key(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<TenantPath>,
    Json(request): Json<KeyRequest>,
) -> Result<(StatusCode, axum::Json<IssuedKey>), ApiError> {
    operator.admin_only()?;
    let tenant = tenant(&path.tenant)?;
    let issued = keys::issue(&state.db, &tenant, &request.name).await.map_err(ApiError::from);
    let change = Change { detail: format!("key {}", request.name), ..Change::of(AuditAction::CreateKey) };
    let issued = audited(&state, &operator, &tenant, change, issued).await?;
    Ok((StatusCode::CREATED, axum::Json(issued)))
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct KeyList {
    pub keys: Vec<TenantKey>,
}

/// The tenant's keys: name, created, last used — never a secret.
#[utoipa::path(get, path = "/admin/v1/tenants/{tenant}/keys", tag = "admin", params(("tenant" = String, Path)),
    responses((status = 200, body = KeyList), (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("admin" = [])))]
pub async fn keys(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<TenantPath>,
) -> Result<axum::Json<KeyList>, ApiError> {
    Ok(axum::Json(KeyList { keys: keys::list(&state.db, &operator.reach(&path.tenant)?).await? }))
}

/// Revoke a tenant key (platform admin only): requests with it are refused from now on.
#[utoipa::path(delete, path = "/admin/v1/tenants/{tenant}/keys/{name}", tag = "admin",
    params(("tenant" = String, Path), ("name" = String, Path)),
    responses((status = 204), (status = 401, body = Problem), (status = 403, body = Problem), (status = 404, body = Problem)),
    security(("admin" = [])))]
pub async fn revoke_key(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<KeyPath>,
) -> Result<StatusCode, ApiError> {
    operator.admin_only()?;
    let tenant = tenant(&path.tenant)?;
    let revoked = keys::revoke(&state.db, &tenant, &path.name).await.map_err(ApiError::from);
    let change = Change { detail: format!("key {}", path.name), ..Change::of(AuditAction::RevokeKey) };
    audited(&state, &operator, &tenant, change, revoked).await?;
    Ok(StatusCode::NO_CONTENT)
}
