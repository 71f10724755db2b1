//! Liveness, readiness (each dependency checked, a lagging relay makes a node unready) and Prometheus
//! metrics (requests by route template, plugin calls and rate-limit decisions by tenant).

use std::time::Duration;

use strand::config::RelayMode;
use strand_test_support::{wait_until, Backend, TestServer};

async fn metrics(server: &TestServer) -> String {
    let response = reqwest::get(server.url("/metrics")).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    response.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_readyz_report_each_dependency() {
    let server = TestServer::start_with(Backend::Sqlite, |c| c.relay = RelayMode::Poll).await;
    let live = server.anonymous().get("/healthz").await;
    assert_eq!((live.status, live.body["status"].as_str()), (200, Some("ok")));
    let ready = server.anonymous().get("/readyz").await;
    assert_eq!(ready.status, 200, "{ready:?}");
    assert_eq!(ready.body["ready"], true);
    for check in ["database", "cache"] {
        assert_eq!(ready.body["checks"][check]["ok"], true, "{check}: {ready:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_outbox_leaves_nodes_ready_and_shows_in_the_relays_backlog_metric() {
    // No relay on this node: the outbox only grows, and the node still serves what it serves.
    let api_only = TestServer::start_with(Backend::Sqlite, |c| c.relay = RelayMode::Off).await;
    api_only.client("ops", 1).follow(2).await;
    // Stuck for an hour.
    sqlx::query("UPDATE outbox SET created_at = created_at - 3600000")
        .execute(api_only.database().writer())
        .await
        .unwrap();
    let ready = api_only.anonymous().get("/readyz").await;
    assert_eq!(ready.status, 200, "an unpublished event does not make an API node unready: {ready:?}");
    assert!(ready.body["checks"].get("relay").is_none(), "{ready:?}");
    // A node running a relay exports the backlog.
    let relaying = TestServer::start(Backend::Sqlite).await;
    relaying.client("ops", 1).follow(2).await;
    wait_until("the relay exports the outbox backlog", Duration::from_secs(30), || async {
        let text = metrics(&relaying).await;
        text.contains("strand_outbox_oldest_seconds") && text.contains("strand_outbox_rows")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_by_route_plugin_calls_and_rate_limit_decisions() {
    let tenant = format!("mx{}", std::process::id());
    let server = TestServer::start(Backend::Sqlite).await;
    server.client(&tenant, 1).follow(2).await;
    let text = metrics(&server).await;
    let expected = [
        r#"strand_http_requests_total{method="PUT",route="/v1/me/following/{user_id}",status="200"}"#.to_owned(),
        r#"strand_http_request_seconds_bucket{method="PUT",route="/v1/me/following/{user_id}",status="200",le="#
            .to_owned(),
        format!(r#"strand_rate_limit_decisions_total{{tenant="{tenant}",decision="allowed"}}"#),
        format!(
            r#"strand_plugin_calls_total{{tenant="{tenant}",kind="rate-limiter",plugin="default",version="0",outcome="ok"}}"#
        ),
        format!(r#"strand_plugin_call_seconds_bucket{{tenant="{tenant}",kind="rate-limiter",plugin="default""#),
    ];
    for line in expected {
        assert!(text.contains(&line), "{line} missing from:\n{text}");
    }
    assert!(!text.contains("/v1/me/following/2"), "user ids are not label values");
}
