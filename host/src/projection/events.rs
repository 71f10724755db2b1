//! What projections receive: an outbox event decoded from the bus, checked and turned into the
//! `relation-event` projector plugins see.

use chrono::DateTime;

use crate::outbox::{ChangeEvent, EventId};
use crate::plugins::{Action, RelationEvent};

/// Why an event cannot be projected (a poison event: retrying will not help).
#[derive(Debug, thiserror::Error)]
#[error("event {event_id} cannot be projected: {detail}")]
pub struct Unprojectable {
    pub event_id: String,
    pub detail: String,
}

/// The projector's view of `event`.
pub fn relation_event(event: &ChangeEvent) -> Result<RelationEvent, Unprojectable> {
    let poison = |detail: String| Unprojectable { event_id: event.event_id.clone(), detail };
    let action = Action::from(event.event_type);
    let named = EventId { tenant: &event.tenant, from: event.from, to: event.to, version: event.version };
    if EventId::parse(&event.event_id) != Some(named) {
        return Err(poison(format!("its id does not name its own change ({named})")));
    }
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
        followed_back: event.followed_back,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::EventType;

    #[test]
    fn an_event_whose_id_names_another_change_is_poison() {
        let event = ChangeEvent {
            event_id: "acme:1:2:3".into(),
            event_type: EventType::Follow,
            tenant: "acme".into(),
            from: 1,
            to: 2,
            version: 3,
            occurred_at: "2026-12-01T00:00:00.000Z".into(),
            followed_back: false,
        };
        assert_eq!(relation_event(&event).unwrap().event_id, "acme:1:2:3");
        let replayed_as_another = ChangeEvent { version: 4, ..event };
        assert!(relation_event(&replayed_as_another).unwrap_err().detail.contains("acme:1:2:4"));
    }
}
