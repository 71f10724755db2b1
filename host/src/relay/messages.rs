//! From a routed outbox event to the messages that are published, with the headers every consumer can
//! rely on (`bus::Header`): `event-id`, `tenant`, `event-type`, `version`, `router-version` (then the
//! router's own, whose names never repeat these), and `traceparent` when the change was traced, on a topic
//! of the tenant's own namespace.

use std::collections::HashMap;

use tracing::Span;

use crate::bus::{Header, Message, Topology};
use crate::ops::telemetry::{self, TARGET};
use crate::outbox::OutboxRow;
use crate::plugins::Destination;

/// The `relay.publish` span of each traced row of `rows` (continuing the trace its change began), by the
/// row's index: open from routing until the bus has the messages. Empty with tracing off.
pub fn publish_spans(rows: &[OutboxRow]) -> HashMap<usize, Span> {
    if !telemetry::enabled() {
        return HashMap::new();
    }
    let traced = rows.iter().enumerate().filter_map(|(index, row)| Some((index, row, row.traceparent.as_deref()?)));
    traced
        .map(|(index, row, traceparent)| {
            let span = tracing::info_span!(target: TARGET, "relay.publish", tenant = %row.tenant, outbox.id = row.id);
            telemetry::continue_trace(&span, traceparent);
            (index, span)
        })
        .collect()
}

/// The messages for `event`, one per destination (none: the router dropped it); `published_in` is its
/// `relay.publish` span, whose trace they carry on.
pub fn to_messages(
    event: &OutboxRow,
    destinations: &[Destination],
    router_version: i64,
    topology: &Topology,
    published_in: Option<&Span>,
) -> Vec<Message> {
    let traceparent = published_in.and_then(telemetry::traceparent_of);
    let payload = &event.change;
    destinations
        .iter()
        .map(|destination| {
            let mut headers = vec![
                (Header::EventId.to_string(), payload.event_id.clone()),
                (Header::Tenant.to_string(), event.tenant.to_string()),
                (Header::EventType.to_string(), event.event_type.to_string()),
                (Header::Version.to_string(), payload.version.to_string()),
                (Header::RouterVersion.to_string(), router_version.to_string()),
            ];
            headers.extend(traceparent.iter().map(|t| (Header::Traceparent.to_string(), t.clone())));
            headers.extend(destination.headers.iter().cloned());
            Message {
                topic: topology.tenant_topic(event.tenant.as_str(), &destination.topic),
                key: destination.key.clone(),
                headers,
                payload: event.payload.clone(),
            }
        })
        .collect()
}
