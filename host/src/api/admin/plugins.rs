//! A tenant's plugins: deploy (with a canary or shadow), promote, abort, roll back, remove, diff a shadow's
//! space, page the plugins' logs, list versions and projector builds.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::*;
use crate::api::params::{ApiJson as Json, ApiPath as Path, ApiQuery as Query};
use crate::api::problem::{ApiError, Problem};
use crate::api::AppState;
use crate::cache::Space;
use crate::plugins::logs::{self, LogPage, LogQuery};
use crate::plugins::{
    parse_declarations, Declared, PluginKind, PluginSlot, PluginVersion, RegistryError, RequestedLimits, RolloutRates,
    RolloutStage, VersionState,
};
use crate::projection::progress::{self, BackfillProgress};
use crate::projection::spaces::{self, SpaceDiff};
use crate::projection::{cannot_replay, PluginProjectionError};
use crate::tenancy::audit::AuditAction;
use crate::util::hashing::hex_sha256;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Tenants' plugins: deploy, roll out, roll back, remove, logs.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(deploy, remove))
        .routes(routes!(rollback))
        .routes(routes!(promote))
        .routes(routes!(abort))
        .routes(routes!(diff))
        .routes(routes!(plugin_logs))
        .routes(routes!(list))
        .routes(routes!(projections))
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
    let readable = parse_declarations(rollout.readable.as_deref().unwrap_or("")).map_err(ApiError::InvalidReadable)?;
    let declared = Declared { readable, history: rollout.history };
    let detail = match staged {
        Some(RolloutStage::Canary(percent)) => format!("canary {percent}%"),
        Some(RolloutStage::Shadow) => "shadow".to_owned(),
        None => String::new(),
    };
    let uploaded = Change { sha256: Some(hex_sha256(&wasm)), detail, ..Change::plugin(AuditAction::Deploy, &slot) };
    let deploying = state.plugins.deploy_with(slot.clone(), wasm, limits, staged, declared);
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
    /// A projector whose spaces depend on the events' history, not only on the truth's current state (a
    /// counter of followers gained): never built from the truth, but replayed from the embedded bus's log
    /// while it holds every event, else counted from the build on; `strand rebuild` and a rollback onto it
    /// are refused (409 `needs_history`) when the log cannot replay it.
    #[serde(default)]
    pub history: bool,
}

impl RolloutQuery {
    fn staged(&self) -> Result<Option<RolloutStage>, ApiError> {
        match (self.canary, self.shadow) {
            (Some(_), true) => Err(ApiError::CanaryAndShadow),
            (Some(percent), false) => Ok(Some(RolloutStage::Canary(percent))),
            (None, true) => Ok(Some(RolloutStage::Shadow)),
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
    check_history_replayable(&state, &slot, request.version).await?;
    let rolling_back = state.plugins.rollback(slot.clone(), request.version);
    let rolled_back = retiring(&state, &slot, rolling_back).await.map_err(ApiError::from);
    let change = match &rolled_back {
        Ok(version) => Change::plugin(AuditAction::Rollback, &slot).version(version),
        Err(_) => Change { version: Some(request.version), ..Change::plugin(AuditAction::Rollback, &slot) },
    };
    Ok(axum::Json(audited(&state, &operator, &slot.tenant, change, rolled_back).await?))
}

/// A rollback onto a projector version that declares history builds its space again (dropped when the
/// version retired): refused (409 `needs_history`) unless the embedded bus's log can replay every event.
async fn check_history_replayable(state: &AppState, slot: &PluginSlot, version: i64) -> Result<(), ApiError> {
    if slot.kind != PluginKind::Projector {
        return Ok(());
    }
    let versions = state.plugins.versions(&slot.tenant).await?;
    let target = versions.iter().find(|v| v.kind == slot.kind && v.name == slot.name && v.version == version);
    if !target.is_some_and(|v| v.history) {
        return Ok(());
    }
    match cannot_replay(state.retained_log.as_ref()).await? {
        None => Ok(()),
        Some(why) => {
            let refused = PluginProjectionError::NeedsHistory { projector: slot.name.clone(), version, why };
            Err(ApiError::NeedsHistory(refused))
        }
    }
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
    let shadow = state.plugins.candidate(&slot).filter(|c| c.staged == RolloutStage::Shadow).ok_or_else(no_shadow)?;
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
    /// The platform's bundled plugins, each serving its slot wherever the tenant has no active version.
    #[serde(default)]
    pub bundled: Vec<BundledSlot>,
    /// The tenant's running canaries and shadows, with their failure rates as this node saw them.
    pub rollouts: Vec<RunningRollout>,
}

/// A bundled plugin as one tenant runs it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BundledSlot {
    pub kind: PluginKind,
    pub name: String,
    pub sha256: String,
    /// It serves the tenant's slot (the tenant has no active version of its own there).
    pub serving: bool,
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

/// Every stored version of the tenant's plugins, its running canaries and shadows, and the bundled plugins
/// (each serving its slot where the tenant has no active version).
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
    let bundled = state
        .plugins
        .bundled_plugins()
        .iter()
        .map(|plugin| BundledSlot {
            kind: plugin.kind,
            name: plugin.name.clone(),
            sha256: plugin.sha256.clone(),
            serving: state.plugins.active(&tenant, plugin.kind, &plugin.name).is_none_or(|active| active.version == 0),
        })
        .collect();
    Ok(axum::Json(PluginList { plugins: state.plugins.versions(&tenant).await?, bundled, rollouts }))
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
