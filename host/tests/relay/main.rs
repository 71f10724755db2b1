//! The relay and the embedded bus against real databases.

mod binlog;
mod bus;
mod failover;
mod faults;
mod kafka;
mod leader;
mod poll;
mod routing;

use futures::future::join_all;
use strand::bus::{Delivered, EmbeddedBus};
use strand::db::Database;
use strand_test_support::TestServer;

/// Everything on the embedded bus's `topic`.
async fn bus(db: &Database, topic: &str) -> Vec<Delivered> {
    EmbeddedBus::new(db.clone()).read(topic, 0, 100_000).await.expect("reading the bus")
}

/// 8 users following and unfollowing concurrently over HTTP; returns how many calls changed something
/// (each committed one outbox row).
async fn concurrent_writers(server: &TestServer) -> usize {
    let writers = (1..=8).map(|user| {
        let client = server.client("acme", user);
        async move {
            let mut changes = 0;
            for i in 0..20 {
                let target = 100 + i % 3;
                let reply = if i % 2 == 0 { client.follow(target).await } else { client.unfollow(target).await };
                changes += usize::from(reply["changed"] == true);
            }
            changes
        }
    });
    join_all(writers).await.into_iter().sum()
}

/// An outbox insert of a hand-made event, as a transaction of the write path would write it.
fn outbox_insert(event_id: &str, from: i64, to: i64) -> String {
    format!(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, event_key, payload, created_at) \
         VALUES ('acme', 'following', '{from}:{to}', 'follow', 'acme:{from}', \
         '{{\"event_id\":\"{event_id}\",\"type\":\"follow\",\"tenant\":\"acme\",\"from\":{from},\"to\":{to},\"version\":1,\"occurred_at\":\"2026-01-01T00:00:00.000Z\"}}', 0)"
    )
}
