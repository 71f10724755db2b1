//! A tenant's relation policy, as WASM: the `following-cap` example enforces Mastodon's cap with its own
//! code reaching the client, privacy still asks for approval under it, blocks come first, and a trapping
//! policy takes the tenant's failure mode (open: the host's rule decides; closed: 503).

use reqwest::Method;
use serde_json::json;
use strand::plugins::EXAMPLES;
use strand_test_support::{on_every_backend, test_plugin, Backend, TestServer};

use super::deploy;

on_every_backend!(
    the_following_cap_refuses_past_the_cap_with_its_own_code,
    a_trapping_policy_takes_the_tenants_failure_mode
);

/// `user` of `tenant` follows `count` users from 1 000 000 on, written straight into the truth.
async fn seed_followings(server: &TestServer, tenant: &str, user: i64, count: i64) {
    for chunk in (0..count).collect::<Vec<_>>().chunks(500) {
        let values: Vec<String> =
            chunk.iter().map(|i| format!("('{tenant}', {user}, {}, 1, 1, {i}, {i})", 1_000_000 + i)).collect();
        let sql = format!(
            "INSERT INTO following (tenant_id, from_user_id, to_user_id, rel_status, version, created_at, updated_at) VALUES {}",
            values.join(", ")
        );
        sqlx::query(&sql).execute(server.database().writer()).await.expect("seeding follows");
    }
}

async fn the_following_cap_refuses_past_the_cap_with_its_own_code(backend: Backend) {
    let server = TestServer::start(backend).await;
    let cap = EXAMPLES.iter().find(|e| e.name == "following-cap").unwrap();
    let deployed = deploy(&server, "acme", "relation-policy", "default", cap.wasm.to_vec()).await;
    assert_eq!(deployed.status, 200, "{deployed:?}");
    seed_followings(&server, "acme", 1, 7_500).await;
    seed_followings(&server, "acme", 2, 7_499).await;

    let refused = server.client("acme", 1).put("/v1/me/following/5").await;
    assert_eq!((refused.status, refused.code()), (403, "policy.following_cap"), "{refused:?}");
    assert_eq!(refused.content_type, "application/problem+json");
    assert!(refused.body["detail"].as_str().unwrap().contains("7500"), "{refused:?}");
    let refused_again = server.client("acme", 1).put("/v1/me/following/5").await;
    assert_eq!(refused_again.code(), "policy.following_cap", "nothing was written: still refused");
    assert_eq!(server.client("acme", 2).follow(5).await["following"], true, "under the cap");
    // Another tenant has no policy of its own: the host's rule, no cap.
    seed_followings(&server, "other", 1, 7_500).await;
    assert_eq!(server.client("other", 1).follow(5).await["following"], true);

    // Under the policy a private account still requires approval; a block is refused before it is asked.
    let private = server.client("acme", 6).send_json(Method::PUT, "/v1/me/settings", &json!({"private": true})).await;
    assert_eq!(private.status, 200);
    assert_eq!(server.client("acme", 3).follow(6).await["requested"], true);
    server.client("acme", 7).put("/v1/me/blocks/1").await;
    assert_eq!(server.client("acme", 1).put("/v1/me/following/7").await.code(), "blocked");
}

async fn a_trapping_policy_takes_the_tenants_failure_mode(backend: Backend) {
    let server = TestServer::start(backend).await;
    for tenant in ["open", "closed"] {
        let deployed =
            deploy(&server, tenant, "relation-policy", "default", test_plugin("trapping-relation-policy")).await;
        assert_eq!(deployed.status, 200, "{deployed:?}");
    }
    let closed = json!({"rate_limit_failure": "closed"});
    let set = server.admin().send_json(Method::PUT, "/admin/v1/tenants/closed/settings", &closed).await;
    assert_eq!(set.status, 200, "{set:?}");

    assert_eq!(server.client("open", 1).follow(666).await["following"], true, "failing open: the host's rule decides");
    let refused = server.client("closed", 1).put("/v1/me/following/666").await;
    assert_eq!((refused.status, refused.code()), (503, "relation_policy_unavailable"), "{refused:?}");
    assert_eq!(server.client("closed", 1).follow(5).await["following"], true, "only the trapping calls fail");
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(
            r#"strand_plugin_calls_total{tenant="closed",kind="relation-policy",plugin="default",outcome="trap"}"#
        ),
        "the trap is counted"
    );
}
