//! Publishing to Kafka: an idempotent producer (`enable.idempotence`, `acks=all`), topics created when
//! missing, and a batch counted as published only when the broker acknowledged every message of it.

use std::collections::HashSet;
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

    /// Publishes `messages` and returns once the broker acknowledged all of them. Messages of one key go to
    /// one partition in order (the idempotent producer keeps that order across retries).
    pub async fn publish(&self, messages: &[Message]) -> Result<(), KafkaError> {
        let sending = self.send(messages).await?;
        self.acknowledged(sending).await
    }

    /// Hands `messages` to the producer without waiting for the broker, so the caller can prepare the next
    /// batch meanwhile; [`KafkaBus::acknowledged`] waits. Batches sent one after another keep their order
    /// per partition, as within one batch.
    pub async fn send(&self, messages: &[Message]) -> Result<Sending, KafkaError> {
        let result = self.enqueue(messages).await;
        self.replace_if_fatal(result)
    }

    /// Waits until the broker acknowledged every message of `sending`.
    pub async fn acknowledged(&self, sending: Sending) -> Result<(), KafkaError> {
        let result = all_delivered(sending.deliveries).await;
        self.replace_if_fatal(result)
    }

    /// A fatal producer (an idempotent one that lost its sequence, e.g. after the broker lost its state)
    /// fails every later send: after a failure it is replaced, and the failure returned.
    fn replace_if_fatal<T>(&self, result: Result<T, KafkaError>) -> Result<T, KafkaError> {
        if result.is_err() {
            if let Some((code, reason)) = self.producer.load().client().fatal_error() {
                tracing::error!(?code, %reason, "the Kafka producer failed fatally; replacing it");
                self.producer.store(Arc::new(Self::producer(&self.settings)?));
            }
        }
        result
    }

    async fn enqueue(&self, messages: &[Message]) -> Result<Sending, KafkaError> {
        self.ensure_topics(messages).await?;
        let producer = self.producer.load_full();
        let mut deliveries = Vec::with_capacity(messages.len());
        for message in messages {
            let headers = message
                .headers
                .iter()
                .fold(OwnedHeaders::new(), |h, (name, value)| h.insert(Header { key: name, value: Some(value) }));
            let record = FutureRecord::to(&message.topic).key(&message.key).payload(&message.payload).headers(headers);
            deliveries.push(producer.send_result(record).map_err(|(error, _)| error)?);
        }
        Ok(Sending { deliveries })
    }

    async fn ensure_topics(&self, messages: &[Message]) -> Result<(), KafkaError> {
        let mut known = self.known_topics.lock().await;
        let missing: HashSet<&str> =
            messages.iter().map(|m| m.topic.as_str()).filter(|t| !known.contains(*t)).collect();
        if missing.is_empty() {
            return Ok(());
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
                    tracing::error!(%topic, ?code, "cannot create topic");
                    return Err(KafkaError::AdminOp(code));
                }
            }
        }
        Ok(())
    }
}

/// The first failure among `deliveries`, in order, if any.
async fn all_delivered(deliveries: Vec<DeliveryFuture>) -> Result<(), KafkaError> {
    for delivery in deliveries {
        match delivery.await {
            Ok(Ok(_)) => {}
            Ok(Err((error, _))) => return Err(error),
            Err(_canceled) => return Err(KafkaError::Canceled),
        }
    }
    Ok(())
}

/// Messages handed to the producer, their acknowledgements still to come.
pub struct Sending {
    deliveries: Vec<DeliveryFuture>,
}
