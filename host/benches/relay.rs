//! Relay figures on MariaDB, binlog and poll mode, printed (never asserted):
//! - outbox rows/s from a backlog to acknowledged publication, to the embedded bus and to Kafka (the test broker, nisshi):
//!   the rows are committed while the relay is stopped, then it is started and timed until the outbox is
//!   empty (every row published — for Kafka, acknowledged — and deleted); with the database server's CPU
//!   time per 1000 rows meanwhile (what relaying costs the database);
//! - commit-to-publication lag, p50/p99, at 50 writes/s: from a follow's commit until its outbox row is
//!   gone, with the relay running.
//!
//! `cargo bench -p strand --bench relay` (needs `nisshi`; see docs/development.md); `STRAND_BENCH_RELAY="binlog kafka"`
//! runs one combination.

use std::sync::Arc;
use std::time::{Duration, Instant};

use strand::app;
use strand::config::{Config, RelayMode};
use strand::db::Database;
use strand::graph::{self, TenantId, UserId};
use strand::plugins::{PluginRegistry, PluginRuntime};
use strand::relay::Relay;
use strand_test_support::{unique_server_id, Backend, Kafka, MariaDb};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const BACKLOG: i64 = 50_000;
/// Concurrent writers committing the backlog.
const WRITERS: i64 = 16;

/// Commits `count` follows from users `first..`, by `WRITERS` concurrent writers.
async fn follows(db: &Database, tenant: &TenantId, first: i64, count: i64) {
    let writers = (0..WRITERS.min(count)).map(|writer| async move {
        for user in (first + writer..first + count).step_by(WRITERS as usize) {
            let (from, to) = (UserId::try_from(user).expect("positive"), UserId::try_from(user + 1).expect("positive"));
            graph::change(db, graph::RelationCommand::follow(tenant, from, to)).await.expect("a follow");
        }
    });
    futures::future::join_all(writers).await;
}

/// Polls until the outbox is empty (a benchmark measures, so it polls tightly instead of by condition),
/// asking only whether a row is left — counting a large backlog would load the database it measures.
async fn until_published(db: &Database) {
    while sqlx::query("SELECT 1 FROM outbox LIMIT 1").fetch_optional(db.reader()).await.expect("a query").is_some() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The configured relay (its Kafka producer connecting meanwhile).
fn relay(config: &Config, db: &Database, plugins: &Arc<PluginRegistry>) -> Relay {
    app::relay(config, db, plugins).expect("a relay").expect("relay on")
}

/// Starts `relay`; it stops when the returned sender is dropped.
fn start(relay: Relay) -> (oneshot::Sender<()>, JoinHandle<()>) {
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        relay
            .run(async move {
                let _stop_or_drop = stopped.await;
            })
            .await
            .expect("the relay runs");
    });
    (stop, task)
}

#[tokio::main]
async fn main() {
    let kafka = Kafka::shared().expect("the test broker");
    let mariadb = MariaDb::shared().expect("MariaDB");
    // One combination only, e.g. `STRAND_BENCH_RELAY="binlog kafka"` (to profile it).
    let only = std::env::var("STRAND_BENCH_RELAY").ok();
    let runtime = Arc::new(PluginRuntime::new(Default::default(), None).expect("runtime"));
    let tenant: TenantId = "bench".parse().expect("tenant");
    println!("relay on MariaDB, backlog of {BACKLOG} rows; lag at 50 writes/s");
    for mode in [RelayMode::Binlog, RelayMode::Poll] {
        for target in ["embedded", "kafka"] {
            let name = format!("{mode:?} {target}").to_lowercase();
            if only.as_deref().is_some_and(|only| only != name) {
                continue;
            }
            let database = Backend::MariaDb.fresh_database().await.expect("database");
            let db = Database::open(&database.url, 16).await.expect("open");
            let plugins = Arc::new(PluginRegistry::load(runtime.clone(), db.clone()).await.expect("registry"));
            let config = Config {
                database_url: database.url.clone(),
                relay: mode,
                relay_server_id: unique_server_id(),
                relay_idle_ms: 5,
                topic_prefix: kafka.unique_prefix(),
                kafka_brokers: (target == "kafka").then(|| kafka.brokers()),
                ..Config::default()
            };
            // Warm up: the first start (binlog: its snapshot and checkpoint), topic creation.
            let (stop, task) = start(relay(&config, &db, &plugins));
            follows(&db, &tenant, 1, 1).await;
            until_published(&db).await;
            drop(stop);
            task.await.expect("relay task");

            // Throughput: a backlog committed while the relay was down, drained by a relay that was standing
            // by (built, its producer connected) — as after a takeover.
            let standby = relay(&config, &db, &plugins);
            follows(&db, &tenant, 10, BACKLOG).await;
            let started = Instant::now();
            let database_cpu = mariadb.cpu_time().expect("the server's CPU time");
            let (stop, task) = start(standby);
            until_published(&db).await;
            let per_second = BACKLOG as f64 / started.elapsed().as_secs_f64();
            let database_cpu = mariadb.cpu_time().expect("the server's CPU time") - database_cpu;

            // Lag at 50 writes/s, while the relay runs.
            let mut lags = Vec::new();
            let mut ticks = tokio::time::interval(Duration::from_millis(20));
            for i in 0..200 {
                ticks.tick().await;
                follows(&db, &tenant, 1_000_000 + i, 1).await;
                let committed = Instant::now();
                until_published(&db).await;
                lags.push(committed.elapsed());
            }
            drop(stop);
            task.await.expect("relay task");
            lags.sort();
            println!(
                "{:<7} {target:<9} {per_second:>8.0} rows/s   database CPU {:>5.1} ms per 1000 rows   lag p50 {:?}  p99 {:?}",
                format!("{mode:?}").to_lowercase(),
                database_cpu.as_secs_f64() * 1e6 / BACKLOG as f64,
                lags[lags.len() / 2],
                lags[lags.len() * 99 / 100]
            );
        }
    }
}
