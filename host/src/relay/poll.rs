//! Poll mode (the seeds' EventPublish design): read the oldest committed outbox rows, route and publish
//! them, delete exactly those rows, commit — one transaction. Not `WHERE id > last_seen`: auto-increment
//! ids become visible out of order under concurrent writers; every batch reads the head of what is left.
//!
//! The read is a plain consistent read under READ COMMITTED, not `FOR UPDATE SKIP LOCKED`: MariaDB was
//! seen waiting on the implicit lock of an uncommitted insert despite `SKIP LOCKED` (stalling the relay
//! for a lock time-out behind any long transaction), and under REPEATABLE READ the locking scan also took
//! gap locks that stalled every concurrent outbox insert. A consistent read never waits: uncommitted rows
//! are invisible and are read once they commit. Point `DELETE`s by id then lock exactly those rows; if it removes fewer than
//! were read, another relay published them first, and this batch rolls back instead of publishing twice.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sqlx::{Acquire, Executor, Row};

use super::{to_messages, Leadership, RelayError};
use crate::bus::Publisher;
use crate::graph::{Database, DatabaseKind, TenantId};
use crate::plugins::{route_or_default, OutboxEvent, PluginRegistry};

/// Relays the outbox of one database to the bus.
pub struct PollRelay {
    db: Database,
    plugins: Arc<PluginRegistry>,
    publisher: Publisher,
    topic_prefix: String,
    batch: u32,
    idle_wait: Duration,
}

impl PollRelay {
    pub fn new(
        db: Database,
        plugins: Arc<PluginRegistry>,
        publisher: Publisher,
        topic_prefix: String,
        idle_wait: Duration,
    ) -> Self {
        Self { db, plugins, publisher, topic_prefix, batch: 256, idle_wait }
    }

    /// Publishes the oldest unpublished outbox rows; returns how many (0: caught up).
    pub async fn publish_batch(&self) -> Result<usize, RelayError> {
        let mut conn = self.db.writer().acquire().await?;
        if self.db.kind() == DatabaseKind::MySql {
            conn.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED").await?;
        }
        let mut tx = conn.begin().await?;
        let rows = sqlx::query(
            "SELECT id, tenant_id, aggregate_type, aggregate_id, event_type, event_key, payload \
             FROM outbox ORDER BY id LIMIT ?",
        )
        .bind(i64::from(self.batch))
        .fetch_all(&mut *tx)
        .await?;
        if rows.is_empty() {
            tx.commit().await?;
            return Ok(0);
        }
        let events = rows
            .iter()
            .map(|row| {
                Ok(OutboxEvent {
                    id: row.try_get(0)?,
                    tenant: row.try_get(1)?,
                    aggregate_type: row.try_get(2)?,
                    aggregate_id: row.try_get(3)?,
                    event_type: row.try_get(4)?,
                    key: row.try_get(5)?,
                    payload: row.try_get(6)?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
        // Route each tenant's events with its own router, keeping id order within the tenant (one key
        // never spans tenants, so per-key order holds).
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
            for (event, destinations) in batch.iter().zip(&routed.destinations) {
                messages.extend(to_messages(event, destinations, routed.router_version, &self.topic_prefix)?);
            }
        }
        match &self.publisher {
            Publisher::Embedded(bus) => bus.append(&mut tx, &messages).await?,
            // Acknowledged by the broker before the rows are deleted: a crash in between republishes
            // them (at least once; consumers dedupe by event id).
            Publisher::Kafka(kafka) => kafka.publish(&messages).await?,
        }
        // One primary-key delete per row: an `IN (…)` list may be planned as a scan, and a DELETE waits on
        // every row it examines — including uncommitted rows of long transactions it must not touch.
        let mut deleted = 0;
        for id in &ids {
            deleted += sqlx::query("DELETE FROM outbox WHERE id = ?").bind(id).execute(&mut *tx).await?.rows_affected();
        }
        if deleted != ids.len() as u64 {
            tx.rollback().await?;
            return Err(RelayError::Contended { read: ids.len(), deleted });
        }
        tx.commit().await?;
        Ok(ids.len())
    }

    /// Publishes until `shutdown` completes: straight on while there is a backlog, every `idle_wait` when
    /// caught up. A failed batch is logged and retried with backoff; nothing is skipped. On MySQL only the
    /// holder of the relay lock publishes; others wait as standbys.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut backoff = self.idle_wait;
        let mut leadership: Option<Leadership> = None;
        loop {
            if self.db.kind() == DatabaseKind::MySql && !self.lead(&mut leadership).await {
                tokio::select! {
                    () = &mut shutdown => return,
                    () = tokio::time::sleep(backoff) => continue,
                }
            }
            let wait = match self.publish_batch().await {
                Ok(0) => self.idle_wait,
                Ok(published) => {
                    tracing::debug!(published, "relayed outbox rows");
                    backoff = self.idle_wait;
                    Duration::ZERO
                }
                Err(e) => {
                    tracing::error!(error = %e, retry_in = ?backoff, "relay batch failed; retrying");
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                    backoff
                }
            };
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Ensures this relay holds the lock before a batch; false while another relay leads.
    async fn lead(&self, leadership: &mut Option<Leadership>) -> bool {
        if let Some(held) = leadership {
            if held.still_held().await {
                return true;
            }
            tracing::error!("lost the relay lock (connection or server lost); standing by");
            *leadership = None;
        }
        match Leadership::try_acquire(&self.db, RELAY_LOCK, Duration::from_secs(1)).await {
            Ok(Some(held)) => {
                tracing::info!("this relay is now the active one");
                *leadership = Some(held);
                true
            }
            Ok(None) => false,
            Err(e) => {
                tracing::error!(error = %e, "cannot take the relay lock; retrying");
                false
            }
        }
    }
}

/// The `GET_LOCK` name every relay of a database competes for.
pub const RELAY_LOCK: &str = "strand-relay";
