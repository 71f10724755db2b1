//! Publishing to Kafka: an idempotent producer (`enable.idempotence`, `acks=all`), topics created when
//! missing, and a batch counted as published only when the broker acknowledged every message of it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use tokio::sync::Mutex;

use super::{KafkaConnection, Message};

/// How long a message may wait for its acknowledgement before the batch fails (and is retried whole).
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest topic name Apache Kafka accepts.
const MAX_TOPIC_NAME: usize = 249;

/// Where and how topics are created.
#[derive(Debug, Clone)]
pub struct KafkaSettings {
    pub connection: KafkaConnection,
    pub partitions: i32,
    pub replication: i32,
}

/// The producer, and the topics known to exist.
pub struct KafkaBus {
    /// Replaced when librdkafka reports a fatal error (an idempotent producer that lost its sequence, e.g.
    /// after the broker lost its state): a fatal producer fails every later send.
    producer: ArcSwap<FutureProducer>,
    admin: AdminClient<DefaultClientContext>,
    settings: KafkaSettings,
    known_topics: Mutex<HashSet<String>>,
}

impl KafkaBus {
    pub fn connect(settings: KafkaSettings) -> Result<Self, KafkaError> {
        let producer = ArcSwap::from_pointee(Self::producer(&settings)?);
        let admin = settings.connection.client_config().create()?;
        Ok(Self { producer, admin, settings, known_topics: Mutex::default() })
    }

    fn producer(settings: &KafkaSettings) -> Result<FutureProducer, KafkaError> {
        settings
            .connection
            .client_config()
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("message.timeout.ms", DELIVERY_TIMEOUT.as_millis().to_string())
            // The relay batches rows itself: a message waits at most 1 ms more for the producer's batch.
            .set("linger.ms", "1")
            // Connected to every broker from the start, so the idempotent producer gets its id before the
            // first publication instead of holding it up (by 0.5–1 s) while it connects.
            .set("enable.sparse.connections", "false")
            .create()
    }

    /// Publishes `messages` and returns once the broker acknowledged all of them (else the first failure).
    /// Messages of one key go to one partition in order (the idempotent producer keeps that order across
    /// retries).
    pub async fn publish(&self, messages: &[Message]) -> Result<(), KafkaError> {
        let sending = self.send(messages).await?;
        self.acknowledged(sending).await.into_iter().find_map(Result::err).map_or(Ok(()), Err)
    }

    /// Hands `messages` to the producer without waiting for the broker, so the caller can prepare the next
    /// batch meanwhile; [`KafkaBus::acknowledged`] waits. Batches sent one after another keep their order
    /// per partition, as within one batch. A topic the broker refuses to create fails only its messages
    /// (in [`KafkaBus::acknowledged`]); the broker unreachable fails the whole batch here.
    pub async fn send(&self, messages: &[Message]) -> Result<Sending, KafkaError> {
        crate::db::held::forbid_wait("Kafka");
        let result = self.enqueue(messages).await;
        if result.is_err() {
            self.replace_if_fatal()?;
        }
        result
    }

    /// Waits for the broker's answer to every message of `sending`, in order: each acknowledged, or why not.
    pub async fn acknowledged(&self, sending: Sending) -> Vec<Result<(), KafkaError>> {
        crate::db::held::forbid_wait("Kafka");
        let mut outcomes = Vec::with_capacity(sending.deliveries.len());
        for delivery in sending.deliveries {
            outcomes.push(match delivery {
                Err(refused) => Err(refused),
                Ok(delivery) => match delivery.await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err((error, _))) => Err(error),
                    Err(_canceled) => Err(KafkaError::Canceled),
                },
            });
        }
        if outcomes.iter().any(Result::is_err) {
            if let Err(e) = self.replace_if_fatal() {
                tracing::error!(error = %e, "cannot replace the failed Kafka producer; the next send tries again");
            }
        }
        outcomes
    }

    /// A fatal producer (an idempotent one that lost its sequence, e.g. after the broker lost its state)
    /// fails every later send: after a failure it is replaced.
    fn replace_if_fatal(&self) -> Result<(), KafkaError> {
        if let Some((code, reason)) = self.producer.load().client().fatal_error() {
            tracing::error!(?code, %reason, "the Kafka producer failed fatally; replacing it");
            self.producer.store(Arc::new(Self::producer(&self.settings)?));
        }
        Ok(())
    }

    async fn enqueue(&self, messages: &[Message]) -> Result<Sending, KafkaError> {
        let refused = self.ensure_topics(messages).await?;
        let producer = self.producer.load_full();
        let mut deliveries = Vec::with_capacity(messages.len());
        for message in messages {
            if let Some(code) = refused.get(message.topic.as_str()) {
                deliveries.push(Err(KafkaError::AdminOp(*code)));
                continue;
            }
            // Kafka's limit on a topic's name, refused here alike on every broker (some accept longer).
            if message.topic.len() > MAX_TOPIC_NAME {
                deliveries.push(Err(KafkaError::MessageProduction(RDKafkaErrorCode::InvalidTopic)));
                continue;
            }
            let headers = message
                .headers
                .iter()
                .fold(OwnedHeaders::new(), |h, (name, value)| h.insert(Header { key: name, value: Some(value) }));
            let record = FutureRecord::to(&message.topic).key(&message.key).payload(&message.payload).headers(headers);
            // A full local queue is everyone's condition (the batch waits and is tried again); anything
            // else the producer refuses up front is about this message.
            match producer.send_result(record) {
                Ok(delivery) => deliveries.push(Ok(delivery)),
                Err((error @ KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => return Err(error),
                Err((error, _)) => deliveries.push(Err(error)),
            }
        }
        Ok(Sending { deliveries })
    }

    /// Creates the topics of `messages` not known to exist; the ones the broker refused (with why). Fails
    /// whole only when the broker could not be asked.
    async fn ensure_topics<'m>(
        &self,
        messages: &'m [Message],
    ) -> Result<HashMap<&'m str, RDKafkaErrorCode>, KafkaError> {
        let mut known = self.known_topics.lock().await;
        let missing: HashSet<&str> = messages
            .iter()
            .map(|m| m.topic.as_str())
            .filter(|t| t.len() <= MAX_TOPIC_NAME && !known.contains(*t))
            .collect();
        let mut refused = HashMap::new();
        if missing.is_empty() {
            return Ok(refused);
        }
        let (partitions, replication) = (self.settings.partitions, self.settings.replication);
        let topics: Vec<NewTopic> =
            missing.iter().map(|t| NewTopic::new(t, partitions, TopicReplication::Fixed(replication))).collect();
        for result in self.admin.create_topics(&topics, &AdminOptions::new()).await? {
            match result {
                Ok(topic) | Err((topic, RDKafkaErrorCode::TopicAlreadyExists)) => {
                    known.insert(topic);
                }
                Err((topic, code)) => {
                    tracing::error!(%topic, ?code, "the broker refused to create a topic");
                    if let Some(asked) = missing.iter().find(|t| **t == topic) {
                        refused.insert(*asked, code);
                    }
                }
            }
        }
        Ok(refused)
    }
}

/// Whether the broker refused a message for what it is (its topic's name, size, access rights or
/// policy) — a refusal the next attempt meets again — rather than for the broker's state (down, slow,
/// leaderless), which the next attempt may not.
pub fn is_refusal(error: &KafkaError) -> bool {
    use RDKafkaErrorCode::*;
    let code = match error {
        KafkaError::AdminOp(code) | KafkaError::MessageProduction(code) => *code,
        _ => return false,
    };
    matches!(
        code,
        InvalidTopic
            | TopicAuthorizationFailed
            | MessageSizeTooLarge
            | InvalidMessageSize
            | MessageBatchTooLarge
            | PolicyViolation
            | InvalidRecord
            | InvalidPartitions
            | InvalidReplicationFactor
            | TopicDeletionDisabled
            | InvalidConfig
            | InvalidRequest
    )
}

/// Messages handed to the producer, their acknowledgements still to come (or, for a topic the broker
/// refused to create, the refusal).
pub struct Sending {
    deliveries: Vec<Result<DeliveryFuture, KafkaError>>,
}
