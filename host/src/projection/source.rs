//! Where a projection reads the bus: a Kafka consumer group, or a named subscriber of the embedded bus —
//! the same batches and the same "commit only what is done" either way.

use std::collections::HashMap;
use std::time::Duration;

use futures::FutureExt;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::{ClientContext, Message as _, Offset, TopicPartitionList};

use crate::bus::{EmbeddedBus, KafkaConnection, Message};
use crate::ops::metrics::{PROJECTION_COMMIT_FAILURES, PROJECTION_PARTITIONS};

/// An event read from the bus, with where it came from (what a commit moves past).
#[derive(Debug, Clone)]
pub struct Received {
    pub message: Message,
    position: Position,
}

#[derive(Debug, Clone, Copy)]
enum Position {
    Embedded(i64),
    Kafka { partition: i32, offset: i64 },
}

/// Why the bus could not be read or a position not committed; the worker retries.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("the embedded bus failed: {0}")]
    Embedded(#[from] sqlx::Error),
    #[error("Kafka failed: {0}")]
    Kafka(#[from] KafkaError),
}

/// One projection's reader of one topic.
pub enum EventSource {
    Embedded { bus: EmbeddedBus, subscriber: String, topic: String, after: i64 },
    Kafka { consumer: StreamConsumer<GroupMember>, topic: String },
}

impl EventSource {
    /// The topic it reads.
    pub fn topic(&self) -> &str {
        match self {
            Self::Embedded { topic, .. } | Self::Kafka { topic, .. } => topic,
        }
    }

    /// The embedded bus's `topic`, from where `subscriber` committed last.
    pub async fn embedded(bus: EmbeddedBus, subscriber: &str, topic: &str) -> Result<Self, SourceError> {
        let after = bus.position(subscriber, topic).await?;
        Ok(Self::Embedded { bus, subscriber: subscriber.to_owned(), topic: topic.to_owned(), after })
    }

    /// Kafka's `topic` as a member of consumer group `group` (partitions are split between the members;
    /// a new group starts from the beginning of the topic). With an `instance` name the membership is static:
    /// a restarted process with the same name takes its partitions back at once, instead of waiting for its
    /// dead predecessor to time out and the group to rebalance.
    pub fn kafka(
        kafka: &KafkaConnection,
        group: &str,
        topic: &str,
        instance: Option<&str>,
    ) -> Result<Self, SourceError> {
        let mut config = kafka.client_config();
        if let Some(instance) = instance {
            config.set("group.instance.id", instance);
        }
        let consumer: StreamConsumer<GroupMember> = config
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", "10000")
            .set("heartbeat.interval.ms", "1000")
            // A worker may start before the relay creates the topic: notice it within seconds, not the
            // default five minutes, or the group stays without partitions that long.
            .set("topic.metadata.refresh.interval.ms", "5000")
            .create_with_context(GroupMember { group: group.to_owned() })?;
        consumer.subscribe(&[topic])?;
        Ok(Self::Kafka { consumer, topic: topic.to_owned() })
    }

    /// Waits up to `wait` for a first event, then takes what is ready, up to `max` in all.
    pub async fn next_batch(&mut self, max: usize, wait: Duration) -> Result<Vec<Received>, SourceError> {
        match self {
            Self::Embedded { bus, topic, after, .. } => {
                let mut read = bus.read(topic, *after, max as u32).await?;
                if read.is_empty() {
                    tokio::time::sleep(wait).await;
                    read = bus.read(topic, *after, max as u32).await?;
                }
                if let Some(last) = read.last() {
                    *after = last.seq;
                }
                Ok(read
                    .into_iter()
                    .map(|d| Received { message: d.message, position: Position::Embedded(d.seq) })
                    .collect())
            }
            Self::Kafka { consumer, .. } => {
                let mut batch = Vec::new();
                let Ok(first) = tokio::time::timeout(wait, consumer.recv()).await else {
                    return Ok(batch);
                };
                batch.push(received(&first?));
                while batch.len() < max {
                    match consumer.recv().now_or_never() {
                        Some(next) => batch.push(received(&next?)),
                        None => break,
                    }
                }
                Ok(batch)
            }
        }
    }

    /// Records that everything up to the end of `batch` is done: only call once its effects are durable.
    pub async fn commit(&mut self, batch: &[Received]) -> Result<(), SourceError> {
        match self {
            Self::Embedded { bus, subscriber, topic, .. } => {
                let last = batch.iter().filter_map(|r| match r.position {
                    Position::Embedded(seq) => Some(seq),
                    Position::Kafka { .. } => None,
                });
                if let Some(seq) = last.max() {
                    bus.commit(subscriber, topic, seq).await?;
                }
                Ok(())
            }
            Self::Kafka { consumer, topic } => {
                let mut next: HashMap<i32, i64> = HashMap::new();
                for r in batch {
                    if let Position::Kafka { partition, offset } = r.position {
                        let entry = next.entry(partition).or_insert(offset + 1);
                        *entry = (*entry).max(offset + 1);
                    }
                }
                if next.is_empty() {
                    return Ok(());
                }
                let mut offsets = TopicPartitionList::new();
                for (partition, offset) in next {
                    offsets.add_partition_offset(topic, partition, Offset::Offset(offset))?;
                }
                // A lost commit only means redelivery, which every projection absorbs.
                consumer.commit(&offsets, CommitMode::Async)?;
                Ok(())
            }
        }
    }
}

/// A consumer group member's view of its group: which partitions it reads (logged, and the gauge
/// `strand_projection_partitions`) and commits that failed (logged and counted; the events are delivered
/// again, which the projections absorb).
pub struct GroupMember {
    group: String,
}

impl ClientContext for GroupMember {}

impl ConsumerContext for GroupMember {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let gauge = metrics::gauge!(PROJECTION_PARTITIONS.name, "group" => self.group.clone());
        match rebalance {
            Rebalance::Assign(list) => {
                let partitions: Vec<i32> = list.elements().iter().map(|p| p.partition()).collect();
                tracing::info!(group = %self.group, ?partitions, "partitions assigned");
                gauge.set(partitions.len() as f64);
            }
            Rebalance::Revoke(list) => {
                tracing::info!(group = %self.group, revoked = list.count(), "partitions revoked");
                gauge.set(0.0);
            }
            Rebalance::Error(error) => tracing::error!(group = %self.group, %error, "rebalance failed"),
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        if let Err(error) = result {
            metrics::counter!(PROJECTION_COMMIT_FAILURES.name, "group" => self.group.clone()).increment(1);
            tracing::warn!(group = %self.group, %error, ?offsets, "commit failed; those events will be delivered again");
        }
    }
}

fn received(message: &BorrowedMessage<'_>) -> Received {
    let text = |bytes: Option<&[u8]>| String::from_utf8_lossy(bytes.unwrap_or_default()).into_owned();
    let headers =
        message.headers().map(|h| h.iter().map(|h| (h.key.to_owned(), text(h.value))).collect()).unwrap_or_default();
    Received {
        message: Message {
            topic: message.topic().to_owned(),
            key: text(message.key()),
            headers,
            payload: text(message.payload()),
        },
        position: Position::Kafka { partition: message.partition(), offset: message.offset() },
    }
}
