//! `strand reconcile` finds nothing once the workers caught up, and reports (exit 1) a counter, a list or a
//! follower row that differs from the truth; `strand rebuild` derives every projection from the truth alone
//! and marks it complete, after which counts and lists are served from it, in the truth's exact order.

use std::path::Path;
use std::time::Duration;

use redis::AsyncCommands;
use strand::config::RelayMode;
use strand::projection::reconcile;
use strand_test_support::{wait_until, ApiClient, Backend, Redis, StrandProcess, TestServer};

use super::storm;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconcile_is_clean_after_catching_up_and_reports_every_difference() {
    let tenant = format!("rc{}", std::process::id());
    let redis_url = Redis::shared().unwrap().url();
    let server = TestServer::start_with(Backend::Sqlite, |c| {
        c.relay = RelayMode::Poll;
        c.relay_idle_ms = 10;
        c.workers = true;
        c.redis_url = Some(redis_url.clone());
    })
    .await;
    storm(&server, &tenant, 0).await;
    let mut redis = redis::Client::open(redis_url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    wait_until("the projections caught up", Duration::from_secs(30), || {
        let (db, mut redis) = (server.database().clone(), redis.clone());
        async move { reconcile(&db, Some(&mut redis), 100).await.unwrap().is_clean() }
    })
    .await;
    let (code, output) = strand_command(&["reconcile"], &server.config.database_url, &redis_url).await;
    assert_eq!(code, 0, "{output}");
    assert!(output.contains(" 0 differences"), "{output}");

    let _: () = redis.set(format!("{tenant}:follow-counts:followers:1"), 999).await.unwrap();
    let _: () = redis.zadd(format!("{tenant}:follow-lists:following:2"), "00000000000000000042", 1).await.unwrap();
    sqlx::query("UPDATE follower SET rel_status = 1 - rel_status WHERE tenant_id = ? AND to_user_id = 3")
        .bind(&tenant)
        .execute(server.database().writer())
        .await
        .unwrap();
    let (code, output) = strand_command(&["reconcile"], &server.config.database_url, &redis_url).await;
    assert_eq!(code, 1, "{output}");
    assert!(output.contains(&format!("{tenant}:follow-counts:followers:1: truth")), "{output}");
    assert!(output.contains(&format!("{tenant}:follow-lists:following:2")), "{output}");
    assert!(output.contains(&format!("follower (\"{tenant}\"")), "{output}");
}

/// Runs `strand <args>` against the server's database and Redis until it exits; its exit code and output.
async fn strand_command(args: &[&str], database_url: &str, redis_url: &str) -> (i32, String) {
    let log = tempfile::NamedTempFile::new().unwrap();
    let env = [
        ("STRAND_DATABASE_URL", database_url.to_owned()),
        ("STRAND_REDIS_URL", redis_url.to_owned()),
        ("STRAND_PLUGIN_CACHE_DIR", std::env::temp_dir().join("strand-test-plugin-cache").display().to_string()),
    ];
    let binary = Path::new(env!("CARGO_BIN_EXE_strand"));
    let mut process = StrandProcess::spawn(binary, args, &env, log.path().to_owned()).unwrap();
    let mut status = None;
    wait_until("the command exits", Duration::from_secs(60), || {
        status = process.exited();
        std::future::ready(status.is_some())
    })
    .await;
    (status.unwrap().code().unwrap_or(-1), process.log())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rebuild_derives_every_projection_from_the_truth_alone() {
    let tenant = format!("rb{}", std::process::id());
    let redis_url = Redis::shared().unwrap().url();
    // No workers: nothing is derived until the rebuilds.
    let server = TestServer::start_with(Backend::MariaDb, |c| c.redis_url = Some(redis_url.clone())).await;
    storm(&server, &tenant, 3).await;
    let url = server.config.database_url.clone();
    let (code, output) = strand_command(&["reconcile"], &url, &redis_url).await;
    assert_eq!(code, 1, "nothing derived yet: {output}");

    for projection in ["follower", "follow-counts", "follow-lists"] {
        let (code, output) = strand_command(&["rebuild", projection], &url, &redis_url).await;
        assert_eq!(code, 0, "{output}");
        assert!(output.contains(&format!("rebuilt {projection}")), "{output}");
    }
    let (code, output) = strand_command(&["reconcile"], &url, &redis_url).await;
    assert_eq!(code, 0, "{output}");
    let (code, output) = strand_command(&["rebuild", "no-such-projection"], &url, &redis_url).await;
    assert_ne!(code, 0);
    assert!(output.contains("no projection \"no-such-projection\""), "{output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counts_come_from_the_counters_once_rebuilt_complete_and_from_the_truth_before() {
    let tenant = format!("cc{}", std::process::id());
    let redis_url = Redis::shared().unwrap().url();
    let server = TestServer::start_with(Backend::Sqlite, |c| {
        c.relay = RelayMode::Poll;
        c.relay_idle_ms = 10;
        c.workers = true;
        c.redis_url = Some(redis_url.clone());
    })
    .await;
    storm(&server, &tenant, 1).await;
    let followers_of_1 = || async {
        let reply = server.client(&tenant, 1).get("/v1/users/1/counts").await;
        reply.body["followers"].as_i64().unwrap()
    };
    let truth: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM following WHERE tenant_id = ? AND to_user_id = 1 AND rel_status = 1")
            .bind(&tenant)
            .fetch_one(server.database().reader())
            .await
            .unwrap();
    let mut redis = redis::Client::open(redis_url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let counter = format!("{tenant}:follow-counts:followers:1");
    // The workers are idle before the rebuild (as `strand rebuild` asks of a projector's workers).
    wait_until("the projections caught up", Duration::from_secs(30), || {
        let (db, mut redis) = (server.database().clone(), redis.clone());
        async move { reconcile(&db, Some(&mut redis), 100).await.unwrap().is_clean() }
    })
    .await;

    // Not known complete: the truth answers, whatever Redis holds.
    let _: () = redis.set(&counter, 999).await.unwrap();
    assert_eq!(followers_of_1().await, truth);

    let (code, output) = strand_command(&["rebuild", "follow-counts"], &server.config.database_url, &redis_url).await;
    assert_eq!(code, 0, "{output}");
    assert_eq!(followers_of_1().await, truth, "rebuilt from the truth");
    let _: () = redis.set(&counter, 999).await.unwrap();
    assert_eq!(followers_of_1().await, 999, "complete now: served from the counters");
    let _: () = redis.set(&counter, truth).await.unwrap();

    // Eventually consistent: a new follower shows up once the worker applied it.
    assert_eq!(server.client(&tenant, 7).follow(1).await["changed"], true, "user 7 is not in the storm");
    wait_until("the new follower is counted", Duration::from_secs(30), || async {
        followers_of_1().await == truth + 1
    })
    .await;
}

/// `path`'s whole list through the API, two per page: by cursor, and by offset.
async fn walk(client: &ApiClient, path: &str) -> (Vec<i64>, Vec<i64>) {
    let ids = |reply: &serde_json::Value| -> Vec<i64> {
        reply["items"].as_array().unwrap().iter().map(|i| i["user_id"].as_i64().unwrap()).collect()
    };
    let (mut by_cursor, mut cursor) = (Vec::new(), String::new());
    loop {
        let reply = client.get(&format!("{path}?limit=2&cursor={cursor}")).await;
        by_cursor.extend(ids(&reply.body));
        match reply.body["next_cursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
    }
    let mut by_offset = Vec::new();
    for offset in (0..).step_by(2) {
        let page = ids(&client.get(&format!("{path}?limit=2&offset={offset}")).await.body);
        if page.is_empty() {
            break;
        }
        by_offset.extend(page);
    }
    (by_cursor, by_offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lists_from_the_cache_page_exactly_like_the_truth_ties_included() {
    let tenant = format!("ls{}", std::process::id());
    let redis_url = Redis::shared().unwrap().url();
    let server = TestServer::start_with(Backend::Sqlite, |c| c.redis_url = Some(redis_url.clone())).await;
    storm(&server, &tenant, 2).await;
    // Ties: all of user 1's follows and all of user 2's followers in one millisecond.
    sqlx::query("UPDATE following SET created_at = 1000 WHERE tenant_id = ? AND (from_user_id = 1 OR to_user_id = 2)")
        .bind(&tenant)
        .execute(server.database().writer())
        .await
        .unwrap();
    let client = server.client(&tenant, 1);
    let mut truth = Vec::new();
    for user in 1..=6 {
        for side in ["following", "followers"] {
            truth.push(walk(&client, &format!("/v1/users/{user}/{side}")).await);
        }
    }
    let (code, output) = strand_command(&["rebuild", "follow-lists"], &server.config.database_url, &redis_url).await;
    assert_eq!(code, 0, "{output}");
    let mut redis = redis::Client::open(redis_url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let cached: i64 = redis.zcard(format!("{tenant}:follow-lists:following:1")).await.unwrap();
    assert!(cached > 1, "the cache holds user 1's list");
    let mut served = Vec::new();
    for user in 1..=6 {
        for side in ["following", "followers"] {
            served.push(walk(&client, &format!("/v1/users/{user}/{side}")).await);
        }
    }
    assert_eq!(served, truth, "same entries, same order, by cursor and by offset");
    // And it is the cache that answers: a member only Redis has shows up.
    let _: () = redis.zadd(format!("{tenant}:follow-lists:following:1"), "00000000000000000099", 1).await.unwrap();
    let (by_cursor, _) = walk(&client, "/v1/users/1/following").await;
    assert_eq!(by_cursor.last(), Some(&99));
}
