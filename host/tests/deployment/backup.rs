//! Backup and restore, as the README's procedure does it: a consistent dump of the database (the only store
//! that must be backed up) taken under writes, restored into a fresh MariaDB server; Strand started on it
//! with fresh topics and an empty Redis serves reads equal to the restored truth, the relay publishes what
//! the dump held unpublished and goes on after it, and nothing is lost or applied twice. The tenant export,
//! the logical backup of one tenant, is restored into an empty tenant with the same edges.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;
use strand::db::Database;
use strand_test_support::{token, wait_until, MariaDb, Redis, TestDatabase, ADMIN_TOKEN, TEST_SECRET};

use super::scale_out::{storm, ROUNDS};
use super::{answering, port, Deployment};

/// `mysql://root@127.0.0.1:PORT/DB` → (port, database).
fn server_and_database(url: &str) -> (String, String) {
    let (server, database) = url.trim_start_matches("mysql://root@127.0.0.1:").split_once('/').expect("a test URL");
    (server.to_owned(), database.to_owned())
}

/// The README's dump: one consistent snapshot (a single transaction), the plugins' components as hex.
fn dump(url: &str, file: &std::path::Path) {
    let (port, database) = server_and_database(url);
    let output = Command::new("mariadb-dump")
        .args(["-h", "127.0.0.1", "-P", &port, "-u", "root", "--single-transaction", "--hex-blob", &database])
        .output()
        .expect("mariadb-dump (Debian's mariadb-client)");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    std::fs::write(file, output.stdout).unwrap();
}

fn restore(url: &str, file: &std::path::Path) {
    let (port, database) = server_and_database(url);
    let output = Command::new("mariadb")
        .args(["-h", "127.0.0.1", "-P", &port, "-u", "root", &database])
        .stdin(std::fs::File::open(file).unwrap())
        .output()
        .expect("mariadb (Debian's mariadb-client)");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

/// Each of users 1-10 of tenant `scaled`: (followings, followers) in the truth at `url`.
async fn truth_counts(url: &str) -> Vec<(i64, i64)> {
    let db = Database::open_existing(url, 1).await.unwrap();
    let mut counts = Vec::new();
    for user in 1..=10_i64 {
        let count = |column: &'static str| {
            let sql = format!(
                "SELECT COUNT(*) FROM following WHERE tenant_id = 'scaled' AND {column} = ? AND rel_status = 1"
            );
            let db = db.clone();
            async move { sqlx::query_scalar::<_, i64>(&sql).bind(user).fetch_one(db.reader()).await.unwrap() }
        };
        counts.push((count("from_user_id").await, count("to_user_id").await));
    }
    db.close().await;
    counts
}

/// The served counts of users 1-10 on the API at `port`.
async fn served_counts(port: u16) -> Vec<(i64, i64)> {
    let mut counts = Vec::new();
    for user in 1..=10_i64 {
        let reply =
            super::counts(&format!("http://127.0.0.1:{port}"), &token(TEST_SECRET, "1", "scaled", 60), user).await;
        counts.push((reply["followings"].as_i64().unwrap(), reply["followers"].as_i64().unwrap()));
    }
    counts
}

/// A tenant's export (NDJSON), from the API at `port`.
async fn export(port: u16, tenant: &str) -> String {
    let reply = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/admin/v1/tenants/{tenant}/export"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    reply.text().await.unwrap()
}

/// The edges a tenant's export holds, without their times.
async fn exported(port: u16, tenant: &str) -> BTreeSet<(String, i64, i64)> {
    export(port, tenant)
        .await
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .map(|e| (e["relation"].as_str().unwrap().to_owned(), e["from"].as_i64().unwrap(), e["to"].as_i64().unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dump_taken_under_writes_restores_into_a_fresh_server_with_reads_equal_to_its_truth() {
    let files = tempfile::tempdir().unwrap();
    let backup = files.path().join("strand.sql");

    // The running deployment, dumped while a storm writes through it.
    let original = Deployment::new().await;
    let api = port();
    let _running = [original.api("api", api), original.relay("relay", port()), original.worker("worker", port(), None)];
    answering(api, &_running[0]).await;
    let done = AtomicUsize::new(0);
    let dumped = async {
        wait_until("a third of the storm acknowledged", Duration::from_secs(120), || {
            std::future::ready(done.load(Ordering::Relaxed) >= (10 * 9 * ROUNDS as usize) / 3)
        })
        .await;
        let (url, file) = (original.database_url(), backup.clone());
        tokio::task::spawn_blocking(move || dump(&url, &file)).await.unwrap();
        done.load(Ordering::Relaxed)
    };
    let ((), at_dump) = tokio::join!(storm([api, api], &done), dumped);
    assert!(at_dump < 10 * 9 * ROUNDS as usize, "the dump was taken under writes ({at_dump} acknowledged then)");

    // A fresh server, the dump restored into it; Strand on it with its own topics and an empty Redis.
    let server = MariaDb::dedicated().unwrap();
    let url = server.create_database().await.unwrap();
    restore(&url, &backup);
    let restored_truth = truth_counts(&url).await;
    assert_ne!(restored_truth, truth_counts(&original.database_url()).await, "the dump's point, not the end");
    let redis = Redis::dedicated().unwrap();
    let restored = Deployment::on(TestDatabase::at(url.clone()), redis.url());
    restored.cli("migrate", &["migrate"]).finished(Duration::from_secs(60)).await;
    restored.cli("rebuild", &["rebuild", "follower"]).finished(Duration::from_secs(60)).await;
    let api = port();
    let _serving = [
        restored.api("restored-api", api),
        restored.relay_after_restore("restored-relay", port()),
        restored.worker("restored-worker", port(), None),
    ];
    answering(api, &_serving[0]).await;
    let names = ["restored-api", "restored-relay", "restored-worker"];
    if let Err(state) = restored.settled(Duration::from_secs(120)).await {
        panic!("the restore never settled: {state}\n{}", restored.logs(&names));
    }
    assert_eq!(served_counts(api).await, restored_truth, "reads equal the truth at the dump's point");

    // The relay goes on after the restore: a storm through it is published and projected, once.
    storm([api, api], &AtomicUsize::new(0)).await;
    match restored.settled(Duration::from_secs(120)).await {
        Ok(report) => assert_eq!(report.pairs_checked, 90, "{report}"),
        Err(state) => panic!("not settled after the restore's writes: {state}\n{}", restored.logs(&names)),
    }
    assert_eq!(served_counts(api).await, truth_counts(&url).await);

    // The logical backup of one tenant: its export, imported into an empty tenant, holds the same edges.
    let logical = export(api, "scaled").await;
    let imported = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{api}/admin/v1/tenants/scaled-copy/import"))
        .bearer_auth(ADMIN_TOKEN)
        .header("content-type", "application/x-ndjson")
        .body(logical)
        .send()
        .await
        .unwrap();
    assert_eq!(imported.status(), 200, "{}", imported.text().await.unwrap());
    assert_eq!(exported(api, "scaled-copy").await, exported(api, "scaled").await);
}
