//! Binlog mode on a real MariaDB (binlog on, ROW format): the first start publishes the backlog, then every
//! committed outbox row reaches the bus in commit order, across binlog rotations, whatever else commits
//! around it; a rolled-back transaction publishes nothing; published rows leave the outbox.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sqlx::{Executor, Row};
use strand::app;
use strand::bus::EmbeddedBus;
use strand::config::{Config, RelayMode};
use strand::db::Database;
use strand::graph::{self, TenantId, UserId};
use strand::plugins::{PluginRegistry, PluginRuntime};
use strand::relay::{Checkpoint, Relay};
use strand_test_support::{unique_server_id, wait_until, Backend, MariaDb, TestServer};
use tokio::sync::oneshot;

use super::{bus, concurrent_writers, outbox_insert};
use strand_test_support::outbox_rows;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_committed_row_is_published_once_in_commit_order() {
    // A backlog written while no relay runs: the first start publishes it.
    let mut server = TestServer::start(Backend::MariaDb).await;
    for target in 2..=4 {
        server.client("acme", 1).follow(target).await;
    }
    server.config.relay = RelayMode::Binlog;
    let server = server.restart().await;

    let mut long = server.database().writer().begin().await.unwrap();
    long.execute(outbox_insert("acme:9:10:1", 9, 10).as_str()).await.unwrap();
    let mut rolled_back = server.database().writer().begin().await.unwrap();
    rolled_back.execute(outbox_insert("acme:9:11:1", 9, 11).as_str()).await.unwrap();

    let committed = 3 + concurrent_writers(&server).await;
    wait_until("the later commits are published", Duration::from_secs(30), || async {
        bus(server.database(), "strand.following").await.len() == committed
    })
    .await;
    // The long transaction commits into the next binlog file.
    server.database().writer().execute("FLUSH BINARY LOGS").await.unwrap();
    rolled_back.rollback().await.unwrap();
    long.commit().await.unwrap();
    wait_until("the long transaction is published when it commits", Duration::from_secs(30), || async {
        bus(server.database(), "strand.following").await.len() == committed + 1
    })
    .await;
    wait_until("published rows leave the outbox", Duration::from_secs(30), || async {
        outbox_rows(server.database()).await.unwrap() == 0
    })
    .await;

    let delivered = bus(server.database(), "strand.following").await;
    let ids: HashSet<_> = delivered.iter().map(|d| d.message.header("event-id").unwrap().to_owned()).collect();
    assert_eq!(ids.len(), delivered.len(), "no event twice");
    assert!(ids.contains("acme:9:10:1"), "the long transaction's row");
    assert!(!ids.contains("acme:9:11:1"), "the rolled-back row is never published");
    assert_eq!(delivered.last().unwrap().message.header("event-id"), Some("acme:9:10:1"), "commit order");
    let mut last_version: HashMap<String, i64> = HashMap::new();
    for d in &delivered {
        let event: Value = serde_json::from_str(&d.message.payload).unwrap();
        assert_eq!(d.message.key, format!("acme:{}", event["from"]));
        let pair = format!("{}:{}", event["from"], event["to"]);
        let version = event["version"].as_i64().unwrap();
        let previous = last_version.insert(pair.clone(), version).unwrap_or(0);
        assert_eq!(version, previous + 1, "{pair}: versions arrive in order, without gaps");
    }
}

/// An in-process binlog relay to the embedded bus, as `strand relay --mode binlog` builds it.
async fn binlog_relay(url: &str, db: &Database) -> Relay {
    let config = Config {
        database_url: url.to_owned(),
        relay: RelayMode::Binlog,
        relay_server_id: unique_server_id(),
        ..Config::default()
    };
    let runtime = Arc::new(PluginRuntime::new(Default::default(), None).unwrap());
    let plugins = Arc::new(PluginRegistry::load(runtime, db.clone()).await.unwrap());
    app::relay(&config, db, &plugins).unwrap().expect("a relay")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_purged_checkpoint_stops_the_relay_and_a_reset_loses_nothing() {
    // The test's own server: purging binlogs would pull them from under other tests' relays.
    let mariadb = MariaDb::dedicated().unwrap();
    let url = mariadb.create_database().await.unwrap();
    let db = Database::open(&url, 4).await.unwrap();
    let bus = EmbeddedBus::new(db.clone());
    let published = |n: usize| {
        let bus = bus.clone();
        move || {
            let bus = bus.clone();
            async move { bus.read("strand.following", 0, 1000).await.unwrap().len() == n }
        }
    };
    let tenant: TenantId = "acme".parse().unwrap();
    let follow = |to: i64| {
        let (db, tenant) = (db.clone(), tenant.clone());
        async move {
            let (from, to) = (UserId::try_from(1).unwrap(), UserId::try_from(to).unwrap());
            graph::change(&db, graph::RelationCommand::follow(&tenant, from, to)).await.unwrap();
        }
    };

    let (stop, stopped) = oneshot::channel::<()>();
    let relay = tokio::spawn(binlog_relay(&url, &db).await.run(async move {
        let _stop_or_drop = stopped.await;
    }));
    follow(2).await;
    wait_until("the first follow is published", Duration::from_secs(30), published(1)).await;
    drop(stop);
    relay.await.unwrap().unwrap();

    let checkpoint = Checkpoint::load(&db).await.unwrap().expect("a checkpoint").position;
    db.writer().execute("FLUSH BINARY LOGS").await.unwrap();
    let current: String = sqlx::query("SHOW MASTER STATUS").fetch_one(db.writer()).await.unwrap().get(0);
    // The server keeps a file while a replica connection still reads it: purge once the old one is gone.
    wait_until("the checkpoint's binlog file is purged", Duration::from_secs(30), || async {
        db.writer().execute(format!("PURGE BINARY LOGS TO '{current}'").as_str()).await.unwrap();
        let logs = sqlx::query("SHOW BINARY LOGS").fetch_all(db.writer()).await.unwrap();
        !logs.iter().any(|log| log.get::<String, _>(0) == checkpoint.file)
    })
    .await;
    follow(3).await;
    follow(4).await;

    let error = binlog_relay(&url, &db).await.run(std::future::pending()).await.expect_err("a purged checkpoint");
    assert!(error.needs_operator(), "{error}");
    assert!(error.to_string().contains("strand relay --reset-checkpoint"), "says how to recover: {error}");

    Checkpoint::forget(&db).await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let relay = tokio::spawn(binlog_relay(&url, &db).await.run(async move {
        let _stop_or_drop = stopped.await;
    }));
    wait_until("the reset relay publishes what the purge hid", Duration::from_secs(30), published(3)).await;
    follow(5).await;
    wait_until("and follows the binlog again", Duration::from_secs(30), published(4)).await;
    drop(stop);
    relay.await.unwrap().unwrap();
}
