//! What projections receive: an outbox event decoded from the bus, checked and turned into the
//! `relation-event` projector plugins see. Projectors built against `strand:plugin@0.2.0` or earlier see
//! follows begin and end only (blocks, mutes and requests end or begin follows through ordinary `follow` and
//! `unfollow` events, so they stay exact).

use chrono::DateTime;

use crate::outbox::ChangeEvent;
use crate::outbox::EventType;
use crate::plugins::{Action, RelationEvent};

/// Why an event cannot be projected (a poison event: retrying will not help).
#[derive(Debug, thiserror::Error)]
#[error("event {event_id} cannot be projected: {detail}")]
pub struct Unprojectable {
    pub event_id: String,
    pub detail: String,
}

/// When `event` happened (epoch ms), once it is checked: its id must name its own change.
pub fn occurred_at_ms(event: &ChangeEvent) -> Result<i64, Unprojectable> {
    let poison = |detail: String| Unprojectable { event_id: event.event_id.clone(), detail };
    let named = event.named();
    if named.to_string() != event.event_id {
        return Err(poison(format!("its id does not name its own change ({named})")));
    }
    Ok(DateTime::parse_from_rfc3339(&event.occurred_at)
        .map_err(|e| poison(format!("occurred_at {:?}: {e}", event.occurred_at)))?
        .timestamp_millis())
}

/// The projector's view of `event`; `None` for an event projectors do not receive (not a follow's beginning
/// or end).
pub fn relation_event(event: &ChangeEvent) -> Result<Option<RelationEvent>, Unprojectable> {
    let occurred_at_ms = occurred_at_ms(event)?;
    let action = match event.event_type {
        EventType::Follow => Action::Follow,
        EventType::Unfollow => Action::Unfollow,
        _ => return Ok(None),
    };
    Ok(Some(RelationEvent {
        event_id: event.event_id.clone(),
        tenant: event.tenant.clone(),
        action,
        follower: event.from,
        followee: event.to,
        version: event.version,
        occurred_at_ms,
        followed_back: event.followed_back,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

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
            actor: None,
            expires_at: None,
            notifications: None,
        };
        assert_eq!(relation_event(&event).unwrap().unwrap().event_id, "acme:1:2:3");
        let replayed_as_another = ChangeEvent { version: 4, ..event.clone() };
        assert!(relation_event(&replayed_as_another).unwrap_err().detail.contains("acme:1:2:4"));
        let a_block_named_as_a_follow = ChangeEvent { event_type: EventType::Block, ..event.clone() };
        assert!(relation_event(&a_block_named_as_a_follow).unwrap_err().detail.contains("acme:block:1:2:3"));
        let a_request = ChangeEvent { event_type: EventType::FollowRequested, ..event };
        assert_eq!(relation_event(&a_request).unwrap(), None);
    }
}
