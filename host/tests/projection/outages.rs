//! Redis down: writes go on (the bundled policy's buckets fail open), reads come from the database, and
//! once Redis is back — empty — the workers build the caches again to the exact truth.

use std::time::Duration;

use strand::cache::Space;
use strand::projection::reconcile;
use strand_test_support::{wait_until, Redis};

use super::{pipeline, redis_cache, storm};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn while_redis_is_down_writes_go_on_and_reads_fall_back_then_the_caches_are_rebuilt() {
    let tenant = format!("rd{}", std::process::id());
    let redis = Redis::dedicated().unwrap();
    let port = redis.port();
    let url = format!("redis://127.0.0.1:{port}/0");
    let server = pipeline(&url).await;
    let cache = redis_cache(&url).await;
    let space = Space::bundled(&tenant, "follow-counts");
    let caught_up = || async {
        cache.built_by(space).await.is_ok_and(|b| b.is_some())
            && reconcile(server.database(), Some(&cache), 100).await.is_ok_and(|r| r.is_clean())
    };
    storm(&server, &tenant, 0).await;
    wait_until("the caches are built and caught up", Duration::from_secs(30), caught_up).await;
    let followers_of_1 = || async {
        let reply = server.client(&tenant, 1).get("/v1/users/1/counts").await;
        assert_eq!(reply.status, 200, "{reply:?}");
        reply.body["followers"].as_i64().unwrap()
    };
    let before = followers_of_1().await;

    redis.stop().unwrap();
    let followed = server.client(&tenant, 7).follow(1).await;
    assert_eq!(followed["changed"], true, "the write goes through (the bundled policy fails open)");
    assert_eq!(followers_of_1().await, before + 1, "read from the database");
    storm(&server, &tenant, 1).await;

    let _back = Redis::start_on(port).unwrap();
    wait_until("the caches are rebuilt to the truth", Duration::from_secs(60), caught_up).await;
}
