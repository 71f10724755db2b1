//! A projector that declares history (followers gained, which an unfollow does not lower) is never built
//! from the truth: a deploy, a new version and a rollback replay the embedded bus's log while it holds
//! every event; once retention pruned it, a new version counts from its deploy on, and a rollback or
//! `strand rebuild` is refused rather than lose the history. A projector that does not declare it is built
//! from the truth as before (the contrast that shows the replay is one).

use std::time::Duration;

use reqwest::Method;
use strand_test_support::{test_plugin, wait_until, Redis, TestServer};

use super::{pipeline, strand_command};

/// `tenant`'s followers of 909 gained, as projector `name` serves them (null until its space is built).
async fn gained(server: &TestServer, tenant: &str, name: &str) -> serde_json::Value {
    server.client(tenant, 1).get(&format!("/v1/projections/{name}/followers/909")).await.body["value"].clone()
}

/// Deploys the gained-followers projector as `tenant`'s `name`, declaring history or not; its version.
async fn deploy(server: &TestServer, tenant: &str, name: &str, history: bool) -> i64 {
    let path =
        format!("/admin/v1/tenants/{tenant}/plugins/projector/{name}?readable=counter:followers&history={history}");
    let deployed = server.admin().upload(Method::PUT, &path, test_plugin("hostile-projector")).await;
    assert_eq!(deployed.status, 200, "{deployed:?}");
    assert_eq!(deployed.body["plugin"]["history"], history, "{deployed:?}");
    deployed.body["plugin"]["version"].as_i64().unwrap()
}

/// Three follows of 909 and one unfollow, all through the bus: 3 gained, 2 followers in the truth.
async fn three_gained_one_lost(server: &TestServer, tenant: &str) {
    for user in 1..=3 {
        server.client(tenant, user).follow(909).await;
    }
    server.client(tenant, 1).unfollow(909).await;
    wait_until("the follows are projected", Duration::from_secs(30), || async {
        server.client(tenant, 1).get("/v1/users/909/counts").await.body["followers"] == 2
    })
    .await;
}

/// Retention prunes the oldest message of the events topic (as `retention_bus_hours` would, in time).
async fn prune_the_log_head(server: &TestServer) {
    let pruned = sqlx::query("DELETE FROM bus_log WHERE topic = 'strand.following' AND seq = 1")
        .execute(server.database().writer())
        .await
        .unwrap();
    assert_eq!(pruned.rows_affected(), 1);
}

async fn wait_for(server: &TestServer, tenant: &str, name: &str, value: i64) {
    let what = format!("{name} serves {value}");
    wait_until(&what, Duration::from_secs(30), || async { gained(server, tenant, name).await == value }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_projector_replays_the_log_on_deploy_and_rollback_and_counts_from_now_once_it_is_pruned() {
    let server = TestServer::start_pipeline(strand_test_support::Backend::Sqlite, None).await;
    three_gained_one_lost(&server, "acme").await;

    // Deployed after the events: built from the truth it would serve 2; replayed from the log, 3.
    deploy(&server, "acme", "truth-built", false).await;
    wait_for(&server, "acme", "truth-built", 2).await;
    let first = deploy(&server, "acme", "gained", true).await;
    wait_for(&server, "acme", "gained", 3).await;

    // A new version replays the log too, then takes live events once each.
    let second = deploy(&server, "acme", "gained", true).await;
    assert_eq!(second, first + 1);
    wait_until("the new version is built", Duration::from_secs(30), || async {
        let builds = server.admin().get("/admin/v1/projections").await.body["backfills"].clone();
        builds.as_array().unwrap().iter().any(|build| {
            build["projection"] == "projector.gained"
                && build["plugin_version"] == second
                && build["state"] == "complete"
        })
    })
    .await;
    wait_for(&server, "acme", "gained", 3).await;
    server.client("acme", 4).follow(909).await;
    wait_for(&server, "acme", "gained", 4).await;

    // A rollback's space is replayed as well, while the log is whole.
    let rollback = serde_json::json!({ "version": first });
    let path = "/admin/v1/tenants/acme/plugins/projector/gained/rollback";
    let rolled_back = server.admin().send_json(Method::POST, path, &rollback).await;
    assert_eq!(rolled_back.status, 200, "{rolled_back:?}");
    wait_for(&server, "acme", "gained", 4).await;

    // Pruned: a rollback would lose the history, so it is refused with the reason; a new version counts
    // from its deploy on. So does a new projector, whose subscriber starts at the log's retained head: the
    // truth's pairs, taken as floors, keep the follows it still holds from counting (else it would serve 4).
    prune_the_log_head(&server).await;
    let refused = server.admin().send_json(Method::POST, path, &serde_json::json!({ "version": second })).await;
    assert_eq!((refused.status, refused.code()), (409, "needs_history"), "{refused:?}");
    assert!(refused.body["detail"].as_str().unwrap().contains("pruned"), "{refused:?}");
    deploy(&server, "acme", "gained", true).await;
    deploy(&server, "acme", "gained-late", true).await;
    wait_for(&server, "acme", "gained", 0).await;
    wait_for(&server, "acme", "gained-late", 0).await;
    server.client("acme", 5).follow(909).await;
    wait_for(&server, "acme", "gained", 1).await;
    wait_for(&server, "acme", "gained-late", 1).await;

    // Only a projector declares history.
    let path = "/admin/v1/tenants/acme/plugins/router/default?history=true";
    let refused = server.admin().upload(Method::PUT, path, test_plugin("hostile-projector")).await;
    assert_eq!((refused.status, refused.code()), (400, "invalid_history"), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strand_rebuild_replays_a_history_projector_from_the_whole_log_and_refuses_once_it_is_pruned() {
    let redis_url = Redis::shared().unwrap().url();
    let server = pipeline(&redis_url).await;
    let tenant = format!("hist{}", strand_test_support::unique_server_id());
    three_gained_one_lost(&server, &tenant).await;
    deploy(&server, &tenant, "gained", true).await;
    wait_for(&server, &tenant, "gained", 3).await;
    // A second tenant runs the same component under the same name without declaring history: deployed
    // before its events, it counts them (3); a rebuild from the truth gives it 2. It sorts after the first.
    let other = format!("{tenant}b");
    deploy(&server, &other, "gained", false).await;
    wait_for(&server, &other, "gained", 0).await;
    three_gained_one_lost(&server, &other).await;
    wait_for(&server, &other, "gained", 3).await;

    let (code, output) = strand_command(&["rebuild", "gained"], &server.config.database_url, &redis_url).await;
    assert_eq!(code, 0, "{output}");
    wait_for(&server, &tenant, "gained", 3).await;
    wait_for(&server, &other, "gained", 2).await;

    // Pruned: refused for the first tenant, whose space stays as it was — and the second one is rebuilt
    // all the same (one tenant's declaration does not stop another's rebuild).
    prune_the_log_head(&server).await;
    server.client(&other, 4).follow(909).await;
    server.client(&other, 4).unfollow(909).await;
    wait_for(&server, &other, "gained", 3).await;
    let (code, output) = strand_command(&["rebuild", "gained"], &server.config.database_url, &redis_url).await;
    assert_ne!(code, 0, "{output}");
    assert!(output.contains("declares history") && output.contains("pruned"), "{output}");
    assert_eq!(gained(&server, &tenant, "gained").await, 3, "the space stays as it was");
    wait_for(&server, &other, "gained", 2).await;
}
