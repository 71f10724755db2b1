//! The outbox: the event a real change of a pair commits with it, in the same transaction, for the relay
//! to publish. What the row holds and how the bus carries it are decided here.

mod event_id;
mod row;

use serde::Serialize;

pub use event_id::EventId;
pub use row::{OutboxRow, OUTBOX_COLUMNS};

/// The aggregate type of follow events; the relay's default topic is derived from it (`strand.following`).
pub const AGGREGATE_TYPE: &str = "following";

crate::str_enum! {
    /// What a change did to its pair, as the outbox's `event_type` column, the payload's `type` and the
    /// bus's `event-type` header spell it (any other name is refused, never taken for an unfollow).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum EventType("event type") {
        Follow = "follow",
        Unfollow = "unfollow",
    }
}

/// The event written to the outbox on every real change; consumers dedupe and order by it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ChangeEvent {
    /// [`EventId`]: `tenant:from:to:version`, one change forever.
    pub event_id: String,
    #[serde(rename = "type")]
    pub event_type: EventType,
    pub tenant: String,
    pub from: i64,
    pub to: i64,
    pub version: i64,
    /// RFC 3339, milliseconds, UTC.
    pub occurred_at: String,
    /// Whether `to` followed `from` when this change committed (read under lock in the change's
    /// transaction): a follow with it starts a mutual follow, an unfollow with it ends one. Events written
    /// before it existed read as `false`.
    #[serde(default)]
    pub followed_back: bool,
}

impl ChangeEvent {
    /// The outbox row's `aggregate_id`: `from:to`.
    pub fn aggregate_id(&self) -> String {
        format!("{}:{}", self.from, self.to)
    }

    /// The message key: one user's actions share it, so the bus keeps them in order.
    pub fn key(&self) -> String {
        format!("{}:{}", self.tenant, self.from)
    }

    /// The outbox row's `payload`: the event as JSON.
    pub fn payload(&self) -> String {
        serde_json::to_string(self).expect("an ChangeEvent always serialises")
    }
}
