//! The CDC relay: committed outbox rows → the tenant's router plugin → the bus, at least once (exactly
//! once into the embedded bus), never skipping a committed row, keeping one user's events in order.
//!
//! `binlog.rs` follows the MySQL/MariaDB binlog (with `checkpoint.rs` its durable position); `poll.rs` reads
//! the outbox table where there is no binlog to follow (SQLite; MySQL without replication rights). Both hand
//! batches to `outlet.rs` (route, publish, delete), which builds messages with `messages.rs`; `leader.rs`
//! keeps one relay active per database.

mod binlog;
mod checkpoint;
mod leader;
mod messages;
mod outlet;
mod poll;

use std::future::Future;

pub use binlog::BinlogRelay;
pub use checkpoint::{BinlogPosition, Checkpoint, Saved};
pub use leader::{Lead, Leadership, RELAY_LOCK};
use messages::publish_spans;
pub use messages::to_messages;
pub use outlet::{Outlet, DEFAULT_ROUTER_BUDGET};
pub use poll::PollRelay;

/// The relay a node runs, in the configured mode.
pub enum Relay {
    Poll(PollRelay),
    Binlog(BinlogRelay),
}

impl Relay {
    /// Relays until `shutdown`, exporting the outbox's backlog meanwhile; returns early only with an error
    /// that needs an operator.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), RelayError> {
        let db = match &self {
            Relay::Poll(relay) => relay.db().clone(),
            Relay::Binlog(relay) => relay.db().clone(),
        };
        let relaying = async move {
            match self {
                Relay::Poll(relay) => {
                    relay.run(shutdown).await;
                    Ok(())
                }
                Relay::Binlog(relay) => relay.run(shutdown).await,
            }
        };
        tokio::select! {
            relayed = relaying => relayed,
            never = crate::upkeep::lag::export_outbox_backlog(db) => match never {},
        }
    }
}

/// Why a relay batch failed. Nothing is deleted from the outbox nor checkpointed past a failed batch; it is
/// retried, except where [`RelayError::needs_operator`] says an operator must act first.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    CorruptOutbox(#[from] crate::outbox::CorruptRow),
    #[error("another relay published {} of the {read} rows read first; batch rolled back", read - *deleted as usize)]
    Contended { read: usize, deleted: u64 },
    #[error("Kafka did not acknowledge the batch: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("routing failed even with the default router: {0}")]
    Routing(#[from] crate::plugins::PluginError),
    #[error("parked rows are still refused")]
    StillRefused(#[source] TopicRefused),
    #[error("this relay lost the relay lock; another relay may be active")]
    LostLead,
    #[error("the binlog connection failed: {0}")]
    Binlog(#[from] mysql_async::Error),
    #[error("cannot decode a binlog event: {0}")]
    BinlogEvent(std::io::Error),
    #[error("no binlog event nor heartbeat for {0:?}: the link is taken for dead")]
    BinlogSilent(std::time::Duration),
    #[error("the server ended the binlog stream")]
    BinlogEnded,
    #[error("cannot follow the binlog: {0}")]
    BinlogNotConfigured(String),
    #[error(
        "the relay checkpoint {checkpoint} names a binlog file the server no longer has (purged, or the \
         server was reset). No event is lost: every row the relay has not published is still in the outbox. \
         Run `strand relay --reset-checkpoint` once to publish them and follow the binlog from its end"
    )]
    BinlogPurged { checkpoint: BinlogPosition },
    #[error(
        "the server cannot send the binlog from the relay checkpoint {checkpoint}: {detail}. No event is lost: \
         every row the relay has not published is still in the outbox. Run `strand relay --reset-checkpoint` \
         once to publish them and follow the binlog from its end"
    )]
    BinlogUnreadable { checkpoint: BinlogPosition, detail: String },
}

impl RelayError {
    /// Errors that retrying cannot fix: the relay stops and says what to do.
    pub fn needs_operator(&self) -> bool {
        matches!(
            self,
            RelayError::BinlogNotConfigured(_) | RelayError::BinlogPurged { .. } | RelayError::BinlogUnreadable { .. }
        )
    }
}

/// Rows selected with [`OUTBOX_COLUMNS`](crate::outbox::OUTBOX_COLUMNS) (from `outbox` or `relay_parked`),
/// checked: a corrupt one fails the batch, naming it ([`RelayError::CorruptOutbox`]; never skipped).
fn outbox_rows(rows: &[sqlx::any::AnyRow]) -> Result<Vec<crate::outbox::OutboxRow>, RelayError> {
    let checked = |row| Ok(crate::outbox::OutboxRow::try_from(crate::outbox::StoredRow::from_row(row)?)?);
    rows.iter().map(checked).collect()
}

/// The broker refused a message for one of a tenant's own topics (the shared events topic's refusals fail
/// the whole batch instead): the row is parked, or kept parked.
#[derive(Debug, thiserror::Error)]
#[error("the broker refused topic {topic}")]
pub struct TopicRefused {
    pub topic: String,
    #[source]
    pub error: rdkafka::error::KafkaError,
}
