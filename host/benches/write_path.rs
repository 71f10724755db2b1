//! Follow writes per second through HTTP against MariaDB, and the same two-row transaction issued directly
//! (`graph::set_following` over sqlx) in the same run, on the same server: the ratio is the API's cost.
//!
//! `cargo bench -p strand --bench write_path` (`STRAND_BENCH_WRITES`, `STRAND_BENCH_CONCURRENCY` to change
//! the size). Figures are printed, never asserted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use strand::graph::{self, Database, TenantId, UserId};
use strand_test_support::{Backend, TestServer};

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let writes = setting("STRAND_BENCH_WRITES", 4000);
    let concurrency = setting("STRAND_BENCH_CONCURRENCY", 32);
    let per_worker = writes / concurrency;

    let server = TestServer::start(Backend::MariaDb).await;
    let anyone = server.client("bench", 1);
    let http = measure(concurrency, per_worker, |worker, i| {
        // Every write is a real change by a fresh caller, so the bundled rate limit (100 per user) never
        // refuses one; its policy call and bucket charge are part of what is measured.
        let caller = 1_000_000 * (worker as i64 + 1) + i as i64;
        let client = anyone.as_user("bench", caller);
        async move {
            let reply = client.put(&format!("/v1/me/following/{}", caller + 1)).await;
            assert_eq!(reply.status, 200, "{reply:?}");
        }
    })
    .await;

    let db = Arc::new(Database::open(&server.config.database_url, 32).await.expect("the bench database"));
    let tenant: TenantId = "bench-direct".parse().expect("a tenant");
    let direct = measure(concurrency, per_worker, |worker, i| {
        let (db, tenant) = (db.clone(), tenant.clone());
        async move {
            let caller = 1_000_000 * (worker as i64 + 1) + i as i64;
            let from = UserId::try_from(caller).expect("positive");
            let to = UserId::try_from(caller + 1).expect("positive");
            graph::set_following(&db, &tenant, from, to, true, graph::now_ms()).await.expect("a direct write");
        }
    })
    .await;

    println!("write_path: {writes} follows, {concurrency} concurrent writers, MariaDB (binlog on)");
    http.print("HTTP PUT /v1/me/following");
    direct.print("direct sqlx transaction");
    println!("ratio HTTP/direct throughput: {:.2}", http.per_second() / direct.per_second());
}

struct Measurement {
    count: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

impl Measurement {
    fn per_second(&self) -> f64 {
        self.count as f64 / self.elapsed.as_secs_f64()
    }

    fn print(&self, label: &str) {
        let quantile = |q: f64| self.latencies[((self.latencies.len() - 1) as f64 * q) as usize];
        println!(
            "{label:<28} {:>8.0} writes/s   p50 {:>7.2?}   p99 {:>7.2?}",
            self.per_second(),
            quantile(0.50),
            quantile(0.99)
        );
    }
}

/// Runs `concurrency` workers, each issuing `per_worker` operations one after another.
async fn measure<F, Fut>(concurrency: usize, per_worker: usize, operation: F) -> Measurement
where
    F: Fn(usize, usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let started = Instant::now();
    let workers = (0..concurrency).map(|worker| {
        let operations: Vec<_> = (0..per_worker).map(|i| operation(worker, i)).collect();
        tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(operations.len());
            for op in operations {
                let start = Instant::now();
                op.await;
                latencies.push(start.elapsed());
            }
            latencies
        })
    });
    let mut latencies: Vec<Duration> =
        join_all(workers).await.into_iter().flat_map(|r| r.expect("a bench worker")).collect();
    let elapsed = started.elapsed();
    latencies.sort();
    Measurement { count: latencies.len(), elapsed, latencies }
}
