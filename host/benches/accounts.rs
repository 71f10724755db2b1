//! Deleting a celebrity, measured on one production-shaped in-process node (MariaDB binlog relay, Redis, Kafka,
//! workers): an account with `ACCOUNTS_FOLLOWERS` followers (default 1 000 000, seeded with bulk SQL and projected by
//! the workers' build from the truth), deleted while the tenant's other users keep writing at `ACCOUNTS_WRITE_RATE` a
//! second (default 200, open loop; 0: the job alone), the job pacing itself within `ACCOUNTS_JOB_SHARE` of the
//! time (default: `account_job_share`'s), in batches of `ACCOUNTS_JOB_BATCH` edges (default: `account_job_batch`'s). Printed: the build of the seeded projections (pairs/s: today's build rate), the other
//! writes' p50/p99 alone and beside the job, the job's edges/s, and the wall time until every projection has
//! converged (outbox empty, every consumer group at the end) — then `reconcile` confirms the follower table and the
//! counters. `cargo bench -p strand --bench accounts`. Figures are printed, not asserted.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use strand::cache::{Cache, RedisCache};
use strand::projection::{rebuild_follower, reconcile};
use strand_test_support::bench::{setting, Measurement};
use strand_test_support::TestServer;

const TENANT: &str = "bench";
/// The deleted account; its followers are users from [`FIRST_FOLLOWER`] on.
const CELEBRITY: i64 = 1;
const FIRST_FOLLOWER: i64 = 10_000_000;
/// The first of the other writers' users (one per write).
const FIRST_WRITER: i64 = 100_000;

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let followers = setting("ACCOUNTS_FOLLOWERS", 1_000_000) as i64;
    let rate = setting("ACCOUNTS_WRITE_RATE", 200);
    let share =
        std::env::var("ACCOUNTS_JOB_SHARE").ok().map(|s| s.parse::<f64>().expect("ACCOUNTS_JOB_SHARE: a number"));
    let server = TestServer::start_node(|c| {
        if let Some(share) = share {
            c.account_job_share = share;
        }
        c.account_job_batch = setting("ACCOUNTS_JOB_BATCH", c.account_job_batch as usize) as u32;
    })
    .await;
    let db = server.database();
    let admin = server.admin();
    println!(
        "accounts: deleting an account with {followers} followers while others write {rate}/s; job share {}; \
         MariaDB (binlog), Redis, Kafka; one in-process node, 2 cores",
        server.config.account_job_share
    );

    // The followers, straight into the truth (version 1), then the follower table and the projectors' spaces
    // built from it.
    let seeded = Instant::now();
    for start in (0..followers).step_by(1_000_000) {
        let count = (followers - start).min(1_000_000);
        sqlx::query(
            "INSERT INTO following (tenant_id, from_user_id, to_user_id, rel_status, version, created_at, updated_at) \
             SELECT ?, ? + seq, ?, 1, 1, seq, seq FROM seq_0_to_999999 WHERE seq < ?",
        )
        .bind(TENANT)
        .bind(FIRST_FOLLOWER + start)
        .bind(CELEBRITY)
        .bind(count)
        .execute(db.writer())
        .await
        .expect("seeding followers");
    }
    rebuild_follower(db).await.expect("the follower table");
    strand_test_support::recount_follows(db, TENANT).await;
    let built = Instant::now();
    let complete = || async {
        let progress = admin.get("/admin/v1/projections").await.body;
        let entries = progress["backfills"].as_array().cloned().unwrap_or_default();
        let ours: Vec<&Value> = entries.iter().filter(|p| p["tenant"] == TENANT).collect();
        !ours.is_empty() && ours.iter().all(|p| p["state"] == "complete")
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    while !complete().await {
        assert!(Instant::now() < deadline, "the projections were not built within 10 minutes");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let build = built.elapsed();
    println!(
        "seeded in {:.1?}; projections built from the truth in {build:.1?}: {:.0} pairs/s per projector",
        built - seeded,
        followers as f64 / build.as_secs_f64()
    );

    // `ACCOUNTS_WRITE_RATE=0`: the job alone, as fast as its pace lets it with nobody writing.
    let mut next_user = FIRST_WRITER;
    let alone = match rate {
        0 => None,
        _ => Some(writes(&server, rate, &mut next_user, Duration::from_secs(10)).await),
    };
    if let Some(alone) = &alone {
        alone.print("other writes, alone", "writes");
    }

    let started = Instant::now();
    let job = admin
        .send_json(
            reqwest::Method::POST,
            &format!("/admin/v1/tenants/{TENANT}/accounts/{CELEBRITY}/jobs"),
            &json!({"kind": "delete"}),
        )
        .await;
    assert_eq!(job.status, 202, "{job:?}");
    let job_path = format!("/admin/v1/tenants/{TENANT}/jobs/{}", job.body["id"]);
    let mut beside: Option<Measurement> = None;
    let job_took = loop {
        let state = admin.get(&job_path).await.body;
        if state["state"] != "running" {
            assert_eq!(state["state"], "done", "{state}");
            break started.elapsed();
        }
        if rate == 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let measured = writes(&server, rate, &mut next_user, Duration::from_secs(2)).await;
        let metrics = server.metrics().await;
        let gauge = |name: &str| gauge(&metrics, name).map_or("-".to_owned(), |value| format!("{value:.3}"));
        println!(
            "  {:>5.1?}: writes p99 {:>6.1?}; the job's share {}, its quiet p99 {} s",
            started.elapsed(),
            measured.quantile(0.99),
            gauge("strand_account_job_share"),
            gauge("strand_account_job_quiet_seconds"),
        );
        beside = Some(match beside {
            Some(before) => before.and(measured),
            None => measured,
        });
    };
    if let (Some(beside), Some(alone)) = (&beside, &alone) {
        beside.print("other writes, beside the deletion", "writes");
        println!("p99 beside / alone: {:.2}", beside.quantile(0.99).as_secs_f64() / alone.quantile(0.99).as_secs_f64());
    }
    println!("deletion: {followers} edges in {job_took:.1?}: {:.0} edges/s", followers as f64 / job_took.as_secs_f64());

    // Converged: nothing left to publish or consume, nothing parked, and reconcile finds the follower table
    // and the counters equal to the truth.
    // The node's own logical database: each `Redis::url()` names another.
    let redis_url = server.config.redis_url.as_deref().expect("the node's Redis");
    let cache = Cache::Redis(RedisCache::connect(redis_url).await.expect("Redis"));
    let deadline = Instant::now() + Duration::from_secs(1200);
    let report = loop {
        let lag = admin.get("/admin/v1/lag").await.body;
        let consumers = lag["consumers"].as_array().cloned().unwrap_or_default();
        let behind: i64 = consumers.iter().map(|c| c["behind"].as_i64().unwrap_or(0)).sum();
        let parked = admin.get(&format!("/admin/v1/tenants/{TENANT}/parked")).await.body;
        let idle = lag["relay"]["outbox_rows"] == 0 && !consumers.is_empty() && behind == 0;
        let none_parked = parked["rows"] == 0 && parked["projections"].as_array().is_some_and(Vec::is_empty);
        if idle && none_parked {
            let report = reconcile(db, Some(&cache), 100).await.expect("reconcile");
            if report.is_clean() || Instant::now() > deadline {
                break report;
            }
        }
        if Instant::now() > deadline {
            println!("not converged within 20 minutes: {lag} {parked}");
            break reconcile(db, Some(&cache), 100).await.expect("reconcile");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!(
        "converged (outbox empty, groups at the end, nothing parked, reconcile clean) {:.1?} after the job started",
        started.elapsed()
    );
    println!(
        "reconcile: {} pairs, {} users' counters: {} differences",
        report.pairs_checked,
        report.users_checked,
        report.differences.len()
    );
    for difference in report.differences.iter().take(10) {
        println!("  {difference}");
    }
}

/// The value of the unlabelled gauge `name` in a `/metrics` text.
fn gauge(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The tenant's other users following at `rate` writes a second for `length`, open loop — each write starts
/// on its schedule whether or not those before it have finished, as users arrive, and its latency counts from
/// that schedule — each a fresh pair of its own user (from `next_user` on), so no write meets another's pair
/// or the bundled rate limit's per-user bucket.
async fn writes(server: &TestServer, rate: usize, next_user: &mut i64, length: Duration) -> Measurement {
    let started = Instant::now();
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut writes = Vec::new();
    while started.elapsed() < length {
        let scheduled = ticks.tick().await;
        let (client, target) = (server.client(TENANT, *next_user), 1_000 + *next_user % 1_000);
        *next_user += 1;
        writes.push(tokio::spawn(async move {
            let reply = client.put(&format!("/v1/me/following/{target}")).await;
            assert_eq!(reply.status, 200, "{reply:?}");
            scheduled.elapsed()
        }));
    }
    let mut latencies: Vec<Duration> =
        futures::future::join_all(writes).await.into_iter().map(|r| r.expect("a write")).collect();
    latencies.sort();
    Measurement { count: latencies.len(), elapsed: started.elapsed(), latencies }
}
