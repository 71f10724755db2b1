//! What a follow or unfollow asks, what it did, or why it did not: the same for every database.

use serde::Serialize;

use crate::graph::ids::{TenantId, UserId};
use crate::outbox::{ChangeEvent, EventId, EventType};
use crate::util::time::{now_ms, rfc3339_millis};

/// One follow or unfollow of `to` by `from`, as the write path carries it from the API to the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowCommand<'a> {
    pub tenant: &'a TenantId,
    pub from: UserId,
    pub to: UserId,
    /// Follow or unfollow.
    pub event: EventType,
    /// When it happens (epoch ms): the time the pair records and lists are ordered by.
    pub at_ms: i64,
}

impl<'a> FollowCommand<'a> {
    /// `from` follows `to`, now.
    pub fn follow(tenant: &'a TenantId, from: UserId, to: UserId) -> Self {
        Self { tenant, from, to, event: EventType::Follow, at_ms: now_ms() }
    }

    /// `from` stops following `to`, now.
    pub fn unfollow(tenant: &'a TenantId, from: UserId, to: UserId) -> Self {
        Self { event: EventType::Unfollow, ..Self::follow(tenant, from, to) }
    }

    /// Whether it asks for a follow.
    pub fn follows(&self) -> bool {
        self.event == EventType::Follow
    }

    /// The outbox event of this command when it really changed its pair to `version`; `followed_back`:
    /// whether `to` followed `from` then.
    pub(super) fn change_event(&self, version: i64, followed_back: bool) -> ChangeEvent {
        let (tenant, from, to) = (self.tenant.as_str(), self.from.get(), self.to.get());
        ChangeEvent {
            event_id: EventId { tenant, from, to, version }.to_string(),
            event_type: self.event,
            tenant: tenant.to_owned(),
            from,
            to,
            version,
            occurred_at: rfc3339_millis(self.at_ms),
            followed_back,
        }
    }
}

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
