//! The platform team's console: sign in with the admin token, the last hour charted, the pipeline, the
//! tenants list with each tenant's figures, a tenant's page, two versions deployed from files and a
//! rollback to the first.

use std::time::Duration;

use serde_json::json;
use strand::config::RelayMode;
use strand::plugins::{PluginKind, BUNDLED};
use strand_test_support::{test_plugin, Backend, TestServer, ADMIN_TOKEN};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_reads_the_pipeline_finds_a_tenant_deploys_and_rolls_back_from_the_console() {
    let server = TestServer::start_with(Backend::Sqlite, |config| {
        config.relay = RelayMode::Poll;
        config.workers = true;
    })
    .await;
    server.client("acme", 1).follow(2).await;
    let files = tempfile::tempdir().unwrap();
    let bundled = BUNDLED.iter().find(|p| p.kind == PluginKind::RateLimiter).unwrap();
    let first = wasm_file(&files, "default-rate-limit.wasm", bundled.wasm);
    let second = wasm_file(&files, "deny-all.wasm", &test_plugin("deny-all"));

    let driver = ChromeDriver::start();
    let browser = driver.browser().await;
    browser.goto(&server.url("/admin")).await.unwrap();

    // A wrong token is refused with the API's problem.
    type_into(&browser, "token", "wrong").await;
    click(&browser, "#sign-in button").await;
    wait_for_text(&browser, "#status", "invalid_admin_token").await;
    type_into(&browser, "token", ADMIN_TOKEN).await;
    click(&browser, "#sign-in button").await;
    wait_for_text(&browser, "#whoami", "platform admin").await;
    assert_eq!(read(&browser, "return document.querySelector('#sign-in').hidden").await, json!(true));

    // The overview charts the node's last hour: a write storm shows as writes/s (two points, 10 s apart),
    // and the charts an alert rule pages on draw its threshold.
    let storm = tokio::spawn({
        let clients: Vec<_> = (1..=3_000).map(|user| server.client("storm", user)).collect();
        async move {
            for client in clients {
                client.put("/v1/me/following/1").await;
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        }
    });
    let charted = "return (document.querySelector('#chart-writes_per_second .now') || {}).textContent || ''";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let now = read(&browser, charted).await;
        if now.as_str().is_some_and(|now| now.ends_with("/s") && !now.starts_with("0 ")) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no writes charted: {now}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let thresholds = "return [...document.querySelectorAll('.chart line.threshold')].map(l => l.closest('.chart').id)";
    let thresholds: Vec<String> = serde_json::from_value(read(&browser, thresholds).await).unwrap();
    assert_eq!(
        thresholds,
        ["chart-outbox_oldest_seconds", "chart-projection_lag_seconds", "chart-plugin_failure_share"]
    );
    screenshot(&browser, "overview").await;
    assert!(fits_a_phone(&browser, "overview").await, "the overview fits a phone's width");

    // The tenants list, searchable, with the storm tenant's writes per second while it writes.
    open_view(&browser, "tenants").await;
    let storming = "return [...document.querySelectorAll('#tenants tbody tr')]\
        .filter(tr => tr.querySelector('a[data-tenant=storm]')).map(tr => tr.children[1].textContent)";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let rates: Vec<String> = serde_json::from_value(read(&browser, storming).await).unwrap();
        if rates.first().is_some_and(|rate| rate.parse::<f64>().is_ok_and(|r| r > 0.0)) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the storm's writes/s never shown: {rates:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    storm.abort();
    type_into(&browser, "tenant-search", "acm").await;
    let listed = "return [...document.querySelectorAll('#tenants tbody a')].map(a => a.textContent)";
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while read(&browser, listed).await != json!(["acme"]) {
        assert!(tokio::time::Instant::now() < deadline, "the search never narrowed to acme");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    screenshot(&browser, "tenants").await;

    // The follow reached the bus and every projection committed it: nothing behind.
    open_view(&browser, "overview").await;
    wait_for_text(&browser, "#relay", "0 rows to publish").await;
    let consumers = wait_for_text(&browser, "#consumers tbody", "follower").await;
    for projector in ["follow-counts", "follow-lists", "top-followers"] {
        assert!(consumers.contains(projector), "{consumers}");
    }

    // The tenant's page: the bundled plugins marked, two versions deployed, a rollback to the first.
    open_view(&browser, "tenants").await;
    click(&browser, "#tenants a[data-tenant=acme]").await;
    wait_for_text(&browser, "#tenant-name", "acme").await;
    let limiter = wait_for_text(&browser, "tr.bundled[data-plugin='rate-limiter/default/bundled']", "bundled").await;
    assert!(limiter.contains("serving"), "{limiter}");
    deploy_from_file(&browser, &first, None).await;
    wait_for_text(&browser, "#status", "version 1 deployed and active").await;
    deploy_from_file(&browser, &second, None).await;
    wait_for_text(&browser, "#status", "version 2 deployed and active").await;
    wait_for_text(&browser, "#plugins tr.active[data-plugin='rate-limiter/default/2']", "active").await;
    let replaced = wait_for_text(&browser, "tr[data-plugin='rate-limiter/default/bundled']", "replaced").await;
    assert!(replaced.contains("bundled"), "{replaced}");
    // The tenant is now denied every write: the deny-all limiter is live.
    assert_eq!(server.client("acme", 1).put("/v1/me/following/3").await.status, 429);
    screenshot(&browser, "tenant").await;

    click(&browser, "tr[data-plugin='rate-limiter/default/1'] button.rollback").await;
    confirm(&browser, "back to version 1").await;
    wait_for_text(&browser, "#status", "version 1 is active").await;
    wait_for_text(&browser, "tr[data-plugin='rate-limiter/default/1']", "active").await;
    let listed = server.admin().get("/admin/v1/tenants/acme/plugins").await;
    let active: Vec<i64> = listed.body["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["state"] == "active")
        .map(|p| p["version"].as_i64().unwrap())
        .collect();
    assert_eq!(active, [1]);
    assert_eq!(server.client("acme", 1).put("/v1/me/following/3").await.status, 200);
    browser.close().await.unwrap();
}
