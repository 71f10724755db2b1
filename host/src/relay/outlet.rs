//! What both relay modes do with a batch of committed outbox rows: route each tenant's rows through its
//! router plugin, publish the messages, and delete the rows — all decided inside the caller's transaction,
//! so the rows leave the outbox exactly when their publication is settled.

use std::collections::BTreeMap;
use std::sync::Arc;

use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Executor, Row};

use super::{to_messages, RelayError};
use crate::bus::{EmbeddedBus, KafkaBus, Message, Publisher, Sending, Topology};
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

    /// Publishes `events` (in outbox order) and deletes their rows within `tx`: [`Outlet::dispatch`] then
    /// [`Outlet::settle`], for a caller with nothing to overlap.
    pub async fn publish_and_delete(&self, tx: &mut AnyConnection, events: Vec<OutboxEvent>) -> Result<(), RelayError> {
        let dispatched = self.dispatch(events).await?;
        Self::settle(tx, vec![dispatched]).await
    }

    /// Routes `events` (in outbox order) and, to Kafka, hands the messages to the producer without waiting
    /// for the broker — so a relay can read and route the next batch while these are on their way.
    pub async fn dispatch(&self, events: Vec<OutboxEvent>) -> Result<Dispatched, RelayError> {
        let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
        let newest = events.last().and_then(|e| serde_json::from_str::<serde_json::Value>(&e.payload).ok());
        let occurred_at = newest.as_ref().and_then(|p| p["occurred_at"].as_str()).map(str::to_owned);
        let messages = self.route(events).await?;
        let on_its_way = match &self.publisher {
            Publisher::Embedded(bus) => OnItsWay::ToAppend(bus.clone(), messages),
            Publisher::Kafka(kafka) => OnItsWay::Sent(kafka.clone(), kafka.send(&messages).await?),
        };
        Ok(Dispatched { ids, occurred_at, on_its_way })
    }

    /// Settles dispatched batches (in dispatch order) within `tx`: Kafka has acknowledged every message
    /// before this returns (at least once: a crash before `tx` commits publishes them again), into the
    /// embedded bus they are appended in `tx` (exactly once); then their rows are deleted. Fails with
    /// `Contended` when some row was already gone — another relay published it — so the caller rolls back
    /// instead of publishing twice.
    pub async fn settle(tx: &mut AnyConnection, batches: Vec<Dispatched>) -> Result<(), RelayError> {
        let mut ids = Vec::new();
        let mut occurred_at = None;
        for batch in batches {
            match batch.on_its_way {
                OnItsWay::ToAppend(bus, messages) => bus.append(tx, &messages).await?,
                OnItsWay::Sent(kafka, sending) => kafka.acknowledged(sending).await?,
            }
            ids.extend(batch.ids);
            occurred_at = batch.occurred_at.or(occurred_at);
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
        if let Some(lag) = occurred_at.as_deref().and_then(seconds_since) {
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

/// Routed outbox rows on their way to the bus, not yet settled.
pub struct Dispatched {
    ids: Vec<i64>,
    /// When the newest row's change committed (its payload's `occurred_at`), for the lag gauge.
    occurred_at: Option<String>,
    on_its_way: OnItsWay,
}

enum OnItsWay {
    /// Messages for the embedded bus, appended in the settling transaction.
    ToAppend(EmbeddedBus, Vec<Message>),
    /// Messages handed to the Kafka producer.
    Sent(Arc<KafkaBus>, Sending),
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
