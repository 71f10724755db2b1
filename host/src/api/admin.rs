//! The admin API (`/admin/v1/…`) for platform teams: deploy, list, roll back and remove tenants' plugins,
//! follow projector backfills, and set tenant settings. It has its own credential (`admin_token`), never a user JWT.

use std::str::FromStr;

use axum::body::Bytes;
use axum::extract::{FromRequestParts, State};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::params::{ApiJson as Json, ApiPath as Path};
use super::problem::{ApiError, Problem};
use super::AppState;
use crate::graph::TenantId;
use crate::lag::{LagError, PipelineLag};
use crate::plugins::{PluginError, PluginKind, PluginSlot, PluginVersion, RegistryError};
use crate::projection::progress::{self, BackfillProgress};
use crate::projection::Projection;
use crate::tenants::TenantConfig;

/// Proof that the request carries the admin token.
pub struct Admin;

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let Some(expected) = &state.admin_token else {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "admin_disabled",
                "the admin API is disabled: set STRAND_ADMIN_TOKEN",
            ));
        };
        let presented = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        if constant_time_eq(presented.as_bytes(), expected.as_bytes()) {
            Ok(Admin)
        } else {
            Err(ApiError::unauthorized("invalid_admin_token", "send Authorization: Bearer <admin token>"))
        }
    }
}

/// Compares without an early exit, so response timing does not reveal how much of the token matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[derive(Deserialize)]
pub struct TenantPath {
    tenant: String,
}

#[derive(Deserialize)]
pub struct SlotPath {
    tenant: String,
    kind: String,
    name: String,
}

fn tenant(raw: &str) -> Result<TenantId, ApiError> {
    raw.parse().map_err(|e: crate::graph::InvalidTenantId| ApiError::bad_request("invalid_tenant", e.to_string()))
}

impl SlotPath {
    fn slot(&self) -> Result<PluginSlot, ApiError> {
        let kind = PluginKind::from_str(&self.kind).map_err(|e| ApiError::bad_request("invalid_plugin_kind", e))?;
        Ok(PluginSlot::new(tenant(&self.tenant)?, kind, &self.name)?)
    }
}

impl From<RegistryError> for ApiError {
    fn from(error: RegistryError) -> Self {
        let detail = error.to_string();
        match error {
            RegistryError::InvalidName(_) => ApiError::bad_request("invalid_plugin_name", detail),
            RegistryError::NoSuchVersion { .. } | RegistryError::NotDeployed { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "plugin_not_found", detail)
            }
            RegistryError::Database(e) => ApiError::database(&e),
            RegistryError::Rejected(PluginError::NotAComponent(_)) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_component", detail)
            }
            RegistryError::Rejected(PluginError::WrongWorld { .. }) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "wrong_world", detail)
            }
            RegistryError::Rejected(PluginError::Host(_)) => {
                tracing::error!(error = %detail, "plugin host failure during a deploy");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "plugin_host_error", detail)
            }
            RegistryError::Rejected(_) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "conformance_failed", detail),
        }
    }
}

/// A new version, and what its conformance run cost.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeployResponse {
    pub plugin: PluginVersion,
    pub conformance_micros: u64,
    pub conformance_fuel: Option<u64>,
}

/// Upload a component (the request body) as the slot's next version: validated against the kind's world,
/// compiled, run on conformance samples, stored, and swapped in atomically.
#[utoipa::path(put, path = "/admin/v1/tenants/{tenant}/plugins/{kind}/{name}", tag = "admin",
    params(("tenant" = String, Path), ("kind" = String, Path, description = "rate-limiter, router or projector"),
        ("name" = String, Path, description = "`default` for rate-limiter and router")),
    request_body(content = Vec<u8>, content_type = "application/wasm"),
    responses((status = 200, body = DeployResponse), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 422, description = "Not a component, wrong world or failed conformance", body = Problem)),
    security(("admin" = [])))]
pub async fn deploy(
    State(state): State<AppState>,
    _admin: Admin,
    Path(path): Path<SlotPath>,
    wasm: Bytes,
) -> Result<axum::Json<DeployResponse>, ApiError> {
    let (plugin, cost) = state.plugins.deploy(path.slot()?, wasm.to_vec()).await?;
    Ok(axum::Json(DeployResponse {
        plugin,
        conformance_micros: cost.elapsed.as_micros() as u64,
        conformance_fuel: cost.fuel,
    }))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct RollbackRequest {
    pub version: i64,
}

/// Make a kept version of the slot active again.
#[utoipa::path(post, path = "/admin/v1/tenants/{tenant}/plugins/{kind}/{name}/rollback", tag = "admin",
    params(("tenant" = String, Path), ("kind" = String, Path), ("name" = String, Path)),
    request_body = RollbackRequest,
    responses((status = 200, body = PluginVersion), (status = 404, body = Problem), (status = 401, body = Problem)),
    security(("admin" = [])))]
pub async fn rollback(
    State(state): State<AppState>,
    _admin: Admin,
    Path(path): Path<SlotPath>,
    Json(request): Json<RollbackRequest>,
) -> Result<axum::Json<PluginVersion>, ApiError> {
    Ok(axum::Json(state.plugins.rollback(path.slot()?, request.version).await?))
}

/// Delete every version of the slot; the tenant falls back to the bundled plugin.
#[utoipa::path(delete, path = "/admin/v1/tenants/{tenant}/plugins/{kind}/{name}", tag = "admin",
    params(("tenant" = String, Path), ("kind" = String, Path), ("name" = String, Path)),
    responses((status = 204), (status = 404, body = Problem), (status = 401, body = Problem)),
    security(("admin" = [])))]
pub async fn remove(
    State(state): State<AppState>,
    _admin: Admin,
    Path(path): Path<SlotPath>,
) -> Result<StatusCode, ApiError> {
    state.plugins.remove(path.slot()?).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PluginList {
    pub plugins: Vec<PluginVersion>,
}

/// Every stored version of the tenant's plugins (tenants without any use the bundled ones).
#[utoipa::path(get, path = "/admin/v1/tenants/{tenant}/plugins", tag = "admin", params(("tenant" = String, Path)),
    responses((status = 200, body = PluginList), (status = 401, body = Problem)),
    security(("admin" = [])))]
pub async fn list(
    State(state): State<AppState>,
    _admin: Admin,
    Path(path): Path<TenantPath>,
) -> Result<axum::Json<PluginList>, ApiError> {
    Ok(axum::Json(PluginList { plugins: state.plugins.versions(&tenant(&path.tenant)?).await? }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ProjectionList {
    /// Backfills of projectors deployed at runtime, by projection and tenant.
    pub backfills: Vec<BackfillProgress>,
}

/// Where the backfills of projectors deployed at runtime stand (written by the worker that runs each).
#[utoipa::path(get, path = "/admin/v1/projections", tag = "admin",
    responses((status = 200, body = ProjectionList), (status = 401, body = Problem)),
    security(("admin" = [])))]
pub async fn projections(State(state): State<AppState>, _admin: Admin) -> Result<axum::Json<ProjectionList>, ApiError> {
    Ok(axum::Json(ProjectionList { backfills: progress::all(&state.db).await? }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TenantList {
    pub tenants: Vec<String>,
}

/// Every tenant with follows, deployed plugins or settings.
#[utoipa::path(get, path = "/admin/v1/tenants", tag = "admin",
    responses((status = 200, body = TenantList), (status = 401, body = Problem)),
    security(("admin" = [])))]
pub async fn tenants(State(state): State<AppState>, _admin: Admin) -> Result<axum::Json<TenantList>, ApiError> {
    Ok(axum::Json(TenantList { tenants: state.tenants.known().await? }))
}

impl From<LagError> for ApiError {
    fn from(error: LagError) -> Self {
        match error {
            LagError::Database(e) => ApiError::database(&e),
            other => {
                tracing::warn!(error = %other, "cannot measure the pipeline lag");
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "lag_unavailable", other.to_string())
            }
        }
    }
}

/// How far behind the relay (outbox) and each projection (events not yet committed) are.
#[utoipa::path(get, path = "/admin/v1/lag", tag = "admin",
    responses((status = 200, body = PipelineLag), (status = 401, body = Problem),
        (status = 503, description = "the database or the broker does not answer", body = Problem)),
    security(("admin" = [])))]
pub async fn lag(State(state): State<AppState>, _admin: Admin) -> Result<axum::Json<PipelineLag>, ApiError> {
    let mut projections = vec!["follower".to_owned()];
    projections.extend(state.plugins.projector_names().iter().map(|name| Projection::projector_name(name)));
    Ok(axum::Json(state.lag.measure(projections).await?))
}

/// The tenant's settings.
#[utoipa::path(get, path = "/admin/v1/tenants/{tenant}/settings", tag = "admin", params(("tenant" = String, Path)),
    responses((status = 200, body = TenantConfig), (status = 401, body = Problem)),
    security(("admin" = [])))]
pub async fn settings(
    State(state): State<AppState>,
    _admin: Admin,
    Path(path): Path<TenantPath>,
) -> Result<axum::Json<TenantConfig>, ApiError> {
    Ok(axum::Json(state.tenants.get(&tenant(&path.tenant)?)))
}

/// Replace the tenant's settings, e.g. `{"rate_limit_failure": "closed"}`.
#[utoipa::path(put, path = "/admin/v1/tenants/{tenant}/settings", tag = "admin", params(("tenant" = String, Path)),
    request_body = TenantConfig,
    responses((status = 200, body = TenantConfig), (status = 400, body = Problem), (status = 401, body = Problem)),
    security(("admin" = [])))]
pub async fn set_settings(
    State(state): State<AppState>,
    _admin: Admin,
    Path(path): Path<TenantPath>,
    Json(config): Json<TenantConfig>,
) -> Result<axum::Json<TenantConfig>, ApiError> {
    state.tenants.set(&tenant(&path.tenant)?, config).await?;
    Ok(axum::Json(config))
}
