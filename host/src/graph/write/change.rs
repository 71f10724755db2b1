//! What a follow or unfollow did, or why it did not: the same for every database.

use serde::Serialize;

/// What a follow or unfollow did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FollowChange {
    /// Whether `from` follows `to` after the call.
    pub following: bool,
    /// Whether the call changed the state (and so wrote an outbox event).
    pub changed: bool,
    /// The pair's version after the call (0 when the pair never existed).
    pub version: i64,
}

/// Why a write was refused or failed. Nothing is half-written in any case: the transaction rolls back.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("a user cannot follow themselves")]
    SelfFollow,
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
}
