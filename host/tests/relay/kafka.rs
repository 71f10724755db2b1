//! The relay publishing to a real Kafka-protocol broker: every event, keyed by `tenant:follower`, one key
//! per partition in version order, with Strand's headers.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures::future::join_all;
use serde_json::Value;
use strand::config::RelayMode;
use strand_test_support::{on_every_backend, outbox_rows, wait_until, Backend, Kafka, TestServer};

on_every_backend!(follows_reach_kafka_keyed_and_in_order_per_key);

async fn follows_reach_kafka_keyed_and_in_order_per_key(backend: Backend) {
    relayed_to_kafka(backend, RelayMode::Poll).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn follows_reach_kafka_keyed_and_in_order_per_key_from_the_binlog() {
    relayed_to_kafka(Backend::MariaDb, RelayMode::Binlog).await
}

async fn relayed_to_kafka(backend: Backend, mode: RelayMode) {
    let kafka = Kafka::shared().unwrap();
    let prefix = kafka.unique_prefix();
    let server = TestServer::start_with(backend, |c| {
        c.kafka_brokers = Some(kafka.brokers());
        c.topic_prefix = prefix.clone();
        c.relay = mode;
        c.relay_idle_ms = 10;
    })
    .await;
    let writers = (1..=4).map(|user| {
        let client = server.client("acme", user);
        async move {
            for target in 10..15 {
                client.follow(target).await;
            }
            client.unfollow(10).await;
        }
    });
    join_all(writers).await;
    wait_until("the relay published and deleted every row", Duration::from_secs(60), || async {
        outbox_rows(server.database()).await.unwrap() == 0
    })
    .await;

    let topic = format!("{prefix}following");
    let received =
        tokio::task::spawn_blocking(move || kafka.read(&topic, 3, 24, Duration::from_secs(60))).await.unwrap();
    assert_eq!(received.len(), 24, "4 users × (5 follows + 1 unfollow)");
    let ids: HashSet<_> = received.iter().map(|m| m.header("event-id").unwrap().to_owned()).collect();
    assert_eq!(ids.len(), 24, "no duplicates in a clean run");

    let mut partition_of_key: HashMap<String, i32> = HashMap::new();
    let mut by_key: HashMap<String, Vec<(i64, Value)>> = HashMap::new();
    for m in &received {
        assert_eq!(
            *partition_of_key.entry(m.key.clone()).or_insert(m.partition),
            m.partition,
            "one key, one partition"
        );
        assert_eq!(m.header("tenant"), Some("acme"));
        let event: Value = serde_json::from_str(&m.payload).unwrap();
        assert_eq!(m.key, format!("acme:{}", event["from"]));
        assert_eq!(m.header("version"), Some(event["version"].to_string().as_str()));
        by_key.entry(m.key.clone()).or_default().push((m.offset, event));
    }
    for (key, mut events) in by_key {
        events.sort_by_key(|(offset, _)| *offset);
        let unfollow_at = events.iter().position(|(_, e)| e["type"] == "unfollow").unwrap();
        let follow_of_10 = events.iter().position(|(_, e)| e["type"] == "follow" && e["to"] == 10).unwrap();
        assert!(follow_of_10 < unfollow_at, "{key}: the follow of 10 precedes its unfollow");
    }
}
