//! Poll-mode relay figures on MariaDB, printed (never asserted):
//! - outbox rows/s from a backlog to acknowledged publication, to the embedded bus and to Kafka (tansu);
//! - commit-to-publication lag, p50/p99, at 50 writes/s: from a follow's commit until its outbox row is
//!   gone (published — for Kafka, acknowledged — and deleted).
//!
//! `cargo bench -p strand --bench relay` (needs `tansu`; see the README).

use std::sync::Arc;
use std::time::{Duration, Instant};

use strand::bus::{EmbeddedBus, KafkaBus, KafkaSettings, Publisher};
use strand::graph::{self, Database, TenantId, UserId};
use strand::plugins::{PluginRegistry, PluginRuntime};
use strand::relay::{Outlet, PollRelay};
use strand_test_support::{Backend, Kafka};

const BACKLOG: i64 = 10_000;

async fn follows(db: &Database, tenant: &TenantId, first: i64, count: i64) {
    for user in first..first + count {
        let (from, to) = (UserId::try_from(user).expect("positive"), UserId::try_from(user + 1).expect("positive"));
        graph::set_following(db, tenant, from, to, true, graph::now_ms()).await.expect("a follow");
    }
}

async fn outbox(db: &Database) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM outbox").fetch_one(db.reader()).await.expect("count")
}

#[tokio::main]
async fn main() {
    let kafka = Kafka::shared().expect("tansu");
    let runtime = Arc::new(PluginRuntime::new(Default::default(), None).expect("runtime"));
    let tenant: TenantId = "bench".parse().expect("tenant");
    println!("relay (poll mode, MariaDB), backlog of {BACKLOG} rows");
    for target in ["embedded", "kafka"] {
        let database = Backend::MariaDb.fresh_database().await.expect("database");
        let db = Database::open(&database.url, 16).await.expect("open");
        let plugins = Arc::new(PluginRegistry::load(runtime.clone(), db.clone()).await.expect("registry"));
        let prefix = kafka.unique_prefix();
        let publisher = match target {
            "kafka" => Publisher::Kafka(Arc::new(
                KafkaBus::connect(KafkaSettings { brokers: kafka.brokers(), partitions: 3, replication: 1 })
                    .expect("producer"),
            )),
            _ => Publisher::Embedded(EmbeddedBus::new(db.clone())),
        };
        let relay = PollRelay::new(db.clone(), Outlet::new(plugins, publisher, prefix), Duration::from_millis(5));

        // Throughput: drain a backlog.
        follows(&db, &tenant, 1, BACKLOG).await;
        let started = Instant::now();
        let mut published = 0;
        while published < BACKLOG as usize {
            published += relay.publish_batch().await.expect("a batch");
        }
        let per_second = published as f64 / started.elapsed().as_secs_f64();

        // Lag at 50 writes/s, while the relay runs.
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(relay.run(async move {
            let _stop_or_drop = stopped.await;
        }));
        let mut lags = Vec::new();
        let mut ticks = tokio::time::interval(Duration::from_millis(20));
        for i in 0..200 {
            ticks.tick().await;
            follows(&db, &tenant, 1_000_000 + i, 1).await;
            let committed = Instant::now();
            while outbox(&db).await > 0 {
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            lags.push(committed.elapsed());
        }
        drop(stop);
        running.await.expect("relay task");
        lags.sort();
        println!(
            "{target:<9} {per_second:>8.0} rows/s   lag p50 {:?}  p99 {:?}",
            lags[lags.len() / 2],
            lags[lags.len() * 99 / 100]
        );
    }
}
