//! A tenant's relation policy, as WASM: the `following-cap` example enforces Mastodon's cap with its own
//! code reaching the client, privacy still asks for approval under it, blocks come first, and a trapping
//! policy takes the tenant's failure mode (open: the host's rule decides; closed: 503).

use std::time::Duration;

use futures::future::join_all;
use reqwest::Method;
use serde_json::json;
use strand::plugins::EXAMPLES;
use strand_test_support::{on_every_backend, recount_follows, test_plugin, wait_until, Backend, Reply, TestServer};

use super::deploy;

on_every_backend!(
    the_following_cap_refuses_past_the_cap_with_its_own_code,
    a_trapping_policy_takes_the_tenants_failure_mode,
    parallel_follows_never_pass_the_cap,
    a_failing_canary_policy_is_rolled_back_while_every_tenant_writes_on
);

/// `user` of `tenant` follows `count` users from 1 000 000 on, written straight into the truth (the follows
/// and the tenant's counts, counted again from them).
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
    recount_follows(server.database(), tenant).await;
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
    for tenant in ["open", "closed", "legacy"] {
        let deployed =
            deploy(&server, tenant, "relation-policy", "default", test_plugin("trapping-relation-policy")).await;
        assert_eq!(deployed.status, 200, "{deployed:?}");
    }
    // The relation policy's failure mode is its own: the rate limiter's stays open.
    let closed = json!({"rate_limit_failure": "open", "relation_policy_failure": "closed"});
    let set = server.admin().send_json(Method::PUT, "/admin/v1/tenants/closed/settings", &closed).await;
    assert_eq!(set.status, 200, "{set:?}");
    // Settings that do not name it (written before it existed) keep meaning what they meant: the rate
    // limiter's mode.
    let legacy = json!({"rate_limit_failure": "closed"});
    let set = server.admin().send_json(Method::PUT, "/admin/v1/tenants/legacy/settings", &legacy).await;
    assert_eq!(set.status, 200, "{set:?}");
    let refused = server.client("legacy", 1).put("/v1/me/following/666").await;
    assert_eq!((refused.status, refused.code()), (503, "relation_policy_unavailable"), "{refused:?}");

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

/// A follow answered within a generous deadline: a write that hangs (a deadlock, a stalled writer) fails
/// the test instead of the suite's time limit.
async fn answered(server: &TestServer, tenant: &str, user: i64, target: i64) -> Reply {
    let (client, path) = (server.client(tenant, user), format!("/v1/me/following/{target}"));
    tokio::time::timeout(Duration::from_secs(30), client.put(&path))
        .await
        .unwrap_or_else(|_| panic!("{tenant}'s follow {user} -> {target} was not answered within 30 s"))
}

/// The cap counts the truth at the moment of the decision: 3 places left, 6 follows at once and then 3 back
/// to back — exactly 3 pass, whatever the follow-counts projection has caught up with.
async fn parallel_follows_never_pass_the_cap(backend: Backend) {
    let server = TestServer::start(backend).await;
    let cap = EXAMPLES.iter().find(|e| e.name == "following-cap").unwrap();
    assert_eq!(deploy(&server, "acme", "relation-policy", "default", cap.wasm.to_vec()).await.status, 200);
    seed_followings(&server, "acme", 1, 7_497).await;

    let at_once = join_all((10..16).map(|target| answered(&server, "acme", 1, target))).await;
    let mut statuses: Vec<u16> = at_once.iter().map(|reply| reply.status).collect();
    for target in 20..23 {
        statuses.push(answered(&server, "acme", 1, target).await.status);
    }
    let passed = statuses.iter().filter(|status| **status == 200).count();
    assert_eq!(passed, 3, "exactly the 3 places left: {statuses:?} {at_once:?}");
    assert!(statuses.iter().all(|status| [200, 403].contains(status)), "{statuses:?}");
    let followings: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM following WHERE tenant_id = 'acme' AND from_user_id = 1 AND rel_status = 1",
    )
    .fetch_one(server.database().reader())
    .await
    .unwrap();
    assert_eq!(followings, 7_500, "the truth holds the cap exactly");
}

/// A canary relation policy that traps is rolled back by the host while its tenant's follows go on (none
/// hangs: the rollback's writes never wait for a connection a follow holds), and another tenant writes.
async fn a_failing_canary_policy_is_rolled_back_while_every_tenant_writes_on(backend: Backend) {
    let server = TestServer::start(backend).await;
    let stable = EXAMPLES.iter().find(|e| e.name == "following-cap").unwrap();
    assert_eq!(deploy(&server, "evil", "relation-policy", "default", stable.wasm.to_vec()).await.status, 200);
    let slot = "/admin/v1/tenants/evil/plugins/relation-policy/default?canary=99";
    let canary = server.admin().upload(Method::PUT, slot, test_plugin("trapping-relation-policy")).await;
    assert_eq!(canary.status, 200, "{canary:?}");

    // The trapping policy traps on follows of 666; the tenant fails open, so every follow is answered 200.
    for user in 1..=40 {
        let reply = answered(&server, "evil", user, 666).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        if user % 10 == 0 {
            assert_eq!(answered(&server, "acme", user, 2).await.status, 200, "another tenant writes meanwhile");
        }
    }
    wait_until("the host rolls the canary back", Duration::from_secs(30), || async {
        let listed = server.admin().get("/admin/v1/tenants/evil/plugins").await.body;
        listed["plugins"].as_array().unwrap().iter().all(|p| p["state"] != "canary")
    })
    .await;
    assert_eq!(answered(&server, "evil", 41, 666).await.status, 200, "after the rollback: the stable version");
}
