//! Tenants as the admin API shows them: the list, each tenant's settings, its audit log, and who is asking.

use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use super::*;
use crate::api::params::{ApiJson as Json, ApiPath as Path, ApiQuery as Query};
use crate::api::problem::{ApiError, Problem};
use crate::api::AppState;
use crate::graph::TenantId;
use crate::tenancy::audit::{self, AuditAction, AuditPage, AuditQuery};
use crate::tenancy::settings::TenantConfig;
use crate::upkeep::tenant_figures::{one_tenant_figures, tenant_figures, TenantFigures};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Tenants, their settings, the audit log, and who the caller is.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(settings, set_settings))
        .routes(routes!(tenants))
        .routes(routes!(figures))
        .routes(routes!(audit_log))
        .routes(routes!(whoami))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TenantList {
    pub tenants: Vec<String>,
    /// Each tenant's figures, in the same order.
    pub figures: Vec<TenantFigures>,
}

/// Every tenant with follows, deployed plugins or settings, with its figures: writes and denials per second
/// and dead letters (the answering node's), parked rows and events, and how full its spaces are.
#[utoipa::path(get, path = "/admin/v1/tenants", tag = "admin",
    responses((status = 200, body = TenantList), (status = 401, body = Problem)),
    security(("admin" = [])))]
pub async fn tenants(State(state): State<AppState>, operator: Operator) -> Result<axum::Json<TenantList>, ApiError> {
    operator.admin_only()?;
    let tenants = state.tenants.known().await?;
    let figures = tenant_figures(&state.db, &state.cache, &state.plugins, &tenants).await?;
    Ok(axum::Json(TenantList { tenants, figures }))
}
/// One tenant's figures (as the list shows them): a tenant key reads its own.
#[utoipa::path(get, path = "/admin/v1/tenants/{tenant}/figures", tag = "admin", params(("tenant" = String, Path)),
    responses((status = 200, body = TenantFigures), (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("admin" = [])))]
pub async fn figures(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<TenantPath>,
) -> Result<axum::Json<TenantFigures>, ApiError> {
    let tenant = operator.reach(&path.tenant)?;
    Ok(axum::Json(one_tenant_figures(&state.db, &state.cache, &state.plugins, &tenant).await?))
}

/// The tenant's settings.
#[utoipa::path(get, path = "/admin/v1/tenants/{tenant}/settings", tag = "admin", params(("tenant" = String, Path)),
    responses((status = 200, body = TenantConfig), (status = 401, body = Problem)),
    security(("admin" = [])))]
pub async fn settings(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<TenantPath>,
) -> Result<axum::Json<TenantConfig>, ApiError> {
    Ok(axum::Json(state.tenants.get(&operator.reach(&path.tenant)?)))
}

/// Replace the tenant's settings, e.g. `{"rate_limit_failure": "closed"}`.
#[utoipa::path(put, path = "/admin/v1/tenants/{tenant}/settings", tag = "admin", params(("tenant" = String, Path)),
    request_body = TenantConfig,
    responses((status = 200, body = TenantConfig), (status = 400, body = Problem), (status = 401, body = Problem)),
    security(("admin" = [])))]
pub async fn set_settings(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<TenantPath>,
    Json(config): Json<TenantConfig>,
) -> Result<axum::Json<TenantConfig>, ApiError> {
    let tenant = operator.reach(&path.tenant)?;
    let set = state.tenants.set(&tenant, config).await.map_err(ApiError::from);
    let detail = format!(
        "rate_limit_failure {:?}, relation_policy_failure {:?}, allow_pinned_versions {}",
        config.rate_limit_failure,
        config.relation_policy_failure(),
        config.allow_pinned_versions
    )
    .to_lowercase();
    let change = Change { detail, ..Change::of(AuditAction::SetSettings) };
    audited(&state, &operator, &tenant, change, set).await?;
    Ok(axum::Json(config))
}
/// The audit log, newest first: every tenant's for the admin, its own tenant's for a tenant key; filtered by
/// actor, action and time if asked. A page reads at most 5 000 entries: a filter that matches few may
/// answer a short page with `next_before` set — go on from there.
#[utoipa::path(get, path = "/admin/v1/audit", tag = "admin", params(AuditQuery),
    responses((status = 200, body = AuditPage), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem)),
    security(("admin" = [])))]
pub async fn audit_log(
    State(state): State<AppState>,
    operator: Operator,
    Query(query): Query<AuditQuery>,
) -> Result<axum::Json<AuditPage>, ApiError> {
    let tenant = match (&query.tenant, operator.own_tenant()) {
        (Some(raw), _) => Some(operator.reach(raw)?),
        (None, own) => own.cloned(),
    };
    let filter = query.filter()?;
    let page = audit::page(&state.db, tenant.as_ref(), &filter, query.before, query.limit.unwrap_or(50)).await?;
    Ok(axum::Json(page))
}
/// Who a credential is, so that a client (the admin page) shows what it reaches.
#[derive(Debug, Serialize, ToSchema)]
pub struct WhoAmI {
    /// `admin`, or `key:NAME`.
    pub actor: String,
    /// The one tenant a tenant key reaches; `null` for the admin, who reaches every tenant.
    pub tenant: Option<String>,
}

/// The caller's credential: the platform admin, or a tenant key and its tenant.
#[utoipa::path(get, path = "/admin/v1/whoami", tag = "admin",
    responses((status = 200, body = WhoAmI), (status = 401, body = Problem)),
    security(("admin" = [])))]
pub async fn whoami(operator: Operator) -> axum::Json<WhoAmI> {
    axum::Json(WhoAmI { actor: operator.actor(), tenant: operator.own_tenant().map(TenantId::to_string) })
}
