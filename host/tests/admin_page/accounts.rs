//! Support staff's side of the console: a graph imported from a file on the page, a user looked up (the
//! counts equal to the API's, the relationship, the lists paged), and the account's deletion started from
//! the page and followed to its end on a progress bar that moves.

use std::time::Duration;

use serde_json::{json, Value};
use strand_test_support::{Backend, TestServer, ADMIN_TOKEN};

use super::*;

/// Followers of user 1 in the imported graph.
const FOLLOWERS: i64 = 1_500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn support_staff_import_look_a_user_up_and_delete_the_account_watching_its_progress() {
    // A slow job, so that the page's two-second refresh sees it on its way.
    let server = TestServer::start_with(Backend::Sqlite, |config| {
        config.account_job_batch = 2;
        config.account_job_share = 0.05;
    })
    .await;
    let files = tempfile::tempdir().unwrap();
    let csv: String =
        (2..FOLLOWERS + 2).map(|follower| format!("{follower},1\n")).chain(["1,2\n1,3\n".to_owned()]).collect();
    let graph = files.path().join("graph.csv");
    std::fs::write(&graph, csv).unwrap();

    let driver = ChromeDriver::start();
    let browser = driver.browser().await;
    sign_in(&browser, &server, ADMIN_TOKEN).await;

    // The import, from the page: it asks first, then shows the upload and the import's report.
    browser.goto(&server.url("/admin#/jobs/acme")).await.unwrap();
    wait_for_text(&browser, "#jobs-tenant-name", "acme").await;
    browser
        .find(fantoccini::Locator::Id("import-file"))
        .await
        .unwrap()
        .send_keys(&graph.display().to_string())
        .await
        .unwrap();
    click(&browser, "#import button[type=submit]").await;
    confirm(&browser, "into acme").await;
    let report = wait_for_text(&browser, "#import-state", "imported:").await;
    assert!(report.contains(&format!("followed {}", FOLLOWERS + 2)), "{report}");

    // The user as support staff see them: the same counts as the API serves.
    let api_counts = server.client("acme", 1).get("/v1/users/1/counts").await.body;
    assert_eq!(api_counts["followers"], json!(FOLLOWERS));
    open_view(&browser, "users").await;
    type_into(&browser, "lookup-tenant", "acme").await;
    type_into(&browser, "lookup-user", "1").await;
    type_into(&browser, "lookup-with", "2").await;
    click(&browser, "#lookup button[type=submit]").await;
    wait_for_text(&browser, "#user-state", "active").await;
    let figure = |id: &str| format!("return document.querySelector('#{id}').textContent");
    assert_eq!(read(&browser, &figure("user-followers")).await, json!(api_counts["followers"].to_string()));
    assert_eq!(read(&browser, &figure("user-followings")).await, json!(api_counts["followings"].to_string()));
    let relationship = wait_for_text(&browser, "#relationship", "1 follows 2").await;
    assert!(relationship.contains("2 follows 1"), "{relationship}");
    // The followers, a page of 20 and the next one.
    let listed = "return [...document.querySelectorAll('#user-list tbody a')].map(a => a.textContent)";
    let first: Vec<String> = serde_json::from_value(read(&browser, listed).await).unwrap();
    assert_eq!(first.len(), 20, "{first:?}");
    click(&browser, "#user-list-more").await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let next: Vec<String> = serde_json::from_value(read(&browser, listed).await).unwrap();
        if next.len() == 20 && next.iter().all(|id| !first.contains(id)) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no second page: {next:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    click(&browser, "#user-lists button[data-list=following]").await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while read(&browser, listed).await != json!(["3", "2"]) {
        assert!(tokio::time::Instant::now() < deadline, "the following list never showed 3 and 2");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_for_text(&browser, "#recent tbody", "follow").await;
    screenshot(&browser, "users").await;
    assert!(fits_a_phone(&browser, "users").await, "the user's page fits a phone's width");

    // The deletion, started from the page after a confirmation that names the account.
    click(&browser, "#user-actions button[data-job=delete]").await;
    confirm(&browser, "Delete account 1 of acme").await;
    let started = wait_for_text(&browser, "#status", "started").await;
    let job: i64 = started.split_whitespace().nth(1).and_then(|id| id.parse().ok()).expect(&started);
    open_view(&browser, "jobs").await;
    let progress = format!(
        "const tr = document.querySelector('#jobs tr[data-job=\"{job}\"]'); \
         return tr ? [tr.querySelector('progress').value, tr.querySelector('progress').max, tr.children[5].textContent] : null"
    );
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let last = loop {
        let now = read(&browser, &progress).await;
        if let Some([value, _, state]) = now.as_array().map(Vec::as_slice) {
            if seen.last() != Some(value) {
                seen.push(value.clone());
            }
            if state == "done" {
                break now;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "the job never ended: {now}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    screenshot(&browser, "jobs").await;
    let moving: Vec<&Value> = seen.iter().filter(|v| v.as_f64().is_some_and(|v| v > 0.0) && **v != last[1]).collect();
    assert!(moving.len() >= 2, "the progress bar moved through {seen:?} to {last}");
    assert_eq!(last[0], last[1], "a finished job's bar is full: {last}");
    let counts = server.client("acme", 1).get("/v1/users/1/counts").await.body;
    assert_eq!((counts["followers"].as_i64(), counts["followings"].as_i64()), (Some(0), Some(0)));
    browser.close().await.unwrap();
}
