//! `strand reconcile` finds nothing once the workers caught up, and reports (exit 1) a counter, a list or a
//! follower row that differs from the truth; `strand rebuild` derives every projection from the truth alone.

use std::time::Duration;

use redis::AsyncCommands;
use strand::cache::Space;
use strand::projection::reconcile;
use strand_test_support::{wait_until, Backend, Redis, TestServer};

use super::{pipeline, redis_cache, storm, strand_command};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconcile_is_clean_after_catching_up_and_reports_every_difference() {
    let tenant = format!("rc{}", std::process::id());
    let redis_url = Redis::shared().unwrap().url();
    let server = pipeline(&redis_url).await;
    storm(&server, &tenant, 0).await;
    let mut redis = redis::Client::open(redis_url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let cache = redis_cache(&redis_url).await;
    wait_until("the projections caught up", Duration::from_secs(30), || {
        let (db, cache) = (server.database().clone(), cache.clone());
        async move { reconcile(&db, Some(&cache), 100).await.unwrap().is_clean() }
    })
    .await;
    let (code, output) = strand_command(&["reconcile"], &server.config.database_url, &redis_url).await;
    assert_eq!(code, 0, "{output}");
    assert!(output.contains(" 0 differences"), "{output}");

    let _: () = redis.set(Space::bundled(&tenant, "follow-counts").counter("followers", [1]), 999).await.unwrap();
    let _: () = redis
        .zadd(Space::bundled(&tenant, "follow-lists").sorted_set("following", [2]), "00000000000000000042", 1)
        .await
        .unwrap();
    sqlx::query("UPDATE follower SET rel_status = 1 - rel_status WHERE tenant_id = ? AND to_user_id = 3")
        .bind(&tenant)
        .execute(server.database().writer())
        .await
        .unwrap();
    let (code, output) = strand_command(&["reconcile"], &server.config.database_url, &redis_url).await;
    assert_eq!(code, 1, "{output}");
    assert!(
        output.contains(&format!("{}: truth", Space::bundled(&tenant, "follow-counts").counter("followers", [1]))),
        "{output}"
    );
    assert!(output.contains(&Space::bundled(&tenant, "follow-lists").sorted_set("following", [2])), "{output}");
    assert!(output.contains(&format!("follower (\"{tenant}\"")), "{output}");
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
