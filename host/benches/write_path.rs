//! Follow writes per second through HTTP against MariaDB, and the same two-row transaction issued directly
//! (`graph::set_following` over sqlx) in the same run, on the same server: the ratio is the API's cost. The
//! API node runs without the relay and workers (as on its own in production); the load generator shares the
//! machine with it and the database, so its HTTP client's cost counts against the API.
//!
//! `cargo bench -p strand --bench write_path` (`STRAND_BENCH_WRITES`, `STRAND_BENCH_CONCURRENCY` to change
//! the size). Figures are printed, never asserted.

use std::sync::Arc;

use strand::config::RelayMode;
use strand::graph::{self, Database, TenantId, UserId};
use strand_test_support::bench::{measure, setting};
use strand_test_support::{Backend, TestServer};

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
    http.print("HTTP PUT /v1/me/following", "writes");
    direct.print("direct sqlx transaction", "writes");
    floor.print("HTTP GET /healthz (no work)", "requests");
    println!("ratio HTTP/direct throughput: {:.2}", http.per_second() / direct.per_second());
}
