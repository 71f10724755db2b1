//! A projector plugin as a projection: each tenant's events go through that tenant's active version of the
//! plugin (deployed, else bundled; none: the tenant does not use it), and the effects to the cache. Live
//! effects apply only to a space completed for that very version; when it is not (a new tenant, a new
//! version, an empty in-process cache), the space is built first (`build.rs`), in line, so no event slips
//! between the snapshot and the bus. When the plugin keeps failing on a batch, its events are tried one by
//! one so that only the one it cannot take is dead-lettered (the worker then applies the rest again:
//! harmless, effects are exactly once).
//!
//! While a shadow version runs, every event is projected by it too, into its own space (built from the
//! truth first, like the active version's): its failures never hold the active version back — the events
//! it cannot take are left out of its space and count towards its automatic rollback.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::build::{build, build_stale, Rebuild};
use super::events::{relation_event, Unprojectable};
use super::projector::{PluginProjectionError, Projector, Role};
use crate::cache::{Applied, Cache, Gate};
use crate::graph::{Database, OutboxEvent, TenantId};
use crate::plugins::{ActivePlugin, PluginRegistry, RelationEvent, Tally};

/// One projector (by name) for every tenant, fed live from the bus.
#[derive(Clone)]
pub struct PluginProjection {
    projector: Projector,
}

impl PluginProjection {
    /// `db` holds the truth that spaces are built from.
    pub fn new(registry: Arc<PluginRegistry>, plugin: &str, cache: Cache, db: Database) -> Self {
        Self { projector: Projector::new(registry, plugin, cache, db) }
    }

    /// The projector's name.
    pub fn plugin(&self) -> &str {
        self.projector.plugin()
    }

    /// The version projecting `tenant`'s events now, if the tenant uses this projector.
    pub fn active(&self, tenant: &TenantId) -> Option<Arc<ActivePlugin>> {
        self.projector.active(tenant)
    }

    pub(super) fn db(&self) -> &Database {
        self.projector.db()
    }

    /// Makes `tenant`'s space of `plugin` complete (`Rebuild::Always`: again, as `strand rebuild` does),
    /// reporting `(done, total)` pairs per page; returns how many pairs this call replayed.
    pub async fn build(
        &self,
        tenant: &TenantId,
        plugin: &Arc<ActivePlugin>,
        when: Rebuild,
        report: impl FnMut(u64, u64),
    ) -> Result<u64, PluginProjectionError> {
        build(&self.projector, tenant, plugin, when, report).await
    }

    /// Builds every stale space of the projector (see `build.rs`), between batches.
    pub async fn build_stale(&self) -> Result<(), PluginProjectionError> {
        build_stale(&self.projector).await
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
            // Both looked up once per batch: a promote in between still feeds the promoted space this batch.
            let shadow = self.projector.shadow(&tenant);
            let Some(active) = self.projector.active(&tenant) else { continue };
            let active = self.apply_as(&tenant, (active, Role::Active), &batch).await;
            // The stable version's calls, beside the shadow's (a transient failure is no call: it is retried).
            let failures = match &active {
                Ok(()) => Some(0),
                Err(PluginProjectionError::Unprojectable(_)) => Some(1),
                Err(_) => None,
            };
            if let (Some(shadow), Some(failures)) = (&shadow, failures) {
                self.projector.record(&tenant, shadow, false, Tally { calls: batch.len() as u64, failures }).await;
            }
            active?;
            let Some(shadow) = shadow else { continue };
            match self.apply_as(&tenant, (shadow, Role::Shadow), &batch).await {
                // Its build could not take the truth: it is tried again at the next batch or sweep.
                Err(PluginProjectionError::Unprojectable(poison)) => {
                    tracing::warn!(projector = %self.projector.plugin(), %tenant, error = %poison, "the shadow cannot be built");
                }
                shadowed => shadowed?,
            }
        }
        Ok(())
    }

    /// Projects `batch` with `plugin`, `tenant`'s version in `role`, and applies it to that version's space,
    /// built first if it is not complete. A space refused under a version this process still thinks current
    /// may have been retired by another node: the plugin set is read again before anything is built.
    async fn apply_as(
        &self,
        tenant: &TenantId,
        (mut plugin, role): (Arc<ActivePlugin>, Role),
        batch: &[RelationEvent],
    ) -> Result<(), PluginProjectionError> {
        let mut effects = self.projector.effects(tenant, &plugin, role, batch).await?;
        let mut refreshed = false;
        while self.projector.apply_whole(tenant, (&plugin, role), batch, &effects, Gate::Built(&plugin.sha256)).await?
            == Applied::Refused
        {
            if !refreshed {
                refreshed = true;
                self.projector.refresh_plugins().await;
                match self.projector.version_for(tenant, role) {
                    None => return Ok(()),
                    Some(now) if now.sha256 != plugin.sha256 => {
                        plugin = now;
                        effects = self.projector.effects(tenant, &plugin, role, batch).await?;
                        continue;
                    }
                    Some(_) => {}
                }
            }
            build(&self.projector, tenant, &plugin, Rebuild::IfStale, |_, _| {}).await?;
        }
        Ok(())
    }
}
