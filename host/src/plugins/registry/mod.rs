//! Which plugin version serves each tenant, kind and name — and the hot swap.
//!
//! Deployed versions live in the `plugins` table (the source of truth across restarts and nodes); the
//! active set is an immutable map behind an `ArcSwap`. A swap publishes a new map in one atomic store:
//! a call that already holds an `Arc<ActivePlugin>` finishes on the old version, every call that starts
//! after the swap returns sees the new one, and no call ever waits on a lock.

mod store;
mod version;

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use sqlx::Row;

pub use version::{Candidate, Chosen, PluginVersion, Staged, VersionLimits, VersionState};

use self::store::{retire, stored_limits, stored_readable, Retired, StoredRow, DEPLOY_ATTEMPTS};
use crate::audit::{self, AuditAction, AuditOutcome, AuditRecord};
use crate::graph::{is_lock_conflict, Database, TenantId};
use crate::plugins::error::PluginError;
use crate::plugins::logs::PluginLogs;
use crate::plugins::rollout::{traffic_share, RollbackPolicy, RolloutHealth, RolloutRates, Tally};
use crate::plugins::runtime::{
    hex_sha256, CallCost, LimitRefused, PluginLimits, PluginRuntime, PreparedPlugin, RequestedLimits,
};
use crate::plugins::slot::{PluginSlot, SlotError, SINGLETON_NAME};
use crate::plugins::{conformance, PluginKind, Readable, Singleton, BUNDLED};
use crate::util::time::{now_ms, rfc3339_millis};

/// A loaded plugin version, shared by the calls using it.
pub struct ActivePlugin {
    pub kind: PluginKind,
    pub name: String,
    /// The deployed version; 0 for a bundled plugin.
    pub version: i64,
    pub sha256: String,
    pub prepared: PreparedPlugin,
    /// What each call of this version may use (per call of up to 256 inputs).
    pub limits: PluginLimits,
    /// The spaces the API serves (a projector's; declared at deploy).
    pub readable: Vec<Readable>,
}

/// Why a deploy, rollback or removal was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(transparent)]
    Slot(#[from] SlotError),
    /// Each projector name is a worker and a consumer group reading the whole events topic on every
    /// node: a tenant may have only so many.
    #[error("tenant {tenant} already has {max} projectors, the platform's maximum; remove one first")]
    TooManyProjectors { tenant: String, max: usize },
    #[error("the component did not compile within {0:?}; it is refused (a component this slow to compile is not one the platform runs)")]
    CompileTooSlow(std::time::Duration),
    #[error("rejected: {0}")]
    Rejected(#[from] PluginError),
    #[error(transparent)]
    LimitRefused(#[from] LimitRefused),
    #[error("no version {version} of {kind} {name:?}")]
    NoSuchVersion { kind: PluginKind, name: String, version: i64 },
    #[error("no {kind} {name:?} is deployed")]
    NotDeployed { kind: PluginKind, name: String },
    #[error("{kind} {name:?} has no canary or shadow running")]
    NoRollout { kind: PluginKind, name: String },
    #[error("{0}")]
    InvalidRollout(String),
    #[error("invalid readable spaces: {0}")]
    InvalidReadable(String),
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
}

type Deployed = HashMap<PluginSlot, Arc<ActivePlugin>>;

/// How long an upload may take to compile unless configured otherwise. A 12 MiB JavaScript component
/// compiles in about 12 s on a loaded 2-core machine.
pub const DEFAULT_COMPILE_BUDGET: std::time::Duration = std::time::Duration::from_secs(120);
/// Projector names one tenant may have unless configured otherwise.
pub const DEFAULT_MAX_PROJECTORS: usize = 8;
/// Uploads compiled at once on a node; more wait (within their budget).
pub const CONCURRENT_COMPILES: usize = 2;

/// Who compiles an upload now: one of each tenant's at a time, [`CONCURRENT_COMPILES`] in all.
struct Compiles {
    permits: Arc<tokio::sync::Semaphore>,
    per_tenant: std::sync::Mutex<HashMap<TenantId, Arc<tokio::sync::Mutex<()>>>>,
}

impl Default for Compiles {
    fn default() -> Self {
        Self { permits: Arc::new(tokio::sync::Semaphore::new(CONCURRENT_COMPILES)), per_tenant: Default::default() }
    }
}

impl Compiles {
    /// `tenant`'s turn to compile.
    fn of(&self, tenant: &TenantId) -> Arc<tokio::sync::Mutex<()>> {
        let mut per_tenant = self.per_tenant.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        per_tenant.entry(tenant.clone()).or_default().clone()
    }
}

/// Bundled defaults, deployed versions and the swap between them.
pub struct PluginRegistry {
    runtime: Arc<PluginRuntime>,
    db: Database,
    bundled: Vec<Arc<ActivePlugin>>,
    /// The bundled rate limiter and router, found at load: a tenant without its own always has these.
    default_rate_limiter: Arc<ActivePlugin>,
    default_router: Arc<ActivePlugin>,
    deployed: ArcSwap<Deployed>,
    candidates: ArcSwap<HashMap<PluginSlot, Candidate>>,
    health: RolloutHealth,
    /// Serialises deploys, rollbacks and removals; calls never take it, nor does any compile.
    changes: tokio::sync::Mutex<()>,
    /// Who compiles an upload now, and how long one may take.
    compiles: Compiles,
    compile_budget: std::time::Duration,
    /// Projector names one tenant may have.
    max_projectors: usize,
    /// Where every version's calls leave their log lines.
    logs: Arc<PluginLogs>,
}

impl PluginRegistry {
    /// Loads the bundled plugins and every active deployed version from the database.
    pub async fn load(runtime: Arc<PluginRuntime>, db: Database) -> Result<Self, RegistryError> {
        Self::load_with(runtime, db, RollbackPolicy::default()).await
    }

    /// [`PluginRegistry::load`], rolling canaries back by `policy`.
    pub async fn load_with(
        runtime: Arc<PluginRuntime>,
        db: Database,
        policy: RollbackPolicy,
    ) -> Result<Self, RegistryError> {
        let rt = runtime.clone();
        let bundled = compiling(move || {
            BUNDLED
                .iter()
                .map(|b| {
                    let prepared = rt.prepare(b.kind, b.wasm)?;
                    Ok(Arc::new(ActivePlugin {
                        kind: b.kind,
                        name: b.name.to_owned(),
                        version: 0,
                        sha256: hex_sha256(b.wasm),
                        prepared,
                        limits: rt.limits(),
                        readable: b
                            .readable
                            .iter()
                            .map(|&(shape, space)| Readable { space: space.to_owned(), shape })
                            .collect(),
                    }))
                })
                .collect::<Result<Vec<_>, PluginError>>()
        })
        .await?;
        let bundled_singleton = |kind: PluginKind| {
            let found = bundled.iter().find(|b| b.kind == kind && b.name == SINGLETON_NAME).cloned();
            found.ok_or_else(|| PluginError::host("loading the bundled plugins", format!("no bundled {kind}")))
        };
        let (default_rate_limiter, default_router) =
            (bundled_singleton(PluginKind::RateLimiter)?, bundled_singleton(PluginKind::Router)?);
        let registry = Self {
            runtime,
            db,
            bundled,
            default_rate_limiter,
            default_router,
            deployed: ArcSwap::from_pointee(Deployed::new()),
            candidates: ArcSwap::from_pointee(HashMap::new()),
            health: RolloutHealth::new(policy),
            changes: Default::default(),
            compiles: Compiles::default(),
            compile_budget: DEFAULT_COMPILE_BUDGET,
            max_projectors: DEFAULT_MAX_PROJECTORS,
            logs: Default::default(),
        };
        registry.refresh().await?;
        Ok(registry)
    }

    /// Brings the active set and the running canaries and shadows in line with the `plugins` table, loading only what
    /// changed: how deploys, rollbacks and rollouts made through another node reach this one. Returns how
    /// many slots changed.
    pub async fn refresh(&self) -> Result<usize, RegistryError> {
        // What changed is loaded (compiled) before the lock: a slow compile holds up no deploy, rollback or
        // removal on this node.
        let mut loaded = HashMap::new();
        for (slot, version, staged) in self.stored_set().await? {
            if self.held(&slot, version, staged).is_some() {
                continue;
            }
            // One broken version must not keep every tenant down: that slot falls back to the default (a
            // broken canary's share, to the active version).
            let plugin = self.load_stored(&slot, version).await.inspect_err(|e| {
                tracing::error!(tenant = %slot.tenant, kind = %slot.kind, version, error = %e, "cannot load deployed plugin");
            });
            loaded.insert((slot, version), plugin.ok());
        }
        let _change = self.changes.lock().await;
        // Read again under the lock, so a deploy or rollback made meanwhile is not undone.
        let (current, current_candidates) = (self.deployed.load_full(), self.candidates.load_full());
        let (mut next, mut next_candidates) = (Deployed::new(), HashMap::new());
        let mut changed = 0;
        for (slot, version, staged) in self.stored_set().await? {
            let plugin = match (self.held(&slot, version, staged), loaded.remove(&(slot.clone(), version))) {
                (Some(plugin), _) => plugin,
                (None, Some(Some(plugin))) => {
                    changed += 1;
                    plugin
                }
                (None, Some(None)) => continue,
                // Stored by another node since the first read: the slot keeps what it has until the next
                // refresh loads it.
                (None, None) => match staged {
                    None => match current.get(&slot) {
                        Some(plugin) => plugin.clone(),
                        None => continue,
                    },
                    Some(_) => match current_candidates.get(&slot) {
                        Some(candidate) => candidate.plugin.clone(),
                        None => continue,
                    },
                },
            };
            match staged {
                None => next.insert(slot, plugin),
                Some(staged) => next_candidates.insert(slot, Candidate { plugin, staged }).map(|c| c.plugin),
            };
        }
        changed += current.keys().filter(|slot| !next.contains_key(slot)).count();
        changed += current_candidates.keys().filter(|slot| !next_candidates.contains_key(slot)).count();
        if changed > 0 {
            self.deployed.store(Arc::new(next));
            self.candidates.store(Arc::new(next_candidates));
            tracing::info!(changed, "plugin set refreshed from the database");
        }
        Ok(changed)
    }

    /// The versions the `plugins` table says serve: each slot's active one and its running canary or shadow.
    async fn stored_set(&self) -> Result<Vec<(PluginSlot, i64, Option<Staged>)>, RegistryError> {
        let rows = sqlx::query(
            "SELECT tenant_id, kind, name, version, state, canary_percent FROM plugins \
             WHERE state IN ('active', 'canary', 'shadow')",
        )
        .fetch_all(self.db.reader())
        .await?;
        let mut stored = Vec::with_capacity(rows.len());
        for row in rows {
            let (tenant, kind, name): (String, String, String) = (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
            let (version, state, percent): (i64, String, Option<i64>) =
                (row.try_get(3)?, row.try_get(4)?, row.try_get(5)?);
            let staged = match VersionState::decode(&state)? {
                VersionState::Canary => Some(Staged::Canary(percent.and_then(|p| u8::try_from(p).ok()).unwrap_or(0))),
                VersionState::Shadow => Some(Staged::Shadow),
                VersionState::Active | VersionState::Inactive => None,
            };
            let (Ok(tenant), Ok(kind)) = (tenant.parse(), kind.parse()) else {
                tracing::error!(%tenant, %kind, version, "ignoring an unreadable plugins row");
                continue;
            };
            stored.push((PluginSlot { tenant, kind, name }, version, staged));
        }
        Ok(stored)
    }

    /// The loaded plugin for `slot`'s `version` in the role `staged`, if this node holds it.
    fn held(&self, slot: &PluginSlot, version: i64, staged: Option<Staged>) -> Option<Arc<ActivePlugin>> {
        match staged {
            None => self.deployed.load().get(slot).filter(|p| p.version == version).cloned(),
            Some(staged) => self
                .candidates
                .load()
                .get(slot)
                .filter(|c| c.plugin.version == version && c.staged == staged)
                .map(|c| c.plugin.clone()),
        }
    }

    /// The version serving `tenant`'s `kind` traffic of `key` (a user for policies, a message key for
    /// routers): the canary for its share while one runs — or for test traffic `pinned` to its version,
    /// also at 0% — else the active version.
    pub fn choose(&self, tenant: &TenantId, kind: Singleton, key: &str, pinned: Option<i64>) -> Chosen {
        let slot = PluginSlot { tenant: tenant.clone(), kind: kind.kind(), name: SINGLETON_NAME.to_owned() };
        let stable = self.deployed.load().get(&slot).cloned().unwrap_or_else(|| match kind {
            Singleton::RateLimiter => self.default_rate_limiter.clone(),
            Singleton::Router => self.default_router.clone(),
        });
        let candidates = self.candidates.load();
        let Some(canary) = candidates.get(&slot) else {
            return Chosen { plugin: stable, rollout: None, by_canary: false };
        };
        let percent = canary.staged.percent().unwrap_or(0);
        let by_canary = pinned == Some(canary.plugin.version) || traffic_share(tenant.as_str(), key) < percent;
        let plugin = if by_canary { canary.plugin.clone() } else { stable };
        Chosen { plugin, rollout: Some(canary.plugin.version), by_canary }
    }

    /// Counts how a call chosen by [`PluginRegistry::choose`] ended (see [`PluginRegistry::record_calls`]).
    /// A failure that is not the plugin's doing ([`PluginError::is_the_plugins`]) is not counted at all.
    pub async fn record_outcome(
        &self,
        tenant: &TenantId,
        kind: Singleton,
        chosen: &Chosen,
        error: Option<&PluginError>,
    ) {
        let Some(canary_version) = chosen.rollout else { return };
        if error.is_some_and(|e| !e.is_the_plugins()) {
            return;
        }
        let failed = error.is_some();
        let slot = PluginSlot { tenant: tenant.clone(), kind: kind.kind(), name: SINGLETON_NAME.to_owned() };
        self.record_calls(&slot, canary_version, chosen.by_canary, Tally { calls: 1, failures: u64::from(failed) })
            .await;
    }

    /// Counts `tally` calls of `slot` during the rollout of `candidate_version`, by the candidate or by the
    /// stable version. A candidate failing clearly more often than its stable version is aborted here,
    /// recorded in the audit log, logged and counted; returns whether that happened.
    pub async fn record_calls(
        &self,
        slot: &PluginSlot,
        candidate_version: i64,
        by_candidate: bool,
        tally: Tally,
    ) -> bool {
        let Some(unhealthy) = self.health.record(slot, candidate_version, by_candidate, tally) else { return false };
        let (tenant, kind) = (&slot.tenant, slot.kind);
        tracing::error!(%tenant, %kind, name = %slot.name, %unhealthy, "rolling the rollout back automatically");
        metrics::counter!("strand_rollout_automatic_rollbacks_total", "tenant" => tenant.to_string(), "kind" => kind.to_string())
            .increment(1);
        let aborted = self.abort(slot.clone()).await;
        let outcome = if aborted.is_ok() { AuditOutcome::Ok } else { AuditOutcome::Refused };
        let detail = match &aborted {
            Ok(()) => unhealthy.to_string(),
            Err(e) => format!("{unhealthy}; the abort failed: {e}"),
        };
        let record = AuditRecord {
            actor: "host".to_owned(),
            tenant: tenant.to_string(),
            action: AuditAction::AutomaticRollback,
            slot: Some(format!("{kind}/{}", slot.name)),
            version: Some(candidate_version),
            sha256: None,
            outcome,
            detail,
        };
        if let Err(error) = audit::record(&self.db, record).await {
            tracing::error!(%tenant, %error, "cannot record an automatic rollback in the audit log");
        }
        aborted.is_ok()
    }

    /// The failure rates of `slot`'s running rollout as this process has seen them in the current window.
    pub fn rollout_rates(&self, slot: &PluginSlot) -> Option<RolloutRates> {
        self.health.rates(slot)
    }

    async fn load_stored(&self, slot: &PluginSlot, version: i64) -> Result<Arc<ActivePlugin>, RegistryError> {
        let row = sqlx::query(
            "SELECT wasm, deadline_ms, memory_bytes, fuel, readable FROM plugins \
             WHERE tenant_id = ? AND kind = ? AND name = ? AND version = ?",
        )
        .bind(slot.tenant.as_str())
        .bind(slot.kind.as_str())
        .bind(&slot.name)
        .bind(version)
        .fetch_optional(self.db.reader())
        .await?
        .ok_or_else(|| RegistryError::NoSuchVersion { kind: slot.kind, name: slot.name.clone(), version })?;
        let (limits, readable) = (stored_limits(&self.runtime, &row, 1)?, stored_readable(&row, 4)?);
        Ok(load_version(&self.runtime, slot, version, row.try_get(0)?, (limits, readable)).await?)
    }

    pub fn runtime(&self) -> &Arc<PluginRuntime> {
        &self.runtime
    }

    /// This registry allowing each tenant `max` projector names (`plugin_max_projectors`).
    pub fn with_max_projectors(mut self, max: usize) -> Self {
        self.max_projectors = max;
        self
    }

    /// Refuses a new projector name of a tenant that has [`PluginRegistry::with_max_projectors`] already (a
    /// new version of one it has is always allowed).
    async fn check_projector_room(&self, slot: &PluginSlot) -> Result<(), RegistryError> {
        let others: i64 = sqlx::query_scalar(
            "SELECT COUNT(DISTINCT name) FROM plugins WHERE tenant_id = ? AND kind = ? AND name <> ?",
        )
        .bind(slot.tenant.as_str())
        .bind(slot.kind.as_str())
        .bind(&slot.name)
        .fetch_one(self.db.reader())
        .await?;
        if others >= self.max_projectors as i64 {
            return Err(RegistryError::TooManyProjectors { tenant: slot.tenant.to_string(), max: self.max_projectors });
        }
        Ok(())
    }

    /// This registry refusing uploads that do not compile within `budget` (`plugin_compile_budget_ms`).
    pub fn with_compile_budget(mut self, budget: std::time::Duration) -> Self {
        self.compile_budget = budget;
        self
    }

    /// Where plugin calls leave their log lines.
    pub fn logs(&self) -> &Arc<PluginLogs> {
        &self.logs
    }

    /// The plugin serving `tenant`'s `kind` slot `name`: its deployed version, else the bundled one.
    pub fn active(&self, tenant: &TenantId, kind: PluginKind, name: &str) -> Option<Arc<ActivePlugin>> {
        let slot = PluginSlot { tenant: tenant.clone(), kind, name: name.to_owned() };
        self.deployed.load().get(&slot).cloned().or_else(|| self.bundled(kind, name))
    }

    /// The slot's canary or shadow, while one runs.
    pub fn candidate(&self, slot: &PluginSlot) -> Option<Candidate> {
        self.candidates.load().get(slot).cloned()
    }

    /// The tenant's running canaries and shadows, by slot.
    pub fn rollouts(&self, tenant: &TenantId) -> Vec<(PluginSlot, Candidate)> {
        let candidates = self.candidates.load();
        let mut running: Vec<_> =
            candidates.iter().filter(|(slot, _)| slot.tenant == *tenant).map(|(s, c)| (s.clone(), c.clone())).collect();
        running.sort_by(|a, b| (a.0.kind.as_str(), &a.0.name).cmp(&(b.0.kind.as_str(), &b.0.name)));
        running
    }

    /// The versions of the slot that hold data or take traffic: the active one (deployed, else bundled: 0)
    /// and a running canary or shadow. A projector has a space for each; the others are dropped.
    pub fn live_versions(&self, slot: &PluginSlot) -> Vec<i64> {
        let active = self.active(&slot.tenant, slot.kind, &slot.name).map(|p| p.version);
        active.into_iter().chain(self.candidate(slot).map(|c| c.plugin.version)).collect()
    }

    /// The tenant's projectors: the bundled ones (each replaceable by a deployed one of the same name) and
    /// every other projector the tenant deployed.
    pub fn projectors(&self, tenant: &TenantId) -> Vec<Arc<ActivePlugin>> {
        let deployed = self.deployed.load();
        let mut projectors: Vec<_> = self
            .bundled
            .iter()
            .filter(|b| b.kind == PluginKind::Projector)
            .map(|b| self.active(tenant, PluginKind::Projector, &b.name).unwrap_or_else(|| b.clone()))
            .collect();
        projectors.extend(
            deployed
                .iter()
                .filter(|(slot, _)| {
                    slot.tenant == *tenant
                        && slot.kind == PluginKind::Projector
                        && self.bundled(PluginKind::Projector, &slot.name).is_none()
                })
                .map(|(_, plugin)| plugin.clone()),
        );
        projectors
    }

    /// The tenants that deployed a `kind` plugin named `name`.
    pub fn deployed_tenants(&self, kind: PluginKind, name: &str) -> Vec<TenantId> {
        let deployed = self.deployed.load();
        deployed.keys().filter(|slot| slot.kind == kind && slot.name == name).map(|slot| slot.tenant.clone()).collect()
    }

    /// Every projector name in use: the bundled ones and those any tenant deployed (one worker each).
    pub fn projector_names(&self) -> std::collections::BTreeSet<String> {
        let deployed = self.deployed.load();
        let bundled = self.bundled.iter().filter(|b| b.kind == PluginKind::Projector).map(|b| b.name.clone());
        let tenants = deployed.keys().filter(|slot| slot.kind == PluginKind::Projector).map(|slot| slot.name.clone());
        bundled.chain(tenants).collect()
    }

    /// The bundled router: the fallback when a tenant's router fails.
    pub fn default_router(&self) -> Arc<ActivePlugin> {
        self.default_router.clone()
    }

    fn bundled(&self, kind: PluginKind, name: &str) -> Option<Arc<ActivePlugin>> {
        self.bundled.iter().find(|b| b.kind == kind && b.name == name).cloned()
    }

    /// [`PluginRegistry::deploy_with`] the default limits, for all of the traffic.
    pub async fn deploy(
        &self,
        slot: PluginSlot,
        wasm: impl Into<Bytes>,
    ) -> Result<(PluginVersion, CallCost), RegistryError> {
        self.deploy_with(slot, wasm, RequestedLimits::default(), None, Vec::new()).await
    }

    /// Compiles an uploaded component within the compile budget: one compile per tenant at a time (its
    /// next upload waits for it) and [`CONCURRENT_COMPILES`] in all. A compile past the budget is refused;
    /// it finishes on its blocking thread with its permit, so a flood of slow uploads cannot take more
    /// cores than that.
    async fn compile_upload(
        &self,
        tenant: &TenantId,
        kind: PluginKind,
        wasm: Bytes,
    ) -> Result<PreparedPlugin, RegistryError> {
        let budget = self.compile_budget;
        let started = tokio::time::Instant::now();
        let compiled = tokio::time::timeout(budget, async {
            let own = self.compiles.of(tenant);
            let own = own.lock_owned().await;
            let permit = self
                .compiles
                .permits
                .clone()
                .acquire_owned()
                .await
                .map_err(|e| PluginError::host("waiting to compile", e))?;
            let runtime = self.runtime.clone();
            compiling(move || {
                let _held = (own, permit);
                runtime.prepare(kind, &wasm)
            })
            .await
        })
        .await;
        match compiled {
            Ok(prepared) => Ok(prepared?),
            Err(_elapsed) => {
                tracing::warn!(%tenant, %kind, waited = ?started.elapsed(), "an upload did not compile within the budget; refused");
                Err(RegistryError::CompileTooSlow(budget))
            }
        }
    }

    /// Validates, compiles and conformance-checks `wasm` within the `requested` limits (each at most the
    /// platform's maximum), stores it with them as the slot's next version and swaps it in — for all of
    /// the traffic, or `staged` beside the active version (replacing a running canary or shadow). Returns
    /// the new version and the cost of the conformance run. A projector's `readable` spaces are served by
    /// the API.
    pub async fn deploy_with(
        &self,
        slot: PluginSlot,
        wasm: impl Into<Bytes>,
        requested: RequestedLimits,
        staged: Option<Staged>,
        readable: Vec<Readable>,
    ) -> Result<(PluginVersion, CallCost), RegistryError> {
        let wasm: Bytes = wasm.into();
        if !readable.is_empty() && slot.kind != PluginKind::Projector {
            return Err(RegistryError::InvalidReadable(format!("a {} has no spaces to read", slot.kind)));
        }
        match (staged, slot.kind.is_singleton()) {
            (Some(Staged::Canary(percent)), true) if percent > 99 => {
                return Err(RegistryError::InvalidRollout(format!("a canary takes 0 to 99 percent, not {percent}")))
            }
            (Some(Staged::Canary(_)), false) => {
                return Err(RegistryError::InvalidRollout("a projector is staged as a shadow, not a canary".into()))
            }
            (Some(Staged::Shadow), true) => {
                return Err(RegistryError::InvalidRollout(format!(
                    "a {} is staged as a canary, not a shadow",
                    slot.kind
                )))
            }
            _ => {}
        }
        let limits = self.runtime.limits_for(requested)?;
        if slot.kind == PluginKind::Projector {
            self.check_projector_room(&slot).await?;
        }
        // Compiled and checked before the registry's lock: a tenant's slow component holds up nobody's
        // deploys, rollbacks or refreshes but that tenant's own next compile.
        let prepared = self.compile_upload(&slot.tenant, slot.kind, wasm.clone()).await?;
        let cost = conformance::check(&self.runtime, &prepared, limits).await?;
        let _change = self.changes.lock().await;
        let (sha256, size_bytes, created_at) = (hex_sha256(&wasm), wasm.len() as i64, now_ms());
        let listed = VersionLimits::from(limits);
        let state = staged.map_or(VersionState::Active, Staged::state);
        let canary = staged.and_then(Staged::percent);
        let readable_json =
            serde_json::to_string(&readable).map_err(|e| RegistryError::InvalidReadable(e.to_string()))?;
        let row = StoredRow { state, canary, listed, sha256: &sha256, created_at, readable: &readable_json };
        // Another node deploying to the slot at once takes the same next number: the loser retries.
        let mut attempt = 1;
        let version = loop {
            match self.store(&slot, staged, &row, &wasm).await {
                Err(sqlx::Error::Database(e)) if attempt < DEPLOY_ATTEMPTS && e.is_unique_violation() => {}
                Err(e) if attempt < DEPLOY_ATTEMPTS && is_lock_conflict(&e) => {}
                stored => break stored?,
            }
            tracing::info!(tenant = %slot.tenant, name = %slot.name, attempt, "a concurrent deploy took the version number; retrying");
            attempt += 1;
        };
        let stored = PluginVersion {
            tenant: slot.tenant.to_string(),
            kind: slot.kind,
            name: slot.name.clone(),
            version,
            sha256: sha256.clone(),
            size_bytes,
            state,
            created_at: rfc3339_millis(created_at),
            limits: listed,
            canary_percent: canary,
            readable: readable.clone(),
        };
        let (kind, name) = (slot.kind, slot.name.clone());
        let plugin = Arc::new(ActivePlugin { kind, name, version, sha256, prepared, limits, readable });
        match staged {
            None => {
                self.end_rollout(&slot);
                self.swap(|deployed| {
                    deployed.insert(slot.clone(), plugin.clone());
                })
            }
            Some(staged) => {
                self.candidates.rcu(|current| {
                    let mut next = HashMap::clone(current);
                    next.insert(slot.clone(), Candidate { plugin: plugin.clone(), staged });
                    next
                });
            }
        }
        tracing::info!(tenant = %slot.tenant, kind = %slot.kind, name = %slot.name, version, "plugin deployed");
        Ok((stored, cost))
    }

    /// Stores `wasm` as the slot's next version in one transaction (retiring what `staged` replaces); its
    /// number.
    async fn store(
        &self,
        slot: &PluginSlot,
        staged: Option<Staged>,
        row: &StoredRow<'_>,
        wasm: &[u8],
    ) -> Result<i64, sqlx::Error> {
        let mut tx = self.db.writer().begin().await?;
        let version: i64 = sqlx::query_scalar(
            "SELECT COALESCE(MAX(version), 0) + 1 FROM plugins WHERE tenant_id = ? AND kind = ? AND name = ?",
        )
        .bind(slot.tenant.as_str())
        .bind(slot.kind.as_str())
        .bind(&slot.name)
        .fetch_one(&mut *tx)
        .await?;
        retire(&mut tx, slot, if staged.is_some() { Retired::Candidate } else { Retired::All }).await?;
        sqlx::query(
            "INSERT INTO plugins (tenant_id, kind, name, version, sha256, wasm, state, created_at, deadline_ms, \
             memory_bytes, fuel, canary_percent, readable) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(slot.tenant.as_str())
        .bind(slot.kind.as_str())
        .bind(&slot.name)
        .bind(version)
        .bind(row.sha256)
        .bind(wasm)
        .bind(row.state.as_str())
        .bind(row.created_at)
        .bind(i64::try_from(row.listed.deadline_ms).unwrap_or(i64::MAX))
        .bind(i64::try_from(row.listed.memory_bytes).unwrap_or(i64::MAX))
        .bind(row.listed.fuel.map(|fuel| i64::try_from(fuel).unwrap_or(i64::MAX)))
        .bind(row.canary.map(i64::from))
        .bind(row.readable)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(version)
    }

    /// Makes a kept version of the slot active again.
    pub async fn rollback(&self, slot: PluginSlot, version: i64) -> Result<PluginVersion, RegistryError> {
        let _change = self.changes.lock().await;
        let plugin = self.load_stored(&slot, version).await?;
        let mut tx = self.db.writer().begin().await?;
        retire(&mut tx, &slot, Retired::All).await?;
        sqlx::query(
            "UPDATE plugins SET state = 'active' WHERE tenant_id = ? AND kind = ? AND name = ? AND version = ?",
        )
        .bind(slot.tenant.as_str())
        .bind(slot.kind.as_str())
        .bind(&slot.name)
        .bind(version)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        self.end_rollout(&slot);
        self.swap(|deployed| {
            deployed.insert(slot.clone(), plugin.clone());
        });
        tracing::info!(tenant = %slot.tenant, kind = %slot.kind, name = %slot.name, version, "plugin rolled back");
        self.listed(&slot, version).await
    }

    /// Deletes every version of the slot; the tenant falls back to the bundled plugin (if any).
    pub async fn remove(&self, slot: PluginSlot) -> Result<(), RegistryError> {
        let _change = self.changes.lock().await;
        let removed = sqlx::query("DELETE FROM plugins WHERE tenant_id = ? AND kind = ? AND name = ?")
            .bind(slot.tenant.as_str())
            .bind(slot.kind.as_str())
            .bind(&slot.name)
            .execute(self.db.writer())
            .await?
            .rows_affected();
        if removed == 0 {
            return Err(RegistryError::NotDeployed { kind: slot.kind, name: slot.name });
        }
        self.end_rollout(&slot);
        self.swap(|deployed| {
            deployed.remove(&slot);
        });
        tracing::info!(tenant = %slot.tenant, kind = %slot.kind, name = %slot.name, "plugin removed");
        Ok(())
    }

    /// Makes the slot's canary its active version, for all of the traffic — or its shadow, whose space is
    /// complete and current: reads switch to it as they are.
    pub async fn promote(&self, slot: PluginSlot) -> Result<PluginVersion, RegistryError> {
        let _change = self.changes.lock().await;
        let canary = self.candidate(&slot);
        let Some(canary) = canary else { return Err(RegistryError::NoRollout { kind: slot.kind, name: slot.name }) };
        let mut tx = self.db.writer().begin().await?;
        retire(&mut tx, &slot, Retired::All).await?;
        sqlx::query(
            "UPDATE plugins SET state = 'active', canary_percent = NULL \
             WHERE tenant_id = ? AND kind = ? AND name = ? AND version = ?",
        )
        .bind(slot.tenant.as_str())
        .bind(slot.kind.as_str())
        .bind(&slot.name)
        .bind(canary.plugin.version)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        // The active version changes first: every call meets either the canary or the promoted canary.
        self.swap(|deployed| {
            deployed.insert(slot.clone(), canary.plugin.clone());
        });
        self.end_rollout(&slot);
        tracing::info!(tenant = %slot.tenant, kind = %slot.kind, name = %slot.name, version = canary.plugin.version, "rollout promoted");
        self.listed(&slot, canary.plugin.version).await
    }

    /// Stops the slot's canary or shadow: all of the traffic goes to the active version again.
    pub async fn abort(&self, slot: PluginSlot) -> Result<(), RegistryError> {
        let _change = self.changes.lock().await;
        if self.candidate(&slot).is_none() {
            return Err(RegistryError::NoRollout { kind: slot.kind, name: slot.name });
        }
        let mut tx = self.db.writer().begin().await?;
        retire(&mut tx, &slot, Retired::Candidate).await?;
        tx.commit().await?;
        self.end_rollout(&slot);
        tracing::info!(tenant = %slot.tenant, kind = %slot.kind, name = %slot.name, "rollout aborted");
        Ok(())
    }

    fn end_rollout(&self, slot: &PluginSlot) {
        self.candidates.rcu(|current| {
            let mut next = HashMap::clone(current);
            next.remove(slot);
            next
        });
        self.health.forget(slot);
    }

    /// The stored `version` of `slot`, as listed.
    async fn listed(&self, slot: &PluginSlot, version: i64) -> Result<PluginVersion, RegistryError> {
        let listed = self.versions(&slot.tenant).await?;
        listed
            .into_iter()
            .find(|v| v.kind == slot.kind && v.name == slot.name && v.version == version)
            .ok_or_else(|| RegistryError::NoSuchVersion { kind: slot.kind, name: slot.name.clone(), version })
    }

    /// Every stored version of the tenant's plugins.
    pub async fn versions(&self, tenant: &TenantId) -> Result<Vec<PluginVersion>, RegistryError> {
        let rows = sqlx::query(
            "SELECT kind, name, version, sha256, LENGTH(wasm), state, created_at, deadline_ms, memory_bytes, fuel, \
             canary_percent, readable FROM plugins WHERE tenant_id = ? ORDER BY kind, name, version",
        )
        .bind(tenant.as_str())
        .fetch_all(self.db.reader())
        .await?;
        rows.iter()
            .map(|row| {
                Ok(PluginVersion {
                    tenant: tenant.to_string(),
                    kind: row
                        .try_get::<String, _>(0)?
                        .parse()
                        .map_err(|unknown: String| sqlx::Error::Decode(unknown.into()))?,
                    name: row.try_get(1)?,
                    version: row.try_get(2)?,
                    sha256: row.try_get(3)?,
                    size_bytes: row.try_get(4)?,
                    state: VersionState::decode(&row.try_get::<String, _>(5)?)?,
                    created_at: rfc3339_millis(row.try_get(6)?),
                    limits: stored_limits(&self.runtime, row, 7)?.into(),
                    canary_percent: row.try_get::<Option<i64>, _>(10)?.and_then(|p| u8::try_from(p).ok()),
                    readable: stored_readable(row, 11)?,
                })
            })
            .collect()
    }

    fn swap(&self, change: impl Fn(&mut Deployed)) {
        self.deployed.rcu(|current| {
            let mut next = Deployed::clone(current);
            change(&mut next);
            next
        });
    }
}

async fn load_version(
    runtime: &Arc<PluginRuntime>,
    slot: &PluginSlot,
    version: i64,
    wasm: Vec<u8>,
    (limits, readable): (PluginLimits, Vec<Readable>),
) -> Result<Arc<ActivePlugin>, PluginError> {
    let (runtime, kind, name) = (runtime.clone(), slot.kind, slot.name.clone());
    compiling(move || {
        let prepared = runtime.prepare(kind, &wasm)?;
        Ok(Arc::new(ActivePlugin { kind, name, version, sha256: hex_sha256(&wasm), prepared, limits, readable }))
    })
    .await
}

/// Compilation is CPU work without a deadline: keep it off the async workers.
async fn compiling<R: Send + 'static>(
    work: impl FnOnce() -> Result<R, PluginError> + Send + 'static,
) -> Result<R, PluginError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| PluginError::host("compiling the plugin on a blocking thread", e))?
}
