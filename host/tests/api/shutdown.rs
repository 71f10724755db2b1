//! SIGTERM under write load: `strand serve` stops accepting, finishes the requests in flight, lets the relay
//! and the workers finish their batch, and exits 0 — every write it acknowledged is in the database with
//! its event (published or still in the outbox), and no request got a 5xx.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use strand::db::Database;
use strand_test_support::{outbox_rows, token, wait_until, StrandCommand, TEST_SECRET};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_drains_in_flight_writes_and_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let database_url = format!("sqlite://{}?mode=rwc", dir.path().join("strand.db").display());
    // Port 0, and the address the server logs it bound: no other process can take a port in between.
    let command = StrandCommand::new(env!("CARGO_BIN_EXE_strand"), &database_url)
        .set("listen", "127.0.0.1:0")
        .set("jwt_hs256_secret", TEST_SECRET);
    let mut serve = command.spawn(&["serve"], dir.path().join("serve.log")).unwrap();
    let mut bound = None;
    wait_until("the server logs its address", Duration::from_secs(60), || {
        bound = serve.log().lines().find(|l| l.contains("strand is serving")).and_then(|line| {
            let addr = line.split_once("addr=")?.1;
            Some(addr.split_whitespace().next()?.to_owned())
        });
        std::future::ready(bound.is_some())
    })
    .await;
    let base = format!("http://{}", bound.unwrap());
    let http = reqwest::Client::new();
    wait_until("the server answers", Duration::from_secs(60), || async {
        http.get(format!("{base}/healthz")).send().await.is_ok_and(|r| r.status() == 200)
    })
    .await;

    // Eight users follow one account after another until the server stops answering.
    let stopping = Arc::new(AtomicBool::new(false));
    let writers = (1..=8_i64).map(|user| {
        let (http, base, stopping) = (http.clone(), base.clone(), stopping.clone());
        let bearer = token(TEST_SECRET, &user.to_string(), "drain", 3600);
        async move {
            let mut acknowledged = Vec::new();
            for target in 100..100_000_i64 {
                let sent = http.put(format!("{base}/v1/me/following/{target}")).bearer_auth(&bearer).send().await;
                match sent {
                    Ok(reply) => {
                        let status = reply.status().as_u16();
                        assert!(status < 500, "user {user} → {target}: {status}");
                        if status == 200 {
                            acknowledged.push((user, target));
                        }
                    }
                    // Refused or cut after the listener closed: not acknowledged, so nothing is owed.
                    Err(_) if stopping.load(Ordering::SeqCst) => break,
                    Err(error) => panic!("before shutdown: {error}"),
                }
            }
            acknowledged
        }
    });
    let load = tokio::spawn(join_all(writers));
    let db_for_wait = Database::open(&database_url, 2).await.unwrap();
    wait_until("writes are flowing", Duration::from_secs(30), || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM following").fetch_one(db_for_wait.reader()).await.unwrap()
            >= 200
    })
    .await;
    stopping.store(true, Ordering::SeqCst);
    serve.terminate().unwrap();
    let mut exit = None;
    wait_until("the server exits", Duration::from_secs(60), || {
        exit = serve.exited();
        std::future::ready(exit.is_some())
    })
    .await;
    assert!(exit.unwrap().success(), "exit {exit:?}; log:\n{}", serve.log());
    let acknowledged: Vec<(i64, i64)> = load.await.unwrap().into_iter().flatten().collect();
    assert!(acknowledged.len() >= 200);

    for (user, target) in &acknowledged {
        let status: Option<i64> = sqlx::query_scalar(
            "SELECT rel_status FROM following WHERE tenant_id = 'drain' AND from_user_id = ? AND to_user_id = ?",
        )
        .bind(user)
        .bind(target)
        .fetch_optional(db_for_wait.reader())
        .await
        .unwrap();
        assert_eq!(status, Some(1), "acknowledged {user} → {target} is in the truth");
    }
    // Every change has its event: published to the bus, or still in the outbox for the next start.
    let changes: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM following").fetch_one(db_for_wait.reader()).await.unwrap();
    let pending = outbox_rows(&db_for_wait).await.unwrap();
    let published: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM bus_log WHERE topic = 'strand.following'")
        .fetch_one(db_for_wait.reader())
        .await
        .unwrap();
    assert_eq!(pending + published, changes, "one event per follow");
    assert!(serve.log().contains("strand is serving"));
}
