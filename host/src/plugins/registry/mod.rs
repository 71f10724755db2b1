//! Which plugin version serves each tenant, kind and name — and the hot swap.
//!
//! Deployed versions live in the `plugins` table (the source of truth across restarts and nodes); the
//! active set is an immutable map behind an `ArcSwap`. A swap publishes a new map in one atomic store:
//! a call that already holds an `Arc<ActivePlugin>` finishes on the old version, every call that starts
//! after the swap returns sees the new one, and no call ever waits on a lock.

mod auto_rollback;
mod deploy;
mod store;
mod version;

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;

pub use deploy::{DEFAULT_COMPILE_BUDGET, DEFAULT_MAX_PROJECTORS};
pub use version::{Candidate, Chosen, PluginVersion, RolloutStage, VersionLimits, VersionState};

use self::deploy::Compiles;
use self::store::{Serving, StoredComponent};
use crate::db::Database;
use crate::graph::TenantId;
use crate::plugins::error::PluginError;
use crate::plugins::logs::PluginLogs;
use crate::plugins::rollout::{traffic_share, RollbackPolicy, RolloutHealth};
use crate::plugins::runtime::{LimitRefused, PluginLimits, PluginRuntime, PreparedPlugin};
use crate::plugins::slot::{PluginSlot, SlotError, SINGLETON_NAME};
use crate::plugins::{OnePerTenant, PluginKind, Readable, BUNDLED};
use crate::util::hashing::hex_sha256;

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
    /// Whether its spaces depend on history (a projector's; declared at deploy): see [`crate::plugins::Declared::history`].
    pub history: bool,
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
    #[error("a {0} has no spaces to keep history in: only a projector declares history")]
    HistoryNotAProjector(PluginKind),
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
}

type Deployed = HashMap<PluginSlot, Arc<ActivePlugin>>;

/// Bundled defaults, deployed versions and the swap between them.
pub struct PluginRegistry {
    runtime: Arc<PluginRuntime>,
    db: Database,
    bundled: Vec<Arc<ActivePlugin>>,
    /// The bundled rate limiter and router, found at load: a tenant without its own always has these.
    default_rate_limiter: Arc<ActivePlugin>,
    default_router: Arc<ActivePlugin>,
    default_relation_policy: Arc<ActivePlugin>,
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
                        history: false,
                    }))
                })
                .collect::<Result<Vec<_>, PluginError>>()
        })
        .await?;
        let bundled_singleton = |kind: PluginKind| {
            let found = bundled.iter().find(|b| b.kind == kind && b.name == SINGLETON_NAME).cloned();
            found.ok_or_else(|| PluginError::host("loading the bundled plugins", format!("no bundled {kind}")))
        };
        let (default_rate_limiter, default_router, default_relation_policy) = (
            bundled_singleton(PluginKind::RateLimiter)?,
            bundled_singleton(PluginKind::Router)?,
            bundled_singleton(PluginKind::RelationPolicy)?,
        );
        let registry = Self {
            runtime,
            db,
            bundled,
            default_rate_limiter,
            default_router,
            default_relation_policy,
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
        for Serving { slot, version, staged } in store::serving(&self.db).await? {
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
        for Serving { slot, version, staged } in store::serving(&self.db).await? {
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

    /// The loaded plugin for `slot`'s `version` in the role `staged`, if this node holds it.
    fn held(&self, slot: &PluginSlot, version: i64, staged: Option<RolloutStage>) -> Option<Arc<ActivePlugin>> {
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
    pub fn choose(&self, tenant: &TenantId, kind: OnePerTenant, key: &str, pinned: Option<i64>) -> Chosen {
        let slot = PluginSlot { tenant: tenant.clone(), kind: kind.kind(), name: SINGLETON_NAME.to_owned() };
        let stable = self.deployed.load().get(&slot).cloned().unwrap_or_else(|| match kind {
            OnePerTenant::RateLimiter => self.default_rate_limiter.clone(),
            OnePerTenant::Router => self.default_router.clone(),
            OnePerTenant::RelationPolicy => self.default_relation_policy.clone(),
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

    /// Whether `tenant` has a `kind` of its own deployed or rolling out (else the bundled one serves it).
    pub fn has_own(&self, tenant: &TenantId, kind: OnePerTenant) -> bool {
        let slot = PluginSlot { tenant: tenant.clone(), kind: kind.kind(), name: SINGLETON_NAME.to_owned() };
        self.deployed.load().contains_key(&slot) || self.candidates.load().contains_key(&slot)
    }

    /// `slot`'s stored `version`, compiled.
    async fn load_stored(&self, slot: &PluginSlot, version: i64) -> Result<Arc<ActivePlugin>, RegistryError> {
        let stored = store::component(&self.db, &self.runtime, slot, version)
            .await?
            .ok_or_else(|| RegistryError::NoSuchVersion { kind: slot.kind, name: slot.name.clone(), version })?;
        Ok(load_version(&self.runtime, slot, version, stored).await?)
    }

    pub fn runtime(&self) -> &Arc<PluginRuntime> {
        &self.runtime
    }

    /// This registry allowing each tenant `max` projector names (`plugin_max_projectors`).
    pub fn with_max_projectors(mut self, max: usize) -> Self {
        self.max_projectors = max;
        self
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
        self.live_plugins(slot).iter().map(|plugin| plugin.version).collect()
    }

    /// The slot's [`PluginRegistry::live_versions`] themselves.
    pub fn live_plugins(&self, slot: &PluginSlot) -> Vec<Arc<ActivePlugin>> {
        let active = self.active(&slot.tenant, slot.kind, &slot.name);
        active.into_iter().chain(self.candidate(slot).map(|c| c.plugin)).collect()
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

    /// Every bundled plugin (version 0), each serving its slot wherever a tenant has no deployed version.
    pub fn bundled_plugins(&self) -> &[Arc<ActivePlugin>] {
        &self.bundled
    }

    /// Deletes every slot's inactive versions but its newest `keep` (kept for rollbacks); how many went.
    pub async fn prune_inactive_versions(db: &Database, keep: u32) -> Result<u64, sqlx::Error> {
        store::prune_inactive(db, keep).await
    }

    /// Every stored version of the tenant's plugins.
    pub async fn versions(&self, tenant: &TenantId) -> Result<Vec<PluginVersion>, RegistryError> {
        Ok(store::versions(&self.db, &self.runtime, tenant).await?)
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
    StoredComponent { wasm, limits, readable, history }: StoredComponent,
) -> Result<Arc<ActivePlugin>, PluginError> {
    let (runtime, kind, name) = (runtime.clone(), slot.kind, slot.name.clone());
    compiling(move || {
        let prepared = runtime.prepare(kind, &wasm)?;
        let sha256 = hex_sha256(&wasm);
        Ok(Arc::new(ActivePlugin { kind, name, version, sha256, prepared, limits, readable, history }))
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
