//! A projector plugin as a projection: each tenant's events go through that tenant's active version of the
//! plugin (deployed, else bundled; none: the tenant does not use it), and the effects to Redis. When the
//! plugin keeps failing on a batch, its events are tried one by one so that only the one it cannot take
//! is dead-lettered (the worker then applies the rest again: harmless, effects are exactly once).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::effects::RedisEffects;
use super::events::{relation_event, Unprojectable};
use crate::graph::{OutboxEvent, TenantId};
use crate::plugins::{
    project_with_retries, Action, ActivePlugin, Effect, PluginKind, PluginRegistry, RelationEvent, RetryPolicy,
};

/// One projector (by name) for every tenant.
#[derive(Clone)]
pub struct PluginProjection {
    registry: Arc<PluginRegistry>,
    plugin: String,
    effects: Arc<RedisEffects>,
}

/// Why a batch was not applied.
#[derive(Debug, thiserror::Error)]
pub enum PluginProjectionError {
    #[error(transparent)]
    Unprojectable(#[from] Unprojectable),
    #[error("Redis failed: {0}")]
    Redis(#[from] redis::RedisError),
}

impl PluginProjection {
    pub fn new(registry: Arc<PluginRegistry>, plugin: &str, effects: Arc<RedisEffects>) -> Self {
        Self { registry, plugin: plugin.to_owned(), effects }
    }

    /// The projector's name.
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// Projects `events` (in bus order) and applies the effects, exactly once in result.
    pub async fn apply(&self, events: &[OutboxEvent]) -> Result<(), PluginProjectionError> {
        let mut by_tenant: BTreeMap<String, Vec<RelationEvent>> = BTreeMap::new();
        for event in events {
            let relation = relation_event(event)?;
            by_tenant.entry(relation.tenant.clone()).or_default().push(relation);
        }
        for (tenant, batch) in by_tenant {
            let tenant_id: TenantId = tenant.parse().map_err(|e: crate::graph::InvalidTenantId| Unprojectable {
                event_id: batch[0].event_id.clone(),
                detail: e.to_string(),
            })?;
            // Looked up per batch: a hot swap takes effect at the next batch.
            let Some(plugin) = self.registry.active(&tenant_id, PluginKind::Projector, &self.plugin) else {
                continue;
            };
            let effects = self.project(plugin, &batch).await?;
            self.effects.apply(&tenant, &self.plugin, &batch, &effects, false).await?;
        }
        Ok(())
    }

    /// Applies the truth's current state of `pairs` (a backfill page of `tenant`): follows through the
    /// plugin, unfollows only raising their pair's floor. A tenant without this projector is skipped.
    pub async fn apply_snapshot(
        &self,
        tenant: &TenantId,
        pairs: &[RelationEvent],
    ) -> Result<(), PluginProjectionError> {
        let Some(plugin) = self.registry.active(tenant, PluginKind::Projector, &self.plugin) else {
            return Ok(());
        };
        let follows: Vec<RelationEvent> = pairs.iter().filter(|p| p.action == Action::Follow).cloned().collect();
        let mut projected = self.project(plugin, &follows).await?.into_iter();
        let effects: Vec<Vec<Effect>> = pairs
            .iter()
            .map(|p| if p.action == Action::Follow { projected.next().unwrap_or_default() } else { Vec::new() })
            .collect();
        self.effects.apply(tenant.as_str(), &self.plugin, pairs, &effects, true).await?;
        Ok(())
    }

    async fn project(
        &self,
        plugin: Arc<ActivePlugin>,
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
