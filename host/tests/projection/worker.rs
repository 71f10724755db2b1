//! The follower worker keeps the `follower` table equal to the truth from the bus — the embedded bus or a
//! Kafka consumer group — across restarts, and sends what it cannot apply to the dead-letter topic.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::future::join_all;
use strand::bus::{EmbeddedBus, Message};
use strand::config::RelayMode;
use strand::graph::Database;
use strand_test_support::{on_every_backend, wait_until, Backend, Kafka, TestServer};

on_every_backend!(the_worker_keeps_the_follower_table_equal_to_the_truth_across_restarts);

/// Every pair as (follower, followee, status, version) in `table` (`following` or `follower`).
async fn pairs(db: &Database, table: &str) -> BTreeSet<(i64, i64, i64, i64)> {
    let sql = format!("SELECT from_user_id, to_user_id, rel_status, version FROM {table}");
    sqlx::query_as(&sql).fetch_all(db.reader()).await.unwrap().into_iter().collect()
}

async fn projected(db: &Database) -> bool {
    pairs(db, "follower").await == pairs(db, "following").await
}

/// Users 1..=6 following and unfollowing each other concurrently over HTTP.
async fn storm(server: &TestServer, round: i64) {
    let writers = (1..=6).map(|user| {
        let client = server.client("acme", user);
        async move {
            for i in 0..15 {
                let target = 1 + (user + i + round) % 6;
                if target != user {
                    if (i + round) % 3 == 2 {
                        client.unfollow(target).await
                    } else {
                        client.follow(target).await
                    };
                }
            }
        }
    });
    join_all(writers).await;
}

async fn the_worker_keeps_the_follower_table_equal_to_the_truth_across_restarts(backend: Backend) {
    let mut server = TestServer::start_with(backend, |c| {
        c.relay = RelayMode::Poll;
        c.relay_idle_ms = 10;
        c.workers = true;
    })
    .await;
    for round in 0..3 {
        storm(&server, round).await;
        wait_until("the follower table equals the truth", Duration::from_secs(30), || projected(server.database()))
            .await;
        // A restart resumes from the committed position: nothing is applied twice or missed.
        server = server.restart().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_group_on_kafka_projects_the_binlog_relays_events() {
    let kafka = Kafka::shared().unwrap();
    let prefix = kafka.unique_prefix();
    let mut server = TestServer::start_with(Backend::MariaDb, |c| {
        c.relay = RelayMode::Binlog;
        c.kafka_brokers = Some(kafka.brokers());
        c.topic_prefix = prefix.clone();
        c.workers = true;
    })
    .await;
    for round in 0..2 {
        storm(&server, round).await;
        wait_until("the follower table equals the truth", Duration::from_secs(90), || projected(server.database()))
            .await;
        server = server.restart().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_undecodable_event_goes_to_the_dead_letter_topic_and_the_rest_proceeds() {
    let server = TestServer::start_with(Backend::Sqlite, |c| {
        c.relay = RelayMode::Poll;
        c.relay_idle_ms = 10;
        c.workers = true;
    })
    .await;
    server.client("acme", 1).follow(2).await;
    let bus = EmbeddedBus::new(server.database().clone());
    let garbage = Message {
        topic: "strand.following".into(),
        key: "acme:9".into(),
        headers: vec![("event-id".into(), "acme:9:10:1".into())],
        payload: "{not json".into(),
    };
    wait_until("the first follow is on the bus", Duration::from_secs(30), || async {
        !bus.read("strand.following", 0, 10).await.unwrap().is_empty()
    })
    .await;
    bus.append_alone(&[garbage]).await.unwrap();
    server.client("acme", 2).follow(1).await;

    wait_until("the valid events are projected", Duration::from_secs(30), || projected(server.database())).await;
    let dead = bus.read("strand.dead-letter.follower", 0, 10).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].message.payload, "{not json");
    assert_eq!(dead[0].message.header("source-topic"), Some("strand.following"));
    assert!(dead[0].message.header("error").is_some_and(|e| e.contains("undecodable")), "{dead:?}");
}
