//! Relay figures on MariaDB, binlog and poll mode, printed (never asserted):
//! - outbox rows/s from a backlog to acknowledged publication, to the embedded bus and to Kafka (the test broker, nisshi):
//!   the rows are committed while the relay is stopped, then it is started and timed until the outbox is
//!   empty (every row published — for Kafka, acknowledged — and deleted);
//! - commit-to-publication lag, p50/p99, at 50 writes/s: from a follow's commit until its outbox row is
//!   gone, with the relay running.
//!
//! `cargo bench -p strand --bench relay` (needs `nisshi`; see the README).

use std::sync::Arc;
use std::time::{Duration, Instant};

use strand::app;
use strand::config::{Config, RelayMode};
use strand::graph::{self, Database, TenantId, UserId};
use strand::plugins::{PluginRegistry, PluginRuntime};
use strand_test_support::{unique_server_id, Backend, Kafka};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const BACKLOG: i64 = 10_000;

async fn follows(db: &Database, tenant: &TenantId, first: i64, count: i64) {
    for user in first..first + count {
        let (from, to) = (UserId::try_from(user).expect("positive"), UserId::try_from(user + 1).expect("positive"));
        graph::set_following(db, tenant, from, to, true, graph::now_ms()).await.expect("a follow");
    }
}

async fn outbox(db: &Database) -> i64 {
    strand_test_support::outbox_rows(db).await.expect("count")
}

/// Polls until the outbox is empty (a benchmark measures, so it polls tightly instead of by condition).
async fn until_published(db: &Database) {
    while outbox(db).await > 0 {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}

/// Starts the configured relay; it stops when the returned sender is dropped.
async fn start(config: &Config, db: &Database, plugins: &Arc<PluginRegistry>) -> (oneshot::Sender<()>, JoinHandle<()>) {
    let relay = app::relay(config, db, plugins).expect("a relay").expect("relay on");
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
    let runtime = Arc::new(PluginRuntime::new(Default::default(), None).expect("runtime"));
    let tenant: TenantId = "bench".parse().expect("tenant");
    println!("relay on MariaDB, backlog of {BACKLOG} rows; lag at 50 writes/s");
    for mode in [RelayMode::Binlog, RelayMode::Poll] {
        for target in ["embedded", "kafka"] {
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
            let (stop, task) = start(&config, &db, &plugins).await;
            follows(&db, &tenant, 1, 1).await;
            until_published(&db).await;
            drop(stop);
            task.await.expect("relay task");

            // Throughput: a backlog committed while the relay was stopped.
            follows(&db, &tenant, 10, BACKLOG).await;
            let started = Instant::now();
            let (stop, task) = start(&config, &db, &plugins).await;
            until_published(&db).await;
            let per_second = BACKLOG as f64 / started.elapsed().as_secs_f64();

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
                "{:<7} {target:<9} {per_second:>8.0} rows/s   lag p50 {:?}  p99 {:?}",
                format!("{mode:?}").to_lowercase(),
                lags[lags.len() / 2],
                lags[lags.len() * 99 / 100]
            );
        }
    }
}
