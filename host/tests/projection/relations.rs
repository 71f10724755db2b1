//! A storm of every relation — follows, unfollows, blocks, unblocks, requests to private accounts,
//! authorizations, rejections, withdrawals, follower removals, mutes — through the whole pipeline, then a
//! replay of the whole bus: the truth never holds a follow between a blocked pair, and the follower table,
//! the cached counts and lists, the `mutual-follows` example (a 0.2.0 projector deployed mid-storm: follows
//! only) and the `relation-signals` example (a 0.3.0 relation projector deployed mid-storm: every kind, its
//! space built from every edge of the truth) equal the truth. On SQLite with the in-process cache, and on
//! MariaDB with Redis and with a Redis Cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::future::join_all;
use reqwest::Method;
use serde_json::json;
use sqlx::Row;
use strand::plugins::{RelationKind, EXAMPLES};
use strand::projection::recent_changes;
use strand_test_support::{wait_until, ApiClient, Backend, Redis, RedisCluster, TestServer};

const USERS: i64 = 8;
/// Accounts that are private: follows of them are requests.
const PRIVATE: [i64; 2] = [3, 6];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relation_storm_on_sqlite_in_memory_leaves_every_projection_equal_to_the_truth() {
    storm_and_replay(Backend::Sqlite, None, "rs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relation_storm_on_mariadb_and_redis_leaves_every_projection_equal_to_the_truth() {
    storm_and_replay(Backend::MariaDb, Some(Redis::shared().unwrap().url()), "rr").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relation_storm_on_mariadb_and_a_redis_cluster_leaves_every_projection_equal_to_the_truth() {
    storm_and_replay(Backend::MariaDb, Some(RedisCluster::shared().unwrap().url()), "rc").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pending_request_is_snapshot_as_a_request_for_relation_projectors_only() {
    let server = TestServer::start(Backend::Sqlite).await;
    let private = server.client("snap", 2).send_json(Method::PUT, "/v1/me/settings", &json!({"private": true})).await;
    assert_eq!(private.status, 200, "{private:?}");
    for target in [2, 3] {
        assert_eq!(server.client("snap", 1).put(&format!("/v1/me/following/{target}")).await.status, 200);
    }
    let tenant = "snap".parse().unwrap();
    let kinds = async |every_kind| {
        let changes = recent_changes(server.database(), &tenant, 10, every_kind).await.unwrap();
        changes.iter().map(|c| (c.followee, c.kind)).collect::<BTreeMap<_, _>>()
    };
    // A projector of follows is handed follows only: the request is no follow (its floors are raised).
    assert_eq!(kinds(false).await, BTreeMap::from([(2, RelationKind::Unfollow), (3, RelationKind::Follow)]));
    assert_eq!(kinds(true).await, BTreeMap::from([(2, RelationKind::FollowRequested), (3, RelationKind::Follow)]));
}

/// Every user's writes, concurrently: a mix of every relation write a user can make.
async fn storm(server: &TestServer, tenant: &str, round: i64) {
    let writers = (1..=USERS).map(|user| {
        let client = server.client(tenant, user);
        async move {
            for i in 0..30 {
                let other = 1 + (user * 5 + i * 3 + round) % USERS;
                if other == user {
                    continue;
                }
                let (path, method) = match (i + round + user) % 10 {
                    0..=3 => (format!("/v1/me/following/{other}"), Method::PUT),
                    4 => (format!("/v1/me/following/{other}"), Method::DELETE),
                    5 => (format!("/v1/me/blocks/{other}"), Method::PUT),
                    6 => (format!("/v1/me/blocks/{other}"), Method::DELETE),
                    7 => (format!("/v1/me/follow_requests/{other}/authorize"), Method::POST),
                    8 if i % 2 == 0 => (format!("/v1/me/follow_requests/{other}/reject"), Method::POST),
                    8 => (format!("/v1/me/followers/{other}"), Method::DELETE),
                    _ => (format!("/v1/me/mutes/{other}"), Method::PUT),
                };
                let reply = client.call(method, &path).await;
                // A follow while a block holds is refused; everything else succeeds.
                assert!(reply.status == 200 || reply.code() == "blocked", "{path}: {reply:?}");
            }
        }
    });
    join_all(writers).await;
}

async fn storm_and_replay(backend: Backend, redis_url: Option<String>, prefix: &str) {
    let tenant = format!("{prefix}{}", std::process::id());
    let mut server = TestServer::start_pipeline(backend, redis_url.as_deref()).await;
    for user in PRIVATE {
        let reply =
            server.client(&tenant, user).send_json(Method::PUT, "/v1/me/settings", &json!({"private": true})).await;
        assert_eq!(reply.status, 200, "{reply:?}");
    }
    storm(&server, &tenant, 0).await;
    // A projector built against strand:plugin@0.2.0, deployed mid-storm: backfilled, then fed follows only.
    let example = EXAMPLES.iter().find(|e| e.name == "mutual-follows").unwrap();
    let path = format!("/admin/v1/tenants/{tenant}/plugins/projector/mutual-follows?readable=sorted-set:friends");
    let admin = server.admin();
    let (deployed, ()) =
        tokio::join!(admin.upload(Method::PUT, &path, example.wasm.to_vec()), storm(&server, &tenant, 1));
    assert_eq!(deployed.status, 200, "{deployed:?}");
    // A relation projector (0.3.0), deployed mid-storm: built from follows, requests and blocks, then fed all.
    let signals = EXAMPLES.iter().find(|e| e.name == "relation-signals").unwrap();
    let path = format!(
        "/admin/v1/tenants/{tenant}/plugins/projector/relation-signals?readable=sorted-set:requests,counter:blocked_by"
    );
    let (deployed, ()) =
        tokio::join!(admin.upload(Method::PUT, &path, signals.wasm.to_vec()), storm(&server, &tenant, 2));
    assert_eq!(deployed.status, 200, "{deployed:?}");
    storm(&server, &tenant, 3).await;
    let truth = Truth::read(&server, &tenant).await;
    assert!(
        truth.blocks.len() > 2 && truth.follows.len() > 5 && !truth.requests.is_empty(),
        "a storm worth checking: {truth:?}"
    );
    for &(a, b) in &truth.blocks {
        assert!(
            !truth.follows.contains(&(a, b)) && !truth.follows.contains(&(b, a)),
            "{a} and {b}: a follow across a block"
        );
    }
    converged(&server, &tenant, &truth).await;

    // Replay: every consumer reads the whole bus again from its start (redelivery of everything).
    sqlx::query("UPDATE bus_positions SET seq = 0").execute(server.database().writer()).await.unwrap();
    server = server.restart().await;
    converged(&server, &tenant, &truth).await;
}

/// What the truth holds for the tenant.
#[derive(Debug)]
struct Truth {
    follows: BTreeSet<(i64, i64)>,
    blocks: BTreeSet<(i64, i64)>,
    /// Pending follow requests (requester, target).
    requests: BTreeSet<(i64, i64)>,
    /// Every row of `following`: (from, to) → (status, version).
    rows: BTreeMap<(i64, i64), (i64, i64)>,
}

impl Truth {
    async fn read(server: &TestServer, tenant: &str) -> Self {
        let rows: BTreeMap<(i64, i64), (i64, i64)> = rows(server, tenant, "following").await;
        let blocks = sqlx::query("SELECT from_user_id, to_user_id FROM blocks WHERE tenant_id = ? AND rel_status = 1")
            .bind(tenant)
            .fetch_all(server.database().reader())
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let follows = rows.iter().filter(|(_, (status, _))| *status == 1).map(|(pair, _)| *pair).collect();
        let requests = rows.iter().filter(|(_, (status, _))| *status == 2).map(|(pair, _)| *pair).collect();
        Self { follows, blocks, requests, rows }
    }

    fn friends(&self, user: i64) -> BTreeSet<i64> {
        self.follows.iter().filter(|&&(a, b)| a == user && self.follows.contains(&(b, a))).map(|&(_, b)| b).collect()
    }
}

async fn rows(server: &TestServer, tenant: &str, table: &str) -> BTreeMap<(i64, i64), (i64, i64)> {
    // Version 0: a row holding only a block's flag, no state of the pair.
    let sql = format!(
        "SELECT from_user_id, to_user_id, rel_status, version FROM {table} WHERE tenant_id = ? AND version > 0"
    );
    sqlx::query(&sql)
        .bind(tenant)
        .fetch_all(server.database().reader())
        .await
        .unwrap()
        .iter()
        .map(|r| ((r.get(0), r.get(1)), (r.get(2), r.get(3))))
        .collect()
}

async fn served_ids(client: &ApiClient, path: &str) -> Option<BTreeSet<i64>> {
    let reply = client.get(path).await;
    if reply.status != 200 {
        return None;
    }
    let items = reply.body["items"].as_array()?;
    Some(items.iter().filter_map(|i| i["user_id"].as_i64().or_else(|| i["member"].as_i64())).collect())
}

/// Waits until the follower table, the served counts and lists, the friends of `mutual-follows` and the
/// pending requests and blocked-by counts of `relation-signals` equal `truth`.
async fn converged(server: &TestServer, tenant: &str, truth: &Truth) {
    wait_until("the follower table equals the truth row for row", Duration::from_secs(60), || async {
        rows(server, tenant, "follower").await == truth.rows
    })
    .await;
    let client = server.client(tenant, 1);
    wait_until("every served count, list and friend set equals the truth", Duration::from_secs(60), || async {
        for user in 1..=USERS {
            let following: BTreeSet<i64> = truth.follows.iter().filter(|p| p.0 == user).map(|p| p.1).collect();
            let followers: BTreeSet<i64> = truth.follows.iter().filter(|p| p.1 == user).map(|p| p.0).collect();
            let counts = client.get(&format!("/v1/users/{user}/counts")).await.body;
            if counts["followings"] != following.len() || counts["followers"] != followers.len() {
                return false;
            }
            if served_ids(&client, &format!("/v1/users/{user}/following?limit=100")).await != Some(following)
                || served_ids(&client, &format!("/v1/users/{user}/followers?limit=100")).await != Some(followers)
                || served_ids(&client, &format!("/v1/projections/mutual-follows/friends/{user}?limit=100")).await
                    != Some(truth.friends(user))
            {
                return false;
            }
            let requesters: BTreeSet<i64> = truth.requests.iter().filter(|p| p.1 == user).map(|p| p.0).collect();
            let blocked_by = truth.blocks.iter().filter(|p| p.1 == user).count();
            let signals = client.get(&format!("/v1/projections/relation-signals/blocked_by/{user}")).await.body;
            if served_ids(&client, &format!("/v1/projections/relation-signals/requests/{user}?limit=100")).await
                != Some(requesters)
                || signals["value"] != blocked_by
            {
                return false;
            }
        }
        true
    })
    .await;
}
