//! What projections receive: an outbox event decoded from the bus, checked and turned into the
//! `relation-event` projector plugins see.

use chrono::DateTime;

use crate::graph::OutboxEvent;
use crate::plugins::{Action, RelationEvent};

/// Why an event cannot be projected (a poison event: retrying will not help).
#[derive(Debug, thiserror::Error)]
#[error("event {event_id} cannot be projected: {detail}")]
pub struct Unprojectable {
    pub event_id: String,
    pub detail: String,
}

/// The projector's view of `event`.
pub fn relation_event(event: &OutboxEvent) -> Result<RelationEvent, Unprojectable> {
    let poison = |detail: String| Unprojectable { event_id: event.event_id.clone(), detail };
    let action = match event.event_type.as_str() {
        "follow" => Action::Follow,
        "unfollow" => Action::Unfollow,
        other => return Err(poison(format!("unknown event type {other:?}"))),
    };
    let occurred_at_ms = DateTime::parse_from_rfc3339(&event.occurred_at)
        .map_err(|e| poison(format!("occurred_at {:?}: {e}", event.occurred_at)))?
        .timestamp_millis();
    Ok(RelationEvent {
        event_id: event.event_id.clone(),
        tenant: event.tenant.clone(),
        action,
        follower: event.from,
        followee: event.to,
        version: event.version,
        occurred_at_ms,
    })
}
