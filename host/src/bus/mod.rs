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

crate::str_enum! {
    /// The headers the host sets on every message it publishes, spelt here only: consumers rely on them, and
    /// a router's own headers may not take these names (in any case), so a consumer reading a header's last
    /// value reads the host's — and a tenant cannot put its messages into a trace of its choosing.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Header("message header") {
        /// The change's id (the value's `event_id`): one change forever, what a consumer deduplicates by.
        EventId = "event-id",
        /// The tenant (app) whose graph changed.
        Tenant = "tenant",
        /// The value's `type`, readable without parsing the value.
        EventType = "event-type",
        /// The edge's version after the change.
        Version = "version",
        /// The version of the router that routed it.
        RouterVersion = "router-version",
        /// W3C trace context, when the change was traced.
        Traceparent = "traceparent",
    }
}

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

#[cfg(test)]
mod tests {
    use super::Header;
    use crate::ops::telemetry::TRACEPARENT;

    #[test]
    fn the_trace_header_is_the_one_the_propagator_reads() {
        assert_eq!(Header::Traceparent.as_str(), TRACEPARENT);
    }
}
