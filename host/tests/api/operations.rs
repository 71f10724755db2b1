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
    for check in ["database", "cache", "relay"] {
        assert_eq!(ready.body["checks"][check]["ok"], true, "{check}: {ready:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_does_not_keep_up_makes_the_node_unready() {
    // No relay: the outbox only grows.
    let server = TestServer::start_with(Backend::Sqlite, |c| {
        c.relay = RelayMode::Off;
        c.ready_max_relay_lag_ms = 0;
    })
    .await;
    assert_eq!(server.anonymous().get("/readyz").await.status, 200, "an empty outbox lags nothing");
    server.client("ops", 1).follow(2).await;
    wait_until("the unpublished event makes the node unready", Duration::from_secs(10), || async {
        let reply = server.anonymous().get("/readyz").await;
        reply.status == 503
            && reply.content_type == "application/problem+json"
            && reply.code() == "not_ready"
            && reply.body["detail"].as_str().is_some_and(|d| d.contains("relay: the oldest unpublished event"))
    })
    .await;
    assert!(metrics(&server).await.contains("strand_outbox_oldest_seconds"));
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
