//! The admin API (`/admin/v1/…`) for platform teams: deploy, list, roll back and remove tenants' plugins,
//! follow projector backfills, and set tenant settings; issue tenant keys; page the audit log. Its credentials
//! are the platform admin's token (`admin_token`) and the tenant keys it issues ([`Operator`]), never a
//! user JWT; every change is recorded in the audit log.

use std::str::FromStr;

use axum::body::Bytes;
use axum::extract::{FromRequestParts, State};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::params::{ApiJson as Json, ApiPath as Path, ApiQuery as Query};
use super::problem::{ApiError, Problem};
use super::AppState;
use crate::audit::{self, AuditAction, AuditOutcome, AuditPage, AuditQuery, AuditRecord};
use crate::bus::Topology;
use crate::cache::Space;
use crate::graph::TenantId;
use crate::lag::{LagError, ParkedRows, PipelineLag};
use crate::plugins::logs::{self, LogPage, LogQuery};
use crate::plugins::{
    hex_sha256, parse_declarations, PluginError, PluginKind, PluginSlot, PluginVersion, RegistryError, RequestedLimits,
    RolloutRates, Staged, VersionState,
};
use crate::projection::progress::{self, BackfillProgress};
use crate::projection::spaces::{self, SpaceDiff};
use crate::tenant_jwt::{JwtKeyInfo, JwtKeySpec, TenantJwtError};
use crate::tenant_keys::{self, IssuedKey, TenantKey, TenantKeyError};
use crate::tenants::TenantConfig;

/// Who calls the admin API: the platform admin (the admin token), or a tenant's team with a tenant key,
/// which reaches only its own tenant's routes. Every handler takes one, so no route is left unguarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operator {
    Admin,
    TenantKey { tenant: TenantId, name: String },
}

impl Operator {
    /// As the audit log names it: `admin`, or `key:NAME`.
    pub fn actor(&self) -> String {
        match self {
            Operator::Admin => "admin".to_owned(),
            Operator::TenantKey { name, .. } => format!("key:{name}"),
        }
    }

    /// The tenant a tenant key is fenced into; `None` for the admin.
    pub fn own_tenant(&self) -> Option<&TenantId> {
        match self {
            Operator::Admin => None,
            Operator::TenantKey { tenant, .. } => Some(tenant),
        }
    }

    /// `raw` as a tenant this operator may act on; 403 for another tenant's, before anything else is
    /// looked at (so a key learns nothing of other tenants, not even whether their ids are valid).
    fn reach(&self, raw: &str) -> Result<TenantId, ApiError> {
        match self.own_tenant() {
            Some(own) if own.as_str() != raw => Err(ApiError::forbidden(format!("this key reaches only tenant {own}"))),
            _ => tenant(raw),
        }
    }

    /// Only the platform admin: the tenant list, issuing and revoking keys, the metrics.
    pub(super) fn admin_only(&self) -> Result<(), ApiError> {
        match self {
            Operator::Admin => Ok(()),
            Operator::TenantKey { .. } => Err(ApiError::forbidden("only the platform admin's token reaches this")),
        }
    }
}

impl FromRequestParts<AppState> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let Some(expected) = &state.admin_token else {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "admin_disabled",
                "the admin API is disabled: set STRAND_ADMIN_TOKEN",
            ));
        };
        let refused =
            || ApiError::unauthorized("invalid_admin_token", "send Authorization: Bearer <admin token or tenant key>");
        // No credential is never compared to anything: an empty token cannot match (nor be configured).
        let presented = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .filter(|presented| !presented.is_empty())
            .ok_or_else(refused)?;
        if !expected.is_empty() && constant_time_eq(presented.as_bytes(), expected.as_bytes()) {
            return Ok(Operator::Admin);
        }
        if presented.starts_with(tenant_keys::KEY_PREFIX) {
            if let Some((tenant, name)) =
                tenant_keys::authenticate(&state.db, presented).await.map_err(|e| ApiError::database(&e))?
            {
                return Ok(Operator::TenantKey { tenant, name });
            }
        }
        Err(refused())
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
    /// The slot, if `operator` reaches its tenant.
    fn slot(&self, operator: &Operator) -> Result<PluginSlot, ApiError> {
        let tenant = operator.reach(&self.tenant)?;
        let kind = PluginKind::from_str(&self.kind).map_err(|e| ApiError::bad_request("invalid_plugin_kind", e))?;
        Ok(PluginSlot::new(tenant, kind, &self.name)?)
    }
}

/// A change about to be recorded in the audit log.
struct Change {
    action: AuditAction,
    slot: Option<String>,
    version: Option<i64>,
    sha256: Option<String>,
    detail: String,
}

impl Change {
    fn of(action: AuditAction) -> Self {
        Self { action, slot: None, version: None, sha256: None, detail: String::new() }
    }

    fn plugin(action: AuditAction, slot: &PluginSlot) -> Self {
        Self { slot: Some(format!("{}/{}", slot.kind, slot.name)), ..Self::of(action) }
    }

    fn version(self, version: &PluginVersion) -> Self {
        Self { version: Some(version.version), sha256: Some(version.sha256.clone()), ..self }
    }
}

/// Records `change` of `tenant` by `operator` with how `result` ended, then passes `result` on. A change
/// that cannot be recorded answers the database's error: nothing happens unaudited without saying so.
async fn audited<T>(
    state: &AppState,
    operator: &Operator,
    tenant: &TenantId,
    change: Change,
    result: Result<T, ApiError>,
) -> Result<T, ApiError> {
    let (outcome, detail) = match &result {
        Ok(_) => (AuditOutcome::Ok, change.detail),
        Err(error) => (AuditOutcome::Refused, format!("{}: {}", error.code(), error.detail())),
    };
    let record = AuditRecord {
        actor: operator.actor(),
        tenant: tenant.to_string(),
        action: change.action,
        slot: change.slot,
        version: change.version,
        sha256: change.sha256,
        outcome,
        detail,
    };
    audit::record(&state.db, record).await.map_err(|e| ApiError::database(&e))?;
    result
}

impl From<RegistryError> for ApiError {
    fn from(error: RegistryError) -> Self {
        let detail = error.to_string();
        match error {
            RegistryError::InvalidName(_) => ApiError::bad_request("invalid_plugin_name", detail),
            RegistryError::ReservedName(_) => ApiError::bad_request("reserved_plugin_name", detail),
            RegistryError::LimitRefused(_) => ApiError::bad_request("limit_too_high", detail),
            RegistryError::InvalidRollout(_) => ApiError::bad_request("invalid_rollout", detail),
            RegistryError::InvalidReadable(_) => ApiError::bad_request("invalid_readable", detail),
            RegistryError::NoSuchVersion { .. }
            | RegistryError::NotDeployed { .. }
            | RegistryError::NoRollout { .. } => ApiError::new(StatusCode::NOT_FOUND, "plugin_not_found", detail),
            RegistryError::Database(e) => ApiError::database(&e),
            RegistryError::TooManyProjectors { .. } => {
                ApiError::new(StatusCode::CONFLICT, "too_many_projectors", detail)
            }
            RegistryError::CompileTooSlow(_) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "compile_too_slow", detail)
            }
            RegistryError::Rejected(PluginError::NotAComponent(_)) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_component", detail)
            }
            RegistryError::Rejected(PluginError::WrongWorld { .. }) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "wrong_world", detail)
            }
            RegistryError::Rejected(host @ PluginError::Host { .. }) => {
                tracing::error!(error = %crate::observability::causes(&host), "plugin host failure during a deploy");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "plugin_host_error", detail)
            }
            RegistryError::Rejected(_) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "conformance_failed", detail),
        }
    }
}

/// A new version, and what its conformance run cost.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DeployResponse {
    pub plugin: PluginVersion,
    pub conformance_micros: u64,
    pub conformance_fuel: Option<u64>,
}

/// Upload a component (the request body) as the slot's next version: validated against the kind's world,
/// compiled, run on conformance samples within its limits (the query's, each defaulting to the
/// configuration's and at most the platform's maximum), stored with them, and swapped in atomically.
#[utoipa::path(put, path = "/admin/v1/tenants/{tenant}/plugins/{kind}/{name}", tag = "admin",
    params(("tenant" = String, Path), ("kind" = String, Path, description = "rate-limiter, router or projector"),
        ("name" = String, Path, description = "`default` for rate-limiter and router"), RequestedLimits, RolloutQuery),
    request_body(content = Vec<u8>, content_type = "application/wasm"),
    responses((status = 200, body = DeployResponse), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 422, description = "Not a component, wrong world or failed conformance", body = Problem)),
    security(("admin" = [])))]
pub async fn deploy(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<SlotPath>,
    Query(limits): Query<RequestedLimits>,
    Query(rollout): Query<RolloutQuery>,
    wasm: Bytes,
) -> Result<axum::Json<DeployResponse>, ApiError> {
    let slot = path.slot(&operator)?;
    let staged = rollout.staged()?;
    let readable = parse_declarations(rollout.readable.as_deref().unwrap_or(""))
        .map_err(|e| ApiError::bad_request("invalid_readable", e))?;
    let detail = match staged {
        Some(Staged::Canary(percent)) => format!("canary {percent}%"),
        Some(Staged::Shadow) => "shadow".to_owned(),
        None => String::new(),
    };
    let uploaded = Change { sha256: Some(hex_sha256(&wasm)), detail, ..Change::plugin(AuditAction::Deploy, &slot) };
    let deploying = state.plugins.deploy_with(slot.clone(), wasm, limits, staged, readable);
    let deployed = retiring(&state, &slot, deploying).await.map_err(ApiError::from);
    let change = match &deployed {
        Ok((plugin, _)) => uploaded.version(plugin),
        Err(_) => uploaded,
    };
    let (plugin, cost) = audited(&state, &operator, &slot.tenant, change, deployed).await?;
    Ok(axum::Json(DeployResponse {
        plugin,
        conformance_micros: cost.elapsed.as_micros() as u64,
        conformance_fuel: cost.fuel,
    }))
}

/// How a deployed version takes traffic.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct RolloutQuery {
    /// Deploy a rate limiter or router as a canary taking this percent (0-99) of the traffic, by a stable
    /// hash of the user or message key, beside the active version; `promote` or `abort` ends it. Unset:
    /// all of the traffic at once.
    pub canary: Option<u8>,
    /// Deploy a projector as a shadow: it builds a space of its own from the truth and takes every event
    /// beside the active version, serving no reads; `diff` compares the two, `promote` switches reads to
    /// it without a rebuild, `abort` drops its data.
    #[serde(default)]
    pub shadow: bool,
    /// A projector's spaces the API serves at `/v1/projections/{name}/{space}/{ids}`, as
    /// `shape:space[,…]` with shape `counter`, `sorted-set` or `value`, e.g. `counter:friends`.
    pub readable: Option<String>,
}

impl RolloutQuery {
    fn staged(&self) -> Result<Option<Staged>, ApiError> {
        match (self.canary, self.shadow) {
            (Some(_), true) => {
                Err(ApiError::bad_request("invalid_rollout", "a version is a canary or a shadow, not both"))
            }
            (Some(percent), false) => Ok(Some(Staged::Canary(percent))),
            (None, true) => Ok(Some(Staged::Shadow)),
            (None, false) => Ok(None),
        }
    }
}

/// Runs `change` of `slot`, then drops the data of the projector versions it retired (see
/// [`spaces::retire`]) in the background: nothing reads those spaces any more, and a big one takes a while
/// to scan (≈1.5 s for 40,000 keys), which the answer should not wait for.
async fn retiring<T>(state: &AppState, slot: &PluginSlot, change: impl std::future::Future<Output = T>) -> T {
    let was_live = state.plugins.live_versions(slot);
    let changed = change.await;
    let (cache, plugins, slot) = (state.cache.clone(), state.plugins.clone(), slot.clone());
    tokio::spawn(async move { spaces::retire(&cache, &plugins, &slot, &was_live).await });
    changed
}

/// Make the slot's canary or shadow its active version for all of the traffic; a shadow's complete space
/// serves reads at once, and the old version's space is dropped.
#[utoipa::path(post, path = "/admin/v1/tenants/{tenant}/plugins/{kind}/{name}/promote", tag = "admin",
    params(("tenant" = String, Path), ("kind" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = PluginVersion), (status = 404, description = "no canary or shadow runs", body = Problem),
        (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("admin" = [])))]
pub async fn promote(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<SlotPath>,
) -> Result<axum::Json<PluginVersion>, ApiError> {
    let slot = path.slot(&operator)?;
    let promoted = retiring(&state, &slot, state.plugins.promote(slot.clone())).await.map_err(ApiError::from);
    let change = match &promoted {
        Ok(version) => Change::plugin(AuditAction::Promote, &slot).version(version),
        Err(_) => Change::plugin(AuditAction::Promote, &slot),
    };
    Ok(axum::Json(audited(&state, &operator, &slot.tenant, change, promoted).await?))
}

/// Stop the slot's canary or shadow: all of the traffic goes to the active version again; a shadow's data
/// is dropped.
#[utoipa::path(post, path = "/admin/v1/tenants/{tenant}/plugins/{kind}/{name}/abort", tag = "admin",
    params(("tenant" = String, Path), ("kind" = String, Path), ("name" = String, Path)),
    responses((status = 204), (status = 404, description = "no canary or shadow runs", body = Problem),
        (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("admin" = [])))]
pub async fn abort(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<SlotPath>,
) -> Result<StatusCode, ApiError> {
    let slot = path.slot(&operator)?;
    let aborted = retiring(&state, &slot, state.plugins.abort(slot.clone())).await.map_err(ApiError::from);
    audited(&state, &operator, &slot.tenant, Change::plugin(AuditAction::Abort, &slot), aborted).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
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
    operator: Operator,
    Path(path): Path<SlotPath>,
    Json(request): Json<RollbackRequest>,
) -> Result<axum::Json<PluginVersion>, ApiError> {
    let slot = path.slot(&operator)?;
    let rolling_back = state.plugins.rollback(slot.clone(), request.version);
    let rolled_back = retiring(&state, &slot, rolling_back).await.map_err(ApiError::from);
    let change = match &rolled_back {
        Ok(version) => Change::plugin(AuditAction::Rollback, &slot).version(version),
        Err(_) => Change { version: Some(request.version), ..Change::plugin(AuditAction::Rollback, &slot) },
    };
    Ok(axum::Json(audited(&state, &operator, &slot.tenant, change, rolled_back).await?))
}

/// Delete every version of the slot; the tenant falls back to the bundled plugin.
#[utoipa::path(delete, path = "/admin/v1/tenants/{tenant}/plugins/{kind}/{name}", tag = "admin",
    params(("tenant" = String, Path), ("kind" = String, Path), ("name" = String, Path)),
    responses((status = 204), (status = 404, body = Problem), (status = 401, body = Problem)),
    security(("admin" = [])))]
pub async fn remove(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<SlotPath>,
) -> Result<StatusCode, ApiError> {
    let slot = path.slot(&operator)?;
    let removed = retiring(&state, &slot, state.plugins.remove(slot.clone())).await.map_err(ApiError::from);
    audited(&state, &operator, &slot.tenant, Change::plugin(AuditAction::Remove, &slot), removed).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// How many keys a diff compares by default, and at most.
const DIFF_SAMPLE: usize = 100;
const DIFF_SAMPLE_MAX: usize = 10_000;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct DiffQuery {
    /// Keys to compare the values of (default 100, at most 10000).
    pub sample: Option<usize>,
}

/// Compare a projector's shadow space with its active one: keys per kind, keys in one space only, and the
/// values of an even sample of keys in both. Scans both spaces: an operator's tool.
#[utoipa::path(get, path = "/admin/v1/tenants/{tenant}/plugins/{kind}/{name}/diff", tag = "admin",
    params(("tenant" = String, Path), ("kind" = String, Path, description = "projector"), ("name" = String, Path),
        DiffQuery),
    responses((status = 200, body = SpaceDiff), (status = 400, body = Problem),
        (status = 404, description = "no shadow runs", body = Problem),
        (status = 401, body = Problem), (status = 403, body = Problem), (status = 503, body = Problem)),
    security(("admin" = [])))]
pub async fn diff(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<SlotPath>,
    Query(query): Query<DiffQuery>,
) -> Result<axum::Json<SpaceDiff>, ApiError> {
    let slot = path.slot(&operator)?;
    let no_shadow = || RegistryError::NoRollout { kind: slot.kind, name: slot.name.clone() };
    let shadow = state.plugins.candidate(&slot).filter(|c| c.staged == Staged::Shadow).ok_or_else(no_shadow)?;
    let active = state.plugins.active(&slot.tenant, slot.kind, &slot.name).ok_or_else(no_shadow)?;
    let space = |version| Space { tenant: slot.tenant.as_str(), plugin: &slot.name, version };
    let sample = query.sample.unwrap_or(DIFF_SAMPLE).min(DIFF_SAMPLE_MAX);
    let compared = spaces::diff(&state.cache, space(active.version), space(shadow.plugin.version), sample).await;
    Ok(axum::Json(compared?))
}

/// What a plugin of the tenant logged (every version's; traps included, with their wasm backtrace), newest
/// first, or oldest first after an id to follow it. The text is the plugin's own: escape it wherever it is
/// shown.
#[utoipa::path(get, path = "/admin/v1/tenants/{tenant}/plugins/{kind}/{name}/logs", tag = "admin",
    params(("tenant" = String, Path), ("kind" = String, Path), ("name" = String, Path), LogQuery),
    responses((status = 200, body = LogPage), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 503, body = Problem)),
    security(("admin" = [])))]
pub async fn plugin_logs(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<SlotPath>,
    Query(query): Query<LogQuery>,
) -> Result<axum::Json<LogPage>, ApiError> {
    let slot = path.slot(&operator)?;
    Ok(axum::Json(logs::page(&state.db, slot.tenant.as_str(), slot.kind, &slot.name, &query).await?))
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PluginList {
    pub plugins: Vec<PluginVersion>,
    /// The tenant's running canaries and shadows, with their failure rates as this node saw them.
    pub rollouts: Vec<RunningRollout>,
}

/// A canary or shadow beside its slot's active version.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RunningRollout {
    pub kind: PluginKind,
    pub name: String,
    pub active_version: i64,
    pub candidate_version: i64,
    /// `canary` or `shadow`.
    pub mode: VersionState,
    /// A canary's percent of the traffic; `null` for a shadow (every event, no reads).
    pub canary_percent: Option<u8>,
    /// Calls and failures of both versions in the current window, in this process (`null`: none yet here;
    /// a router's are seen by the relay, a projector's by the workers).
    pub rates: Option<RolloutRates>,
}

/// Every stored version of the tenant's plugins (tenants without any use the bundled ones).
#[utoipa::path(get, path = "/admin/v1/tenants/{tenant}/plugins", tag = "admin", params(("tenant" = String, Path)),
    responses((status = 200, body = PluginList), (status = 401, body = Problem)),
    security(("admin" = [])))]
pub async fn list(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<TenantPath>,
) -> Result<axum::Json<PluginList>, ApiError> {
    let tenant = operator.reach(&path.tenant)?;
    let rollouts = state
        .plugins
        .rollouts(&tenant)
        .into_iter()
        .map(|(slot, candidate)| RunningRollout {
            kind: slot.kind,
            active_version: state.plugins.active(&tenant, slot.kind, &slot.name).map_or(0, |p| p.version),
            candidate_version: candidate.plugin.version,
            mode: candidate.staged.state(),
            canary_percent: candidate.staged.percent(),
            rates: state.plugins.rollout_rates(&slot),
            name: slot.name,
        })
        .collect();
    Ok(axum::Json(PluginList { plugins: state.plugins.versions(&tenant).await?, rollouts }))
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ProjectionList {
    /// Backfills of projectors deployed at runtime, by projection and tenant.
    pub backfills: Vec<BackfillProgress>,
}

/// Where the backfills of projectors deployed at runtime stand (written by the worker that runs each).
#[utoipa::path(get, path = "/admin/v1/projections", tag = "admin",
    responses((status = 200, body = ProjectionList), (status = 401, body = Problem)),
    security(("admin" = [])))]
pub async fn projections(
    State(state): State<AppState>,
    operator: Operator,
) -> Result<axum::Json<ProjectionList>, ApiError> {
    let mut backfills = progress::all(&state.db).await?;
    if let Some(own) = operator.own_tenant() {
        backfills.retain(|backfill| backfill.tenant == own.as_str());
    }
    Ok(axum::Json(ProjectionList { backfills }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TenantList {
    pub tenants: Vec<String>,
}

/// Every tenant with follows, deployed plugins or settings.
#[utoipa::path(get, path = "/admin/v1/tenants", tag = "admin",
    responses((status = 200, body = TenantList), (status = 401, body = Problem)),
    security(("admin" = [])))]
pub async fn tenants(State(state): State<AppState>, operator: Operator) -> Result<axum::Json<TenantList>, ApiError> {
    operator.admin_only()?;
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
    let set = state.tenants.set(&tenant, config).await.map_err(|e| ApiError::database(&e));
    let detail = format!(
        "rate_limit_failure {:?}, allow_pinned_versions {}",
        config.rate_limit_failure, config.allow_pinned_versions
    )
    .to_lowercase();
    let change = Change { detail, ..Change::of(AuditAction::SetSettings) };
    audited(&state, &operator, &tenant, change, set).await?;
    Ok(axum::Json(config))
}

impl From<TenantKeyError> for ApiError {
    fn from(error: TenantKeyError) -> Self {
        let detail = error.to_string();
        match error {
            TenantKeyError::InvalidName(_) => ApiError::bad_request("invalid_key_name", detail),
            TenantKeyError::Exists { .. } => ApiError::new(StatusCode::CONFLICT, "key_exists", detail),
            TenantKeyError::NotFound { .. } => ApiError::new(StatusCode::NOT_FOUND, "key_not_found", detail),
            TenantKeyError::Randomness(_) => {
                tracing::error!(error = %detail, "cannot issue a tenant key");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", detail)
            }
            TenantKeyError::Database(e) => ApiError::database(&e),
        }
    }
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
    let issued = tenant_keys::issue(&state.db, &tenant, &request.name).await.map_err(ApiError::from);
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
    Ok(axum::Json(KeyList { keys: tenant_keys::list(&state.db, &operator.reach(&path.tenant)?).await? }))
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
    let revoked = tenant_keys::revoke(&state.db, &tenant, &path.name).await.map_err(ApiError::from);
    let change = Change { detail: format!("key {}", path.name), ..Change::of(AuditAction::RevokeKey) };
    audited(&state, &operator, &tenant, change, revoked).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The audit log, newest first: every tenant's for the admin, its own tenant's for a tenant key.
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
    let page = audit::page(&state.db, tenant.as_ref(), query.before, query.limit.unwrap_or(50)).await?;
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

impl From<TenantJwtError> for ApiError {
    fn from(error: TenantJwtError) -> Self {
        let detail = error.to_string();
        match error {
            TenantJwtError::InvalidKid(_) => ApiError::bad_request("invalid_kid", detail),
            TenantJwtError::InvalidKey(_) => ApiError::bad_request("invalid_jwt_key", detail),
            TenantJwtError::TooMany(_) => ApiError::new(StatusCode::CONFLICT, "too_many_jwt_keys", detail),
            TenantJwtError::NotFound { .. } => ApiError::new(StatusCode::NOT_FOUND, "jwt_key_not_found", detail),
            TenantJwtError::Database(e) => ApiError::database(&e),
        }
    }
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

/// The tenant's outbox rows the relay parked — its router ran past the relay's time budget, or the broker
/// refused a destination it routed to — and why: they are retried with backoff, in order.
#[utoipa::path(get, path = "/admin/v1/tenants/{tenant}/parked", tag = "admin", params(("tenant" = String, Path)),
    responses((status = 200, body = ParkedRows), (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("admin" = [])))]
pub async fn parked(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<TenantPath>,
) -> Result<axum::Json<ParkedRows>, ApiError> {
    let tenant = operator.reach(&path.tenant)?;
    Ok(axum::Json(crate::lag::parked_rows(&state.db, tenant.as_str()).await?))
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
