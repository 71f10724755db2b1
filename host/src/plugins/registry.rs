//! Which plugin version serves each tenant, kind and name — and the hot swap.
//!
//! Deployed versions live in the `plugins` table (the source of truth across restarts and nodes); the
//! active set is an immutable map behind an `ArcSwap`. A swap publishes a new map in one atomic store:
//! a call that already holds an `Arc<ActivePlugin>` finishes on the old version, every call that starts
//! after the swap returns sees the new one, and no call ever waits on a lock.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::Serialize;
use sqlx::Row;

use super::rollout::{traffic_share, RollbackPolicy, RolloutHealth};
use super::runtime::{
    hex_sha256, CallCost, LimitRefused, PluginError, PluginLimits, PluginRuntime, PreparedPlugin, RequestedLimits,
};
use super::{conformance, PluginKind, BUNDLED};
use crate::audit::{self, AuditAction, AuditOutcome, AuditRecord};
use crate::graph::{now_ms, rfc3339_millis, Database, TenantId};

/// The one name of a tenant's rate limiter and router (projectors are named freely).
pub const SINGLETON_NAME: &str = "default";

/// Where a plugin version is deployed: a tenant's rate limiter, router, or one named projector.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PluginSlot {
    pub tenant: TenantId,
    pub kind: PluginKind,
    pub name: String,
}

impl PluginSlot {
    pub fn new(tenant: TenantId, kind: PluginKind, name: &str) -> Result<Self, RegistryError> {
        let valid_name = (1..=64).contains(&name.len())
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !valid_name {
            return Err(RegistryError::InvalidName(format!("{name:?} is not 1 to 64 characters of a-z, 0-9, -")));
        }
        if kind == PluginKind::Projector && strand_contract::SERVED_PROJECTORS.contains(&name) {
            return Err(RegistryError::ReservedName(name.to_owned()));
        }
        if kind.is_singleton() && name != SINGLETON_NAME {
            return Err(RegistryError::InvalidName(format!(
                "a tenant has one {kind}; its name is {SINGLETON_NAME:?}, not {name:?}"
            )));
        }
        Ok(Self { tenant, kind, name: name.to_owned() })
    }
}

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
}

/// A stored version, as the admin API lists it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PluginVersion {
    pub tenant: String,
    pub kind: String,
    pub name: String,
    pub version: i64,
    pub sha256: String,
    pub size_bytes: i64,
    /// `active`, `canary` (beside the active one, for `canary_percent` of the traffic) or `inactive`.
    pub state: String,
    pub created_at: String,
    pub limits: VersionLimits,
    pub canary_percent: Option<u8>,
}

/// The limits a version was deployed with, as listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct VersionLimits {
    pub deadline_ms: u64,
    pub memory_bytes: u64,
    /// `null`: no fuel metering.
    pub fuel: Option<u64>,
}

impl From<PluginLimits> for VersionLimits {
    fn from(limits: PluginLimits) -> Self {
        Self {
            deadline_ms: u64::try_from(limits.deadline.as_millis()).unwrap_or(u64::MAX),
            memory_bytes: limits.memory_bytes as u64,
            fuel: limits.fuel,
        }
    }
}

/// Why a deploy, rollback or removal was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("invalid plugin name: {0}")]
    InvalidName(String),
    /// The API serves this projector's counts or lists: a replacement could make it serve wrong ones.
    #[error("the projector name {0:?} is reserved for the host: the API serves its counts and lists; deploy yours under another name")]
    ReservedName(String),
    #[error("rejected: {0}")]
    Rejected(#[from] PluginError),
    #[error(transparent)]
    LimitRefused(#[from] LimitRefused),
    #[error("no version {version} of {kind} {name:?}")]
    NoSuchVersion { kind: PluginKind, name: String, version: i64 },
    #[error("no {kind} {name:?} is deployed")]
    NotDeployed { kind: PluginKind, name: String },
    #[error("{kind} {name:?} has no canary running")]
    NoRollout { kind: PluginKind, name: String },
    #[error("a canary takes 0 to 99 percent of a rate limiter's or router's traffic (projectors: not yet), not {0}")]
    InvalidCanary(u8),
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
}

type Deployed = HashMap<PluginSlot, Arc<ActivePlugin>>;

/// A version taking a share of its slot's traffic beside the active one.
#[derive(Clone)]
pub struct Canary {
    pub plugin: Arc<ActivePlugin>,
    /// Percent of the traffic (by user for policies, by message key for routers).
    pub percent: u8,
}

/// The version that serves one share of a slot's traffic, and whether it is the slot's canary.
pub struct Chosen {
    pub plugin: Arc<ActivePlugin>,
    /// The canary's version while a rollout runs (also when the stable version was chosen), for health.
    pub rollout: Option<i64>,
    pub by_canary: bool,
}

/// Bundled defaults, deployed versions and the swap between them.
pub struct PluginRegistry {
    runtime: Arc<PluginRuntime>,
    db: Database,
    bundled: Vec<Arc<ActivePlugin>>,
    deployed: ArcSwap<Deployed>,
    canaries: ArcSwap<HashMap<PluginSlot, Canary>>,
    health: RolloutHealth,
    /// Serialises deploys, rollbacks and removals; calls never take it.
    changes: tokio::sync::Mutex<()>,
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
        let bundled = blocking(move || {
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
                    }))
                })
                .collect::<Result<Vec<_>, PluginError>>()
        })
        .await?;
        let registry = Self {
            runtime,
            db,
            bundled,
            deployed: ArcSwap::from_pointee(Deployed::new()),
            canaries: ArcSwap::from_pointee(HashMap::new()),
            health: RolloutHealth::new(policy),
            changes: Default::default(),
        };
        registry.refresh().await?;
        Ok(registry)
    }

    /// Brings the active set and the running canaries in line with the `plugins` table, loading only what
    /// changed: how deploys, rollbacks and rollouts made through another node reach this one. Returns how
    /// many slots changed.
    pub async fn refresh(&self) -> Result<usize, RegistryError> {
        let _change = self.changes.lock().await;
        let rows = sqlx::query(
            "SELECT tenant_id, kind, name, version, state, canary_percent FROM plugins WHERE state IN ('active', 'canary')",
        )
        .fetch_all(self.db.reader())
        .await?;
        let (current, current_canaries) = (self.deployed.load_full(), self.canaries.load_full());
        let (mut next, mut next_canaries) = (Deployed::new(), HashMap::new());
        let mut changed = 0;
        for row in rows {
            let (tenant, kind, name): (String, String, String) = (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
            let (version, state, percent): (i64, String, Option<i64>) =
                (row.try_get(3)?, row.try_get(4)?, row.try_get(5)?);
            let canary = percent.and_then(|p| u8::try_from(p).ok()).filter(|_| state == "canary");
            let (Ok(tenant), Ok(kind)) = (tenant.parse(), kind.parse()) else {
                tracing::error!(%tenant, %kind, version, "ignoring an unreadable plugins row");
                continue;
            };
            let slot = PluginSlot { tenant, kind, name };
            let kept = match canary {
                None => current.get(&slot).filter(|p| p.version == version).cloned(),
                Some(percent) => current_canaries
                    .get(&slot)
                    .filter(|c: &&Canary| c.plugin.version == version && c.percent == percent)
                    .map(|c| c.plugin.clone()),
            };
            let plugin = match kept {
                Some(plugin) => plugin,
                None => {
                    changed += 1;
                    match self.load_stored(&slot, version).await {
                        Ok(plugin) => plugin,
                        // One broken version must not keep every tenant down: that slot falls back to the
                        // default (a broken canary's share, to the active version).
                        Err(e) => {
                            tracing::error!(tenant = %slot.tenant, kind = %slot.kind, version, error = %e,
                                "cannot load deployed plugin");
                            continue;
                        }
                    }
                }
            };
            match canary {
                None => next.insert(slot, plugin),
                Some(percent) => next_canaries.insert(slot, Canary { plugin, percent }).map(|c| c.plugin),
            };
        }
        changed += current.keys().filter(|slot| !next.contains_key(slot)).count();
        changed += current_canaries.keys().filter(|slot| !next_canaries.contains_key(slot)).count();
        if changed > 0 {
            self.deployed.store(Arc::new(next));
            self.canaries.store(Arc::new(next_canaries));
            tracing::info!(changed, "plugin set refreshed from the database");
        }
        Ok(changed)
    }

    /// The version serving `tenant`'s `kind` traffic of `key` (a user for policies, a message key for
    /// routers): the canary for its share while one runs — or for test traffic `pinned` to its version,
    /// also at 0% — else the active version.
    pub fn choose(&self, tenant: &TenantId, kind: PluginKind, key: &str, pinned: Option<i64>) -> Chosen {
        let stable = self.active(tenant, kind, SINGLETON_NAME).expect("a bundled rate limiter and router");

        let slot = PluginSlot { tenant: tenant.clone(), kind, name: SINGLETON_NAME.to_owned() };
        let canaries = self.canaries.load();
        let Some(canary) = canaries.get(&slot) else {
            return Chosen { plugin: stable, rollout: None, by_canary: false };
        };
        let by_canary = pinned == Some(canary.plugin.version) || traffic_share(tenant.as_str(), key) < canary.percent;
        let plugin = if by_canary { canary.plugin.clone() } else { stable };
        Chosen { plugin, rollout: Some(canary.plugin.version), by_canary }
    }

    /// Counts how a call chosen by [`PluginRegistry::choose`] ended; a canary failing clearly more often
    /// than its stable version is aborted here, recorded in the audit log, logged and counted.
    pub async fn record_outcome(&self, tenant: &TenantId, kind: PluginKind, chosen: &Chosen, failed: bool) {
        let Some(canary_version) = chosen.rollout else { return };
        let slot = PluginSlot { tenant: tenant.clone(), kind, name: SINGLETON_NAME.to_owned() };
        let Some(unhealthy) = self.health.record(&slot, canary_version, chosen.by_canary, failed) else { return };
        tracing::error!(%tenant, %kind, %unhealthy, "rolling the canary back automatically");
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
            slot: Some(format!("{kind}/{SINGLETON_NAME}")),
            version: Some(canary_version),
            sha256: None,
            outcome,
            detail,
        };
        if let Err(error) = audit::record(&self.db, record).await {
            tracing::error!(%tenant, %error, "cannot record an automatic rollback in the audit log");
        }
    }

    async fn load_stored(&self, slot: &PluginSlot, version: i64) -> Result<Arc<ActivePlugin>, RegistryError> {
        let row = sqlx::query(
            "SELECT wasm, deadline_ms, memory_bytes, fuel FROM plugins \
             WHERE tenant_id = ? AND kind = ? AND name = ? AND version = ?",
        )
        .bind(slot.tenant.as_str())
        .bind(slot.kind.as_str())
        .bind(&slot.name)
        .bind(version)
        .fetch_optional(self.db.reader())
        .await?
        .ok_or_else(|| RegistryError::NoSuchVersion { kind: slot.kind, name: slot.name.clone(), version })?;
        let limits = stored_limits(&self.runtime, &row, 1)?;
        Ok(load_version(&self.runtime, slot, version, row.try_get(0)?, limits).await?)
    }

    pub fn runtime(&self) -> &Arc<PluginRuntime> {
        &self.runtime
    }

    /// The plugin serving `tenant`'s `kind` slot `name`: its deployed version, else the bundled one.
    pub fn active(&self, tenant: &TenantId, kind: PluginKind, name: &str) -> Option<Arc<ActivePlugin>> {
        let slot = PluginSlot { tenant: tenant.clone(), kind, name: name.to_owned() };
        self.deployed.load().get(&slot).cloned().or_else(|| self.bundled(kind, name))
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
        self.bundled(PluginKind::Router, SINGLETON_NAME).expect("a bundled router")
    }

    fn bundled(&self, kind: PluginKind, name: &str) -> Option<Arc<ActivePlugin>> {
        self.bundled.iter().find(|b| b.kind == kind && b.name == name).cloned()
    }

    /// [`PluginRegistry::deploy_with`] the default limits, to all of the traffic.
    pub async fn deploy(&self, slot: PluginSlot, wasm: Vec<u8>) -> Result<(PluginVersion, CallCost), RegistryError> {
        self.deploy_with(slot, wasm, RequestedLimits::default(), None).await
    }

    /// Validates, compiles and conformance-checks `wasm` within the `requested` limits (each at most the
    /// platform's maximum), stores it with them as the slot's next version and swaps it in — for all of
    /// the traffic, or as a `canary` for that percent of it (replacing a running canary). Returns the new
    /// version and the cost of the conformance run.
    pub async fn deploy_with(
        &self,
        slot: PluginSlot,
        wasm: Vec<u8>,
        requested: RequestedLimits,
        canary: Option<u8>,
    ) -> Result<(PluginVersion, CallCost), RegistryError> {
        if let Some(percent) = canary.filter(|p| *p > 99 || !slot.kind.is_singleton()) {
            return Err(RegistryError::InvalidCanary(percent));
        }
        let limits = self.runtime.limits_for(requested)?;
        let _change = self.changes.lock().await;
        let (runtime, kind, bytes) = (self.runtime.clone(), slot.kind, wasm.clone());
        let (prepared, cost) = blocking(move || {
            let prepared = runtime.prepare(kind, &bytes)?;
            let cost = conformance::check(&runtime, &prepared, limits)?;
            Ok((prepared, cost))
        })
        .await?;
        let (sha256, size_bytes, created_at) = (hex_sha256(&wasm), wasm.len() as i64, now_ms());
        let mut tx = self.db.writer().begin().await?;
        let version: i64 = sqlx::query_scalar(
            "SELECT COALESCE(MAX(version), 0) + 1 FROM plugins WHERE tenant_id = ? AND kind = ? AND name = ?",
        )
        .bind(slot.tenant.as_str())
        .bind(slot.kind.as_str())
        .bind(&slot.name)
        .fetch_one(&mut *tx)
        .await?;
        retire(&mut tx, &slot, if canary.is_some() { Retired::Canary } else { Retired::All }).await?;
        let listed = VersionLimits::from(limits);
        let state = if canary.is_some() { "canary" } else { "active" };
        sqlx::query(
            "INSERT INTO plugins (tenant_id, kind, name, version, sha256, wasm, state, created_at, deadline_ms, \
             memory_bytes, fuel, canary_percent) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(slot.tenant.as_str())
        .bind(slot.kind.as_str())
        .bind(&slot.name)
        .bind(version)
        .bind(&sha256)
        .bind(wasm)
        .bind(state)
        .bind(created_at)
        .bind(i64::try_from(listed.deadline_ms).unwrap_or(i64::MAX))
        .bind(i64::try_from(listed.memory_bytes).unwrap_or(i64::MAX))
        .bind(listed.fuel.map(|fuel| i64::try_from(fuel).unwrap_or(i64::MAX)))
        .bind(canary.map(i64::from))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        let stored = PluginVersion {
            tenant: slot.tenant.to_string(),
            kind: slot.kind.to_string(),
            name: slot.name.clone(),
            version,
            sha256: sha256.clone(),
            size_bytes,
            state: state.to_owned(),
            created_at: rfc3339_millis(created_at),
            limits: listed,
            canary_percent: canary,
        };
        let plugin =
            Arc::new(ActivePlugin { kind: slot.kind, name: slot.name.clone(), version, sha256, prepared, limits });
        match canary {
            None => {
                self.end_rollout(&slot);
                self.swap(|deployed| {
                    deployed.insert(slot.clone(), plugin.clone());
                })
            }
            Some(percent) => {
                self.canaries.rcu(|current| {
                    let mut next = HashMap::clone(current);
                    next.insert(slot.clone(), Canary { plugin: plugin.clone(), percent });
                    next
                });
            }
        }
        tracing::info!(tenant = %slot.tenant, kind = %slot.kind, name = %slot.name, version, "plugin deployed");
        Ok((stored, cost))
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

    /// Makes the slot's canary its active version, for all of the traffic.
    pub async fn promote(&self, slot: PluginSlot) -> Result<PluginVersion, RegistryError> {
        let _change = self.changes.lock().await;
        let canary = self.canaries.load().get(&slot).cloned();
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
        tracing::info!(tenant = %slot.tenant, kind = %slot.kind, version = canary.plugin.version, "canary promoted");
        self.listed(&slot, canary.plugin.version).await
    }

    /// Stops the slot's canary: all of the traffic goes to the active version again.
    pub async fn abort(&self, slot: PluginSlot) -> Result<(), RegistryError> {
        let _change = self.changes.lock().await;
        if !self.canaries.load().contains_key(&slot) {
            return Err(RegistryError::NoRollout { kind: slot.kind, name: slot.name });
        }
        let mut tx = self.db.writer().begin().await?;
        retire(&mut tx, &slot, Retired::Canary).await?;
        tx.commit().await?;
        self.end_rollout(&slot);
        tracing::info!(tenant = %slot.tenant, kind = %slot.kind, "canary aborted");
        Ok(())
    }

    fn end_rollout(&self, slot: &PluginSlot) {
        self.canaries.rcu(|current| {
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
            .find(|v| v.kind == slot.kind.as_str() && v.name == slot.name && v.version == version)
            .ok_or_else(|| RegistryError::NoSuchVersion { kind: slot.kind, name: slot.name.clone(), version })
    }

    /// Every stored version of the tenant's plugins.
    pub async fn versions(&self, tenant: &TenantId) -> Result<Vec<PluginVersion>, RegistryError> {
        let rows = sqlx::query(
            "SELECT kind, name, version, sha256, LENGTH(wasm), state, created_at, deadline_ms, memory_bytes, fuel, \
             canary_percent FROM plugins WHERE tenant_id = ? ORDER BY kind, name, version",
        )
        .bind(tenant.as_str())
        .fetch_all(self.db.reader())
        .await?;
        rows.iter()
            .map(|row| {
                Ok(PluginVersion {
                    tenant: tenant.to_string(),
                    kind: row.try_get(0)?,
                    name: row.try_get(1)?,
                    version: row.try_get(2)?,
                    sha256: row.try_get(3)?,
                    size_bytes: row.try_get(4)?,
                    state: row.try_get(5)?,
                    created_at: rfc3339_millis(row.try_get(6)?),
                    limits: stored_limits(&self.runtime, row, 7)?.into(),
                    canary_percent: row.try_get::<Option<i64>, _>(10)?.and_then(|p| u8::try_from(p).ok()),
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

/// Which of a slot's versions [`retire`] sets inactive.
#[derive(Clone, Copy)]
enum Retired {
    /// The active one and a canary.
    All,
    /// A canary, if one runs.
    Canary,
}

async fn retire(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    slot: &PluginSlot,
    which: Retired,
) -> Result<(), sqlx::Error> {
    let only = match which {
        Retired::All => "",
        Retired::Canary => " AND state = 'canary'",
    };
    let update = format!(
        "UPDATE plugins SET state = 'inactive', canary_percent = NULL WHERE tenant_id = ? AND kind = ? AND name = ?{only}"
    );
    sqlx::query(&update)
        .bind(slot.tenant.as_str())
        .bind(slot.kind.as_str())
        .bind(&slot.name)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

async fn load_version(
    runtime: &Arc<PluginRuntime>,
    slot: &PluginSlot,
    version: i64,
    wasm: Vec<u8>,
    limits: PluginLimits,
) -> Result<Arc<ActivePlugin>, PluginError> {
    let (runtime, kind, name) = (runtime.clone(), slot.kind, slot.name.clone());
    blocking(move || {
        let prepared = runtime.prepare(kind, &wasm)?;
        Ok(Arc::new(ActivePlugin { kind, name, version, sha256: hex_sha256(&wasm), prepared, limits }))
    })
    .await
}

/// The limits stored with a version in `row`'s columns `first..first + 3` (deadline, memory, fuel); a
/// version deployed before limits were stored has none and runs with the defaults.
fn stored_limits(runtime: &PluginRuntime, row: &sqlx::any::AnyRow, first: usize) -> Result<PluginLimits, sqlx::Error> {
    let deadline: Option<i64> = row.try_get(first)?;
    let memory: Option<i64> = row.try_get(first + 1)?;
    let fuel: Option<i64> = row.try_get(first + 2)?;
    let defaults = runtime.limits();
    Ok(match (deadline, memory) {
        (Some(deadline), Some(memory)) => PluginLimits {
            deadline: std::time::Duration::from_millis(deadline.max(1) as u64),
            memory_bytes: usize::try_from(memory).unwrap_or(defaults.memory_bytes),
            fuel: fuel.and_then(|fuel| u64::try_from(fuel).ok()),
        },
        _ => defaults,
    })
}

/// Compilation and plugin calls are CPU work with their own deadlines: keep them off the async workers.
pub async fn blocking<R: Send + 'static>(
    work: impl FnOnce() -> Result<R, PluginError> + Send + 'static,
) -> Result<R, PluginError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| PluginError::Host(format!("plugin worker: {e}")))?
}
