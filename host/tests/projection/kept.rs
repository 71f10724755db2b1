//! The embedded default keeps its spaces across restarts: a projector whose value depends on history
//! (followers gained, which an unfollow does not lower) keeps that value through a restart and a crash —
//! built again from the truth it would fall to the follower count.

use std::time::Duration;

use reqwest::Method;
use strand_test_support::{test_plugin, wait_until, Backend, TestServer};

const GAINED: &str = "/v1/projections/gained/followers/909";

async fn gained(server: &TestServer) -> serde_json::Value {
    server.client("acme", 1).get(GAINED).await.body["value"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_dependent_projector_keeps_its_value_across_a_restart_and_a_crash() {
    let server = TestServer::start_pipeline(Backend::Sqlite, None).await;
    let path = "/admin/v1/tenants/acme/plugins/projector/gained?readable=counter:followers";
    let deployed = server.admin().upload(Method::PUT, path, test_plugin("hostile-projector")).await;
    assert_eq!(deployed.status, 200, "{deployed:?}");
    // Built (from an empty truth) before the follows, so they count as events, not as the truth's edges.
    wait_until("the space is built", Duration::from_secs(30), || async { gained(&server).await == 0 }).await;
    for user in 1..=3 {
        server.client("acme", user).follow(909).await;
    }
    server.client("acme", 1).unfollow(909).await;
    wait_until("three followers gained", Duration::from_secs(30), || async { gained(&server).await == 3 }).await;

    let server = server.restart().await;
    assert_eq!(gained(&server).await, 3, "kept at shutdown, served at once after the restart");
    assert_eq!(server.client("acme", 1).get("/v1/users/909/counts").await.body["followers"], 2, "the truth");

    // A fourth follower, applied, then the process dies: what was kept is older than that follow, whose
    // event is applied again after the restart — once.
    server.client("acme", 4).follow(909).await;
    wait_until("four followers gained", Duration::from_secs(30), || async { gained(&server).await == 4 }).await;
    let server = server.crash_and_restart().await;
    wait_until("four after the crash", Duration::from_secs(30), || async { gained(&server).await == 4 }).await;
    server.client("acme", 2).unfollow(909).await;
    server.client("acme", 5).follow(909).await;
    wait_until("five, the unfollow ignored", Duration::from_secs(30), || async { gained(&server).await == 5 }).await;
    let server = server.restart().await;
    assert_eq!(gained(&server).await, 5);
}
