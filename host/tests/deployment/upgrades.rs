//! Upgrades across schema versions on MariaDB: a deployment migrates by one explicit step (`strand
//! migrate`), its nodes and maintenance commands only check the schema they find, and a release runs on a
//! newer schema the release that migrated it recorded as compatible (a rollback, an old pod rescheduled
//! mid-rollout) while one too old for it refuses by name; the previous release's binary, built from its
//! tag, runs beside this one and alone after a rollback.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use strand::db::Database;
use strand_test_support::{free_port, Backend, TEST_SECRET};

use super::scale_out::{storm, ROUNDS};
use super::{answering, port, Deployment};

/// `strand args…` run to its end against `database`: whether it succeeded, and what it printed.
async fn strand(database: &str, args: &[&str], settings: &[(&str, &str)]) -> (bool, String) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_strand"));
    command
        .args(args)
        .env("STRAND_CONFIG", "/nonexistent/strand.toml")
        .env("STRAND_DATABASE_URL", database)
        .env("STRAND_JWT_HS256_SECRET", TEST_SECRET)
        .env("STRAND_RELAY", "off")
        .env("STRAND_WORKERS", "false")
        .env("STRAND_LISTEN", format!("127.0.0.1:{}", free_port().unwrap()));
    for (key, value) in settings {
        command.env(format!("STRAND_{}", key.to_ascii_uppercase()), value);
    }
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .unwrap_or_else(|_| panic!("strand {args:?} still runs after 60 s"))
        .unwrap();
    let printed = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), printed)
}

/// Records, as a newer release's `strand migrate` would, a migration this release does not know and the
/// oldest release that runs on the result.
async fn newer_release_migrated(url: &str, compatible_since: i64) {
    let db = Database::open_existing(url, 1).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'a later release', TRUE, X'00', 0) ON DUPLICATE KEY UPDATE version = version",
    )
    .execute(db.writer())
    .await
    .unwrap();
    sqlx::query("UPDATE strand_schema SET compatible_since = ? WHERE id = 1")
        .bind(compatible_since)
        .execute(db.writer())
        .await
        .unwrap();
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_migrates_by_one_step_and_runs_on_a_newer_compatible_schema() {
    let database = Backend::MariaDb.fresh_database().await.unwrap();
    let url = database.url.as_str();
    let checking = [("migrate_on_start", "false")];

    // Nothing migrates an empty database but the explicit step: nodes and maintenance commands say so.
    let (started, printed) = strand(url, &["serve"], &checking).await;
    assert!(!started && printed.contains("strand migrate"), "{printed}");
    let (rebuilt, printed) = strand(url, &["rebuild", "follower"], &[]).await;
    assert!(!rebuilt && printed.contains("no Strand schema"), "{printed}");
    let (migrated, printed) = strand(url, &["migrate"], &[]).await;
    assert!(migrated && printed.contains("up to date"), "{printed}");
    let (rebuilt, printed) = strand(url, &["rebuild", "follower"], &[]).await;
    assert!(rebuilt, "{printed}");

    // A newer release migrated, recording that this one still runs on its schema: a rollback starts.
    let newest = sqlx::query_scalar::<_, i64>("SELECT MAX(version) FROM _sqlx_migrations")
        .fetch_one(Database::open_existing(url, 1).await.unwrap().reader())
        .await
        .unwrap();
    newer_release_migrated(url, newest).await;
    let (migrated, printed) = strand(url, &["migrate"], &[]).await;
    assert!(migrated && printed.contains("newer (migration 9999)"), "{printed}");
    let (rebuilt, printed) = strand(url, &["rebuild", "follower"], &[]).await;
    assert!(rebuilt, "a maintenance command runs on it: {printed}");
    for settings in [&checking[..], &[("migrate_on_start", "true")][..]] {
        let port = free_port().unwrap();
        let mut node = tokio::process::Command::new(env!("CARGO_BIN_EXE_strand"))
            .arg("serve")
            .env("STRAND_CONFIG", "/nonexistent/strand.toml")
            .env("STRAND_DATABASE_URL", url)
            .env("STRAND_JWT_HS256_SECRET", TEST_SECRET)
            .env("STRAND_LISTEN", format!("127.0.0.1:{port}"))
            .env(format!("STRAND_{}", settings[0].0.to_ascii_uppercase()), settings[0].1)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let token = strand_test_support::token(TEST_SECRET, "1", "acme", 60);
        let follow = format!("http://127.0.0.1:{port}/v1/me/following/2");
        strand_test_support::wait_until("the rolled-back node serves a follow", Duration::from_secs(30), || {
            let (follow, token) = (follow.clone(), token.clone());
            async move {
                let client = reqwest::Client::new();
                client.put(&follow).bearer_auth(&token).send().await.is_ok_and(|r| r.status().is_success())
            }
        })
        .await;
        node.kill().await.unwrap();
    }

    // One that says this release is too old for it: refused, by name, whatever the command.
    newer_release_migrated(url, 9999).await;
    for (args, settings) in
        [(&["serve"][..], &checking[..]), (&["serve"], &[]), (&["migrate"], &[]), (&["rebuild", "follower"], &[])]
    {
        let (ran, printed) = strand(url, args, settings).await;
        assert!(!ran && printed.contains("run a newer release"), "{args:?} {settings:?}: {printed}");
    }
}

#[tokio::test]
async fn a_replay_outside_the_servers_folder_says_there_is_no_database() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/strand.db", dir.path().display());
    let candidate = dir.path().join("candidate.wasm");
    std::fs::write(&candidate, b"\0asm").unwrap();
    let args =
        ["plugin", "test", "--replay", "--tenant", "acme", "--kind", "rate-limiter", candidate.to_str().unwrap()];
    let (replayed, printed) = strand(&url, &args, &[]).await;
    assert!(!replayed && printed.contains("opening the server's database"), "{printed}");
    assert!(!dir.path().join("strand.db").exists(), "no empty database left behind");
}

/// The previous release's `strand`: `PREVIOUS_STRAND_BINARY` (`.ci/test` builds it with
/// `.ci/previous-release`), else built here by that script (a few minutes with the suite's dependencies
/// compiled).
fn previous_release() -> std::path::PathBuf {
    if let Ok(binary) = std::env::var("PREVIOUS_STRAND_BINARY") {
        return binary.into();
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/previous-release");
    let built = std::process::Command::new(&script).output().unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    let printed = String::from_utf8_lossy(&built.stdout);
    assert!(built.status.success(), "{printed}{}", String::from_utf8_lossy(&built.stderr));
    printed.lines().last().expect("the binary's path").trim().into()
}

/// A rolling upgrade and its rollback on MariaDB, Redis and Kafka: the new release migrates (one step), then
/// API nodes, relays and workers of both releases run side by side under writes through both; then the new
/// release's processes go (the rollback) while writes go on through the previous release's. Nothing
/// acknowledged is lost, every projection equals the truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_previous_release_runs_beside_this_one_and_alone_after_a_rollback() {
    let previous = previous_release();
    let mut deployment = Deployment::new().await;
    deployment.cli("migrate", &["migrate"]).finished(Duration::from_secs(60)).await;
    let (new_api, old_api) = (port(), port());
    let mut new = vec![deployment.api("api-new", new_api), deployment.relay("relay-new", port())];
    new.push(deployment.worker("worker-new", port(), None));
    deployment.use_binary(&previous);
    let old = vec![
        deployment.api("api-old", old_api),
        deployment.relay("relay-old", port()),
        deployment.worker("worker-old", port(), None),
    ];
    answering(new_api, &new[0]).await;
    answering(old_api, &old[0]).await;
    let done = AtomicUsize::new(0);
    storm([new_api, old_api], &done).await;

    // The rollback: the new release's processes stop; the previous release's take every write.
    for process in &mut new {
        process.terminate().unwrap();
    }
    storm([old_api, old_api], &done).await;
    assert_eq!(done.load(Ordering::Relaxed), 2 * 10 * 9 * ROUNDS as usize);
    let names = ["api-new", "relay-new", "worker-new", "api-old", "relay-old", "worker-old"];
    match deployment.settled(Duration::from_secs(120)).await {
        Ok(report) => assert_eq!(report.pairs_checked, 90, "{report}"),
        Err(state) => panic!("not settled after 2 minutes: {state}\n{}", deployment.logs(&names)),
    }
    drop(old);
}
