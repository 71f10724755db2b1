//! The bundled router: every event to the topic named after its aggregate type (`following`, published as
//! `strand.following` with the default prefix), keyed by `tenant:follower` so one user's actions stay in
//! order.

use strand_plugin_sdk::{export_router, Destination, OutboxEvent, Router};

pub struct ByAggregateType;

impl Router for ByAggregateType {
    fn route(event: &OutboxEvent) -> Vec<Destination> {
        vec![Destination { topic: event.aggregate_type.clone(), key: event.key.clone(), headers: Vec::new() }]
    }
}

export_router!(ByAggregateType);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_to_the_aggregate_topic_with_the_event_key() {
        let event = OutboxEvent {
            id: 1,
            aggregate_type: "following".into(),
            aggregate_id: "1:2".into(),
            event_type: "follow".into(),
            key: "acme:1".into(),
            payload: "{}".into(),
        };
        let routes = ByAggregateType::route(&event);
        assert_eq!(routes.len(), 1);
        assert_eq!((routes[0].topic.as_str(), routes[0].key.as_str()), ("following", "acme:1"));
    }
}
