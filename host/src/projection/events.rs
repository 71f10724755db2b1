//! What projections receive: an outbox event decoded from the bus, checked and turned into the relation
//! event the host hands projector plugins. Relation projectors (since `strand:plugin@0.3.0`) receive every kind;
//! the others see follows begin and end only (blocks, mutes and requests end or begin follows through
//! ordinary `follow` and `unfollow` events, so they stay exact) and are not called for the rest.

use chrono::DateTime;

use crate::outbox::ChangeEvent;
use crate::plugins::RelationEvent;

/// Why an event cannot be projected (a poison event: retrying will not help).
#[derive(Debug, thiserror::Error)]
#[error("event {event_id} cannot be projected: {detail}")]
pub struct Unprojectable {
    pub event_id: String,
    pub detail: String,
}

/// When `event` happened (epoch ms), once it is checked: its id must name its own change.
pub fn occurred_at_ms(event: &ChangeEvent) -> Result<i64, Unprojectable> {
    let named = event.named();
    if named.to_string() != event.event_id {
        return Err(poison(event, format!("its id does not name its own change ({named})")));
    }
    epoch_ms(event, "occurred_at", &event.occurred_at)
}

/// The projectors' view of `event`.
pub fn relation_event(event: &ChangeEvent) -> Result<RelationEvent, Unprojectable> {
    Ok(RelationEvent {
        event_id: event.event_id.clone(),
        tenant: event.tenant.clone(),
        kind: event.event_type.into(),
        follower: event.from,
        followee: event.to,
        version: event.version,
        occurred_at_ms: occurred_at_ms(event)?,
        followed_back: event.followed_back,
        actor: event.actor,
        expires_at_ms: event.expires_at.as_deref().map(|at| epoch_ms(event, "expires_at", at)).transpose()?,
        notifications: event.notifications.unwrap_or(false),
    })
}

/// `event`'s RFC 3339 `field` in epoch milliseconds.
fn epoch_ms(event: &ChangeEvent, field: &str, text: &str) -> Result<i64, Unprojectable> {
    DateTime::parse_from_rfc3339(text)
        .map(|at| at.timestamp_millis())
        .map_err(|e| poison(event, format!("{field} {text:?}: {e}")))
}

fn poison(event: &ChangeEvent, detail: String) -> Unprojectable {
    Unprojectable { event_id: event.event_id.clone(), detail }
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
            actor: None,
            expires_at: None,
            notifications: None,
        };
        assert_eq!(relation_event(&event).unwrap().event_id, "acme:1:2:3");
        let replayed_as_another = ChangeEvent { version: 4, ..event.clone() };
        assert!(relation_event(&replayed_as_another).unwrap_err().detail.contains("acme:1:2:4"));
        let a_block_named_as_a_follow = ChangeEvent { event_type: EventType::Block, ..event.clone() };
        assert!(relation_event(&a_block_named_as_a_follow).unwrap_err().detail.contains("acme:block:1:2:3"));
        let a_request = ChangeEvent { event_type: EventType::FollowRequested, ..event };
        assert_eq!(relation_event(&a_request).unwrap().action(), None);
    }
}
