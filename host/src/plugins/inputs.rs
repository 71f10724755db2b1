//! What the host hands a plugin: each input as the host knows it — with its tenant and, for a relation
//! event, its id — and as the current WIT receives it. From `strand:plugin@0.2.0` on, a batch's tenant
//! crosses the boundary once and an event's id not at all (the host derives both), so the inputs a
//! projector gets are plain scalars: one copy into the guest's memory, no allocation per field.

use serde::{Deserialize, Serialize};

use super::bindings::{wire, Action, RelationKind, WriteKind};
use super::error::PluginError;
use crate::outbox::{ChangeEvent, EventType, OutboxRow, Relation};
use crate::util::time::rfc3339_millis;

/// A relation write about to be done, for the rate-limit policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriteRequest {
    pub tenant: String,
    /// The caller (the follower, blocker, muter…).
    pub user: i64,
    /// Which write (requests written before 0.4.0 name only `action`, a follow or an unfollow).
    #[serde(alias = "action")]
    pub write: WriteKind,
    pub target: i64,
    /// Host time, epoch milliseconds.
    pub now_ms: i64,
}

/// Every write's kind with its name (the samples table's, the README's, `strand plugin test`'s).
pub const WRITE_KINDS: [(WriteKind, &str); 10] = [
    (WriteKind::Follow, "follow"),
    (WriteKind::Unfollow, "unfollow"),
    (WriteKind::Authorize, "authorize"),
    (WriteKind::Reject, "reject"),
    (WriteKind::RemoveFollower, "remove-follower"),
    (WriteKind::Block, "block"),
    (WriteKind::Unblock, "unblock"),
    (WriteKind::Mute, "mute"),
    (WriteKind::Unmute, "unmute"),
    (WriteKind::Settings, "settings"),
];

/// `write`'s name in [`WRITE_KINDS`].
pub fn write_kind_name(write: WriteKind) -> &'static str {
    WRITE_KINDS.iter().find(|(kind, _)| *kind == write).map_or("follow", |(_, name)| name)
}

impl WriteRequest {
    /// What a limiter that knows only follows and unfollows (before 0.4.0) is asked this write as — the
    /// README's table: a write that makes a relation begin or change is a follow, one that ends one an
    /// unfollow (the bundled policy charges by it).
    pub fn action(&self) -> Action {
        match self.write {
            WriteKind::Follow | WriteKind::Authorize | WriteKind::Block | WriteKind::Mute | WriteKind::Settings => {
                Action::Follow
            }
            WriteKind::Unfollow
            | WriteKind::Reject
            | WriteKind::RemoveFollower
            | WriteKind::Unblock
            | WriteKind::Unmute => Action::Unfollow,
        }
    }
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

/// A relation change, for projectors: every kind for a relation projector, follows beginning and ending
/// for the others ([`RelationEvent::action`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RelationEvent {
    /// [`crate::outbox::EventId`]: the cache dedupes by it.
    pub event_id: String,
    pub tenant: String,
    /// What the change did (inputs written before 0.3.0 call it `action`).
    #[serde(alias = "action")]
    pub kind: RelationKind,
    /// The edge's owner: the follower (or requester), the blocker, the muter.
    pub follower: i64,
    /// Whom the edge points at: the followee, the blocked, the muted.
    pub followee: i64,
    pub version: i64,
    pub occurred_at_ms: i64,
    /// Whether the followee followed the follower at commit time (absent in events written before 0.2.0).
    #[serde(default)]
    pub followed_back: bool,
    /// Who acted, when not `follower` (see `wit/strand.wit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<i64>,
    /// A mute's end, epoch ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    /// A mute's notifications flag.
    #[serde(default)]
    pub notifications: bool,
}

impl RelationEvent {
    /// A follow beginning or ending, as projectors that see only those receive it; `None` for the other
    /// kinds.
    pub fn action(&self) -> Option<Action> {
        match self.kind {
            RelationKind::Follow => Some(Action::Follow),
            RelationKind::Unfollow => Some(Action::Unfollow),
            _ => None,
        }
    }

    /// The edge it changes (each has its own versions).
    pub fn relation(&self) -> Relation {
        EventType::from(self.kind).relation()
    }

    /// Whether it leaves its edge without a relation (a follow or request ended, a block or mute lifted): in
    /// a backfill, such a pair's snapshot only raises its floors.
    pub fn ends_edge(&self) -> bool {
        !matches!(
            self.kind,
            RelationKind::Follow | RelationKind::FollowRequested | RelationKind::Block | RelationKind::Mute
        )
    }
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
        self.tenant.as_str()
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
        Self { user: r.user, action: r.action(), write: r.write, target: r.target, now_ms: r.now_ms }
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
            event_type: e.event_type.to_string(),
            key: e.key.clone(),
            payload: e.payload.clone(),
        }
    }
}

impl From<&RelationEvent> for Option<wire::RelationEvent> {
    fn from(e: &RelationEvent) -> Self {
        Some(wire::RelationEvent {
            action: e.action()?,
            follower: e.follower,
            followee: e.followee,
            version: e.version,
            occurred_at_ms: e.occurred_at_ms,
            followed_back: e.followed_back,
        })
    }
}

impl From<&RelationEvent> for wire::RelationChange {
    fn from(e: &RelationEvent) -> Self {
        Self {
            kind: e.kind,
            from: e.follower,
            to: e.followee,
            actor: e.actor.unwrap_or(e.follower),
            version: e.version,
            occurred_at_ms: e.occurred_at_ms,
            followed_back: e.followed_back,
            expires_at_ms: e.expires_at_ms,
            notifications: e.notifications,
        }
    }
}

/// The bus event a relation event was made from (`projection::relation_event`'s inverse).
impl From<&RelationEvent> for ChangeEvent {
    fn from(e: &RelationEvent) -> Self {
        ChangeEvent {
            event_id: e.event_id.clone(),
            event_type: e.kind.into(),
            tenant: e.tenant.clone(),
            from: e.follower,
            to: e.followee,
            version: e.version,
            occurred_at: rfc3339_millis(e.occurred_at_ms),
            followed_back: e.followed_back,
            actor: e.actor,
            expires_at: e.expires_at_ms.map(rfc3339_millis),
            notifications: (e.kind == RelationKind::Mute).then_some(e.notifications),
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

/// A follow's beginning or end as a relation kind.
impl From<Action> for RelationKind {
    fn from(action: Action) -> Self {
        match action {
            Action::Follow => RelationKind::Follow,
            Action::Unfollow => RelationKind::Unfollow,
        }
    }
}

/// The outbox's name of each kind, one to one.
impl From<RelationKind> for EventType {
    fn from(kind: RelationKind) -> Self {
        match kind {
            RelationKind::Follow => EventType::Follow,
            RelationKind::Unfollow => EventType::Unfollow,
            RelationKind::FollowRequested => EventType::FollowRequested,
            RelationKind::FollowRequestWithdrawn => EventType::FollowRequestWithdrawn,
            RelationKind::FollowRequestRejected => EventType::FollowRequestRejected,
            RelationKind::Block => EventType::Block,
            RelationKind::Unblock => EventType::Unblock,
            RelationKind::Mute => EventType::Mute,
            RelationKind::Unmute => EventType::Unmute,
        }
    }
}

impl From<EventType> for RelationKind {
    fn from(event_type: EventType) -> Self {
        match event_type {
            EventType::Follow => RelationKind::Follow,
            EventType::Unfollow => RelationKind::Unfollow,
            EventType::FollowRequested => RelationKind::FollowRequested,
            EventType::FollowRequestWithdrawn => RelationKind::FollowRequestWithdrawn,
            EventType::FollowRequestRejected => RelationKind::FollowRequestRejected,
            EventType::Block => RelationKind::Block,
            EventType::Unblock => RelationKind::Unblock,
            EventType::Mute => RelationKind::Mute,
            EventType::Unmute => RelationKind::Unmute,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_type_is_one_kind_and_back() {
        for &event_type in EventType::ALL {
            assert_eq!(EventType::from(RelationKind::from(event_type)), event_type);
        }
    }
}
