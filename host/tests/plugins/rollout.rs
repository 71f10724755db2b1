//! Staged rollout of a rate limiter: a canary takes a stable share of the users, promotion and abort drop
//! no request, and a canary failing clearly more often than the stable version is rolled back by the host.

use std::time::Duration;

use futures::future::join_all;
use reqwest::Method;
use serde_json::json;
use strand_test_support::{test_plugin, token, wait_until, Backend, TestServer, TEST_SECRET};

use super::deploy;

const SLOT: &str = "/admin/v1/tenants/acme/plugins/rate-limiter/default";

/// Limits of a candidate whose calls must not time out under the tests' bursts (the platform's maximum).
const PATIENT: &str = "deadline_ms=2000";

/// Each of `users` of acme follows `target`, all at once; the statuses, in user order.
async fn writes(server: &TestServer, users: std::ops::RangeInclusive<i64>, target: i64) -> Vec<u16> {
    let calls = users.map(|user| {
        let client = server.client("acme", user);
        async move { client.put(&format!("/v1/me/following/{target}")).await.status }
    });
    join_all(calls).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_canary_takes_a_stable_share_and_promotion_and_abort_drop_no_request() {
    let server = TestServer::start(Backend::Sqlite).await;
    let (admin, abort, promote) = (server.admin(), format!("{SLOT}/abort"), format!("{SLOT}/promote"));
    // A deadline no burst of 1000 writes on a loaded 2-core machine reaches: a timed-out call fails open (200),
    // which would read as the stable version.
    let canary =
        server.admin().upload(Method::PUT, &format!("{SLOT}?canary=10&{PATIENT}"), test_plugin("deny-all")).await;
    assert_eq!(canary.status, 200, "{canary:?}");
    assert_eq!(
        (canary.body["plugin"]["state"].as_str(), canary.body["plugin"]["canary_percent"].as_i64()),
        (Some("canary"), Some(10))
    );

    let first = writes(&server, 1..=1000, 5001).await;
    let denied = first.iter().filter(|s| **s == 429).count();
    assert!(first.iter().all(|s| *s == 200 || *s == 429), "{first:?}");
    assert!((70..=130).contains(&denied), "about 10% of 1000 users meet the deny-all canary: {denied}");
    let again = writes(&server, 1..=1000, 5002).await;
    assert_eq!(first, again, "each user meets the same version every time");
    let sibling = server.sibling().await;
    assert_eq!(writes(&sibling, 1..=1000, 5007).await, first, "and on every node");
    sibling.stop().await;

    // Abort under load: every request answered, by either version; then nobody is denied.
    let (during, aborted) = tokio::join!(writes(&server, 1..=300, 5003), admin.post(&abort));
    assert_eq!(aborted.status, 204, "{aborted:?}");
    assert!(during.iter().all(|s| *s == 200 || *s == 429), "no request dropped: {during:?}");
    assert!(writes(&server, 1..=300, 5004).await.iter().all(|s| *s == 200));
    assert_eq!(server.admin().post(&format!("{SLOT}/abort")).await.code(), "plugin_not_found", "nothing to abort");

    // Promotion under load: then everybody meets the former canary.
    let canary =
        server.admin().upload(Method::PUT, &format!("{SLOT}?canary=10&{PATIENT}"), test_plugin("deny-all")).await;
    assert_eq!(canary.status, 200);
    let (during, promoted) = tokio::join!(writes(&server, 1..=300, 5005), admin.post(&promote));
    assert_eq!(promoted.status, 200, "{promoted:?}");
    assert_eq!(promoted.body["state"], "active");
    assert!(during.iter().all(|s| *s == 200 || *s == 429), "no request dropped: {during:?}");
    assert!(writes(&server, 1..=300, 5006).await.iter().all(|s| *s == 429), "deny-all serves everyone");
    let audit = server.admin().get("/admin/v1/audit?tenant=acme").await.body;
    let actions: Vec<&str> =
        audit["entries"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["promote", "deploy", "abort", "abort", "deploy"], "the refused abort too");
    let projector = deploy(&server, "acme", "projector", "late", test_plugin("hostile-projector")).await;
    assert_eq!(projector.status, 200);
    let canaried = server
        .admin()
        .upload(
            Method::PUT,
            "/admin/v1/tenants/acme/plugins/projector/late?canary=10",
            test_plugin("hostile-projector"),
        )
        .await;
    assert_eq!(
        (canaried.status, canaried.code()),
        (400, "invalid_rollout"),
        "projectors are not canaried: {canaried:?}"
    );
    let shadowed_limiter =
        server.admin().upload(Method::PUT, &format!("{SLOT}?shadow=true"), test_plugin("deny-all")).await;
    assert_eq!(shadowed_limiter.code(), "invalid_rollout", "rate limiters are not shadowed: {shadowed_limiter:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_canary_that_traps_on_5_percent_of_inputs_is_rolled_back_automatically() {
    let server = TestServer::start_with(Backend::Sqlite, |config| {
        config.rollout_max_excess_failure_rate = 0.02;
        config.rollout_min_calls = 40;
    })
    .await;
    let canary = server.admin().upload(Method::PUT, &format!("{SLOT}?canary=50"), test_plugin("hostile-limiter")).await;
    assert_eq!(canary.status, 200, "{canary:?}");
    // Each user follows its own target from 10000 up; the canary traps on every twentieth (fails open: 200).
    let mut round = 0;
    wait_until("the host rolls the canary back", Duration::from_secs(30), || {
        round += 1;
        let (server, base) = (&server, 10_000 + round * 1_000);
        async move {
            let replies = writes(server, 1..=200, base).await;
            assert!(replies.iter().all(|s| *s == 200), "fails open, never dropped: {replies:?}");
            let listed = server.admin().get("/admin/v1/tenants/acme/plugins").await.body;
            listed["plugins"].as_array().unwrap().iter().all(|p| p["state"] != "canary")
        }
    })
    .await;
    let audit = server.admin().get("/admin/v1/audit?tenant=acme").await.body;
    let rollback = &audit["entries"][0];
    assert_eq!(
        (rollback["action"].as_str(), rollback["actor"].as_str()),
        (Some("automatic_rollback"), Some("host")),
        "{audit}"
    );
    assert!(rollback["detail"].as_str().unwrap().contains("failed"), "{rollback}");
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(r#"strand_rollout_automatic_rollbacks_total{tenant="acme",kind="rate-limiter"}"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn test_traffic_pinned_to_a_candidate_reaches_it_only_where_the_tenant_allows_it() {
    let server = TestServer::start(Backend::Sqlite).await;
    let candidate =
        server.admin().upload(Method::PUT, &format!("{SLOT}?canary=0&{PATIENT}"), test_plugin("deny-all")).await;
    assert_eq!(candidate.status, 200, "{candidate:?}");
    let version = candidate.body["plugin"]["version"].as_i64().unwrap();
    assert!(writes(&server, 1..=200, 6001).await.iter().all(|s| *s == 200), "a 0% canary takes no user");
    let pinned = |target: i64| {
        let request = reqwest::Client::new()
            .put(server.url(&format!("/v1/me/following/{target}")))
            .bearer_auth(token(TEST_SECRET, "1", "acme", 600))
            .header("strand-pinned-version", version.to_string());
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(pinned(6002).await, 200, "ignored: the tenant does not allow pinning");
    let allow = json!({"rate_limit_failure": "open", "allow_pinned_versions": true});
    assert_eq!(server.admin().send_json(Method::PUT, "/admin/v1/tenants/acme/settings", &allow).await.status, 200);
    assert_eq!(pinned(6003).await, 429, "the pinned request runs the candidate");
    assert_eq!(server.client("acme", 1).put("/v1/me/following/6004").await.status, 200, "others do not");
    assert_eq!(server.admin().post(&format!("{SLOT}/promote")).await.status, 200);
    assert!(writes(&server, 1..=50, 6005).await.iter().all(|s| *s == 429), "promoted: everyone");
}
