//! Liveness, readiness (each dependency checked, a stopped background task makes a node unready, a lagging
//! outbox does not) and Prometheus metrics (requests by route template, plugin calls and rate-limit
//! decisions by tenant, the relay's backlog, supervised tasks).

use std::time::Duration;

use strand::config::RelayMode;
use strand::relay::{BinlogPosition, Checkpoint};
use strand_test_support::{wait_until, Backend, TestServer};

async fn metrics(server: &TestServer) -> String {
    let response = reqwest::Client::new()
        .get(server.url("/metrics"))
        .bearer_auth(strand_test_support::ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    response.text().await.unwrap()
}

/// `/metrics` names tenants and their plugins: on the API listener only the admin token reads it; the
/// operations listener serves it (and `/healthz`) to whoever reaches that port.
#[tokio::test]
async fn metrics_answer_the_admin_on_the_api_and_anyone_on_the_operations_listener() {
    let port = strand_test_support::free_port().unwrap();
    let server = TestServer::start_with(Backend::Sqlite, |c| {
        c.operations_listen = Some(format!("127.0.0.1:{port}").parse().unwrap())
    })
    .await;
    server.client("metered", 1).follow(2).await;
    let anonymous = server.anonymous().get("/metrics").await;
    assert_eq!((anonymous.status, anonymous.code()), (401, "invalid_admin_token"));
    let user = server.client("metered", 1).get("/metrics").await;
    assert_eq!((user.status, user.code()), (401, "invalid_admin_token"), "a user's JWT is no admin token");
    let issued = server
        .admin()
        .send_json(reqwest::Method::POST, "/admin/v1/tenants/metered/keys", &serde_json::json!({"name": "ci"}))
        .await;
    let key = server.client_with_token(issued.body["secret"].as_str().unwrap()).get("/metrics").await;
    assert_eq!((key.status, key.code()), (403, "forbidden"), "a tenant key sees no other tenant's figures");
    assert!(metrics(&server).await.contains(r#"tenant="metered""#));
    let operations = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await.unwrap();
    assert_eq!(operations.status(), 200);
    assert!(operations.text().await.unwrap().contains(r#"tenant="metered""#));
    assert_eq!(reqwest::get(format!("http://127.0.0.1:{port}/healthz")).await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_readyz_report_each_dependency() {
    let server = TestServer::start_with(Backend::Sqlite, |c| c.relay = RelayMode::Poll).await;
    let live = server.anonymous().get("/healthz").await;
    assert_eq!((live.status, live.body["status"].as_str()), (200, Some("ok")));
    let ready = server.anonymous().get("/readyz").await;
    assert_eq!(ready.status, 200, "{ready:?}");
    assert_eq!(ready.body, serde_json::json!({"ready": true}), "ready or not, and nothing more, to anyone");
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
        format!(r#"strand_plugin_calls_total{{tenant="{tenant}",kind="rate-limiter",plugin="default",outcome="ok"}}"#),
        format!(r#"strand_plugin_call_seconds_bucket{{tenant="{tenant}",kind="rate-limiter",plugin="default""#),
        // Every exported metric says what it counts.
        "# HELP strand_http_requests_total HTTP requests answered".to_owned(),
        "# HELP strand_plugin_calls_total Plugin calls".to_owned(),
    ];
    for line in expected {
        assert!(text.contains(&line), "{line} missing from:\n{text}");
    }
    assert!(!text.contains("/v1/me/following/2"), "user ids are not label values");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_task_that_stops_makes_its_node_unready_within_seconds() {
    let mut server = TestServer::start(Backend::MariaDb).await;
    // A checkpoint naming a binlog file the server never had: the binlog relay stops with an operator error.
    let mut conn = server.database().writer().acquire().await.unwrap();
    let gone = BinlogPosition { file: "mysql-bin.999999".into(), pos: 4 };
    let server_id: i64 = sqlx::query_scalar("SELECT @@server_id").fetch_one(&mut *conn).await.unwrap();
    Checkpoint::save(&mut conn, &gone, server_id as u32).await.unwrap();
    drop(conn);
    server.config.relay = RelayMode::Binlog;
    let server = server.restart().await;
    wait_until("the stopped relay shows in /readyz", Duration::from_secs(30), || async {
        let reply = server.anonymous().get("/readyz").await;
        reply.status == 503 && reply.code() == "not_ready"
    })
    .await;
    // The gauge is 1 for the moment each restart runs (and the recorder is this test process's, which other
    // tests' servers share): it is seen at 0 between the relay's attempts.
    wait_until("strand_task_up shows the relay down", Duration::from_secs(30), || async {
        metrics(&server).await.contains(r#"strand_task_up{task="relay"} 0"#)
    })
    .await;
    let text = metrics(&server).await;
    assert!(text.contains(r#"strand_task_restarts_total{task="relay"}"#), "{text}");
    assert!(server.anonymous().get("/healthz").await.status == 200, "the process itself is alive");
}

/// The shipped alert rules pass their `promtool` tests, and every metric they and the Grafana dashboard
/// name is in the code's catalogue of exported metrics (a renamed metric would silently blind an alert).
#[test]
fn alert_rules_pass_promtool_and_name_only_exported_metrics() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let tested = std::process::Command::new("promtool")
        .args(["test", "rules", "strand-alerts.test.yml"])
        .current_dir(root.join("ops/prometheus"))
        .output()
        .expect("promtool (Debian package prometheus; .ci/run installs it)");
    assert!(
        tested.status.success(),
        "{}{}",
        String::from_utf8_lossy(&tested.stdout),
        String::from_utf8_lossy(&tested.stderr)
    );
    for file in ["ops/prometheus/strand-alerts.yml", "ops/grafana/strand-dashboard.json"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        for (at, _) in text.match_indices("strand_") {
            let name: String =
                text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
            let exported = name.strip_suffix("_bucket").unwrap_or(&name);
            let known = strand::ops::metrics::ALL.iter().any(|metric| metric.name == exported);
            assert!(known, "{file} names {name}, which the code does not export");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_kafka_property_stops_the_start_with_its_name() {
    let database = Backend::Sqlite.fresh_database().await.unwrap();
    let config = strand::config::Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        database_url: database.url.clone(),
        jwt_hs256_secret: Some("a-test-secret-long-enough-for-hs256".to_owned()),
        kafka_brokers: Some("127.0.0.1:9".to_owned()),
        kafka_options: [("ssl.bogus".to_owned(), "1".to_owned())].into(),
        plugin_cache_dir: Some(strand_test_support::plugin_cache_dir()),
        ..Default::default()
    };
    let refused = strand::app::Server::build(&config).await.err().expect("the start is refused");
    // What the operator reads: the error and its causes (as `strand serve` prints them).
    let refused = strand::ops::observability::causes(&refused);
    assert!(refused.contains("ssl.bogus"), "{refused}");
}

/// The console's charts: the node keeps its own last hour, so writes show as writes/s within two points
/// (10 s apart; fewer when other tests' nodes in this process take points too), and the charts the shipped alert rules page on carry those rules' thresholds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_charts_the_nodes_writes_with_the_alert_rules_thresholds() {
    let server = TestServer::start(Backend::Sqlite).await;
    // A write every check, each by a user of its own (no per-user limit met), so writes span two points.
    let next = std::sync::atomic::AtomicI64::new(1);
    let charted = || async {
        let user = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        server.client("charted", user).follow(user + 1_000_000).await;
        let history = server.admin().get("/admin/v1/history").await;
        assert_eq!(history.status, 200, "{history:?}");
        let series = history.body["series"].as_array().cloned().unwrap_or_default();
        let writes = series.iter().find(|s| s["name"] == "writes_per_second").cloned().unwrap_or_default();
        writes["points"].as_array().is_some_and(|points| points.iter().any(|p| p[1].as_f64() > Some(0.0)))
    };
    wait_until("writes charted", Duration::from_secs(60), charted).await;
    let history = server.admin().get("/admin/v1/history").await.body;
    assert_eq!(history["every_seconds"], 10);
    let threshold = |name: &str| {
        history["series"].as_array().unwrap().iter().find(|s| s["name"] == name).map(|s| s["threshold"].clone())
    };
    assert_eq!(threshold("outbox_oldest_seconds"), Some(serde_json::json!(60.0)));
    assert_eq!(threshold("projection_lag_seconds"), Some(serde_json::json!(60.0)));
    assert_eq!(threshold("plugin_failure_share"), Some(serde_json::json!(0.05)));
    assert_eq!(threshold("writes_per_second"), Some(serde_json::Value::Null));
}
