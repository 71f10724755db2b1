//! The database down: requests get a clear 503 (problem+json `database_unavailable`), `/readyz` says not ready (its log says why),
//! and once the database is back the same process serves again — and its relay publishes what was
//! committed — without a restart.

use std::time::Duration;

use strand::config::RelayMode;
use strand_test_support::{outbox_rows, try_wait_until, wait_until, Backend, MariaDb, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn while_the_database_is_down_requests_get_503_and_service_resumes_without_a_restart() {
    let mariadb = tokio::task::spawn_blocking(MariaDb::restartable).await.unwrap().unwrap();
    let url = mariadb.create_database().await.unwrap();
    let server = TestServer::start_with(Backend::MariaDb, |c| {
        c.database_url = url;
        c.relay = RelayMode::Poll;
        c.relay_idle_ms = 10;
    })
    .await;
    let client = server.client("outage", 1);
    assert_eq!(client.put("/v1/me/following/2").await.status, 200);

    let down = tokio::task::spawn_blocking(move || mariadb.go_down().map(|()| mariadb)).await.unwrap();
    let mariadb = down.unwrap();
    for path in ["/v1/me/following/3", "/v1/users/1/counts"] {
        let reply = if path.starts_with("/v1/me") { client.put(path).await } else { client.get(path).await };
        assert_eq!((reply.status, reply.content_type.as_str()), (503, "application/problem+json"), "{path}: {reply:?}");
        assert_eq!(reply.code(), "database_unavailable", "{path}");
    }
    let ready = server.anonymous().get("/readyz").await;
    assert_eq!((ready.status, ready.code()), (503, "not_ready"));
    assert!(!ready.body["detail"].as_str().unwrap().contains("127.0.0.1"), "no raw error text: {ready:?}");

    // Handed back: dropping it would stop the server for good.
    let _mariadb = tokio::task::spawn_blocking(move || mariadb.come_back().map(|()| mariadb)).await.unwrap().unwrap();
    // Polled by readiness, not by writes: a write loop would run into the rate limit.
    let last = std::sync::Mutex::new(None);
    let ready = try_wait_until("the node is ready again", Duration::from_secs(60), || async {
        let reply = server.anonymous().get("/readyz").await;
        let ready = reply.status == 200;
        *last.lock().unwrap() = Some(reply);
        ready
    })
    .await;
    if let Err(timed_out) = ready {
        panic!("{timed_out}; the last /readyz answer: {:?}", last.lock().unwrap().take());
    }
    assert_eq!(client.put("/v1/me/following/3").await.status, 200, "the same process writes again");
    assert_eq!(client.get("/v1/users/1/counts").await.body["followings"], 2);
    wait_until("the relay published what was committed", Duration::from_secs(60), || async {
        outbox_rows(server.database()).await.is_ok_and(|n| n == 0)
    })
    .await;
}
