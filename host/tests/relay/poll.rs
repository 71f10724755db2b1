//! Poll mode: every committed outbox row reaches the bus exactly once, in order per key, routed by the
//! tenant's router; nothing uncommitted, nothing skipped.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::Value;
use sqlx::Executor;
use strand::config::RelayMode;
use strand_test_support::{on_every_backend, wait_until, Backend, TestServer};

use super::{bus, concurrent_writers, outbox_insert};
use strand_test_support::outbox_rows;

on_every_backend!(every_committed_event_reaches_the_bus_once_in_order_per_key);

async fn every_committed_event_reaches_the_bus_once_in_order_per_key(backend: Backend) {
    let server = TestServer::start_with(backend, |c| {
        c.relay = RelayMode::Poll;
        c.relay_idle_ms = 10;
    })
    .await;
    let committed = concurrent_writers(&server).await;

    let topic = "strand.following";
    wait_until("every committed event is on the bus", Duration::from_secs(30), || async {
        bus(server.database(), topic).await.len() >= committed
    })
    .await;
    let delivered = bus(server.database(), topic).await;
    assert_eq!(delivered.len(), committed, "no event twice, none extra");
    assert_eq!(outbox_rows(server.database()).await.unwrap(), 0, "published rows are deleted");

    let ids: HashSet<_> = delivered.iter().map(|d| d.message.header("event-id").unwrap().to_owned()).collect();
    assert_eq!(ids.len(), committed, "event ids are unique");
    let mut last_version: HashMap<String, i64> = HashMap::new();
    for d in &delivered {
        let event: Value = serde_json::from_str(&d.message.payload).unwrap();
        assert_eq!(d.message.key, format!("acme:{}", event["from"]));
        assert_eq!(d.message.header("tenant"), Some("acme"));
        assert_eq!(d.message.header("router-version"), Some("0"));
        assert_eq!(d.message.header("version"), Some(event["version"].to_string().as_str()));
        let pair = format!("{}:{}", event["from"], event["to"]);
        let version = event["version"].as_i64().unwrap();
        let previous = last_version.insert(pair.clone(), version).unwrap_or(0);
        assert_eq!(version, previous + 1, "{pair}: versions arrive in order, without gaps");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_transaction_that_commits_after_later_ones_is_not_skipped() {
    let server = TestServer::start_with(Backend::MariaDb, |c| {
        c.relay = RelayMode::Poll;
        c.relay_idle_ms = 10;
    })
    .await;
    let mut long = server.database().writer().begin().await.unwrap();
    long.execute(outbox_insert("acme:9:10:1", 9, 10).as_str()).await.unwrap();
    for target in 2..=6 {
        server.client("acme", 1).follow(target).await;
    }
    wait_until("the later commits are relayed", Duration::from_secs(30), || async {
        bus(server.database(), "strand.following").await.len() == 5
    })
    .await;
    long.commit().await.unwrap();
    wait_until("the long transaction's event is relayed too", Duration::from_secs(30), || async {
        bus(server.database(), "strand.following")
            .await
            .iter()
            .any(|d| d.message.header("event-id") == Some("acme:9:10:1"))
    })
    .await;
    assert_eq!(outbox_rows(server.database()).await.unwrap(), 0);
}
