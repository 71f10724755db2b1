//! The CDC relay: committed outbox rows → the tenant's router plugin → the bus, at least once (exactly
//! once into the embedded bus), never skipping a committed row, keeping one user's events in order.
//!
//! `poll.rs` is the mode for databases without a binlog to tail (SQLite; MySQL without replication
//! rights); `messages.rs` turns routed outbox rows into bus messages with Strand's headers.

mod leader;
mod messages;
mod poll;

pub use leader::Leadership;
use messages::to_messages;
pub use poll::PollRelay;

/// Why a relay batch failed; the batch is retried, nothing is deleted from the outbox.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
    #[error("outbox row {id} is not a Strand event: {detail}")]
    CorruptOutbox { id: i64, detail: String },
    #[error("another relay published {} of the {read} rows read first; batch rolled back", read - *deleted as usize)]
    Contended { read: usize, deleted: u64 },
    #[error("Kafka did not acknowledge the batch: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("routing failed even with the default router: {0}")]
    Routing(#[from] crate::plugins::PluginError),
}
