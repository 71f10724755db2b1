//! A canary rolled out and aborted from the console, and the audit log filtered to find it.

use serde_json::json;
use strand_test_support::{test_plugin, Backend, TestServer, ADMIN_TOKEN};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_is_deployed_and_aborted_from_the_console_and_found_in_the_audit_log() {
    let server = TestServer::start(Backend::Sqlite).await;
    server.client("acme", 1).follow(2).await;
    let files = tempfile::tempdir().unwrap();
    let bundled = strand::plugins::BUNDLED.iter().find(|p| p.kind == strand::plugins::PluginKind::RateLimiter).unwrap();
    let stable = wasm_file(&files, "default-rate-limit.wasm", bundled.wasm);
    let candidate = wasm_file(&files, "deny-all.wasm", &test_plugin("deny-all"));

    let driver = ChromeDriver::start();
    let browser = driver.browser().await;
    sign_in(&browser, &server, ADMIN_TOKEN).await;
    browser.goto(&server.url("/admin#/tenant/acme")).await.unwrap();
    wait_for_text(&browser, "#tenant-name", "acme").await;
    deploy_from_file(&browser, &stable, None).await;
    let status = deploy_from_file(&browser, &candidate, Some(30)).await;
    assert!(status.contains("version 2 deployed and a canary at 30%"), "{status}");
    wait_for_text(&browser, "tr[data-plugin='rate-limiter/default/2']", "canary 30%").await;
    // The canary takes its share: some of the tenant's users meet the deny-all candidate.
    let mut denied = 0;
    for user in 1..=100 {
        if server.client("acme", user).put("/v1/me/following/1000000").await.status == 429 {
            denied += 1;
        }
    }
    assert!((5..=60).contains(&denied), "a 30 % canary denied {denied} of 100 users");
    browser.refresh().await.unwrap();
    wait_for_text(&browser, "tr[data-plugin='rate-limiter/default/2']", "canary 30% · failed 0/").await;
    screenshot(&browser, "tenant-canary").await;

    // Abort asks first; cancelling changes nothing.
    click(&browser, "tr[data-plugin='rate-limiter/default/2'] button.abort").await;
    wait_for_text(&browser, "dialog[open] #confirm-text", "all of acme's traffic returns to the active version").await;
    click(&browser, "#confirm-cancel").await;
    let listed = server.admin().get("/admin/v1/tenants/acme/plugins").await;
    assert_eq!(listed.body["rollouts"].as_array().map(Vec::len), Some(1), "cancelled: the canary still runs");

    click(&browser, "tr[data-plugin='rate-limiter/default/2'] button.abort").await;
    confirm(&browser, "Abort canary version 2").await;
    wait_for_text(&browser, "#status", "canary v2 aborted").await;
    wait_for_text(&browser, "tr[data-plugin='rate-limiter/default/2']", "inactive").await;
    let listed = server.admin().get("/admin/v1/tenants/acme/plugins").await;
    assert_eq!(listed.body["rollouts"], json!([]), "no canary runs");
    for user in 1..=100 {
        assert_eq!(server.client("acme", user).put("/v1/me/following/1000001").await.status, 200, "user {user}");
    }

    // The audit log, filtered by action, shows the abort and nothing else.
    open_view(&browser, "audit").await;
    browser.find(fantoccini::Locator::Id("audit-action")).await.unwrap().select_by_value("abort").await.unwrap();
    click(&browser, "#audit-filter button[type=submit]").await;
    let actions = "return [...document.querySelectorAll('#audit tbody tr')].map(tr => tr.children[3].textContent)";
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while read(&browser, actions).await != json!(["abort"]) {
        assert!(tokio::time::Instant::now() < deadline, "the filter never showed the abort alone");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let entry = wait_for_text(&browser, "#audit tbody tr", "rate-limiter/default").await;
    assert!(entry.contains("admin") && entry.contains("acme"), "{entry}");
    screenshot(&browser, "audit").await;
    browser.close().await.unwrap();
}
