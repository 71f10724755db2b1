//! The example `mutual-follows` projector, deployed at runtime: backfilled from the truth, served by
//! `/v1/projections`, and exact — every user's set of friends equal to the pairs that follow each other in
//! the database — after concurrent follow/unfollow storms whose two directions travel apart; on one Redis
//! and on a Redis Cluster, where the two users of a pair are in different shards.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use reqwest::Method;
use sqlx::Row;
use strand::plugins::EXAMPLES;
use strand_test_support::{wait_until, ApiClient, Redis, RedisCluster, TestServer};

use super::{pipeline, storm};

/// Per user, who follows them and is followed back, in the truth.
async fn friends_in_the_truth(server: &TestServer, tenant: &str) -> BTreeMap<i64, BTreeSet<i64>> {
    let rows = sqlx::query("SELECT from_user_id, to_user_id FROM following WHERE tenant_id = ? AND rel_status = 1")
        .bind(tenant)
        .fetch_all(server.database().reader())
        .await
        .unwrap();
    let edges: BTreeSet<(i64, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let mut friends: BTreeMap<i64, BTreeSet<i64>> = (1..=6).map(|u| (u, BTreeSet::new())).collect();
    for &(a, b) in &edges {
        if edges.contains(&(b, a)) {
            friends.entry(a).or_default().insert(b);
        }
    }
    friends
}

/// Per user, the served set of friends and its `total`; `None` while any is not served yet.
async fn friends_served(client: &ApiClient) -> Option<BTreeMap<i64, BTreeSet<i64>>> {
    let mut served = BTreeMap::new();
    for user in 1..=6 {
        let reply = client.get(&format!("/v1/projections/mutual-follows/friends/{user}?limit=100")).await;
        if reply.status != 200 {
            return None;
        }
        let members: BTreeSet<i64> =
            reply.body["items"].as_array()?.iter().filter_map(|i| i["member"].as_i64()).collect();
        if reply.body["total"].as_u64() != Some(members.len() as u64) {
            return None;
        }
        served.insert(user, members);
    }
    Some(served)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_follows_deployed_at_runtime_are_backfilled_served_and_exact_under_storms() {
    mutual_follows_exact_on(&Redis::shared().unwrap().url(), "mf").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_follows_are_exact_on_a_redis_cluster_where_each_user_is_a_shard_of_its_own() {
    mutual_follows_exact_on(&RedisCluster::shared().unwrap().url(), "mc").await;
}

async fn mutual_follows_exact_on(redis_url: &str, tenant_prefix: &str) {
    let tenant = format!("{tenant_prefix}{}", std::process::id());
    let server = pipeline(redis_url).await;
    // Pairs that already follow each other before the projector exists: the backfill must find them.
    storm(&server, &tenant, 0).await;
    let example = EXAMPLES.iter().find(|e| e.name == "mutual-follows").unwrap();
    let path = format!("/admin/v1/tenants/{tenant}/plugins/projector/mutual-follows?readable=sorted-set:friends");
    let deployed = server.admin().upload(Method::PUT, &path, example.wasm.to_vec()).await;
    assert_eq!(deployed.status, 200, "{deployed:?}");
    storm(&server, &tenant, 1).await;
    storm(&server, &tenant, 2).await;

    let client = server.client(&tenant, 1);
    let truth = friends_in_the_truth(&server, &tenant).await;
    assert!(truth.values().any(|f| !f.is_empty()), "the storms leave some mutual follows: {truth:?}");
    wait_until("every user's served friends equal the truth's", Duration::from_secs(60), || async {
        friends_served(&client).await.as_ref() == Some(&truth)
    })
    .await;
}
