//! The event bus between the relay and the projections: Kafka in production, and on the embedded default a
//! durable log in the database with the same semantics — order per key, a position per consumer, replay
//! from the start.

use std::sync::Arc;

/// Where the relay publishes.
#[derive(Clone)]
pub enum Publisher {
    /// Appends inside the relay's transaction: exactly once into the bus.
    Embedded(EmbeddedBus),
    /// Publishes and waits for the acknowledgements before the relay deletes the rows: at least once.
    Kafka(Arc<KafkaBus>),
}

impl Publisher {
    /// Publishes `messages` on their own (not within a relay transaction): dead letters, for instance.
    pub async fn publish(&self, messages: &[Message]) -> Result<(), PublishError> {
        match self {
            Publisher::Embedded(bus) => Ok(bus.append_alone(messages).await?),
            Publisher::Kafka(kafka) => Ok(kafka.publish(messages).await?),
        }
    }
}

/// Why messages were not published.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("the embedded bus failed: {0}")]
    Embedded(#[from] sqlx::Error),
    #[error("Kafka failed: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
}

mod embedded;
mod kafka;
mod kafka_client;
mod topology;

pub use embedded::{Delivered, EmbeddedBus};
pub use kafka::{is_refusal, KafkaBus, KafkaSettings, Sending};
pub use kafka_client::{KafkaConnection, KafkaOptionsError};
pub use topology::Topology;

use serde::{Deserialize, Serialize};

/// One message as published: topic (already prefixed), key, headers and the JSON event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub topic: String,
    /// Messages with one key keep their order (`tenant:follower` by default).
    pub key: String,
    pub headers: Vec<(String, String)>,
    pub payload: String,
}

impl Message {
    /// The value of header `name`, if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}
