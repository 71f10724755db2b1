//! What the host hands a plugin: each input as the host knows it — with its tenant and, for a relation
//! event, its id — and as the current WIT receives it. From `strand:plugin@0.2.0` on, a batch's tenant
//! crosses the boundary once and an event's id not at all (the host derives both), so the inputs a
//! projector gets are plain scalars: one copy into the guest's memory, no allocation per field.

use serde::{Deserialize, Serialize};

use super::bindings::{wire, Action};
use super::error::PluginError;
use crate::outbox::{EventType, OutboxRow};

/// A follow or unfollow about to be written, for the rate-limit policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriteRequest {
    pub tenant: String,
    /// The caller (the follower).
    pub user: i64,
    pub action: Action,
    pub target: i64,
    /// Host time, epoch milliseconds.
    pub now_ms: i64,
}

/// A follow about to be written, for the relation policy (what `wit/strand.wit` says of each field).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FollowAttempt {
    pub tenant: String,
    pub follower: i64,
    pub target: i64,
    pub followed_back: bool,
    pub target_private: bool,
    pub follower_followings: i64,
    pub follower_followers: i64,
    pub target_followers: i64,
    pub now_ms: i64,
}

/// A relation change, for projectors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RelationEvent {
    /// `tenant:follower:followee:version`: the cache dedupes by it.
    pub event_id: String,
    pub tenant: String,
    pub action: Action,
    pub follower: i64,
    pub followee: i64,
    pub version: i64,
    pub occurred_at_ms: i64,
    /// Whether the followee followed the follower at commit time (absent in events written before 0.2.0).
    #[serde(default)]
    pub followed_back: bool,
}

/// One of the three inputs: what every batch shares and how a log line names one of them.
pub trait Input {
    fn tenant(&self) -> &str;
    /// What a log line about this input carries as its `input` (an event id, an outbox id, the pair).
    fn id(&self) -> String;
}

impl Input for WriteRequest {
    fn tenant(&self) -> &str {
        &self.tenant
    }
    fn id(&self) -> String {
        format!("{}->{}", self.user, self.target)
    }
}

impl Input for FollowAttempt {
    fn tenant(&self) -> &str {
        &self.tenant
    }
    fn id(&self) -> String {
        format!("{}->{}", self.follower, self.target)
    }
}

impl Input for OutboxRow {
    fn tenant(&self) -> &str {
        &self.tenant
    }
    fn id(&self) -> String {
        format!("outbox:{}", self.id)
    }
}

impl Input for RelationEvent {
    fn tenant(&self) -> &str {
        &self.tenant
    }
    fn id(&self) -> String {
        self.event_id.clone()
    }
}

/// The one tenant of a batch: a call passes it once, so a batch mixing tenants is the host's bug.
pub fn batch_tenant<I: Input>(inputs: &[I]) -> Result<&str, PluginError> {
    let tenant = inputs.first().map_or("", Input::tenant);
    match inputs.iter().find(|i| i.tenant() != tenant) {
        None => Ok(tenant),
        Some(other) => Err(PluginError::host(
            "calling the plugin",
            format!("one batch holds tenants {tenant:?} and {:?}", other.tenant()),
        )),
    }
}

impl From<&WriteRequest> for wire::WriteRequest {
    fn from(r: &WriteRequest) -> Self {
        Self { user: r.user, action: r.action, target: r.target, now_ms: r.now_ms }
    }
}

impl From<&FollowAttempt> for wire::FollowAttempt {
    fn from(a: &FollowAttempt) -> Self {
        Self {
            follower: a.follower,
            target: a.target,
            followed_back: a.followed_back,
            target_private: a.target_private,
            follower_followings: a.follower_followings,
            follower_followers: a.follower_followers,
            target_followers: a.target_followers,
            now_ms: a.now_ms,
        }
    }
}

impl From<&OutboxRow> for wire::OutboxEvent {
    fn from(e: &OutboxRow) -> Self {
        Self {
            id: e.id,
            aggregate_type: e.aggregate_type.clone(),
            aggregate_id: e.aggregate_id.clone(),
            event_type: e.event_type.clone(),
            key: e.key.clone(),
            payload: e.payload.clone(),
        }
    }
}

impl From<&RelationEvent> for wire::RelationEvent {
    fn from(e: &RelationEvent) -> Self {
        Self {
            action: e.action,
            follower: e.follower,
            followee: e.followee,
            version: e.version,
            occurred_at_ms: e.occurred_at_ms,
            followed_back: e.followed_back,
        }
    }
}

/// What a plugin's action records as an event.
impl From<Action> for EventType {
    fn from(action: Action) -> Self {
        match action {
            Action::Follow => EventType::Follow,
            Action::Unfollow => EventType::Unfollow,
        }
    }
}
