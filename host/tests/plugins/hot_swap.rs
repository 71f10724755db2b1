//! Deploy, swap under load, roll back, isolate tenants, survive restarts, refuse the wrong component.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use reqwest::Method;
use strand_test_support::{on_every_backend, test_plugin, wait_until, Backend, TestServer};

use super::{bundled, deploy, rollback};

on_every_backend!(deployed_plugins_survive_a_restart);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deploys_racing_on_two_nodes_each_get_their_own_version() {
    let node_a = TestServer::start(Backend::MariaDb).await;
    let node_b = node_a.sibling().await;
    let policy = bundled("rate-limiter", "default");
    let mut versions = Vec::new();
    for _ in 0..8 {
        let race = [&node_a, &node_b].map(|node| deploy(node, "race", "rate-limiter", "default", policy.clone()));
        for reply in join_all(race).await {
            assert_eq!(reply.status, 200, "every deploy is answered cleanly: {reply:?}");
            versions.push(reply.body["plugin"]["version"].as_i64().unwrap());
        }
    }
    versions.sort();
    assert_eq!(versions, (1..=16).collect::<Vec<_>>(), "one version number each");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deploy_through_one_node_reaches_the_others() {
    let node_a = TestServer::start_with(Backend::MariaDb, |c| c.refresh_ms = 100).await;
    let node_b = node_a.sibling().await;
    assert_eq!(node_b.client("acme", 1).put("/v1/me/following/2").await.status, 200);

    assert_eq!(deploy(&node_a, "acme", "rate-limiter", "default", test_plugin("hostile-limiter")).await.status, 200);
    let closed = serde_json::json!({"rate_limit_failure": "closed"});
    let set = node_a.admin().send_json(Method::PUT, "/admin/v1/tenants/acme/settings", &closed).await;
    assert_eq!(set.status, 200);
    let alice_on_b = node_b.client("acme", 1);
    wait_until("node B runs node A's plugin and settings", Duration::from_secs(30), || async {
        // Only the hostile plugin with the closed failure mode answers 503 here.
        alice_on_b.put("/v1/me/following/667").await.status == 503
    })
    .await;

    let removed = node_a.admin().call(Method::DELETE, "/admin/v1/tenants/acme/plugins/rate-limiter/default").await;
    assert_eq!(removed.status, 204);
    wait_until("node B is back on the bundled policy", Duration::from_secs(30), || async {
        alice_on_b.put("/v1/me/following/667").await.status == 200
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn swapping_the_policy_under_load_drops_no_request_and_applies_from_the_swap_on() {
    let server = TestServer::start(Backend::Sqlite).await;
    let v1 = deploy(&server, "acme", "rate-limiter", "default", bundled("rate-limiter", "default")).await;
    assert_eq!(v1.status, 200, "{v1:?}");
    assert_eq!(v1.body["plugin"]["version"], 1);

    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let senders: Vec<_> = (0..8)
        .map(|task| {
            let (stop, done, client) = (stop.clone(), done.clone(), server.client("acme", 1));
            tokio::spawn(async move {
                let mut outcomes = Vec::new();
                let mut i = 0i64;
                while !stop.load(Ordering::Relaxed) {
                    // A fresh caller each time: the v1 policy's per-user bucket never runs dry here.
                    let caller = 1_000_000 * (task + 1) + i;
                    let started = Instant::now();
                    let reply = client.as_user("acme", caller).put(&format!("/v1/me/following/{}", caller + 1)).await;
                    let code = reply.body["code"].as_str().map(str::to_owned);
                    outcomes.push((started, Instant::now(), reply.status, code));
                    done.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
                outcomes
            })
        })
        .collect();
    let under_load = |n: usize| {
        let done = done.clone();
        move || std::future::ready(done.load(Ordering::Relaxed) >= n)
    };
    wait_until("requests flow before the swap", Duration::from_secs(30), under_load(100)).await;
    let swap_started = Instant::now();
    let v2 = deploy(&server, "acme", "rate-limiter", "default", test_plugin("deny-all")).await;
    let swap_returned = Instant::now();
    assert_eq!(v2.status, 200, "{v2:?}");
    let after_swap = done.load(Ordering::Relaxed) + 100;
    wait_until("requests flow after the swap", Duration::from_secs(30), under_load(after_swap)).await;
    stop.store(true, Ordering::Relaxed);
    let outcomes: Vec<_> = join_all(senders).await.into_iter().flat_map(|r| r.expect("sender")).collect();

    let before = outcomes.iter().filter(|(_, done, ..)| *done < swap_started).count();
    let after: Vec<_> = outcomes.iter().filter(|(start, ..)| *start > swap_returned).collect();
    assert!(before > 0 && !after.is_empty(), "load on both sides of the swap: {before} before, {} after", after.len());
    for (start, done, status, code) in &outcomes {
        assert!(*status == 200 || *status == 429, "no request fails because of the swap: {status} {code:?}");
        if *done < swap_started {
            assert_eq!(*status, 200, "before the swap the old policy allows");
        }
        if *start > swap_returned {
            assert_eq!((*status, code.as_deref()), (429, Some("rate_limited")), "after the swap the new policy denies");
        }
    }

    let back = rollback(&server, "acme", "rate-limiter", "default", 1).await;
    assert_eq!((back.status, back.body["state"].as_str()), (200, Some("active")), "{back:?}");
    assert_eq!(server.client("acme", 5).put("/v1/me/following/6").await.status, 200, "rollback restores v1");
    let listed = server.admin().get("/admin/v1/tenants/acme/plugins").await;
    let states: Vec<_> = listed.body["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["version"].as_i64().unwrap(), p["state"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(states, vec![(1, "active".to_owned()), (2, "inactive".to_owned())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_tenants_plugin_never_affects_another() {
    let server = TestServer::start(Backend::Sqlite).await;
    assert_eq!(deploy(&server, "acme", "rate-limiter", "default", test_plugin("deny-all")).await.status, 200);
    let denied = server.client("acme", 1).put("/v1/me/following/2").await;
    assert_eq!((denied.status, denied.code()), (429, "rate_limited"));
    assert_eq!(server.client("globex", 1).put("/v1/me/following/2").await.status, 200);
    let globex = server.admin().get("/admin/v1/tenants/globex/plugins").await;
    assert_eq!(globex.body["plugins"], serde_json::json!([]));
    // Removing acme's plugin brings back the bundled default.
    let removed = server.admin().call(Method::DELETE, "/admin/v1/tenants/acme/plugins/rate-limiter/default").await;
    assert_eq!(removed.status, 204, "{removed:?}");
    assert_eq!(server.client("acme", 1).put("/v1/me/following/2").await.status, 200);
}

async fn deployed_plugins_survive_a_restart(backend: Backend) {
    let server = TestServer::start(backend).await;
    assert_eq!(deploy(&server, "acme", "rate-limiter", "default", test_plugin("deny-all")).await.status, 200);
    let projector = deploy(&server, "acme", "projector", "counts-copy", bundled("projector", "follow-counts")).await;
    assert_eq!(projector.status, 200, "{projector:?}");

    let server = server.restart().await;
    let denied = server.client("acme", 1).put("/v1/me/following/2").await;
    assert_eq!((denied.status, denied.code()), (429, "rate_limited"), "the deployed policy is back after a restart");
    let listed = server.admin().get("/admin/v1/tenants/acme/plugins").await.body;
    let names: Vec<_> = listed["plugins"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["counts-copy", "default"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_wrong_component_is_refused_with_a_clear_error() {
    let server = TestServer::start(Backend::Sqlite).await;
    let cases = [
        ("rate-limiter", "default", bundled("router", "default"), 422, "wrong_world"),
        ("projector", "lists", bundled("rate-limiter", "default"), 422, "wrong_world"),
        ("rate-limiter", "default", b"\0asm not really".to_vec(), 422, "invalid_component"),
        ("rate-limiter", "default", test_plugin("broken-limiter"), 422, "conformance_failed"),
        ("rate-limiter", "strict", test_plugin("deny-all"), 400, "invalid_plugin_name"),
        ("sorter", "default", test_plugin("deny-all"), 400, "invalid_plugin_kind"),
    ];
    for (kind, name, wasm, status, code) in cases {
        let reply = deploy(&server, "acme", kind, name, wasm).await;
        assert_eq!((reply.status, reply.code()), (status, code), "{kind}/{name}: {reply:?}");
        assert!(reply.body["detail"].as_str().is_some_and(|d| !d.is_empty()));
    }
    assert_eq!(server.admin().get("/admin/v1/tenants/acme/plugins").await.body["plugins"], serde_json::json!([]));
    let anonymous = server.client("acme", 1).call(Method::GET, "/admin/v1/tenants/acme/plugins").await;
    assert_eq!((anonymous.status, anonymous.code()), (401, "invalid_admin_token"), "a user JWT is not an admin token");
}
