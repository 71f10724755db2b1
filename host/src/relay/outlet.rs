//! What both relay modes do with a batch of committed outbox rows: route each tenant's rows through its
//! router plugin, publish the messages, and delete the rows — all decided inside the caller's transaction,
//! so the rows leave the outbox exactly when their publication is settled.

use std::collections::BTreeMap;
use std::sync::Arc;

use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Executor, Row};

use super::{to_messages, RelayError};
use crate::bus::{Message, Publisher, Topology};
use crate::graph::TenantId;
use crate::observability::seconds_since;
use crate::plugins::{route_or_default, OutboxEvent, PluginRegistry};

/// Most outbox rows deleted in one round trip.
const DELETE_CHUNK: usize = 256;

/// Where routed outbox rows go.
pub struct Outlet {
    plugins: Arc<PluginRegistry>,
    publisher: Publisher,
    topology: Topology,
}

impl Outlet {
    pub fn new(plugins: Arc<PluginRegistry>, publisher: Publisher, topology: Topology) -> Self {
        Self { plugins, publisher, topology }
    }

    /// Publishes `events` (in outbox order) and deletes their rows within `tx`. Into the embedded bus the
    /// messages are appended in `tx` (exactly once); Kafka has acknowledged them before this returns (at
    /// least once: a crash before `tx` commits publishes them again). Fails with `Contended` when some row
    /// was already gone — another relay published it — so the caller rolls back instead of publishing twice.
    pub async fn publish_and_delete(&self, tx: &mut AnyConnection, events: Vec<OutboxEvent>) -> Result<(), RelayError> {
        let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
        let newest = events.last().and_then(|e| serde_json::from_str::<serde_json::Value>(&e.payload).ok());
        let messages = self.route(events).await?;
        match &self.publisher {
            Publisher::Embedded(bus) => bus.append(tx, &messages).await?,
            Publisher::Kafka(kafka) => kafka.publish(&messages).await?,
        }
        // One primary-key delete per row — an `IN (…)` list covering most of a small table is planned as a
        // scan, and a DELETE waits on every row it examines, including uncommitted rows of long transactions
        // it must not touch — but a chunk of them per round trip (the ids are integers the outbox gave us).
        let mut deleted = 0;
        for chunk in ids.chunks(DELETE_CHUNK) {
            let deletes: String = chunk.iter().map(|id| format!("DELETE FROM outbox WHERE id = {id};")).collect();
            // A bare string runs as a text-protocol query: several statements in one round trip.
            deleted += (&mut *tx).execute(deletes.as_str()).await?.rows_affected();
        }
        if deleted != ids.len() as u64 {
            return Err(RelayError::Contended { read: ids.len(), deleted });
        }
        metrics::counter!("strand_relay_published_total").increment(ids.len() as u64);
        if let Some(lag) = newest.as_ref().and_then(|p| p["occurred_at"].as_str()).and_then(seconds_since) {
            // From the newest row's commit to its publication.
            metrics::gauge!("strand_relay_lag_seconds").set(lag);
        }
        Ok(())
    }

    /// Routes each tenant's events with its own router, keeping outbox order within the tenant (one key
    /// never spans tenants, so per-key order holds).
    async fn route(&self, events: Vec<OutboxEvent>) -> Result<Vec<Message>, RelayError> {
        let mut by_tenant: BTreeMap<String, Vec<OutboxEvent>> = BTreeMap::new();
        for event in events {
            by_tenant.entry(event.tenant.clone()).or_default().push(event);
        }
        let mut messages = Vec::new();
        for (tenant, batch) in by_tenant {
            let tenant_id: TenantId = tenant.parse().map_err(|e: crate::graph::InvalidTenantId| {
                RelayError::CorruptOutbox { id: batch[0].id, detail: e.to_string() }
            })?;
            let routed = route_or_default(&self.plugins, &tenant_id, batch.clone()).await?;
            for ((event, destinations), version) in batch.iter().zip(&routed.destinations).zip(&routed.router_versions)
            {
                messages.extend(to_messages(event, destinations, *version, &self.topology)?);
            }
        }
        Ok(messages)
    }
}

/// The outbox columns [`outbox_event`] reads, in its order.
pub const OUTBOX_COLUMNS: &str = "id, tenant_id, aggregate_type, aggregate_id, event_type, event_key, payload";

/// An outbox row selected with [`OUTBOX_COLUMNS`].
pub fn outbox_event(row: &AnyRow) -> Result<OutboxEvent, sqlx::Error> {
    Ok(OutboxEvent {
        id: row.try_get(0)?,
        tenant: row.try_get(1)?,
        aggregate_type: row.try_get(2)?,
        aggregate_id: row.try_get(3)?,
        event_type: row.try_get(4)?,
        key: row.try_get(5)?,
        payload: row.try_get(6)?,
    })
}
