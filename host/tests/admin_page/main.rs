//! The console end to end in headless Chromium (Debian's `chromium` and `chromium-driver`, driven over
//! WebDriver), as a platform team and a tenant's team use it: sign in, read the pipeline's charts, find a
//! tenant, deploy, roll out, abort and roll back its plugins, look a user up, run an account job and an
//! import from the page, filter the audit log. Every view is kept as a screenshot
//! (`target/tmp/admin-page/{view}.png`).

mod accounts;
mod operator;
mod rollouts;
mod tenant_key;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{json, Value};
use strand_test_support::{free_port, TestServer};

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
                Ok(client) => {
                    client.set_window_size(1280, 1000).await.unwrap();
                    return client;
                }
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

/// What `script` returns (read in one script: tables are redrawn every 2 s, which makes held elements stale).
async fn read(browser: &Client, script: &str) -> Value {
    browser.execute(script, vec![]).await.unwrap()
}

/// Clicks the element `css` names, once it is there (tables are redrawn every 2 s: an element found just
/// before a redraw is found again).
async fn click(browser: &Client, css: &str) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let clicked = match browser.find(Locator::Css(css)).await {
            Ok(element) => element.click().await,
            Err(e) => Err(e),
        };
        match clicked {
            Ok(()) => return,
            Err(e) if tokio::time::Instant::now() > deadline => panic!("cannot click {css}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

async fn type_into(browser: &Client, id: &str, text: &str) {
    let input = browser.find(Locator::Id(id)).await.unwrap();
    input.clear().await.unwrap();
    input.send_keys(text).await.unwrap();
}

/// Answers the confirmation the page asks, once it says `expected`; its full text.
async fn confirm(browser: &Client, expected: &str) -> String {
    let text = wait_for_text(browser, "dialog[open] #confirm-text", expected).await;
    click(browser, "#confirm-ok").await;
    text
}

/// Opens the page and signs in with `token`.
async fn sign_in(browser: &Client, server: &TestServer, token: &str) {
    browser.goto(&server.url("/admin")).await.unwrap();
    type_into(browser, "token", token).await;
    click(browser, "#sign-in button").await;
    wait_for_text(browser, "#whoami", "Signed in").await;
}

/// Opens a view by its link in the navigation, as a keyboard user would (the link takes the focus and Enter
/// follows it).
async fn open_view(browser: &Client, view: &str) {
    let link = browser.find(Locator::Css(&format!("nav a[data-view={view}]"))).await.unwrap();
    link.send_keys("\u{E007}").await.unwrap();
    let open = format!("return !document.querySelector('#view-{view}').hidden");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while read(browser, &open).await != json!(true) {
        assert!(tokio::time::Instant::now() < deadline, "the {view} view never opened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The page as it looks now, kept as a test artefact (`target/tmp/admin-page/{name}.png`), at 1280 px.
async fn screenshot(browser: &Client, name: &str) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("admin-page");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.png")), browser.screenshot().await.unwrap()).unwrap();
}

/// Whether the page fits a phone's width (390 px) without a sideways scroll of the whole page (wide tables
/// scroll inside their own box); kept as `{name}-phone.png`, the window set back to 1280 px after.
async fn fits_a_phone(browser: &Client, name: &str) -> bool {
    browser.set_window_size(390, 844).await.unwrap();
    let fits = read(browser, "return document.documentElement.scrollWidth <= window.innerWidth").await;
    screenshot(browser, &format!("{name}-phone")).await;
    browser.set_window_size(1280, 1000).await.unwrap();
    fits == json!(true)
}

/// A component file of `wasm` in `dir`.
fn wasm_file(dir: &tempfile::TempDir, name: &str, wasm: &[u8]) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, wasm).unwrap();
    path
}

/// Deploys `file` as the next version of the tenant's rate limiter from the form (`canary`: its percent),
/// confirming what the page says it will do; the status it shows.
async fn deploy_from_file(browser: &Client, file: &std::path::Path, canary: Option<u8>) -> String {
    browser.find(Locator::Id("deploy-kind")).await.unwrap().select_by_value("rate-limiter").await.unwrap();
    type_into(browser, "deploy-name", "default").await;
    browser.find(Locator::Id("deploy-file")).await.unwrap().send_keys(&file.display().to_string()).await.unwrap();
    let mode = browser.find(Locator::Id("deploy-mode")).await.unwrap();
    match canary {
        Some(percent) => {
            mode.select_by_value("canary").await.unwrap();
            type_into(browser, "deploy-percent", &percent.to_string()).await;
        }
        None => mode.select_by_value("all").await.unwrap(),
    }
    click(browser, "#deploy button[type=submit]").await;
    let expected = match canary {
        Some(percent) => format!("as a canary taking {percent}% of the traffic"),
        None => "to all of the traffic at once".to_owned(),
    };
    confirm(browser, &expected).await;
    wait_for_text(browser, "#status", "deployed and").await
}
