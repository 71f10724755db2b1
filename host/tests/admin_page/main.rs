//! The admin page end to end in headless Chromium (Debian's `chromium` and `chromium-driver`, driven over
//! WebDriver): an operator signs in with the admin token, sees the tenants and the pipeline's lag, deploys
//! two versions of a tenant's rate limiter from files, and rolls back to the first.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;
use strand::config::RelayMode;
use strand::plugins::{PluginKind, BUNDLED};
use strand_test_support::{free_port, test_plugin, Backend, TestServer, ADMIN_TOKEN};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// How long the page may take to show what a step expects.
const PATIENCE: Duration = Duration::from_secs(20);

/// A chromedriver process on a free port, stopped when dropped.
struct ChromeDriver {
    child: Child,
    port: u16,
}

impl ChromeDriver {
    fn start() -> Self {
        let port = free_port().unwrap();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{CHROMEDRIVER}: {e} (apt-get install chromium chromium-driver)"));
        Self { child, port }
    }

    /// A headless Chromium session, once the driver answers.
    async fn browser(&self) -> Client {
        let capabilities = json!({
            "goog:chromeOptions": {"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]}
        });
        let capabilities = capabilities.as_object().unwrap().clone();
        let url = format!("http://127.0.0.1:{}", self.port);
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let mut builder = ClientBuilder::new(HttpConnector::new());
            match builder.capabilities(capabilities.clone()).connect(&url).await {
                Ok(client) => return client,
                Err(e) if tokio::time::Instant::now() > deadline => panic!("no WebDriver session: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The text of the first element matching `css`, once it contains `expected`.
async fn wait_for_text(browser: &Client, css: &str, expected: &str) -> String {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut last = String::new();
    while tokio::time::Instant::now() < deadline {
        if let Ok(element) = browser.find(Locator::Css(css)).await {
            last = element.text().await.unwrap_or_default();
            if last.contains(expected) {
                return last;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{css} never showed {expected:?}; last: {last:?}\n{}", browser.source().await.unwrap_or_default());
}

/// The page as it looks now, kept as a test artefact (`target/tmp/admin-page/{name}.png`).
async fn screenshot(browser: &Client, name: &str) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("admin-page");
    std::fs::create_dir_all(&dir).unwrap();
    browser.set_window_size(1280, 1000).await.unwrap();
    std::fs::write(dir.join(format!("{name}.png")), browser.screenshot().await.unwrap()).unwrap();
}

async fn deploy_from_file(browser: &Client, file: &std::path::Path, version: i64) {
    browser.find(Locator::Id("deploy-kind")).await.unwrap().select_by_value("rate-limiter").await.unwrap();
    let name = browser.find(Locator::Id("deploy-name")).await.unwrap();
    name.clear().await.unwrap();
    name.send_keys("default").await.unwrap();
    browser.find(Locator::Id("deploy-file")).await.unwrap().send_keys(&file.display().to_string()).await.unwrap();
    browser.find(Locator::Css("#deploy button[type=submit]")).await.unwrap().click().await.unwrap();
    wait_for_text(browser, "#status", &format!("version {version} deployed and active")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sees_tenants_and_lag_deploys_and_rolls_back_from_the_admin_page() {
    let server = TestServer::start_with(Backend::Sqlite, |config| {
        config.relay = RelayMode::Poll;
        config.workers = true;
    })
    .await;
    server.client("acme", 1).follow(2).await;
    let files = tempfile::tempdir().unwrap();
    let bundled = BUNDLED.iter().find(|p| p.kind == PluginKind::RateLimiter).unwrap();
    let (first, second) = (files.path().join("default-rate-limit.wasm"), files.path().join("deny-all.wasm"));
    std::fs::write(&first, bundled.wasm).unwrap();
    std::fs::write(&second, test_plugin("deny-all")).unwrap();

    let driver = ChromeDriver::start();
    let browser = driver.browser().await;
    browser.goto(&server.url("/admin")).await.unwrap();

    // A wrong token is refused with the API's problem.
    browser.find(Locator::Id("token")).await.unwrap().send_keys("wrong").await.unwrap();
    browser.find(Locator::Css("#sign-in button")).await.unwrap().click().await.unwrap();
    wait_for_text(&browser, "#status", "invalid_admin_token").await;

    let token = browser.find(Locator::Id("token")).await.unwrap();
    token.clear().await.unwrap();
    token.send_keys(ADMIN_TOKEN).await.unwrap();
    browser.find(Locator::Css("#sign-in button")).await.unwrap().click().await.unwrap();
    wait_for_text(&browser, "#tenants", "acme").await;
    let signed_in = browser.execute("return document.querySelector('#sign-in').hidden", vec![]).await.unwrap();
    assert_eq!(signed_in, json!(true), "the sign-in box goes once signed in");

    // The overview charts the node's last hour: a write storm shows as writes/s (two points, 10 s apart),
    // and the charts an alert rule pages on draw its threshold.
    let storm = tokio::spawn({
        let clients: Vec<_> = (1..=1_000).map(|user| server.client("storm", user)).collect();
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
        let now = browser.execute(charted, vec![]).await.unwrap();
        if now.as_str().is_some_and(|now| now.ends_with("/s") && !now.starts_with("0 ")) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no writes charted: {now}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    storm.abort();
    let thresholds = "return [...document.querySelectorAll('.chart line.threshold')].map(l => l.closest('.chart').id)";
    let thresholds: Vec<String> = serde_json::from_value(browser.execute(thresholds, vec![]).await.unwrap()).unwrap();
    assert_eq!(
        thresholds,
        ["chart-outbox_oldest_seconds", "chart-projection_lag_seconds", "chart-plugin_failure_share"]
    );
    screenshot(&browser, "overview").await;
    // The follow reached the bus and every projection committed it: nothing behind.
    wait_for_text(&browser, "#relay", "0 rows to publish").await;
    let consumers = wait_for_text(&browser, "#consumers tbody", "follower").await;
    for projector in ["follow-counts", "follow-lists", "top-followers"] {
        assert!(consumers.contains(projector), "{consumers}");
    }
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        // Read in one script: the table is redrawn every 2 s, which makes held elements stale.
        let read =
            "return [...document.querySelectorAll('#consumers tbody td:nth-child(2)')].map(td => td.textContent)";
        let behind = browser.execute(read, vec![]).await.unwrap();
        let behind: Vec<String> = serde_json::from_value(behind).unwrap();
        if behind.len() == 4 && behind.iter().all(|b| b == "0") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "projections behind: {behind:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    browser.find(Locator::Css("#tenants button[data-tenant=acme]")).await.unwrap().click().await.unwrap();
    wait_for_text(&browser, "#tenant-name", "acme").await;
    deploy_from_file(&browser, &first, 1).await;
    deploy_from_file(&browser, &second, 2).await;
    // Version 2 is the active row and version 1 offers its roll back (the table is redrawn after a deploy:
    // wait for the new drawing, not any row that happens to contain a "2").
    wait_for_text(&browser, "#plugins tr.active[data-plugin='rate-limiter/default/2']", "active").await;
    wait_for_text(&browser, "tr[data-plugin='rate-limiter/default/1']", "Roll back to v1").await;
    // The tenant is now denied every write: the deny-all limiter is live.
    assert_eq!(server.client("acme", 1).put("/v1/me/following/3").await.status, 429);

    browser
        .find(Locator::Css("tr[data-plugin='rate-limiter/default/1'] button.rollback"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_team_signs_in_with_its_key_and_sees_only_its_tenant_and_its_audit_log() {
    let server = TestServer::start(Backend::Sqlite).await;
    server.client("globex", 1).follow(2).await;
    let issued =
        server.admin().send_json(reqwest::Method::POST, "/admin/v1/tenants/acme/keys", &json!({"name": "team"})).await;
    let key = issued.body["secret"].as_str().expect("a key").to_owned();
    let files = tempfile::tempdir().unwrap();
    let wasm = files.path().join("deny-all.wasm");
    std::fs::write(&wasm, test_plugin("deny-all")).unwrap();

    let driver = ChromeDriver::start();
    let browser = driver.browser().await;
    browser.goto(&server.url("/admin")).await.unwrap();
    browser.find(Locator::Id("token")).await.unwrap().send_keys(&key).await.unwrap();
    browser.find(Locator::Css("#sign-in button")).await.unwrap().click().await.unwrap();
    wait_for_text(&browser, "#whoami", "key:team of tenant acme").await;
    wait_for_text(&browser, "#tenant-name", "acme").await;
    let tenant_list_hidden =
        browser.execute("return document.querySelector('#tenant-list').hidden", vec![]).await.unwrap();
    assert_eq!(tenant_list_hidden, json!(true), "a key sees no other tenant");
    let overview_hidden = browser.execute("return document.querySelector('#overview').hidden", vec![]).await.unwrap();
    assert_eq!(overview_hidden, json!(true), "nor the node's charts, which are every tenant's figures");
    assert!(!browser.source().await.unwrap().contains("globex"), "nothing of another tenant on the page");

    deploy_from_file(&browser, &wasm, 1).await;
    wait_for_text(&browser, "#plugins tr.active", "rate-limiter").await;
    let audit = wait_for_text(&browser, "#audit tbody", "deploy").await;
    assert!(audit.contains("key:team") && audit.contains("rate-limiter/default") && audit.contains("ok"), "{audit}");
    assert_eq!(server.client("acme", 1).put("/v1/me/following/3").await.status, 429, "the team's policy is live");
    // Its log on the page, the plugin's markup shown as text, never as markup.
    let logs = "/admin/v1/tenants/acme/plugins/rate-limiter/default/logs";
    strand_test_support::wait_until("the line is kept", PATIENCE, || async {
        server.admin().get(logs).await.body["entries"].as_array().is_some_and(|e| !e.is_empty())
    })
    .await;
    browser.find(Locator::Css("#plugins tr.active button.logs")).await.unwrap().click().await.unwrap();
    let logged = wait_for_text(&browser, "#logs tbody", "<b>denied</b> 1 -> 3").await;
    assert!(logged.contains("1->3") && logged.contains("warn"), "{logged}");
    let markup = browser.execute("return document.querySelector('#logs b') === null", vec![]).await.unwrap();
    assert_eq!(markup, json!(true), "the plugin's text is never parsed as markup");

    // A canary of the bundled policy, shown with its share and failure rates, promoted from the page.
    let bundled = BUNDLED.iter().find(|p| p.kind == PluginKind::RateLimiter).unwrap().wasm.to_vec();
    let path = "/admin/v1/tenants/acme/plugins/rate-limiter/default?canary=10";
    assert_eq!(server.client_with_token(&key).upload(reqwest::Method::PUT, path, bundled).await.status, 200);
    // Traffic for the failure rates: a stable share of these users meets the canary.
    for user in 1..=100 {
        server.client("acme", user).put("/v1/me/following/1000000").await;
    }
    browser.refresh().await.unwrap();
    let canary = wait_for_text(&browser, "tr[data-plugin='rate-limiter/default/2']", "canary 10% · failed 0/").await;
    assert!(canary.contains("(stable 0/"), "both versions' calls and failures: {canary}");
    browser
        .find(Locator::Css("tr[data-plugin='rate-limiter/default/2'] button.promote"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for_text(&browser, "#status", "canary v2 promoted").await;
    wait_for_text(&browser, "#plugins tr.active[data-plugin='rate-limiter/default/2']", "active").await;
    assert_eq!(server.client("acme", 1).put("/v1/me/following/3").await.status, 200, "the promoted policy serves all");
    wait_for_text(&browser, "#audit tbody", "promote").await;
    browser.close().await.unwrap();
}
