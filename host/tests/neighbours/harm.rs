//! One test per harm evil can do, beside acme's steady load.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use strand_test_support::{test_plugin, wait_until};

use super::{acme_beside, deploy, evil_loop, neighbourhood, parked_relay_rows};

/// A tenant id as long as one may be (64 bytes): its own topics' names are long too.
const LONG_EVIL: &str = "evil-with-a-tenant-id-as-long-as-tenant-ids-may-be-0123456789abc";

/// Evil's router sends each event to a topic the broker refuses (its name is past Kafka's 249 bytes once
/// prefixed): evil's rows are parked — visible to evil's admin — and acme's are published as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_router_naming_refused_topics_parks_only_its_tenants_rows() {
    let server = neighbourhood(|_| {}).await;
    let deployed = deploy(&server, LONG_EVIL, "router/default", "", test_plugin("fanout-router")).await;
    assert_eq!(deployed.status, 200, "{deployed:?}");
    let harm = async {
        evil_loop(&server, LONG_EVIL, 778..779, 1).await;
    };
    acme_beside(&server, harm).await;
    let parked = parked_relay_rows(&server, LONG_EVIL, |rows| rows > 0).await;
    assert!(parked["reason"].as_str().unwrap_or("").contains("refused"), "{parked}");
}

/// Evil's router spins to its 2 s deadline on every event: past the relay's budget per batch its rows are
/// parked and retried beside the relay (then published through the default route), and acme's rows are
/// not held up behind them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_router_spinning_to_its_deadline_holds_up_only_its_tenant() {
    let server = neighbourhood(|c| c.plugin_max_deadline_ms = 2000).await;
    let deployed = deploy(&server, "evil", "router/default", "deadline_ms=2000", test_plugin("fanout-router")).await;
    assert_eq!(deployed.status, 200, "{deployed:?}");
    let harm = async {
        evil_loop(&server, "evil", 777..778, 1).await;
    };
    acme_beside(&server, harm).await;
    let parked = r#"strand_relay_parked_rows_total{tenant="evil"}"#;
    assert!(server.metrics().await.contains(parked), "evil's rows were parked");
    // Retried with the router's own deadline, a spinning router falls back to the default route.
    parked_relay_rows(&server, "evil", |rows| rows == 0).await;
}

/// Evil and acme both deploy a projector named `friends` (one worker serves the name for both); evil's
/// spins to its 2 s deadline on its every event. Evil's events are parked past its budget (and dead-lettered
/// after their tries); acme's `friends` counters equal its follower counts all along. Evil cannot deploy
/// under a bundled projector's name either.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_projector_timing_out_on_every_event_holds_up_only_its_tenant() {
    let server = neighbourhood(|c| c.plugin_max_deadline_ms = 2000).await;
    for tenant in ["evil", "acme"] {
        let query = "deadline_ms=2000&readable=counter:followers";
        let deployed = deploy(&server, tenant, "projector/friends", query, test_plugin("hostile-projector")).await;
        assert_eq!(deployed.status, 200, "{deployed:?}");
    }
    let bundled = deploy(&server, "evil", "projector/top-followers", "", test_plugin("hostile-projector")).await;
    assert_eq!((bundled.status, bundled.code()), (400, "reserved_plugin_name"), "{bundled:?}");
    let harm = async {
        evil_loop(&server, "evil", 1..4, 906).await;
    };
    acme_beside(&server, harm).await;
    let acme = server.client("acme", 1);
    wait_until("acme's friends counters equal its follower counts", Duration::from_secs(60), || async {
        for user in 1..=12 {
            let counted = acme.get(&format!("/v1/projections/friends/followers/{user}")).await;
            let truth = acme.get(&format!("/v1/users/{user}/counts")).await;
            if counted.status != 200 || counted.body["value"] != truth.body["followers"] {
                return false;
            }
        }
        true
    })
    .await;
}

/// Evil deploys projector names up to the platform's maximum and no more; a name it removes (and no other
/// tenant has) has its worker stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn projector_names_are_capped_per_tenant_and_a_removed_ones_worker_stops() {
    let server = neighbourhood(|c| c.plugin_max_projectors = 3).await;
    for name in ["n1", "n2", "n3"] {
        let slot = format!("projector/{name}");
        assert_eq!(deploy(&server, "evil", &slot, "", test_plugin("hostile-projector")).await.status, 200);
    }
    let fourth = deploy(&server, "evil", "projector/n4", "", test_plugin("hostile-projector")).await;
    assert_eq!((fourth.status, fourth.code()), (409, "too_many_projectors"), "{fourth:?}");
    let again = deploy(&server, "evil", "projector/n3", "", test_plugin("hostile-projector")).await;
    assert_eq!(again.status, 200, "a new version of a name it has is no new name");
    wait_until("n3's worker runs", Duration::from_secs(30), || async {
        server.metrics().await.contains(r#"strand_task_up{task="projector.n3"} 1"#)
    })
    .await;
    assert_eq!(server.admin().call(Method::DELETE, "/admin/v1/tenants/evil/plugins/projector/n3").await.status, 204);
    wait_until("n3's worker stopped", Duration::from_secs(30), || async {
        server.metrics().await.contains(r#"strand_task_up{task="projector.n3"} 0"#)
    })
    .await;
    let ready = server.anonymous().get("/readyz").await;
    assert_eq!(ready.status, 200, "a retired worker is not a task down: {ready:?}");
    let fourth = deploy(&server, "evil", "projector/n4", "", test_plugin("hostile-projector")).await;
    assert_eq!(fourth.status, 200, "room again: {fourth:?}");
}

/// Evil's limiter spins to its 2 s deadline on every request, from many connections at once: it holds at
/// most its share of the instance pool, and acme (failing closed: a policy call that could not run would be
/// a 503) writes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_limiter_spinning_at_its_deadline_cannot_take_the_instance_pool() {
    let server = neighbourhood(|c| {
        c.plugin_max_deadline_ms = 2000;
        c.plugin_max_fuel = 0;
        c.plugin_fuel = 0;
        c.plugin_tenant_instances = 16;
    })
    .await;
    let deployed =
        deploy(&server, "evil", "rate-limiter/default", "deadline_ms=2000", test_plugin("hostile-limiter")).await;
    assert_eq!(deployed.status, 200, "{deployed:?}");
    let harm = async {
        // 48 connections spinning at once: three times evil's share of 16.
        evil_loop(&server, "evil", 1..49, 666).await;
    };
    acme_beside(&server, harm).await;
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(
            r#"strand_plugin_calls_total{tenant="evil",kind="rate-limiter",plugin="default",outcome="busy"}"#
        ),
        "evil met its share"
    );
    assert!(
        !metrics.contains(r#"tenant="acme",kind="rate-limiter",plugin="default",outcome="busy""#),
        "acme never did"
    );
}

/// While evil's big component compiles (a 20 MiB limiter, compiled afresh), acme deploys, rolls back and
/// changes its settings at once; evil's next upload waits for its own; one past the compile budget is
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_big_upload_compiling_holds_up_no_one_else() {
    let server = neighbourhood(|c| c.plugin_cache_dir = None).await;
    let big = test_plugin("big-limiter");
    let evil_deploy = deploy(&server, "evil", "rate-limiter/default", "", big.clone());
    tokio::pin!(evil_deploy);
    let acme_changes = async {
        let small = test_plugin("deny-all");
        assert_eq!(deploy(&server, "acme", "rate-limiter/default", "", small.clone()).await.status, 200);
        assert_eq!(deploy(&server, "acme", "rate-limiter/default", "", small).await.status, 200);
        let path = "/admin/v1/tenants/acme/plugins/rate-limiter/default/rollback";
        assert_eq!(server.admin().send_json(Method::POST, path, &json!({"version": 1})).await.status, 200);
        assert_eq!(
            server.admin().call(Method::DELETE, "/admin/v1/tenants/acme/plugins/rate-limiter/default").await.status,
            204
        );
    };
    tokio::select! {
        () = acme_changes => {}
        evil = &mut evil_deploy => panic!("evil's compile ended before acme's changes, which waited for it: {evil:?}"),
    }
    assert_eq!(evil_deploy.await.status, 200, "evil's own upload is still deployed");

    let hasty = neighbourhood(|c| {
        c.plugin_cache_dir = None;
        c.plugin_compile_budget_ms = 1;
    })
    .await;
    let refused = deploy(&hasty, "evil", "rate-limiter/default", "", big).await;
    assert_eq!((refused.status, refused.code()), (422, "compile_too_slow"), "{refused:?}");
}

/// Evil deploys its limiter in a loop, and projectors under ever new names: `/metrics` grows by no series
/// per version, and by at most 32 plugin names of evil's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deploy_loops_grow_no_metric_series() {
    let server = neighbourhood(|_| {}).await;
    for _ in 0..10 {
        assert_eq!(deploy(&server, "evil", "rate-limiter/default", "", test_plugin("deny-all")).await.status, 200);
        assert_eq!(server.client("evil", 1).put("/v1/me/following/2").await.status, 429);
    }
    let metrics = server.metrics().await;
    let evil_series: Vec<&str> = metrics.lines().filter(|l| l.contains(r#"tenant="evil""#)).collect();
    assert!(evil_series.iter().all(|l| !l.contains("version=")), "no version label: {evil_series:?}");
    let calls = evil_series.iter().filter(|l| l.starts_with("strand_plugin_calls_total")).count();
    assert_eq!(calls, 1, "ten versions, one series: {evil_series:?}");
}
