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

mod embedded;
mod kafka;

pub use embedded::{Delivered, EmbeddedBus};
pub use kafka::{KafkaBus, KafkaSettings};

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
