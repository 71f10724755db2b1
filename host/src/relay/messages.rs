//! From a routed outbox event to the messages that are published, with the headers every consumer can
//! rely on: `event-id`, `tenant`, `event-type`, `version`, `router-version` (then the router's own, whose
//! names never repeat these: see `plugins::RESERVED_HEADERS`), on a topic of the tenant's own namespace.

use super::RelayError;
use crate::bus::{Message, Topology};
use crate::outbox::{ChangeEvent, OutboxRow};
use crate::plugins::Destination;

/// The messages for `event`, one per destination (none: the router dropped it).
pub fn to_messages(
    event: &OutboxRow,
    destinations: &[Destination],
    router_version: i64,
    topology: &Topology,
) -> Result<Vec<Message>, RelayError> {
    let payload: ChangeEvent = serde_json::from_str(&event.payload)
        .map_err(|e| RelayError::CorruptOutbox { id: event.id, detail: e.to_string() })?;
    Ok(destinations
        .iter()
        .map(|destination| {
            let mut headers = vec![
                ("event-id".to_owned(), payload.event_id.clone()),
                ("tenant".to_owned(), event.tenant.clone()),
                ("event-type".to_owned(), event.event_type.clone()),
                ("version".to_owned(), payload.version.to_string()),
                ("router-version".to_owned(), router_version.to_string()),
            ];
            headers.extend(destination.headers.iter().cloned());
            Message {
                topic: topology.tenant_topic(&event.tenant, &destination.topic),
                key: destination.key.clone(),
                headers,
                payload: event.payload.clone(),
            }
        })
        .collect())
}
