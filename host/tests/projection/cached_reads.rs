//! Counts and lists come from the projections once a build marked them complete — in the truth's exact
//! order, ties included — and from the truth while they are not; the seed's relation flow works with such
//! eventually consistent reads, awaited by condition.

use std::time::Duration;

use redis::AsyncCommands;
use serde_json::json;
use strand::cache::Space;
use strand::config::RelayMode;
use strand::projection::reconcile;
use strand_test_support::{wait_until, ApiClient, Backend, Redis, RedisCluster, TestServer};

use super::{pipeline, redis_cache, storm, strand_command};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counts_come_from_the_counters_once_built_and_from_the_truth_while_they_are_rebuilt() {
    let tenant = format!("cc{}", std::process::id());
    let redis_url = Redis::shared().unwrap().url();
    let server = pipeline(&redis_url).await;
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
    let cache = redis_cache(&redis_url).await;
    let space = Space::bundled(&tenant, "follow-counts");
    wait_until("the workers built the counters and caught up", Duration::from_secs(30), || {
        let (db, cache) = (server.database().clone(), cache.clone());
        async move {
            cache.built_by(space).await.unwrap().is_some()
                && reconcile(&db, Some(&cache), 100).await.unwrap().is_clean()
        }
    })
    .await;

    // Complete: the counters answer (a value only Redis has shows up).
    let counter = space.counter("followers", [1]);
    let _: () = redis.set(&counter, 999).await.unwrap();
    assert_eq!(followers_of_1().await, 999, "served from the counters");
    // Not complete (as while a new version is built): the truth answers, whatever Redis holds.
    let _: () = redis.del(space.ready_key()).await.unwrap();
    assert_eq!(followers_of_1().await, truth);

    // `strand rebuild`, with the workers running, derives the counters from the truth again.
    let (code, output) = strand_command(&["rebuild", "follow-counts"], &server.config.database_url, &redis_url).await;
    assert_eq!(code, 0, "{output}");
    assert!(cache.built_by(space).await.unwrap().is_some());
    let rebuilt: Option<i64> = redis.get(&counter).await.unwrap();
    assert_eq!(rebuilt, Some(truth), "rebuilt from the truth");

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
    let cached: i64 = redis.zcard(Space::bundled(&tenant, "follow-lists").sorted_set("following", [1])).await.unwrap();
    assert!(cached > 1, "the cache holds user 1's list");
    let mut served = Vec::new();
    for user in 1..=6 {
        for side in ["following", "followers"] {
            served.push(walk(&client, &format!("/v1/users/{user}/{side}")).await);
        }
    }
    assert_eq!(served, truth, "same entries, same order, by cursor and by offset");
    // And it is the cache that answers: a member only Redis has shows up.
    let _: () = redis
        .zadd(Space::bundled(&tenant, "follow-lists").sorted_set("following", [1]), "00000000000000000099", 1)
        .await
        .unwrap();
    let (by_cursor, _) = walk(&client, "/v1/users/1/following").await;
    assert_eq!(by_cursor.last(), Some(&99));
}

/// (followings, followers) of `user` through the seed's counter endpoint.
async fn seed_counter(client: &ApiClient, user: i64) -> (i64, i64) {
    let body = client.get(&format!("/api/v1/relation/counter?userId={user}")).await.body;
    (body["followings"].as_i64().unwrap(), body["followers"].as_i64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_seed_relation_flow_with_eventually_consistent_cached_reads() {
    seed_relation_flow(&Redis::shared().unwrap().url(), &format!("sd{}", std::process::id())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_seed_relation_flow_reads_counts_and_lists_from_a_redis_cluster() {
    seed_relation_flow(&RedisCluster::shared().unwrap().url(), &format!("sc{}", std::process::id())).await;
}

async fn seed_relation_flow(redis_url: &str, tenant: &str) {
    let tenant = tenant.to_owned();
    let server = pipeline(redis_url).await;
    let (alice, bob) = (server.client(&tenant, 1), server.client(&tenant, 2));
    let counter = |user: i64| seed_counter(&alice, user);
    let eventually = |what: &'static str, user: i64, expected: (i64, i64)| async move {
        wait_until(what, Duration::from_secs(30), || async { counter(user).await == expected }).await
    };

    assert_eq!(alice.post("/api/v1/relation/follow?toUserId=2").await.body, json!(true));
    let status = alice.get("/api/v1/relation/status?toUserId=2").await.body;
    assert_eq!(status, json!({"following": true, "followedBy": false, "mutual": false}));
    eventually("alice counts the follow", 1, (1, 0)).await;
    eventually("bob counts the follower", 2, (0, 1)).await;

    // A repeated follow changes nothing: no event, so the counters cannot move.
    assert_eq!(alice.post("/api/v1/relation/follow?toUserId=2").await.body, json!(true));
    bob.post("/api/v1/relation/follow?toUserId=1").await;
    assert_eq!(alice.get("/api/v1/relation/status?toUserId=2").await.body["mutual"], true);
    eventually("bob's follow-back is counted", 1, (1, 1)).await;
    // Read from the cache or, while the space is still being built, from the truth: either way once
    // caught up, and a double count would never come down to this.
    eventually("the repeated follow was not counted twice", 2, (1, 1)).await;

    assert_eq!(alice.post("/api/v1/relation/unfollow?toUserId=2").await.body, json!(true));
    eventually("alice's unfollow is counted", 1, (0, 1)).await;
    eventually("bob lost a follower", 2, (1, 0)).await;
    // The lists are another projection than the counters: as fresh as they are only eventually.
    let followers = || async {
        let reply = alice.get("/api/v1/relation/followers?userId=1").await;
        reply.body.as_array().unwrap().iter().map(|u| u["id"].as_i64().unwrap()).collect::<Vec<i64>>()
    };
    wait_until("the cached follower list holds bob", Duration::from_secs(30), || async {
        followers().await == vec![2]
    })
    .await;

    let reply = alice.post("/api/v1/relation/follow?toUserId=1").await;
    assert_eq!((reply.status, reply.code()), (422, "self_follow"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_embedded_default_serves_counts_and_lists_from_its_in_process_cache() {
    let tenant = format!("em{}", std::process::id());
    // No Redis, no Kafka: SQLite, the poll relay, the embedded bus and this process's cache.
    let server = TestServer::start_with(Backend::Sqlite, |c| {
        c.relay = RelayMode::Poll;
        c.relay_idle_ms = 10;
        c.workers = true;
        c.refresh_ms = 100;
    })
    .await;
    storm(&server, &tenant, 5).await;
    let client = server.client(&tenant, 1);
    let db = server.database();
    let following: Vec<i64> = sqlx::query_scalar(
        "SELECT to_user_id FROM following WHERE tenant_id = ? AND from_user_id = 1 AND rel_status = 1 \
         ORDER BY created_at DESC, to_user_id DESC",
    )
    .bind(&tenant)
    .fetch_all(db.reader())
    .await
    .unwrap();
    let followers: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM following WHERE tenant_id = ? AND to_user_id = 1 AND rel_status = 1")
            .bind(&tenant)
            .fetch_one(db.reader())
            .await
            .unwrap();
    let counts = json!({"user_id": 1, "followings": following.len(), "followers": followers});
    let truth = (following.clone(), following);
    wait_until("both spaces are built in memory and caught up", Duration::from_secs(30), || async {
        let reply = server.admin().get("/admin/v1/projections").await;
        let complete = |name: &str| {
            reply.body["backfills"].as_array().unwrap().iter().any(|b| {
                b["projection"] == format!("projector.{name}") && b["tenant"] == tenant && b["state"] == "complete"
            })
        };
        complete("follow-counts")
            && complete("follow-lists")
            && walk(&client, "/v1/users/1/following").await == truth
            && client.get("/v1/users/1/counts").await.body == counts
    })
    .await;
    // A change that bypasses the outbox reaches the database only: what the API serves is the cache.
    sqlx::query("UPDATE following SET rel_status = 0 WHERE tenant_id = ? AND from_user_id = 1")
        .bind(&tenant)
        .execute(server.database().writer())
        .await
        .unwrap();
    assert_eq!(client.get("/v1/users/1/counts").await.body, counts, "counts from the cache");
    assert_eq!(walk(&client, "/v1/users/1/following").await, truth, "the list from the cache, paged alike");
    assert!(!truth.0.is_empty());
}
