//! A projector deployed as a shadow builds a space of its own from the truth and takes every event beside
//! the active version; `diff` compares the two, `promote` switches to it without a rebuild (the counts are
//! exact at once and stay so under writes), `abort` drops its data, and a shadow failing clearly more often
//! than the active version is rolled back by the host.

use std::time::{Duration, Instant};

use reqwest::Method;
use strand::cache::{Cache, Space};
use strand::plugins::BUNDLED;
use strand_test_support::{test_plugin, wait_until, Redis, TestServer};

use super::backfill::counters_equal_truth;
use super::{pipeline, redis_cache, storm};

fn follow_counts() -> Vec<u8> {
    BUNDLED.iter().find(|b| b.name == "follow-counts").unwrap().wasm.to_vec()
}

/// The state of each stored version of `tenant`'s projector `name`, by version.
async fn states(server: &TestServer, tenant: &str, name: &str) -> Vec<(i64, String)> {
    let listed = server.admin().get(&format!("/admin/v1/tenants/{tenant}/plugins")).await;
    let plugins = listed.body["plugins"].as_array().cloned().unwrap_or_default();
    plugins
        .iter()
        .filter(|p| p["kind"] == "projector" && p["name"] == name)
        .map(|p| (p["version"].as_i64().unwrap(), p["state"].as_str().unwrap().to_owned()))
        .collect()
}

async fn complete(cache: &Cache, tenant: &str, plugin: &str, version: i64) -> bool {
    cache.built_by(Space { tenant, plugin, version }).await.unwrap().is_some()
}

async fn data_keys(cache: &Cache, tenant: &str, plugin: &str, version: i64) -> usize {
    cache.data_keys(Space { tenant, plugin, version }).await.unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shadow_projector_under_writes_is_promoted_without_a_rebuild_and_counts_stay_exact() {
    let tenant = format!("sh{}", std::process::id());
    let redis_url = Redis::shared().unwrap().url();
    let cache = redis_cache(&redis_url).await;
    let server = pipeline(&redis_url).await;
    let (admin, db) = (server.admin(), server.database());
    let path = format!("/admin/v1/tenants/{tenant}/plugins/projector/late");
    storm(&server, &tenant, 0).await;
    // Version 1 counts followers.
    assert_eq!(admin.upload(Method::PUT, &path, test_plugin("hostile-projector")).await.status, 200);
    wait_until("version 1 is exact", Duration::from_secs(60), || async {
        counters_equal_truth(db, &cache, &tenant, ("late", 1), false).await
    })
    .await;

    // Version 2 (followers and followings) as a shadow, deployed while writes go on.
    let shadow_path = format!("{path}?shadow=true");
    let shadow = admin.upload(Method::PUT, &shadow_path, follow_counts());
    let (deployed, ()) = tokio::join!(shadow, storm(&server, &tenant, 1));
    assert_eq!(deployed.status, 200, "{deployed:?}");
    assert_eq!(deployed.body["plugin"]["state"], "shadow", "{deployed:?}");
    storm(&server, &tenant, 2).await;
    wait_until("the shadow is built and exact beside version 1", Duration::from_secs(60), || async {
        counters_equal_truth(db, &cache, &tenant, ("late", 2), true).await
            && counters_equal_truth(db, &cache, &tenant, ("late", 1), false).await
    })
    .await;
    assert_eq!(states(&server, &tenant, "late").await, [(1, "active".to_owned()), (2, "shadow".to_owned())]);
    let listed = admin.get(&format!("/admin/v1/tenants/{tenant}/plugins")).await;
    let rollout = &listed.body["rollouts"][0];
    assert_eq!((rollout["mode"].as_str(), rollout["candidate_version"].as_i64()), (Some("shadow"), Some(2)));
    assert!(rollout["rates"]["candidate"]["calls"].as_u64().unwrap() > 0, "the shadow's calls are counted: {rollout}");

    let diff = admin.get(&format!("{path}/diff?sample=1000")).await;
    assert_eq!(diff.status, 200, "{diff:?}");
    let body = &diff.body;
    assert_eq!((body["active"]["complete"].as_bool(), body["shadow"]["complete"].as_bool()), (Some(true), Some(true)));
    assert_eq!(body["active"]["counters"].as_u64(), Some(6), "followers of users 1..=6: {body}");
    assert_eq!(body["shadow"]["counters"].as_u64(), Some(12), "followers and followings: {body}");
    assert_eq!(body["only_in_active"], serde_json::json!([]), "{body}");
    assert!(body["only_in_shadow"]
        .as_array()
        .unwrap()
        .iter()
        .all(|k| k.as_str().unwrap().starts_with("c.followings:")));
    assert!(body["compared"].as_u64().unwrap() >= 1, "{body}");
    assert_eq!(body["differing"], serde_json::json!([]), "the followers agree: {body}");
    let built = super::backfill::backfill_record(&server, "late", &tenant).await;

    // Promoted while writes go on: reads switch to the complete space; nothing is built again.
    let writes = storm(&server, &tenant, 3);
    let promote = async {
        let asked = Instant::now();
        let promoted = admin.post(&format!("{path}/promote")).await;
        assert!(complete(&cache, &tenant, "late", 2).await, "the promoted space is complete at once");
        (promoted, asked.elapsed())
    };
    let ((promoted, took), ()) = tokio::join!(promote, writes);
    assert_eq!(promoted.status, 200, "{promoted:?}");
    eprintln!("promote answered and the new space read complete in {took:?}");
    assert_eq!(states(&server, &tenant, "late").await, [(1, "inactive".to_owned()), (2, "active".to_owned())]);
    wait_until("the old space is dropped", Duration::from_secs(30), || async {
        !complete(&cache, &tenant, "late", 1).await && data_keys(&cache, &tenant, "late", 1).await == 0
    })
    .await;
    storm(&server, &tenant, 4).await;
    wait_until("version 2 stays exact", Duration::from_secs(60), || async {
        counters_equal_truth(db, &cache, &tenant, ("late", 2), true).await
    })
    .await;
    assert_eq!(super::backfill::backfill_record(&server, "late", &tenant).await, built, "no rebuild after promote");

    // A shadow aborted: its data is dropped, the active version goes on.
    let shadow = admin.upload(Method::PUT, &format!("{path}?shadow=true"), test_plugin("hostile-projector")).await;
    assert_eq!(shadow.body["plugin"]["version"], 3, "{shadow:?}");
    wait_until("the third version's shadow is built", Duration::from_secs(60), || complete(&cache, &tenant, "late", 3))
        .await;
    assert!(data_keys(&cache, &tenant, "late", 3).await > 0);
    assert_eq!(admin.post(&format!("{path}/abort")).await.status, 204);
    wait_until("the aborted shadow's data is dropped", Duration::from_secs(30), || async {
        !complete(&cache, &tenant, "late", 3).await && data_keys(&cache, &tenant, "late", 3).await == 0
    })
    .await;
    assert_eq!(admin.get(&format!("{path}/diff")).await.status, 404, "no shadow runs");
    storm(&server, &tenant, 5).await;
    wait_until("version 2 is still exact", Duration::from_secs(60), || async {
        counters_equal_truth(db, &cache, &tenant, ("late", 2), true).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shadow_that_traps_is_rolled_back_by_the_host_and_its_data_dropped() {
    let tenant = format!("st{}", std::process::id());
    let redis_url = Redis::shared().unwrap().url();
    let cache = redis_cache(&redis_url).await;
    let server = pipeline(&redis_url).await;
    let admin = server.admin();
    let path = format!("/admin/v1/tenants/{tenant}/plugins/projector/trapped");
    assert_eq!(admin.upload(Method::PUT, &path, follow_counts()).await.status, 200);
    storm(&server, &tenant, 0).await;
    let shadow = admin.upload(Method::PUT, &format!("{path}?shadow=true"), test_plugin("hostile-projector")).await;
    assert_eq!(shadow.status, 200, "{shadow:?}");
    wait_until("the shadow is built", Duration::from_secs(60), || complete(&cache, &tenant, "trapped", 2)).await;
    // The shadow traps on every event of user 666; the active version takes them all.
    let trapper = server.client(&tenant, 666);
    for round in 0..3 {
        for user in 1..=6 {
            if round == 1 {
                trapper.unfollow(user).await;
            } else {
                trapper.follow(user).await;
            }
        }
    }
    wait_until("the shadow is rolled back", Duration::from_secs(60), || async {
        states(&server, &tenant, "trapped").await == [(1, "active".to_owned()), (2, "inactive".to_owned())]
    })
    .await;
    // Recorded right after the abort it describes.
    let audit_path = format!("/admin/v1/audit?tenant={tenant}");
    wait_until("the rollback is in the audit log", Duration::from_secs(30), || async {
        admin.get(&audit_path).await.body["entries"][0]["action"] == "automatic_rollback"
    })
    .await;
    let audit = admin.get(&audit_path).await;
    let entry = &audit.body["entries"][0];
    assert_eq!(
        (entry["action"].as_str(), entry["actor"].as_str()),
        (Some("automatic_rollback"), Some("host")),
        "{entry}"
    );
    assert_eq!(entry["slot"], "projector/trapped", "{entry}");
    wait_until("the shadow's data is dropped", Duration::from_secs(30), || async {
        !complete(&cache, &tenant, "trapped", 2).await && data_keys(&cache, &tenant, "trapped", 2).await == 0
    })
    .await;
    let db = server.database();
    wait_until("the active version is exact", Duration::from_secs(60), || async {
        counters_equal_truth(db, &cache, &tenant, ("trapped", 1), true).await
    })
    .await;
}
