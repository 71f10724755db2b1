//! Follow writes per second through HTTP against MariaDB, and the same two-row transaction issued directly
//! (`graph::set_following` over sqlx) in the same run, on the same server: the ratio is the API's cost.
//!
//! Measured as production runs it: the API node is a `strand serve` process of its own (relay and workers
//! off, as the scale-out recipe runs API nodes), and — unless `STRAND_BENCH_PIN=0` — MariaDB is pinned to
//! CPU 0 while the API node and this process (the load generator, then the direct writers) share CPU 1 —
//! the API node from its start, so its runtime sizes itself to that one core. So the ratio says whether the
//! API keeps the database saturated, not how three programs share two cores.
//! Each phase's CPU time per write is read from `/proc` for the database server, the API node and this
//! process; the API node's µs per follow above the direct writers' own is the API's cost per write.
//!
//! `cargo bench -p strand --bench write_path` (`STRAND_BENCH_WRITES`, `STRAND_BENCH_CONCURRENCY` to change
//! the size). Figures are printed, never asserted.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strand::db::Database;
use strand::graph::{self, TenantId, UserId};
use strand_test_support::bench::{cpu_time, measure, pin, setting, Measurement};
use strand_test_support::{free_port, token, Backend, MariaDb, StrandCommand, ADMIN_TOKEN, TEST_SECRET};

#[tokio::main]
async fn main() {
    let writes = setting("STRAND_BENCH_WRITES", 4000);
    let concurrency = setting("STRAND_BENCH_CONCURRENCY", 32);
    let pinned = setting("STRAND_BENCH_PIN", 1) == 1;
    let per_worker = writes / concurrency;

    // Pinned before the API node starts, which inherits the placement: its runtime then sizes itself to the
    // one core it has (as it does in a container limited to one CPU), instead of running two worker threads
    // that take turns on one core.
    if pinned {
        pin(std::process::id(), "1").expect("the load generator pinned");
    }
    let mariadb = MariaDb::shared().expect("MariaDB");
    let database = Backend::MariaDb.fresh_database().await.expect("a database");
    let port = free_port().expect("a port");
    let dir = tempfile::tempdir().expect("a directory");
    // As many pooled connections as the direct writers get: the ratio is the API's cost, not a smaller pool's.
    let api = StrandCommand::new(env!("CARGO_BIN_EXE_strand"), &database.url)
        .set("relay", "off")
        .set("workers", false)
        .set("listen", format!("127.0.0.1:{port}"))
        .set("jwt_hs256_secret", TEST_SECRET)
        .set("admin_token", ADMIN_TOKEN)
        .set("database_max_connections", concurrency)
        .set("log", "warn")
        .spawn(&["serve"], dir.path().join("strand.log"))
        .expect("strand serve starts");
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder().pool_max_idle_per_host(concurrency).build().expect("a client");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !http.get(format!("{base}/healthz")).send().await.is_ok_and(|r| r.status() == 200) {
        assert!(Instant::now() < deadline, "strand serve did not start:\n{}", api.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if pinned {
        pin(mariadb.pid().expect("mariadbd's pid"), "0").expect("MariaDB pinned");
        pin(api.id(), "1").expect("the API node pinned");
    }
    let processes = Processes { mariadb, api: api.id() };

    // Every write is a real change by a fresh caller, so the bundled rate limit (100 per user) never refuses
    // one; its policy call and bucket charge are part of what is measured. The callers' tokens are minted
    // beforehand, as a real client holds its token across requests.
    let caller = |worker: usize, i: usize| 1_000_000 * (worker as i64 + 1) + i as i64;
    let tokens: Vec<Vec<String>> = (0..concurrency)
        .map(|worker| {
            (0..per_worker).map(|i| token(TEST_SECRET, &caller(worker, i).to_string(), "bench", 3600)).collect()
        })
        .collect();
    let (through_api, api_cpu) = processes
        .measured(measure(concurrency, per_worker, |worker, i| {
            let (http, token) = (http.clone(), tokens[worker][i].clone());
            let url = format!("{base}/v1/me/following/{}", caller(worker, i) + 1);
            async move {
                let reply = http.put(url).bearer_auth(token).send().await.expect("a reply");
                assert_eq!(reply.status(), 200, "{:?}", reply.text().await);
            }
        }))
        .await;

    let db = Arc::new(Database::open(&database.url, concurrency as u32).await.expect("the bench database"));
    let tenant: TenantId = "bench-direct".parse().expect("a tenant");
    let (direct, direct_cpu) = processes
        .measured(measure(concurrency, per_worker, |worker, i| {
            let (db, tenant) = (db.clone(), tenant.clone());
            let caller = caller(worker, i);
            async move {
                let from = UserId::try_from(caller).expect("positive");
                let to = UserId::try_from(caller + 1).expect("positive");
                graph::set_following(&db, graph::FollowCommand::follow(&tenant, from, to))
                    .await
                    .expect("a direct write");
            }
        }))
        .await;

    let placement = if pinned {
        "MariaDB on CPU 0; the API node and the load generator (then the direct writers) on CPU 1"
    } else {
        "unpinned: MariaDB, the API node and the load generator share every core"
    };
    println!("write_path: {writes} follows, {concurrency} concurrent writers, MariaDB (binlog on); {placement}");
    through_api.print("HTTP PUT /v1/me/following (strand serve)", "writes");
    direct.print("direct sqlx transaction", "writes");
    println!("ratio HTTP/direct throughput: {:.2} (goal ≥ 0.9)", through_api.per_second() / direct.per_second());
    println!("CPU per write, µs        database server   API node   this process (load generator | direct writers)");
    for (label, cpu, count) in [("HTTP", api_cpu, through_api.count), ("direct", direct_cpu, direct.count)] {
        let per_write = |cpu: Duration| cpu.as_secs_f64() * 1e6 / count as f64;
        println!(
            "  {label:<22} {:>15.0}   {:>8.0}   {:>12.0}",
            per_write(cpu.database),
            per_write(cpu.api),
            per_write(cpu.here)
        );
    }
    let api_per_write = api_cpu.api.as_secs_f64() * 1e6 / through_api.count as f64;
    let direct_per_write = direct_cpu.here.as_secs_f64() * 1e6 / direct.count as f64;
    println!(
        "API node's CPU per follow above the direct writers': {:.0} µs (goal ≤ 50)",
        api_per_write - direct_per_write
    );
}

/// The processes whose CPU time a phase is charged with.
struct Processes {
    mariadb: &'static MariaDb,
    api: u32,
}

/// CPU time one phase cost each process.
#[derive(Debug, Clone, Copy)]
struct PhaseCpu {
    database: Duration,
    api: Duration,
    here: Duration,
}

impl Processes {
    fn now(&self) -> PhaseCpu {
        PhaseCpu {
            database: self.mariadb.cpu_time().expect("the database server's CPU time"),
            api: cpu_time(self.api).expect("the API node's CPU time"),
            here: cpu_time(std::process::id()).expect("this process's CPU time"),
        }
    }

    /// Runs `phase` and returns what it measured with the CPU time it cost each process.
    async fn measured(&self, phase: impl Future<Output = Measurement>) -> (Measurement, PhaseCpu) {
        let before = self.now();
        let measured = phase.await;
        let after = self.now();
        let cost = PhaseCpu {
            database: after.database - before.database,
            api: after.api - before.api,
            here: after.here - before.here,
        };
        (measured, cost)
    }
}
