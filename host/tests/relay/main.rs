//! The relay and the embedded bus against real databases.

mod binlog;
mod bus;
mod faults;
mod kafka;
mod leader;
mod poll;
mod routing;

use strand::bus::{Delivered, EmbeddedBus};
use strand::graph::Database;

/// Everything on the embedded bus's `topic`.
async fn bus(db: &Database, topic: &str) -> Vec<Delivered> {
    EmbeddedBus::new(db.clone()).read(topic, 0, 100_000).await.expect("reading the bus")
}

/// Rows still in the outbox: 0 once the relay has published (and removed) everything.
async fn outbox_rows(db: &Database) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM outbox").fetch_one(db.reader()).await.unwrap()
}
