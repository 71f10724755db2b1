//! The host enforces the policy's token buckets exactly: in Redis (one, or a Redis Cluster) for any number
//! of nodes, in-process on the embedded default.

use std::time::Instant;

use futures::future::join_all;
use strand::plugins::Bucket;
use strand::ratelimit::TokenBuckets;
use strand_test_support::{Backend, Redis, RedisCluster, TestServer};

/// One Redis and a Redis Cluster, named.
fn stores() -> [(&'static str, String); 2] {
    [("redis", Redis::shared().unwrap().url()), ("cluster", RedisCluster::shared().unwrap().url())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_redis_bucket_grants_exactly_its_capacity_to_8_concurrent_clients() {
    for (store, url) in stores() {
        bucket_grants_exactly_its_capacity(&url, &format!("exact-{store}-{}", std::process::id())).await;
    }
}

async fn bucket_grants_exactly_its_capacity(url: &str, tenant: &str) {
    let tenant: strand::graph::TenantId = tenant.parse().unwrap();
    let buckets = TokenBuckets::connect(Some(url)).await.unwrap();
    let bucket = Bucket { key: "exact".into(), capacity: 37, refill_per_second: 0.0001, cost: 1 };
    let clients = (0..8).map(|_| async {
        let mut granted = 0;
        for _ in 0..20 {
            if buckets.take(&tenant, &bucket).await.unwrap().is_none() {
                granted += 1;
            }
        }
        granted
    });
    let granted: u32 = join_all(clients).await.into_iter().sum();
    assert_eq!(granted, 37, "{url}: 160 attempts on a 37-token bucket that barely refills");
    let retry = buckets.take(&tenant, &bucket).await.unwrap().expect("empty");
    assert!(retry.as_secs() > 1000, "retry after the refill of one token: {retry:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn follows_through_redis_never_exceed_capacity_plus_refill() {
    for (store, url) in stores() {
        follows_never_exceed_capacity_plus_refill(url, store).await;
    }
}

async fn follows_never_exceed_capacity_plus_refill(redis_url: String, tenant: &str) {
    let server = TestServer::start_with(Backend::Sqlite, |c| c.redis_url = Some(redis_url)).await;
    let alice = server.client(tenant, 1);
    let started = Instant::now();
    let clients = (0..8).map(|task| {
        let alice = alice.clone();
        async move {
            let mut replies = Vec::new();
            for i in 0..30 {
                replies.push(alice.put(&format!("/v1/me/following/{}", 10_000 * (task + 1) + i)).await);
            }
            replies
        }
    });
    let replies: Vec<_> = join_all(clients).await.into_iter().flatten().collect();
    let elapsed = started.elapsed().as_secs_f64();
    let granted = replies.iter().filter(|r| r.status == 200).count() as f64;
    // The bundled policy: 100 tokens, 1 per second, per user and action.
    assert!(granted >= 100.0, "{tenant}: the full burst is granted: {granted}");
    assert!(
        granted <= 100.0 + elapsed.ceil(),
        "{tenant}: never more than capacity + refill: {granted} in {elapsed:.2}s"
    );
    for refused in replies.iter().filter(|r| r.status != 200) {
        assert_eq!((refused.status, refused.code()), (429, "rate_limited"));
        assert_eq!(refused.headers["retry-after"], "1");
    }
    // Unfollows have their own bucket.
    assert_eq!(alice.delete("/v1/me/following/10000").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_bucket_limits_follows_too() {
    let server = TestServer::start(Backend::Sqlite).await;
    let alice = server.client("acme", 1);
    // Follows until the first refusal (a token refills each second, so on a slow machine a few more than
    // the burst may pass first: counted against the time taken, never assumed away).
    let started = std::time::Instant::now();
    let mut granted = 0;
    for target in 2..2_000 {
        match alice.put(&format!("/v1/me/following/{target}")).await.status {
            200 => granted += 1,
            status => {
                assert_eq!(status, 429);
                break;
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert!(granted >= 100, "the full burst is granted: {granted}");
    assert!(granted as f64 <= 100.0 + elapsed.ceil(), "capacity + refill at most: {granted} in {elapsed:.2}s");
}
