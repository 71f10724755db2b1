//! A projector plugin as a projection: each tenant's events go through that tenant's active version of the
//! plugin (deployed, else bundled; none: the tenant does not use it), and the effects to the cache. Live
//! effects apply only to a space completed for that very version; when it is not (a new tenant, a new
//! version, an empty in-process cache), the space is built first (`build.rs`), in line, so no event slips
//! between the snapshot and the bus. When the plugin keeps failing on a batch, its events are tried one by
//! one so that only the one it cannot take is dead-lettered (the worker then applies the rest again:
//! harmless, effects are exactly once).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::build::{build, Rebuild, LOCK_TTL};
use super::events::{relation_event, Unprojectable};
use crate::cache::{Applied, Cache, CacheError, Gate, Space, COUNTER_LIMIT};
use crate::graph::{Database, OutboxEvent, TenantId};
use crate::plugins::{
    count_invalid_output, project_with_retries, Action, ActivePlugin, Effect, PluginKind, PluginRegistry,
    RelationEvent, RetryPolicy,
};

/// One projector (by name) for every tenant.
#[derive(Clone)]
pub struct PluginProjection {
    registry: Arc<PluginRegistry>,
    plugin: String,
    cache: Cache,
    db: Database,
    /// Names this process as a build-lock holder.
    owner: Arc<str>,
}

/// Why a batch was not applied.
#[derive(Debug, thiserror::Error)]
pub enum PluginProjectionError {
    #[error(transparent)]
    Unprojectable(#[from] Unprojectable),
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
    #[error("the build lock of {0} was lost to another builder; the build is abandoned")]
    LockLost(String),
}

impl PluginProjection {
    /// `db` holds the truth that spaces are built from.
    pub fn new(registry: Arc<PluginRegistry>, plugin: &str, cache: Cache, db: Database) -> Self {
        let mut nonce = [0_u8; 8];
        // Uniqueness only needs to hold among live builders; the process id already gives most of it.
        let _best_effort = getrandom::fill(&mut nonce);
        let owner = format!("{}-{}", std::process::id(), u64::from_le_bytes(nonce));
        Self { registry, plugin: plugin.to_owned(), cache, db, owner: owner.into() }
    }

    /// The projector's name.
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    pub(super) fn cache(&self) -> &Cache {
        &self.cache
    }

    pub(super) fn db(&self) -> &Database {
        &self.db
    }

    pub(super) fn owner(&self) -> &str {
        &self.owner
    }

    /// The version projecting `tenant`'s events now, if the tenant uses this projector.
    pub fn active(&self, tenant: &TenantId) -> Option<Arc<ActivePlugin>> {
        // Looked up per batch: a hot swap takes effect at the next batch.
        self.registry.active(tenant, PluginKind::Projector, &self.plugin)
    }

    /// The tenants that deployed a version of this projector (they may have no pairs yet).
    pub(super) fn deploying_tenants(&self) -> Vec<TenantId> {
        self.registry.deployed_tenants(PluginKind::Projector, &self.plugin)
    }

    /// `tenant`'s data of this projector.
    pub(super) fn space<'a>(&'a self, tenant: &'a TenantId) -> Space<'a> {
        Space { tenant: tenant.as_str(), plugin: &self.plugin }
    }

    /// Projects `events` (in bus order) and applies the effects, exactly once in result.
    pub async fn apply(&self, events: &[OutboxEvent]) -> Result<(), PluginProjectionError> {
        let mut by_tenant: BTreeMap<String, Vec<RelationEvent>> = BTreeMap::new();
        for event in events {
            let relation = relation_event(event)?;
            by_tenant.entry(relation.tenant.clone()).or_default().push(relation);
        }
        for (tenant, batch) in by_tenant {
            let tenant: TenantId = tenant.parse().map_err(|e: crate::graph::InvalidTenantId| Unprojectable {
                event_id: batch[0].event_id.clone(),
                detail: e.to_string(),
            })?;
            let Some(plugin) = self.active(&tenant) else { continue };
            let effects = self.project(&plugin, &batch).await?;
            let gate = Gate::Built(&plugin.sha256);
            while self.apply_whole(&tenant, &plugin, &batch, &effects, gate).await? == Applied::Refused {
                build(self, &tenant, &plugin, Rebuild::IfStale, |_, _| {}).await?;
            }
        }
        Ok(())
    }

    /// Applies `effects` of `batch` under `gate`, each event whole or not at all: a batch that would take a
    /// counter out of range is applied event by event, so that the events before the culprit apply and the
    /// culprit is the error (dead-lettered live, left out of a backfill).
    async fn apply_whole(
        &self,
        tenant: &TenantId,
        plugin: &Arc<ActivePlugin>,
        batch: &[RelationEvent],
        effects: &[Vec<Effect>],
        gate: Gate<'_>,
    ) -> Result<Applied, PluginProjectionError> {
        let space = self.space(tenant);
        let applied = self.cache.apply(space, batch, effects, gate).await?;
        if applied != Applied::OutOfRange {
            return Ok(applied);
        }
        let mut new = 0;
        for (event, effects) in batch.iter().zip(effects) {
            let (one, effects) = (std::slice::from_ref(event), std::slice::from_ref(effects));
            match self.cache.apply(space, one, effects, gate).await? {
                Applied::Events(n) => new += n,
                Applied::Refused => return Ok(Applied::Refused),
                Applied::OutOfRange => return Err(self.out_of_range(plugin, event).into()),
            }
        }
        Ok(Applied::Events(new))
    }

    /// The plugin's output for `event` cannot be carried out: it is that event's error (and counted).
    fn out_of_range(&self, plugin: &ActivePlugin, event: &RelationEvent) -> Unprojectable {
        let detail = format!(
            "projector {} v{} returned counter adds that would take a counter beyond ±{COUNTER_LIMIT}",
            plugin.name, plugin.version
        );
        count_invalid_output(&event.tenant, plugin, "apply");
        Unprojectable { event_id: event.event_id.clone(), detail }
    }

    /// Applies the truth's current state of `pairs` (a backfill page of `tenant`) as `plugin` projects it,
    /// while this process holds the space's build lock: follows through the plugin, unfollows only raising
    /// their pair's floor.
    pub(super) async fn apply_snapshot(
        &self,
        tenant: &TenantId,
        plugin: &Arc<ActivePlugin>,
        pairs: &[RelationEvent],
    ) -> Result<(), PluginProjectionError> {
        let follows: Vec<RelationEvent> = pairs.iter().filter(|p| p.action == Action::Follow).cloned().collect();
        let mut projected = self.project(plugin, &follows).await?.into_iter();
        let effects: Vec<Vec<Effect>> = pairs
            .iter()
            .map(|p| if p.action == Action::Follow { projected.next().unwrap_or_default() } else { Vec::new() })
            .collect();
        let gate = Gate::Building { owner: &self.owner, ttl: LOCK_TTL };
        match self.apply_whole(tenant, plugin, pairs, &effects, gate).await? {
            Applied::Refused => Err(PluginProjectionError::LockLost(self.space(tenant).named(""))),
            Applied::Events(_) | Applied::OutOfRange => Ok(()),
        }
    }

    async fn project(
        &self,
        plugin: &Arc<ActivePlugin>,
        batch: &[RelationEvent],
    ) -> Result<Vec<Vec<Effect>>, Unprojectable> {
        let run = |events: Vec<RelationEvent>| {
            project_with_retries(&self.registry, plugin.clone(), Arc::new(events), RetryPolicy::default())
        };
        let failed = match run(batch.to_vec()).await {
            Ok(effects) => return Ok(effects),
            Err(failed) => failed,
        };
        let mut effects = Vec::with_capacity(batch.len());
        for event in batch {
            match run(vec![event.clone()]).await {
                Ok(mut one) => effects.push(one.pop().unwrap_or_default()),
                Err(alone) => {
                    return Err(Unprojectable { event_id: event.event_id.clone(), detail: alone.to_string() })
                }
            }
        }
        // Each event passed alone: the batch failed for its size (fuel, deadline).
        tracing::warn!(projector = %self.plugin, error = %failed, "a batch failed whole; applied event by event");
        Ok(effects)
    }
}
