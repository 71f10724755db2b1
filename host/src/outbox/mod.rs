//! The outbox: the event a real change of a pair commits with it, in the same transaction, for the relay
//! to publish. What the row holds and how the bus carries it are decided here.

mod event_id;
mod row;

use serde::Serialize;

use crate::db::DatabaseKind;

pub use event_id::EventId;
pub use row::{CorruptRow, OutboxRow, StoredRow, OUTBOX_COLUMNS};

/// The aggregate type of follow events; the relay's default topic is derived from it (`strand.following`).
pub const AGGREGATE_TYPE: &str = "following";

crate::str_enum! {
    /// What a change did to its edge, as the outbox's `event_type` column, the payload's `type` and the
    /// bus's `event-type` header spell it (any other name is refused, never taken for an unfollow).
    ///
    /// A follow that begins or ends is always `follow` or `unfollow`, whoever acted (an authorized request,
    /// a removed follower, a block): projectors that count follows stay exact without knowing why.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum EventType("event type") {
        /// `from` follows `to` from now on (directly, or its request was authorized: `actor` is `to`).
        Follow = "follow",
        /// `from` no longer follows `to` (it unfollowed, `to` removed it, or a block ended the follow).
        Unfollow = "unfollow",
        /// A follow of a private account, pending its approval (not a follow: not counted, not listed).
        FollowRequested = "follow_requested",
        /// The requester withdrew a pending request (or blocked its target).
        FollowRequestWithdrawn = "follow_request_withdrawn",
        /// The target rejected a pending request (or blocked the requester).
        FollowRequestRejected = "follow_request_rejected",
        /// `from` blocks `to` (the block's own event; the follows and requests it ended have theirs).
        Block = "block",
        /// `from` no longer blocks `to`; nothing the block ended comes back.
        Unblock = "unblock",
        /// A mute began or changed (its end or notifications flag).
        Mute = "mute",
        /// `from` no longer mutes `to` (asked, or the mute reached its end).
        Unmute = "unmute",
    }
}

crate::str_enum! {
    /// Which kind of edge an event changes: each has its own table and its own version per pair.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Relation("relation") {
        Follow = "follow",
        Block = "block",
        Mute = "mute",
    }
}

impl EventType {
    /// The edge it changes.
    pub fn relation(self) -> Relation {
        match self {
            EventType::Block | EventType::Unblock => Relation::Block,
            EventType::Mute | EventType::Unmute => Relation::Mute,
            _ => Relation::Follow,
        }
    }
}

/// The event written to the outbox on every real change; consumers dedupe and order by it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ChangeEvent {
    /// [`EventId`]: `tenant:from:to:version` for a follow's pair (requests included),
    /// `tenant:block:from:to:version` and `tenant:mute:from:to:version` for the others; one change forever.
    pub event_id: String,
    /// What the change did: one of the event types.
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// The tenant (app) whose graph changed.
    pub tenant: String,
    /// The edge's subject: the follower, blocker, muter or requester.
    pub from: i64,
    /// The edge's object: the one followed, blocked, muted or asked.
    pub to: i64,
    /// The edge's version after this change: each change of one edge (`from`, `to` and its relation)
    /// counts one up, so a consumer keeps the highest it has seen and drops older ones.
    pub version: i64,
    /// RFC 3339, milliseconds, UTC.
    pub occurred_at: String,
    /// Whether `to` followed `from` when this change committed (read under lock in the change's
    /// transaction): a follow with it starts a mutual follow, an unfollow with it ends one. Events written
    /// before it existed read as `false`.
    #[serde(default)]
    pub followed_back: bool,
    /// Who acted: `from`, or `to` when the target authorized or rejected a request or removed a follower,
    /// or the blocker when a block ended this edge. Events written before it existed read as `None` (`from`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<i64>,
    /// A mute's end (RFC 3339); only on `mute` events of a mute that ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// A mute's notifications flag; only on `mute` events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notifications: Option<bool>,
}

/// What a [`ChangeEvent`] tells, by name: eight facts of one edge's change, two of them ids that a
/// positional call could swap unseen.
#[derive(Debug, Clone, Copy)]
pub struct Changed<'a> {
    pub tenant: &'a str,
    pub event_type: EventType,
    pub from: i64,
    pub to: i64,
    /// The edge's version after the change.
    pub version: i64,
    pub at_ms: i64,
    /// Whether `to` follows `from` (a follow's or an unfollow's "mutual").
    pub followed_back: bool,
    /// Who made the change: `from`, `to` (removing a follower, answering a request) or an account job's account.
    pub actor: i64,
}

impl ChangeEvent {
    /// The event of `changed`, named by its [`EventId`]. A mute's end and flag are set by the caller.
    pub fn new(changed: Changed<'_>) -> Self {
        let Changed { tenant, event_type, from, to, version, at_ms, followed_back, actor } = changed;
        let mut event = ChangeEvent {
            event_id: String::new(),
            event_type,
            tenant: tenant.to_owned(),
            from,
            to,
            version,
            occurred_at: crate::util::time::rfc3339_millis(at_ms),
            followed_back,
            actor: Some(actor),
            expires_at: None,
            notifications: None,
        };
        event.event_id = event.named().to_string();
        event
    }

    /// The outbox row's `aggregate_id`: `from:to` for a follow's pair, `block:from:to`, `mute:from:to`.
    pub fn aggregate_id(&self) -> String {
        match self.event_type.relation() {
            Relation::Follow => format!("{}:{}", self.from, self.to),
            other => format!("{other}:{}:{}", self.from, self.to),
        }
    }

    /// Its [`EventId`] as its fields say (a consumer checks that `event_id` names the same change).
    pub fn named(&self) -> EventId<'_> {
        EventId {
            tenant: &self.tenant,
            relation: self.event_type.relation(),
            from: self.from,
            to: self.to,
            version: self.version,
        }
    }

    /// The message key: one user's actions share it, so the bus keeps them in order.
    pub fn key(&self) -> String {
        format!("{}:{}", self.tenant, self.from)
    }

    /// The outbox row's `payload`: the event as JSON.
    pub fn payload(&self) -> String {
        serde_json::to_string(self).expect("a ChangeEvent always serialises")
    }
}

/// The statement writing `events`' outbox rows at `at_ms` (one multi-row insert; nothing when there are none),
/// with literal values so it runs in one round trip beside the changes it records (the payload as a hex
/// literal, the tenant checked when it was parsed: nothing a caller sent is parsed as SQL). Each row keeps
/// the current trace's `traceparent` when it is sampled (formatted by the host, never a caller's text).
pub fn insert(kind: DatabaseKind, events: &[&ChangeEvent], at_ms: i64) -> String {
    if events.is_empty() {
        return String::new();
    }
    let traceparent = crate::ops::telemetry::current_traceparent().map_or("NULL".to_owned(), |t| format!("'{t}'"));
    let rows: Vec<String> = events
        .iter()
        .map(|event| {
            format!(
                "('{}', '{AGGREGATE_TYPE}', '{}', '{}', '{}', {}, {at_ms}, {traceparent})",
                event.tenant,
                event.aggregate_id(),
                event.event_type.as_str(),
                event.key(),
                kind.text_literal(&hex::encode(event.payload())),
            )
        })
        .collect();
    format!(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, event_key, payload, created_at, \
         traceparent) VALUES {};",
        rows.join(", ")
    )
}
