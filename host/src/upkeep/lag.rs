//! How far behind the pipeline is, for the admin page and API: the relay (rows still in the outbox, the
//! oldest one's age) and each projection's reader (events on the bus it has not committed yet). Measured
//! from the outside — the database, the broker's committed offsets and watermarks — so any API node can
//! tell, wherever the relay and the workers run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::bus::{EmbeddedBus, KafkaConnection, Topology};
use crate::db::Database;
use crate::ops::metrics::{OUTBOX_BACKLOG_READ_FAILURES, OUTBOX_OLDEST_SECONDS, OUTBOX_ROWS};
use crate::util::time::now_ms;

/// How often a relay exports the outbox's backlog.
const EXPORT_EVERY: Duration = Duration::from_secs(5);

/// Exports the age of the oldest unpublished outbox row as `strand_outbox_oldest_seconds` and the row count
/// as `strand_outbox_rows`, every few seconds, forever: run beside every relay (a standby's figures show a
/// stuck leader). A failed read is logged and counted; the next one tries again.
pub async fn export_outbox_backlog(db: Database) -> std::convert::Infallible {
    let mut ticks = tokio::time::interval(EXPORT_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let read = sqlx::query_as::<_, (i64, Option<i64>)>("SELECT COUNT(*), MIN(created_at) FROM outbox")
            .fetch_one(db.reader())
            .await;
        match read {
            Ok((rows, oldest)) => {
                let age_ms = oldest.map_or(0, |at| (now_ms() - at).max(0));
                metrics::gauge!(OUTBOX_OLDEST_SECONDS.name).set(age_ms as f64 / 1000.0);
                metrics::gauge!(OUTBOX_ROWS.name).set(rows as f64);
            }
            Err(error) => {
                metrics::counter!(OUTBOX_BACKLOG_READ_FAILURES.name).increment(1);
                tracing::warn!(%error, "cannot read the outbox backlog; trying again");
            }
        }
    }
}

/// A tenant's outbox rows the relay parked (its router over budget, or a destination the broker refused):
/// they wait in `relay_parked` and are retried with backoff. And its events each projection parked (its
/// projector failing, over budget, its space being built or at its quota), retried with backoff and
/// dead-lettered after repeated failures.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ParkedRows {
    /// How many rows wait.
    pub rows: i64,
    /// When the oldest was parked (RFC 3339), if any.
    pub oldest_parked_at: Option<String>,
    /// Why the oldest was parked: the cause (later rows are parked behind it, to keep their order).
    pub reason: Option<String>,
    /// Per projection with parked events of the tenant.
    pub projections: Vec<ParkedEvents>,
}

/// A tenant's events one projection parked.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ParkedEvents {
    /// `projector.{name}`.
    pub projection: String,
    /// How many events wait.
    pub events: i64,
    /// When the oldest was parked (RFC 3339).
    pub oldest_parked_at: Option<String>,
    /// Why the oldest could not be applied at its last try.
    pub reason: Option<String>,
}

/// `tenant`'s parked rows and events.
pub async fn parked_rows(db: &Database, tenant: &str) -> Result<ParkedRows, sqlx::Error> {
    let (rows, oldest, reason) = parked_in(db, "relay_parked", None, tenant).await?;
    let mut projections = Vec::new();
    // Few names (projectors), each read by the index that leads with it.
    let names: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT projection FROM projection_parked ORDER BY projection")
            .fetch_all(db.reader())
            .await?;
    for projection in names {
        let (events, oldest_parked_at, reason) = parked_in(db, "projection_parked", Some(&projection), tenant).await?;
        if events > 0 {
            projections.push(ParkedEvents { projection, events, oldest_parked_at, reason });
        }
    }
    Ok(ParkedRows { rows, oldest_parked_at: oldest, reason, projections })
}

/// How many of `tenant`'s entries `table` holds (of `projection`, if given), when the oldest was parked and
/// why.
async fn parked_in(
    db: &Database,
    table: &str,
    projection: Option<&str>,
    tenant: &str,
) -> Result<(i64, Option<String>, Option<String>), sqlx::Error> {
    let of = if projection.is_some() { "projection = ? AND tenant_id = ?" } else { "tenant_id = ?" };
    let count_sql = format!("SELECT COUNT(*), MIN(parked_at) FROM {table} WHERE {of}");
    let reason_sql = format!("SELECT reason FROM {table} WHERE {of} ORDER BY id LIMIT 1");
    let mut count = sqlx::query_as::<_, (i64, Option<i64>)>(&count_sql);
    let mut reason = sqlx::query_scalar::<_, String>(&reason_sql);
    if let Some(projection) = projection {
        count = count.bind(projection);
        reason = reason.bind(projection);
    }
    let (rows, oldest) = count.bind(tenant).fetch_one(db.reader()).await?;
    let reason = reason.bind(tenant).fetch_optional(db.reader()).await?;
    Ok((rows, oldest.map(crate::util::time::rfc3339_millis), reason))
}

/// How long the broker may take to answer one question.
const BROKER_DEADLINE: Duration = Duration::from_secs(3);

/// The relay's and every projection's backlog.
#[derive(Debug, Serialize, ToSchema)]
pub struct PipelineLag {
    pub relay: RelayLag,
    pub consumers: Vec<ConsumerLag>,
}

/// What the relay has still to publish.
#[derive(Debug, Serialize, ToSchema)]
pub struct RelayLag {
    pub outbox_rows: i64,
    /// Age of the oldest unpublished row (0 when the outbox is empty).
    pub oldest_ms: i64,
}

/// One projection's reader of `{prefix}following`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConsumerLag {
    pub projection: String,
    /// Events published but not yet committed by the projection, over all partitions.
    pub behind: i64,
    pub partitions: Vec<PartitionLag>,
}

/// A partition's committed position against its end (the embedded bus is one partition, 0).
#[derive(Debug, Serialize, ToSchema)]
pub struct PartitionLag {
    pub partition: i32,
    pub committed: i64,
    pub end: i64,
}

/// Why the lag could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum LagError {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error("Kafka: {0}")]
    Kafka(#[from] KafkaError),
    #[error("the Kafka lag probe failed: {0}")]
    Probe(#[from] tokio::task::JoinError),
}

/// Where the projections read from, as the workers are configured.
pub struct LagProbe {
    db: Database,
    topology: Topology,
    /// `None`: the embedded bus in the database.
    kafka: Option<KafkaConnection>,
    /// One client per consumer group, kept: the admin page asks every few seconds.
    groups: Mutex<HashMap<String, Arc<BaseConsumer>>>,
}

impl LagProbe {
    pub fn new(db: Database, topology: Topology, kafka: Option<KafkaConnection>) -> Self {
        Self { db, topology, kafka, groups: Mutex::default() }
    }

    /// The relay's backlog and that of each of `projections` (named as their workers are).
    pub async fn measure(&self, projections: Vec<String>) -> Result<PipelineLag, LagError> {
        let (outbox_rows, oldest): (i64, Option<i64>) =
            sqlx::query_as("SELECT COUNT(*), MIN(created_at) FROM outbox").fetch_one(self.db.reader()).await?;
        let relay = RelayLag { outbox_rows, oldest_ms: oldest.map_or(0, |at| (now_ms() - at).max(0)) };
        let topic = self.topology.events_topic();
        let consumers = match &self.kafka {
            Some(kafka) => {
                let groups = projections
                    .into_iter()
                    .map(|projection| Ok((self.group_client(kafka, &projection)?, projection)))
                    .collect::<Result<Vec<_>, KafkaError>>()?;
                tokio::task::spawn_blocking(move || kafka_lag(&topic, groups)).await??
            }
            None => self.embedded_lag(&topic, projections).await?,
        };
        Ok(PipelineLag { relay, consumers })
    }

    fn group_client(&self, kafka: &KafkaConnection, projection: &str) -> Result<Arc<BaseConsumer>, KafkaError> {
        let group = self.topology.consumer_group(projection);
        let mut groups = self.groups.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(client) = groups.get(&group) {
            return Ok(client.clone());
        }
        let client: Arc<BaseConsumer> =
            Arc::new(kafka.client_config().set("group.id", &group).set("enable.auto.commit", "false").create()?);
        groups.insert(group, client.clone());
        Ok(client)
    }

    async fn embedded_lag(&self, topic: &str, projections: Vec<String>) -> Result<Vec<ConsumerLag>, sqlx::Error> {
        let bus = EmbeddedBus::new(self.db.clone());
        let end = bus.end(topic).await?;
        let mut consumers = Vec::with_capacity(projections.len());
        for projection in projections {
            let committed = bus.position(&projection, topic).await?;
            let partitions = vec![PartitionLag { partition: 0, committed, end }];
            consumers.push(ConsumerLag { projection, behind: (end - committed).max(0), partitions });
        }
        Ok(consumers)
    }
}

/// Each projection's group: committed offsets against the topic's watermarks (asked once, whatever the
/// number of groups). A partition without a commit counts from its low watermark, where a new group starts.
fn kafka_lag(topic: &str, groups: Vec<(Arc<BaseConsumer>, String)>) -> Result<Vec<ConsumerLag>, KafkaError> {
    let Some((any, _)) = groups.first() else { return Ok(Vec::new()) };
    let metadata = any.fetch_metadata(Some(topic), BROKER_DEADLINE)?;
    let count = metadata.topics().first().map_or(0, |t| t.partitions().len()) as i32;
    let watermarks = (0..count)
        .map(|partition| any.fetch_watermarks(topic, partition, BROKER_DEADLINE))
        .collect::<Result<Vec<_>, _>>()?;
    let mut consumers = Vec::with_capacity(groups.len());
    for (client, projection) in &groups {
        let mut asked = TopicPartitionList::new();
        for partition in 0..count {
            asked.add_partition(topic, partition);
        }
        let committed = client.committed_offsets(asked, BROKER_DEADLINE)?;
        let partitions: Vec<PartitionLag> = committed
            .elements()
            .iter()
            .filter_map(|element| {
                let &(low, high) = watermarks.get(usize::try_from(element.partition()).ok()?)?;
                let committed = match element.offset() {
                    Offset::Offset(offset) => offset.max(low),
                    _ => low,
                };
                Some(PartitionLag { partition: element.partition(), committed, end: high })
            })
            .collect();
        let behind = partitions.iter().map(|p| (p.end - p.committed).max(0)).sum();
        consumers.push(ConsumerLag { projection: projection.clone(), behind, partitions });
    }
    Ok(consumers)
}
