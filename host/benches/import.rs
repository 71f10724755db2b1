//! Importing a graph, measured on one production-shaped in-process node (MariaDB with its binlog, Redis,
//! Kafka, workers): `IMPORT_EDGES` follows (default 10 000 000; users of `IMPORT_FANOUT` followings each)
//! streamed as CSV to the admin import route, then the tenant's projector spaces built again from the truth.
//! Printed: edges/s into the truth (and the follower table), the CPU seconds per million edges of this
//! process and of `mariadbd`, and the build's pairs/s — the three bundled projectors at once — until counts
//! and lists are served from the cache, with another tenant's follows meanwhile (one every 20 ms, each timed
//! to its count in Redis; then the same alone): what a build costs other tenants' applies (their 50 follows/s
//! are in the build's CPU figures too, a small share). Then the
//! database's own floor for the same rows: the edges written
//! into copies of `following` and `follower` with plain multi-row inserts (no reads, no decisions, no
//! upserts), the least MariaDB can spend on them here. `cargo bench -p strand --bench import`. Figures are
//! printed, not asserted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use serde_json::Value;
use sqlx::Executor;
use strand::cache::Space;
use strand_test_support::bench::{cpu_time, setting};
use strand_test_support::{TestServer, ADMIN_TOKEN};

const TENANT: &str = "imported";
/// The tenant whose follows are timed beside the build.
const NEIGHBOUR: &str = "neighbour";

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let edges = setting("IMPORT_EDGES", 10_000_000) as i64;
    let fanout = setting("IMPORT_FANOUT", 100) as i64;
    let users = (edges / fanout).max(2);
    let shared_redis = strand_test_support::Redis::shared().expect("Redis");
    // One URL (one logical database) for the node and the neighbour's reads of its counts.
    let redis_url = shared_redis.url();
    let server = TestServer::start_node(|c| c.redis_url = Some(redis_url.clone())).await;
    let mariadb = strand_test_support::MariaDb::shared().expect("MariaDB").pid().expect("mariadbd's pid");
    let me = std::process::id();
    println!(
        "import: {edges} follows of {users} users into MariaDB (binlog), Redis, Kafka; one in-process node, 2 cores"
    );

    let redis = shared_redis.pid().expect("redis-server's pid");
    let mut connection = redis::Client::open(redis_url.as_str())
        .expect("a Redis client")
        .get_multiplexed_async_connection()
        .await
        .expect("Redis");
    // The neighbour's spaces built before the import.
    neighbour_lags(&server, &mut connection, 0, &AtomicBool::new(false), 1).await;

    // `from,to,at_ms` lines, made as they are sent: user u follows the next `fanout` users.
    let chunks = futures::stream::iter((0..users).step_by(100)).map(move |first| {
        let mut chunk = String::with_capacity(100 * fanout as usize * 24);
        for (from, to, at_ms) in edges_of(first..(first + 100).min(users), fanout, users) {
            chunk.push_str(&format!("{from},{to},{at_ms}\n"));
        }
        Ok::<_, std::io::Error>(Bytes::from(chunk))
    });
    let (cpu_me, cpu_db) = (cpu_time(me).unwrap(), cpu_time(mariadb).unwrap());
    let started = Instant::now();
    let reply = reqwest::Client::new()
        .post(server.url(&format!("/admin/v1/tenants/{TENANT}/import?format=csv")))
        .bearer_auth(ADMIN_TOKEN)
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .expect("the import request");
    let status = reply.status();
    let report: Value = reply.json().await.expect("the import's report");
    let took = started.elapsed();
    assert!(status.is_success(), "{status}: {report}");
    let (cpu_me, cpu_db) = (cpu_time(me).unwrap() - cpu_me, cpu_time(mariadb).unwrap() - cpu_db);
    let per_million = |cpu: Duration| cpu.as_secs_f64() / (edges as f64 / 1e6);
    println!(
        "imported in {took:.1?}: {:.0} edges/s into the truth and the follower table ({report})",
        edges as f64 / took.as_secs_f64()
    );
    println!(
        "CPU per million edges: strand {:.1} s, mariadbd {:.1} s ({:.0} edges per CPU-second in all)",
        per_million(cpu_me),
        per_million(cpu_db),
        edges as f64 / (cpu_me + cpu_db).as_secs_f64()
    );

    let admin = server.admin();
    let building = AtomicBool::new(true);
    let (cpu_me, cpu_db, cpu_redis) = (cpu_time(me).unwrap(), cpu_time(mariadb).unwrap(), cpu_time(redis).unwrap());
    let built = Instant::now();
    let deadline = built + Duration::from_secs(3600);
    let until_built = async {
        wait_built(&admin, edges, deadline).await;
        building.store(false, Ordering::Relaxed);
        built.elapsed()
    };
    let (build, beside) = tokio::join!(until_built, neighbour_lags(&server, &mut connection, 1, &building, 0));
    println!(
        "projections built from the truth in {build:.1?}: {:.0} pairs/s per projector, {:.0} pairs/s for the three",
        edges as f64 / build.as_secs_f64(),
        3.0 * edges as f64 / build.as_secs_f64()
    );
    let per_million_pairs = |cpu: Duration| cpu.as_secs_f64() / (3.0 * edges as f64 / 1e6);
    println!(
        "build CPU per million pairs (each projector's): strand {:.1} s, redis-server {:.1} s, mariadbd {:.1} s",
        per_million_pairs(cpu_time(me).unwrap() - cpu_me),
        per_million_pairs(cpu_time(redis).unwrap() - cpu_redis),
        per_million_pairs(cpu_time(mariadb).unwrap() - cpu_db)
    );
    println!(
        "end to end (import to counts and lists served): {:.1?}, {:.0} edges/s",
        took + build,
        edges as f64 / (took + build).as_secs_f64()
    );
    let alone =
        neighbour_lags(&server, &mut connection, 1_000_000, &AtomicBool::new(false), beside.len().max(200)).await;
    for (when, mut lags) in [("beside the build", beside), ("alone", alone)] {
        lags.sort();
        println!(
            "another tenant's follow → its Redis count, one every 20 ms, {when}: p50 {:?}, p99 {:?} ({} follows)",
            lags[lags.len() / 2],
            lags[(lags.len() * 99).div_ceil(100) - 1],
            lags.len()
        );
    }
    database_floor(&server, mariadb, users, fanout).await;
}

/// Waits until the tenant's three bundled projectors are built over its `edges` pairs.
async fn wait_built(admin: &strand_test_support::ApiClient, edges: i64, deadline: Instant) {
    loop {
        let progress = admin.get("/admin/v1/projections").await.body;
        let ours: Vec<Value> =
            progress["backfills"].as_array().into_iter().flatten().filter(|b| b["tenant"] == TENANT).cloned().collect();
        if ours.len() >= 3 && ours.iter().all(|b| b["state"] == "complete" && b["done"].as_i64() >= Some(edges)) {
            return;
        }
        assert!(Instant::now() < deadline, "not built within an hour: {ours:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The neighbour's follows, one every 20 ms while `running` holds and until there are `least`, each timed
/// from its answer to its followee's count in Redis (users from `first` on): how long that tenant's applies
/// take beside whatever runs meanwhile.
async fn neighbour_lags(
    server: &TestServer,
    redis: &mut MultiplexedConnection,
    first: i64,
    running: &AtomicBool,
    least: usize,
) -> Vec<Duration> {
    let mut lags = Vec::new();
    let mut ticks = tokio::time::interval(Duration::from_millis(20));
    let mut user = first;
    while running.load(Ordering::Relaxed) || lags.len() < least {
        ticks.tick().await;
        user += 1;
        let followee = 10_000_000 + user;
        server.client(NEIGHBOUR, user).follow(followee).await;
        let answered = Instant::now();
        let key = Space::bundled(NEIGHBOUR, "follow-counts").counter("followers", [followee]);
        while redis.get::<_, Option<i64>>(&key).await.expect("a count from Redis") != Some(1) {
            assert!(
                answered.elapsed() < Duration::from_secs(600),
                "the neighbour's follow of {followee} never counted"
            );
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        lags.push(answered.elapsed());
    }
    lags
}

/// The follows of users `from` (0-based): `(from, to, at_ms)`, 1-based ids, user u following the next
/// `fanout` users.
fn edges_of(from: std::ops::Range<i64>, fanout: i64, users: i64) -> impl Iterator<Item = (i64, i64, i64)> {
    from.flat_map(move |u| (1..=fanout).map(move |k| (u + 1, (u + k) % users + 1, 1_600_000_000_000 + u * fanout + k)))
}

/// The columns after an edge's key, in the order the floor's rows give them.
const STATE: &str = "rel_status, version, created_at, updated_at";

/// Writes the same edges into copies of `following` and `follower` with plain multi-row inserts of the
/// import's batch size, one transaction per batch, and prints what that took: MariaDB's floor for these
/// rows with its binlog on, which an import writing them by SQL cannot beat.
async fn database_floor(server: &TestServer, mariadb: u32, users: i64, fanout: i64) {
    let writer = server.database().writer();
    for sql in [
        "DROP TABLE IF EXISTS floor_following, floor_follower",
        "CREATE TABLE floor_following LIKE following",
        "CREATE TABLE floor_follower LIKE follower",
    ] {
        writer.execute(sql).await.expect(sql);
    }
    let (edges, cpu_db) = (users * fanout, cpu_time(mariadb).unwrap());
    let started = Instant::now();
    let batch_users = (strand::transfer::import::BATCH as i64 / fanout).max(1);
    for first in (0..users).step_by(batch_users as usize) {
        let batch: Vec<_> = edges_of(first..(first + batch_users).min(users), fanout, users).collect();
        let rows = |f: &dyn Fn(&(i64, i64, i64)) -> String| batch.iter().map(f).collect::<Vec<_>>().join(", ");
        let following = rows(&|(from, to, at)| format!("('{TENANT}', {from}, {to}, 1, 1, {at}, {at})"));
        let follower = rows(&|(from, to, at)| format!("('{TENANT}', {to}, {from}, 1, 1, {at}, {at})"));
        let mut tx = writer.begin().await.expect("a transaction");
        // Each table's key order: `following` by follower, `follower` by followee.
        let inserts = [
            format!("INSERT INTO floor_following (tenant_id, from_user_id, to_user_id, {STATE}) VALUES {following}"),
            format!("INSERT INTO floor_follower (tenant_id, to_user_id, from_user_id, {STATE}) VALUES {follower}"),
        ];
        for insert in inserts {
            tx.execute(insert.as_str()).await.expect("a plain insert");
        }
        tx.commit().await.expect("commit");
    }
    let (took, cpu_db) = (started.elapsed(), cpu_time(mariadb).unwrap() - cpu_db);
    println!(
        "database floor (plain inserts of the same rows into copies of the two tables): {:.0} edges/s, mariadbd \
         {:.1} s CPU per million edges (at most {:.0} edges/s on 2 cores for the database alone)",
        edges as f64 / took.as_secs_f64(),
        cpu_db.as_secs_f64() / (edges as f64 / 1e6),
        2.0 * edges as f64 / cpu_db.as_secs_f64()
    );
    writer.execute("DROP TABLE floor_following, floor_follower").await.expect("drop the copies");
}
