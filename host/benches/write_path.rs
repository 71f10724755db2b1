//! Follow writes per second through HTTP against MariaDB, and the same two-row transaction issued directly
//! (`graph::change` over sqlx) in the same run, on the same server: the ratio is the API's cost.
//!
//! Measured as production runs it: the API node is a `strand serve` process of its own (relay and workers
//! off, as the scale-out recipe runs API nodes), and — unless `STRAND_BENCH_PIN=0` — MariaDB is pinned to
//! CPU 0 while the API node and this process (the load generator, then the direct writers) share CPU 1 —
//! the API node from its start, so its runtime sizes itself to that one core. So the ratio says whether the
//! API keeps the database saturated, not how three programs share two cores.
//! Each phase's CPU time per write is read from `/proc` for the database server, the API node and this
//! process; the API node's µs per follow above the direct writers' own is the API's cost per write.
//!
//! A second API node exports traces (`[tracing]`, 1% sampled, to a collector in this process that keeps
//! nothing): its throughput and CPU per follow beside the first's are what tracing costs.
//!
//! Beside them, two more direct phases: the follow transaction as it was before blocks, private accounts and
//! the relation policy (`before_relations`, its SQL kept here verbatim as the baseline) — the relation checks
//! must cost the follow at most 5% of its throughput; both on new pairs of users who exist, as most follows
//! in production are (the follow counts' rows are updated, not created) — and blocks of pairs that follow each other both ways
//! (a block's transaction with up to four changes: two unfollows, the block, their outbox rows).
//!
//! `cargo bench -p strand --bench write_path` (`STRAND_BENCH_WRITES`, `STRAND_BENCH_CONCURRENCY` to change
//! the size). Figures are printed, never asserted.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strand::db::Database;
use strand::graph::{self, TenantId, UserId};
use strand_test_support::bench::{cpu_time, measure, pin, setting, Measurement};
use strand_test_support::{free_port, token, Backend, MariaDb, StrandCommand, StrandProcess, ADMIN_TOKEN, TEST_SECRET};

#[tokio::main]
async fn main() {
    let writes = setting("STRAND_BENCH_WRITES", 4000);
    let concurrency = setting("STRAND_BENCH_CONCURRENCY", 32);
    let pinned = setting("STRAND_BENCH_PIN", 1) == 1;
    let per_worker = writes / concurrency;
    // Rounds of the follow with and without the relation checks, in turns (ABBA…).
    let rounds = setting("STRAND_BENCH_ROUNDS", 4).max(1);
    assert!(per_worker > rounds + 1 && per_worker < 1_000_000, "each round needs new pairs of its writers' users");

    // Pinned before the API node starts, which inherits the placement: its runtime then sizes itself to the
    // one core it has (as it does in a container limited to one CPU), instead of running two worker threads
    // that take turns on one core.
    if pinned {
        pin(std::process::id(), "1").expect("the load generator pinned");
    }
    let mariadb = MariaDb::shared().expect("MariaDB");
    let database = Backend::MariaDb.fresh_database().await.expect("a database");
    let dir = tempfile::tempdir().expect("a directory");
    let http = reqwest::Client::builder().pool_max_idle_per_host(concurrency).build().expect("a client");
    // A collector that takes every export and keeps nothing, in this process: the traced node's cost is
    // the spans it makes and sends, not a collector's.
    let collector = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let otlp_endpoint = format!("http://{}", collector.local_addr().expect("its address"));
    let sink = axum::Router::new().route("/v1/traces", axum::routing::post(|| async { axum::http::StatusCode::OK }));
    tokio::spawn(async move { axum::serve(collector, sink).await });
    let untraced = ApiNode::start(&database.url, concurrency, dir.path(), &[]).await;
    let traced = ApiNode::start(
        &database.url,
        concurrency,
        dir.path(),
        &[("tracing_otlp_endpoint", otlp_endpoint.as_str()), ("tracing_sample_ratio", "0.01")],
    )
    .await;
    if pinned {
        pin(mariadb.pid().expect("mariadbd's pid"), "0").expect("MariaDB pinned");
        for node in [&untraced, &traced] {
            pin(node.process.id(), "1").expect("the API node pinned");
        }
    }
    let processes = Processes { mariadb, api: untraced.process.id() };
    let traced_processes = Processes { mariadb, api: traced.process.id() };

    // Every write is a real change by a fresh caller, so the bundled rate limit (100 per user) never refuses
    // one; its policy call and bucket charge are part of what is measured. The callers' tokens are minted
    // beforehand, as a real client holds its token across requests. Each node writes as a tenant of its own.
    let caller = |worker: usize, i: usize| 1_000_000 * (worker as i64 + 1) + i as i64;
    let through = |node: &ApiNode, tenant: &str| {
        let tokens: Vec<Vec<String>> = (0..concurrency)
            .map(|worker| {
                (0..per_worker).map(|i| token(TEST_SECRET, &caller(worker, i).to_string(), tenant, 3600)).collect()
            })
            .collect();
        let (http, base) = (http.clone(), node.base.clone());
        measure(concurrency, per_worker, move |worker, i| {
            let (http, token) = (http.clone(), tokens[worker][i].clone());
            let url = format!("{base}/v1/me/following/{}", caller(worker, i) + 1);
            async move {
                let reply = http.put(url).bearer_auth(token).send().await.expect("a reply");
                assert_eq!(reply.status(), 200, "{:?}", reply.text().await);
            }
        })
    };
    let (through_api, api_cpu) = processes.measured(through(&untraced, "bench")).await;
    let (through_traced, traced_cpu) = traced_processes.measured(through(&traced, "bench-traced")).await;

    let db = Arc::new(Database::open(&database.url, concurrency as u32).await.expect("the bench database"));
    let tenant: TenantId = "bench-direct".parse().expect("a tenant");
    let before_tenant = "bench-before";
    // The follow with its relation checks and the follow as it was before them, in turns (ABBA), each
    // phase's rounds summed: neither gains from a warmer cache or a smaller table. As production sees most
    // follows: a new pair of users who exist — each round, a writer's user `i` follows its user `i + 1 +
    // round` — after a warm-up round (not measured) in which every user followed once, so that a follow
    // updates the users' counts rows rather than creating them.
    let pair =
        move |worker: usize, i: usize, round: usize| (caller(worker, i), caller(worker, (i + 1 + round) % per_worker));
    let follows = |round: usize| {
        let (db, tenant) = (db.clone(), tenant.clone());
        processes.measured(measure(concurrency, per_worker, move |worker, i| {
            let (db, tenant) = (db.clone(), tenant.clone());
            let (from, to) = pair(worker, i, round);
            async move {
                let (from, to) = (UserId::try_from(from).expect("positive"), UserId::try_from(to).expect("positive"));
                graph::change(&db, graph::RelationCommand::follow(&tenant, from, to)).await.expect("a direct write");
            }
        }))
    };
    let follows_before = |round: usize| {
        let db = db.clone();
        processes.measured(measure(concurrency, per_worker, move |worker, i| {
            let db = db.clone();
            let (from, to) = pair(worker, i, round);
            async move { before_relations(&db, before_tenant, from, to).await }
        }))
    };
    follows(0).await;
    follows_before(0).await;
    let (mut direct, mut direct_cpu) = follows(1).await;
    let (mut before, mut before_cpu) = follows_before(1).await;
    for round in 2..=rounds {
        if round % 2 == 0 {
            (before, before_cpu) = before_cpu.and(before, follows_before(round).await);
            (direct, direct_cpu) = direct_cpu.and(direct, follows(round).await);
        } else {
            (direct, direct_cpu) = direct_cpu.and(direct, follows(round).await);
            (before, before_cpu) = before_cpu.and(before, follows_before(round).await);
        }
    }
    let (blocks, _) = processes
        .measured(measure(concurrency, per_worker, |worker, i| {
            let (db, tenant) = (db.clone(), tenant.clone());
            // The direct phase's pairs: `caller` follows `caller + 1`; the reverse follow is added first.
            let caller = caller(worker, i);
            async move {
                let (a, b) =
                    (UserId::try_from(caller).expect("positive"), UserId::try_from(caller + 1).expect("positive"));
                graph::change(&db, graph::RelationCommand::follow(&tenant, b, a)).await.expect("a follow back");
                let block = graph::RelationCommand::new(&tenant, a, graph::Act::Block, b);
                let change = graph::change(&db, block).await.expect("a block");
                assert!(change.changed && !change.following);
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
    through_traced.print("the same, traces exported, 1% sampled", "writes");
    direct.print("direct sqlx transaction", "writes");
    before.print("direct, before relation checks", "writes");
    blocks.print("direct: follow back, then block (4 changes)", "blocks");
    println!("ratio HTTP/direct throughput: {:.2} (goal ≥ 0.9)", through_api.per_second() / direct.per_second());
    println!(
        "ratio follow with relation checks / before (new pairs of existing users): {:.2} (goal ≥ 0.95)",
        direct.per_second() / before.per_second()
    );
    println!("CPU per write, µs        database server   API node   this process (load generator | direct writers)");
    let phases = [
        ("HTTP", api_cpu, through_api.count),
        ("HTTP, traced 1%", traced_cpu, through_traced.count),
        ("direct", direct_cpu, direct.count),
        ("direct, before", before_cpu, before.count),
    ];
    for (label, cpu, count) in phases {
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
    let traced_per_write = traced_cpu.api.as_secs_f64() * 1e6 / through_traced.count as f64;
    println!(
        "traces exported, 1% sampled: {:.2}× the throughput, {:+.0} µs of the API node's CPU per follow",
        through_traced.per_second() / through_api.per_second(),
        traced_per_write - api_per_write
    );
    println!(
        "API node's CPU per follow above the direct writers': {:.0} µs (goal ≤ 50)",
        api_per_write - direct_per_write
    );
}

/// A `strand serve` process as the scale-out recipe runs API nodes (relay and workers off), answering.
struct ApiNode {
    process: StrandProcess,
    base: String,
}

impl ApiNode {
    /// As many pooled connections as the direct writers get: the ratio is the API's cost, not a smaller
    /// pool's. `settings` on top (tracing, for one of them).
    async fn start(database_url: &str, concurrency: usize, dir: &Path, settings: &[(&str, &str)]) -> Self {
        let port = free_port().expect("a port");
        let mut command = StrandCommand::new(env!("CARGO_BIN_EXE_strand"), database_url)
            .set("relay", "off")
            .set("workers", false)
            .set("listen", format!("127.0.0.1:{port}"))
            .set("jwt_hs256_secret", TEST_SECRET)
            .set("admin_token", ADMIN_TOKEN)
            .set("database_max_connections", concurrency)
            .set("log", "warn");
        for (key, value) in settings {
            command = command.set(key, value);
        }
        let process = command.spawn(&["serve"], dir.join(format!("strand-{port}.log"))).expect("strand serve starts");
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !reqwest::get(format!("{base}/healthz")).await.is_ok_and(|r| r.status() == 200) {
            assert!(Instant::now() < deadline, "strand serve did not start:\n{}", process.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self { process, base }
    }
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

impl PhaseCpu {
    /// Two rounds of one phase as one: `first` (which this cost) and `then`, with what it cost.
    fn and(self, first: Measurement, (then, cost): (Measurement, PhaseCpu)) -> (Measurement, PhaseCpu) {
        let cpu =
            PhaseCpu { database: self.database + cost.database, api: self.api + cost.api, here: self.here + cost.here };
        (first.and(then), cpu)
    }
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

/// The follow transaction before relations existed (two round trips: create-or-lock the pair's row and
/// change it, read it and the reverse pair; then the outbox row and commit), as the baseline.
async fn before_relations(db: &Database, tenant: &str, from: i64, to: i64) {
    use sqlx::{Executor, Row};
    let mut conn = db.writer().acquire().await.expect("a connection");
    let now = strand::util::time::now_ms();
    let pair = format!("tenant_id = '{tenant}' AND from_user_id = {from} AND to_user_id = {to}");
    let reverse = format!("tenant_id = '{tenant}' AND from_user_id = {to} AND to_user_id = {from}");
    let first = format!(
        "BEGIN;INSERT INTO following (tenant_id, from_user_id, to_user_id, rel_status, version, created_at, updated_at) \
         VALUES ('{tenant}', {from}, {to}, 0, 0, {now}, {now}) ON DUPLICATE KEY UPDATE rel_status = rel_status;\
         UPDATE following SET rel_status = 1, version = version + 1, created_at = {now}, updated_at = {now} \
         WHERE {pair} AND rel_status = 0;\
         SELECT ROW_COUNT(), version FROM following WHERE {pair} FOR UPDATE;\
         SELECT rel_status FROM following WHERE {reverse} LOCK IN SHARE MODE;"
    );
    let rows = conn.fetch_all(first.as_str()).await.expect("the first round trip");
    let version: i64 = rows.iter().find(|r| r.len() == 2).expect("the pair's row").get(1);
    let payload = format!(
        r#"{{"event_id":"{tenant}:{from}:{to}:{version}","type":"follow","tenant":"{tenant}","from":{from},"to":{to},"version":{version},"occurred_at":"2026-12-03T00:00:00.000Z","followed_back":false}}"#
    );
    let second = format!(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, event_key, payload, created_at) \
         VALUES ('{tenant}', 'following', '{from}:{to}', 'follow', '{tenant}:{from}', CONVERT(X'{}' USING utf8mb4), {now});COMMIT",
        hex::encode(payload)
    );
    conn.execute(second.as_str()).await.expect("the second round trip");
}
