//! Follow writes per second through HTTP against MariaDB, and the same two-row transaction issued directly
//! (`graph::set_following` over sqlx) in the same run, on the same server: the ratio is the API's cost. The
//! API node runs without the relay and workers (as on its own in production); the load generator shares the
//! machine with it and the database, so its HTTP client's cost counts against the API. Each phase's CPU
//! time per write, the database server's and this process's (load generator and API node, or the direct
//! writers), shows where the difference goes; and when the machine is saturated, an HTTP exchange that does
//! no work (`/healthz`) bounds the ratio before the API does anything: it is printed as the ceiling.
//!
//! `cargo bench -p strand --bench write_path` (`STRAND_BENCH_WRITES`, `STRAND_BENCH_CONCURRENCY` to change
//! the size). Figures are printed, never asserted.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use strand::config::RelayMode;
use strand::graph::{self, Database, TenantId, UserId};
use strand_test_support::bench::{cpu_time, measure, setting, Measurement};
use strand_test_support::{Backend, MariaDb, TestServer};

#[tokio::main]
async fn main() {
    let writes = setting("STRAND_BENCH_WRITES", 4000);
    let concurrency = setting("STRAND_BENCH_CONCURRENCY", 32);
    let per_worker = writes / concurrency;

    // An API node as the scale-out recipe runs one (relay and workers in processes of their own), with as
    // many pooled connections as the direct writers get: the ratio is the API's cost, not the pipeline's
    // (which every follow costs alike, however it was written) nor a smaller pool's.
    let server = TestServer::start_with(Backend::MariaDb, |c| {
        c.database_max_connections = concurrency as u32;
        c.relay = RelayMode::Off;
        c.workers = false;
    })
    .await;
    let anyone = server.client("bench", 1);
    let mariadb = MariaDb::shared().expect("MariaDB");
    // Every write is a real change by a fresh caller, so the bundled rate limit (100 per user) never refuses
    // one; its policy call and bucket charge are part of what is measured. The callers' tokens are minted
    // beforehand, as a real client holds its token across requests.
    let caller = |worker: usize, i: usize| 1_000_000 * (worker as i64 + 1) + i as i64;
    let clients: Vec<Vec<_>> = (0..concurrency)
        .map(|worker| (0..per_worker).map(|i| anyone.as_user("bench", caller(worker, i))).collect())
        .collect();
    let (http, http_cpu) = with_cpu(
        mariadb,
        measure(concurrency, per_worker, |worker, i| {
            let (caller, client) = (caller(worker, i), clients[worker][i].clone());
            async move {
                let reply = client.put(&format!("/v1/me/following/{}", caller + 1)).await;
                assert_eq!(reply.status, 200, "{reply:?}");
            }
        }),
    )
    .await;

    // The floor under any API call on this machine: an HTTP exchange that does no work, client included.
    let floor = measure(concurrency, per_worker, |_, _| {
        let client = anyone.clone();
        async move {
            let reply = client.get("/healthz").await;
            assert_eq!(reply.status, 200, "{reply:?}");
        }
    })
    .await;

    let db = Arc::new(Database::open(&server.config.database_url, 32).await.expect("the bench database"));
    let tenant: TenantId = "bench-direct".parse().expect("a tenant");
    let (direct, direct_cpu) = with_cpu(
        mariadb,
        measure(concurrency, per_worker, |worker, i| {
            let (db, tenant) = (db.clone(), tenant.clone());
            let caller = caller(worker, i);
            async move {
                let from = UserId::try_from(caller).expect("positive");
                let to = UserId::try_from(caller + 1).expect("positive");
                graph::set_following(&db, &tenant, from, to, true, graph::now_ms()).await.expect("a direct write");
            }
        }),
    )
    .await;

    println!("write_path: {writes} follows, {concurrency} concurrent writers, MariaDB (binlog on)");
    http.print("HTTP PUT /v1/me/following", "writes");
    direct.print("direct sqlx transaction", "writes");
    floor.print("HTTP GET /healthz (no work)", "requests");
    println!("ratio HTTP/direct throughput: {:.2}", http.per_second() / direct.per_second());
    println!("CPU per write, µs             database server   this process (HTTP: load generator + API node)");
    for (label, (database, here), count) in [("HTTP", http_cpu, http.count), ("direct", direct_cpu, direct.count)] {
        let per_write = |cpu: Duration| cpu.as_secs_f64() * 1e6 / count as f64;
        println!("  {label:<28} {:>15.0}   {:>15.0}", per_write(database), per_write(here));
    }
    // CPU-bound, an HTTP follow costs at least the transaction plus an exchange that does nothing.
    let ceiling = floor.per_second() / (floor.per_second() + direct.per_second());
    println!("ceiling of the ratio when CPU-bound, /healthz rate / (/healthz rate + direct rate): {ceiling:.2}");
}

/// Runs `phase` and returns what it measured with the CPU time it cost the database server and this process.
async fn with_cpu(mariadb: &MariaDb, phase: impl Future<Output = Measurement>) -> (Measurement, (Duration, Duration)) {
    let here = || cpu_time(std::process::id()).expect("this process's CPU time");
    let database = || mariadb.cpu_time().expect("the database server's CPU time");
    let before = (database(), here());
    let measured = phase.await;
    (measured, (database() - before.0, here() - before.1))
}
