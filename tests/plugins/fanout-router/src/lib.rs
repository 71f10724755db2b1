//! Follows go to `following` and to `audit`; user 13's events are dropped; user 666's make it trap; user
//! 777's make it spin until its deadline; user 778's go to a topic no Kafka broker accepts (a 200-byte name,
//! beyond Kafka's 249 once prefixed) besides `following`.

use strand_plugin_sdk::{export_router, Destination, OutboxEvent, Router};

pub struct Fanout;

impl Router for Fanout {
    fn route(event: &OutboxEvent) -> Vec<Destination> {
        let follower: i64 = event.aggregate_id.split(':').next().and_then(|id| id.parse().ok()).unwrap_or(0);
        let to = |topic: &str| Destination {
            topic: topic.into(),
            key: event.key.clone(),
            headers: vec![("routed-by".into(), "fanout".into())],
        };
        match follower {
            666 => panic!("fanout router traps on purpose"),
            777 => {
                let mut spins = 0u64;
                loop {
                    spins = std::hint::black_box(spins.wrapping_add(1));
                }
            }
            778 => vec![to("following"), to(&"refused".repeat(28))],
            13 => Vec::new(),
            _ if event.event_type == "follow" => vec![to("following"), to("audit")],
            _ => vec![to("following")],
        }
    }
}

export_router!(Fanout);
