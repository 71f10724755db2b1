//! The binlog relay under faults, run as the `strand relay` process a deployment runs: killed with SIGKILL
//! at random points and restarted, the broker stopped for a while, two relays racing for one database.
//! Nothing committed is lost; what repeats is bounded by what was in flight.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use serde_json::Value;
use strand::bus::EmbeddedBus;
use strand::config::RelayMode;
use strand::db::Database;
use strand::graph::{self, TenantId, UserId};
use strand_test_support::{
    free_port, unique_server_id, wait_until, Backend, Kafka, Received, StrandCommand, StrandProcess, TestServer,
};

use strand_test_support::outbox_rows;

/// Most rows one relay batch publishes (`BATCH` in the binlog relay): what one kill can make repeat.
const MOST_IN_FLIGHT: usize = 512;

/// `strand relay --mode binlog` on `url`, publishing to `brokers` (or the embedded bus) under `prefix`.
fn relay_process(url: &str, brokers: Option<&str>, prefix: &str, log: &Path) -> StrandProcess {
    let mut command = StrandCommand::new(env!("CARGO_BIN_EXE_strand"), url)
        .set("relay_server_id", unique_server_id())
        .set("topic_prefix", prefix);
    if let Some(brokers) = brokers {
        command = command.set("kafka_brokers", brokers);
    }
    command.spawn(&["relay", "--mode", "binlog"], log.to_owned()).expect("strand relay starts")
}

/// Follows and unfollows by `writers` concurrent users, each at most one operation per `pace`; returns the
/// event id of every committed change.
async fn storm(db: &Database, writers: i64, operations: i64, pace: Duration) -> Vec<String> {
    let tenant: TenantId = "acme".parse().unwrap();
    let tasks = (1..=writers).map(|user| {
        let (db, tenant) = (db.clone(), tenant.clone());
        tokio::spawn(async move {
            let mut ids = Vec::new();
            let mut ticks = tokio::time::interval(pace);
            for i in 0..operations {
                ticks.tick().await;
                let (from, to) = (UserId::try_from(user).unwrap(), UserId::try_from(1000 + i % 7).unwrap());
                let change = graph::change(
                    &db,
                    if i % 3 != 2 {
                        graph::RelationCommand::follow(&tenant, from, to)
                    } else {
                        graph::RelationCommand::unfollow(&tenant, from, to)
                    },
                )
                .await
                .unwrap();
                if change.changed {
                    ids.push(format!("acme:{user}:{}:{}", 1000 + i % 7, change.version));
                }
            }
            ids
        })
    });
    join_all(tasks).await.into_iter().flat_map(|ids| ids.unwrap()).collect()
}

/// Reads `topic` until every id in `expected` arrived.
async fn read_all(kafka: &'static Kafka, topic: String, expected: &HashSet<String>) -> Vec<Received> {
    let expected = expected.clone();
    tokio::task::spawn_blocking(move || {
        kafka.read_until(&topic, 3, Duration::from_secs(90), |received| {
            let seen: HashSet<&str> = received.iter().filter_map(|m| m.header("event-id")).collect();
            expected.iter().all(|id| seen.contains(id.as_str()))
        })
    })
    .await
    .unwrap()
}

/// Every expected event arrived; per pair, first deliveries come in version order; returns the repeats.
fn check_delivery(received: &[Received], expected: &HashSet<String>) -> usize {
    let mut seen = HashSet::new();
    let mut last_version: HashMap<String, i64> = HashMap::new();
    for m in received {
        let id = m.header("event-id").unwrap().to_owned();
        if !seen.insert(id) {
            continue;
        }
        let event: Value = serde_json::from_str(&m.payload).unwrap();
        let pair = format!("{}:{}", event["from"], event["to"]);
        let version = event["version"].as_i64().unwrap();
        let previous = last_version.insert(pair.clone(), version).unwrap_or(0);
        assert!(version > previous, "{pair}: version {version} after {previous}");
    }
    let missing: Vec<_> = expected.iter().filter(|id| !seen.contains(*id)).collect();
    assert!(missing.is_empty(), "lost events: {missing:?}");
    received.len() - seen.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relay_killed_at_random_points_loses_nothing() {
    let kafka = Kafka::shared().unwrap();
    let prefix = kafka.unique_prefix();
    let database = Backend::MariaDb.fresh_database().await.unwrap();
    let db = Database::open(&database.url, 16).await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("relay.log");
    let mut random = strand_test_support::Random::seeded("STRAND_TEST_FAULT_SEED");

    let writes = tokio::spawn({
        let db = db.clone();
        async move { storm(&db, 8, 400, Duration::from_millis(10)).await }
    });
    let mut kills = 0;
    while !writes.is_finished() || kills < 10 {
        let relay = relay_process(&database.url, Some(&kafka.brokers()), &prefix, &log);
        // A random moment of the relay's life: starting, catching up, publishing, checkpointing.
        tokio::time::sleep(Duration::from_millis(50 + random.below(700))).await;
        relay.kill();
        kills += 1;
    }
    let committed: HashSet<String> = writes.await.unwrap().into_iter().collect();
    let relay = relay_process(&database.url, Some(&kafka.brokers()), &prefix, &log);
    wait_until("the last relay publishes the rest", Duration::from_secs(90), || async {
        outbox_rows(&db).await.unwrap() == 0
    })
    .await;

    let received = read_all(kafka, format!("{prefix}following"), &committed).await;
    let repeats = check_delivery(&received, &committed);
    println!("{} events, {kills} kills, {repeats} delivered twice", committed.len());
    assert!(repeats <= kills * MOST_IN_FLIGHT, "repeats only from the batches in flight at a kill: {repeats}");
    drop(relay);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn follows_continue_while_the_broker_is_down_and_the_relay_catches_up() {
    let store = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    let broker = Kafka::persistent(store.path(), port).unwrap();
    let brokers = broker.brokers();
    let server = TestServer::start_with(Backend::MariaDb, |c| {
        c.relay = RelayMode::Binlog;
        c.kafka_brokers = Some(brokers.clone());
    })
    .await;
    let client = server.client("acme", 1);
    for target in 2..=4 {
        client.follow(target).await;
    }
    wait_until("published while the broker is up", Duration::from_secs(60), || async {
        outbox_rows(server.database()).await.unwrap() == 0
    })
    .await;

    broker.stop().unwrap();
    for target in 5..=9 {
        assert_eq!(client.follow(target).await["changed"], true, "follows succeed with the broker down");
    }
    assert!(outbox_rows(server.database()).await.unwrap() > 0, "the relay waits for the broker, keeping the rows");
    let broker: &'static Kafka = Box::leak(Box::new(Kafka::persistent(store.path(), port).unwrap()));
    wait_until("the relay catches up once the broker is back", Duration::from_secs(120), || async {
        outbox_rows(server.database()).await.unwrap() == 0
    })
    .await;

    let expected: HashSet<String> = (2..=9).map(|to| format!("acme:1:{to}:1")).collect();
    let received = read_all(broker, "strand.following".to_owned(), &expected).await;
    check_delivery(&received, &expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_two_relays_one_publishes_and_the_other_takes_over_when_it_is_killed() {
    let database = Backend::MariaDb.fresh_database().await.unwrap();
    let db = Database::open(&database.url, 16).await.unwrap();
    let bus = EmbeddedBus::new(db.clone());
    let logs = tempfile::tempdir().unwrap();
    let log = |name: &str| logs.path().join(name);
    let active = |relay: &StrandProcess| relay.log().contains("this relay is now the active one");

    let first = relay_process(&database.url, None, "strand.", &log("first.log"));
    wait_until("the first relay leads", Duration::from_secs(30), || async { active(&first) }).await;
    let second = relay_process(&database.url, None, "strand.", &log("second.log"));
    let before: HashSet<String> = storm(&db, 4, 30, Duration::from_millis(1)).await.into_iter().collect();
    wait_until("the leader publishes", Duration::from_secs(60), || async { outbox_rows(&db).await.unwrap() == 0 })
        .await;
    assert!(!active(&second), "the second relay stands by while the first leads");

    first.kill();
    let after: HashSet<String> = storm(&db, 4, 30, Duration::from_millis(1)).await.into_iter().collect();
    wait_until("the standby takes over and publishes", Duration::from_secs(60), || async {
        outbox_rows(&db).await.unwrap() == 0
    })
    .await;
    assert!(active(&second), "the second relay leads now");

    let delivered = bus.read("strand.following", 0, 100_000).await.unwrap();
    let ids: Vec<String> = delivered.iter().map(|d| d.message.header("event-id").unwrap().to_owned()).collect();
    let unique: HashSet<String> = ids.iter().cloned().collect();
    assert_eq!(ids.len(), unique.len(), "into the embedded bus every event is published exactly once");
    assert_eq!(unique, &before | &after, "every committed event, nothing else");
    let _relays_and_their_logs = (second, Arc::new(logs));
}
