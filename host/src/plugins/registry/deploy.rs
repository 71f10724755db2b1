//! How a version gets in and out: an upload compiled within its budget (one per tenant at a time),
//! conformance-checked, stored and swapped in — for all of the traffic or staged beside the active
//! version —, and rollback, promotion, abort and removal. Every change holds the registry's `changes` lock;
//! no compile does.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::store::{self, StoredRow, DEPLOY_ATTEMPTS};
use super::{compiling, ActivePlugin, Candidate, PluginRegistry, PluginVersion, RegistryError, RolloutStage};
use super::{VersionLimits, VersionState};
use crate::db::is_lock_conflict;
use crate::graph::TenantId;
use crate::plugins::error::PluginError;
use crate::plugins::runtime::{CallCost, PreparedPlugin, RequestedLimits};
use crate::plugins::slot::PluginSlot;
use crate::plugins::{conformance, Declared, PluginKind};
use crate::util::hashing::hex_sha256;
use crate::util::time::{now_ms, rfc3339_millis};

/// How long an upload may take to compile unless configured otherwise. A 12 MiB JavaScript component
/// compiles in about 12 s on a loaded 2-core machine.
pub const DEFAULT_COMPILE_BUDGET: std::time::Duration = std::time::Duration::from_secs(120);
/// Projector names one tenant may have unless configured otherwise.
pub const DEFAULT_MAX_PROJECTORS: usize = 8;
/// Uploads compiled at once on a node; more wait (within their budget).
pub const CONCURRENT_COMPILES: usize = 2;

/// Who compiles an upload now: one of each tenant's at a time, [`CONCURRENT_COMPILES`] in all.
pub(super) struct Compiles {
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

impl PluginRegistry {
    /// Refuses a new projector name of a tenant that has [`PluginRegistry::with_max_projectors`] already (a
    /// new version of one it has is always allowed).
    async fn check_projector_room(&self, slot: &PluginSlot) -> Result<(), RegistryError> {
        if store::other_names(&self.db, slot).await? >= self.max_projectors as i64 {
            return Err(RegistryError::TooManyProjectors { tenant: slot.tenant.to_string(), max: self.max_projectors });
        }
        Ok(())
    }

    /// [`PluginRegistry::deploy_with`] the default limits, for all of the traffic.
    pub async fn deploy(
        &self,
        slot: PluginSlot,
        wasm: impl Into<Bytes>,
    ) -> Result<(PluginVersion, CallCost), RegistryError> {
        self.deploy_with(slot, wasm, RequestedLimits::default(), None, Declared::default()).await
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
    /// the new version and the cost of the conformance run. What a projector `declared` is kept with it.
    pub async fn deploy_with(
        &self,
        slot: PluginSlot,
        wasm: impl Into<Bytes>,
        requested: RequestedLimits,
        staged: Option<RolloutStage>,
        Declared { readable, history }: Declared,
    ) -> Result<(PluginVersion, CallCost), RegistryError> {
        let wasm: Bytes = wasm.into();
        if !readable.is_empty() && slot.kind != PluginKind::Projector {
            return Err(RegistryError::InvalidReadable(format!("a {} has no spaces to read", slot.kind)));
        }
        if history && slot.kind != PluginKind::Projector {
            return Err(RegistryError::HistoryNotAProjector(slot.kind));
        }
        match (staged, slot.kind.is_singleton()) {
            (Some(RolloutStage::Canary(percent)), true) if percent > 99 => {
                return Err(RegistryError::InvalidRollout(format!("a canary takes 0 to 99 percent, not {percent}")))
            }
            (Some(RolloutStage::Canary(_)), false) => {
                return Err(RegistryError::InvalidRollout("a projector is staged as a shadow, not a canary".into()))
            }
            (Some(RolloutStage::Shadow), true) => {
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
        let cost = conformance::check(&self.runtime, &prepared, limits, &slot.tenant).await?;
        let _change = self.changes.lock().await;
        let (sha256, size_bytes, created_at) = (hex_sha256(&wasm), wasm.len() as i64, now_ms());
        let listed = VersionLimits::from(limits);
        let state = staged.map_or(VersionState::Active, RolloutStage::state);
        let canary = staged.and_then(RolloutStage::percent);
        let readable_json =
            serde_json::to_string(&readable).map_err(|e| RegistryError::InvalidReadable(e.to_string()))?;
        let row = StoredRow { state, canary, listed, sha256: &sha256, created_at, readable: &readable_json, history };
        // Another node deploying to the slot at once takes the same next number: the loser retries.
        let mut attempt = 1;
        let version = loop {
            match store::insert_next(&self.db, &slot, staged, &row, &wasm).await {
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
            history,
        };
        let (kind, name) = (slot.kind, slot.name.clone());
        let plugin = Arc::new(ActivePlugin { kind, name, version, sha256, prepared, limits, readable, history });
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

    /// Makes a kept version of the slot active again.
    pub async fn rollback(&self, slot: PluginSlot, version: i64) -> Result<PluginVersion, RegistryError> {
        let _change = self.changes.lock().await;
        let plugin = self.load_stored(&slot, version).await?;
        store::activate(&self.db, &slot, version).await?;
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
        if store::delete(&self.db, &slot).await? == 0 {
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
        store::activate(&self.db, &slot, canary.plugin.version).await?;
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
        store::retire_candidate(&self.db, &slot).await?;
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
}
