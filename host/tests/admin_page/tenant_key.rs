//! A tenant's team in the console with its tenant key: its own tenant only (no node-wide charts, no other
//! tenant, whatever the address asks for), its audit log, its plugin's logs shown as text, a canary of its
//! own promoted from the page.

use serde_json::json;
use strand::plugins::{PluginKind, BUNDLED};
use strand_test_support::{test_plugin, Backend, TestServer};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_team_signs_in_with_its_key_and_sees_only_its_tenant() {
    let server = TestServer::start(Backend::Sqlite).await;
    server.client("globex", 1).follow(2).await;
    server.client("globex", 7).follow(1).await;
    let issued =
        server.admin().send_json(reqwest::Method::POST, "/admin/v1/tenants/acme/keys", &json!({"name": "team"})).await;
    let key = issued.body["secret"].as_str().expect("a key").to_owned();
    let files = tempfile::tempdir().unwrap();
    let deny_all = wasm_file(&files, "deny-all.wasm", &test_plugin("deny-all"));

    let driver = ChromeDriver::start();
    let browser = driver.browser().await;
    sign_in(&browser, &server, &key).await;
    wait_for_text(&browser, "#whoami", "key:team of tenant acme").await;
    wait_for_text(&browser, "#tenant-name", "acme").await;
    let hidden = "return ['a[data-view=overview]', 'a[data-view=tenants]', '#view-overview', '#new-key']\
        .map(css => document.querySelector(css).hidden)";
    assert_eq!(read(&browser, hidden).await, json!([true, true, true, true]), "nothing of the node or other tenants");

    // Another tenant's addresses open its own tenant instead.
    browser.goto(&server.url("/admin#/tenant/globex")).await.unwrap();
    wait_for_text(&browser, "#tenant-name", "acme").await;
    browser.goto(&server.url("/admin#/users/globex/1")).await.unwrap();
    assert_eq!(read(&browser, "return document.querySelector('#lookup-tenant').value").await, json!("acme"));
    assert_eq!(read(&browser, "return document.querySelector('#lookup-tenant').readOnly").await, json!(true));
    wait_for_text(&browser, "#user-followers", "0").await;
    assert_eq!(read(&browser, "return document.querySelector('#user-followers').textContent").await, json!("0"));
    // And the API refuses the key another tenant, whatever the page does.
    let other = server.client_with_token(&key).get("/admin/v1/tenants/globex/accounts/1/relations").await;
    assert_eq!((other.status, other.code()), (403, "forbidden"));
    open_view(&browser, "audit").await;
    wait_for_text(&browser, "#audit tbody", "create_key").await;
    assert!(!browser.source().await.unwrap().contains("globex"), "nothing of another tenant on the page");

    open_view(&browser, "tenant").await;
    deploy_from_file(&browser, &deny_all, None).await;
    wait_for_text(&browser, "#plugins tr.active", "rate-limiter").await;
    assert_eq!(server.client("acme", 1).put("/v1/me/following/3").await.status, 429, "the team's policy is live");
    open_view(&browser, "audit").await;
    let audit = wait_for_text(&browser, "#audit tbody", "deploy").await;
    assert!(audit.contains("key:team") && audit.contains("rate-limiter/default") && audit.contains("ok"), "{audit}");

    // Its log on the page, the plugin's markup shown as text, never as markup.
    let logs = "/admin/v1/tenants/acme/plugins/rate-limiter/default/logs";
    strand_test_support::wait_until("the line is kept", PATIENCE, || async {
        server.admin().get(logs).await.body["entries"].as_array().is_some_and(|e| !e.is_empty())
    })
    .await;
    open_view(&browser, "tenant").await;
    click(&browser, "#plugins tr.active button.logs").await;
    let logged = wait_for_text(&browser, "#logs tbody", "<b>denied</b> 1 -> 3").await;
    assert!(logged.contains("1->3") && logged.contains("warn"), "{logged}");
    assert_eq!(read(&browser, "return document.querySelector('#logs b') === null").await, json!(true));

    // A canary of the bundled policy, shown with its share and failure rates, promoted from the page.
    let bundled = BUNDLED.iter().find(|p| p.kind == PluginKind::RateLimiter).unwrap().wasm.to_vec();
    let path = "/admin/v1/tenants/acme/plugins/rate-limiter/default?canary=10";
    assert_eq!(server.client_with_token(&key).upload(reqwest::Method::PUT, path, bundled).await.status, 200);
    for user in 1..=100 {
        server.client("acme", user).put("/v1/me/following/1000000").await;
    }
    browser.refresh().await.unwrap();
    let canary = wait_for_text(&browser, "tr[data-plugin='rate-limiter/default/2']", "canary 10% · failed 0/").await;
    assert!(canary.contains("(stable 0/"), "both versions' calls and failures: {canary}");
    click(&browser, "tr[data-plugin='rate-limiter/default/2'] button.promote").await;
    confirm(&browser, "Promote canary version 2").await;
    wait_for_text(&browser, "#status", "canary v2 promoted").await;
    wait_for_text(&browser, "#plugins tr.active[data-plugin='rate-limiter/default/2']", "active").await;
    assert_eq!(server.client("acme", 1).put("/v1/me/following/3").await.status, 200, "the promoted policy serves all");
    assert!(fits_a_phone(&browser, "tenant").await, "a tenant's page fits a phone's width");
    browser.close().await.unwrap();
}
