//! Follow and unfollow: idempotency, versions, the outbox written with the truth, and nothing half-written.

use futures::future::join_all;
use serde_json::json;
use sqlx::Executor;
use strand::db::{Database, DatabaseKind};
use strand_test_support::{on_every_backend, Backend, TestServer};

use super::{pair_events, pair_row};

on_every_backend!(
    repeated_follow_and_unfollow_change_once_each,
    unfollow_then_refollow_reuses_the_row_and_bumps_version_twice,
    self_follow_is_refused_and_writes_nothing,
    bad_target_ids_are_400,
    concurrent_follow_unfollow_of_one_pair_writes_one_event_per_real_change,
    of_two_people_following_each_other_at_once_exactly_one_event_says_followed_back,
    outbox_failure_leaves_following_unchanged,
);

async fn repeated_follow_and_unfollow_change_once_each(backend: Backend) {
    let server = TestServer::start(backend).await;
    let alice = server.client("acme", 1);

    assert_eq!(alice.follow(2).await, json!({"user_id": 2, "following": true, "requested": false, "changed": true}));
    assert_eq!(alice.follow(2).await, json!({"user_id": 2, "following": true, "requested": false, "changed": false}));
    assert_eq!(pair_row(server.database(), "acme", 1, 2).await, Some((1, 1)));
    assert_eq!(pair_events(server.database(), "acme", 1, 2).await.len(), 1);

    assert_eq!(alice.unfollow(2).await, json!({"user_id": 2, "following": false, "requested": false, "changed": true}));
    assert_eq!(
        alice.unfollow(2).await,
        json!({"user_id": 2, "following": false, "requested": false, "changed": false})
    );
    assert_eq!(pair_row(server.database(), "acme", 1, 2).await, Some((0, 2)));

    let events = pair_events(server.database(), "acme", 1, 2).await;
    let summary: Vec<_> = events.iter().map(|e| (e["type"].clone(), e["version"].clone())).collect();
    assert_eq!(summary, vec![(json!("follow"), json!(1)), (json!("unfollow"), json!(2))]);
    assert_eq!(events[1]["event_id"], "acme:1:2:2");
    assert_eq!((&events[1]["tenant"], &events[1]["from"], &events[1]["to"]), (&json!("acme"), &json!(1), &json!(2)));
    assert!(events[1]["occurred_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{events:?}");

    // Unfollowing someone never followed changes nothing and publishes nothing.
    assert_eq!(alice.unfollow(3).await["changed"], false);
    assert_eq!(pair_row(server.database(), "acme", 1, 3).await, None);
    assert!(pair_events(server.database(), "acme", 1, 3).await.is_empty());
}

async fn unfollow_then_refollow_reuses_the_row_and_bumps_version_twice(backend: Backend) {
    let server = TestServer::start(backend).await;
    let alice = server.client("acme", 1);
    alice.follow(2).await;
    alice.unfollow(2).await;
    assert_eq!(alice.follow(2).await["changed"], true);

    assert_eq!(pair_row(server.database(), "acme", 1, 2).await, Some((1, 3)));
    let rows: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM following").fetch_one(server.database().reader()).await.unwrap();
    assert_eq!(rows, 1, "a re-follow reuses the pair's row");
    let versions: Vec<_> =
        pair_events(server.database(), "acme", 1, 2).await.iter().map(|e| e["version"].clone()).collect();
    assert_eq!(versions, vec![json!(1), json!(2), json!(3)]);
}

async fn self_follow_is_refused_and_writes_nothing(backend: Backend) {
    let server = TestServer::start(backend).await;
    let alice = server.client("acme", 7);
    for reply in [alice.put("/v1/me/following/7").await, alice.delete("/v1/me/following/7").await] {
        assert_eq!(reply.status, 422, "{reply:?}");
        assert_eq!(reply.code(), "self_follow");
        assert_eq!(reply.content_type, "application/problem+json");
    }
    assert_eq!(pair_row(server.database(), "acme", 7, 7).await, None);
}

async fn bad_target_ids_are_400(backend: Backend) {
    let server = TestServer::start(backend).await;
    let alice = server.client("acme", 1);
    for bad in ["abc", "0", "-5", "1.5", "99999999999999999999"] {
        let reply = alice.put(&format!("/v1/me/following/{bad}")).await;
        assert_eq!(reply.status, 400, "{bad}: {reply:?}");
        assert_eq!(reply.code(), "invalid_user_id", "{bad}");
    }
}

async fn concurrent_follow_unfollow_of_one_pair_writes_one_event_per_real_change(backend: Backend) {
    let server = TestServer::start(backend).await;
    let alice = server.client("acme", 1);
    let calls = (0..64).map(|i| {
        let alice = alice.clone();
        tokio::spawn(async move {
            if i % 2 == 0 {
                alice.follow(2).await
            } else {
                alice.unfollow(2).await
            }
        })
    });
    let replies: Vec<_> = join_all(calls).await.into_iter().map(|r| r.expect("task")).collect();
    let changes = replies.iter().filter(|r| r["changed"] == true).count() as i64;

    let (status, version) = pair_row(server.database(), "acme", 1, 2).await.expect("the pair's row");
    let events = pair_events(server.database(), "acme", 1, 2).await;
    assert_eq!(version, events.len() as i64, "version counts the outbox rows");
    assert_eq!(version, changes, "every reply that said changed wrote exactly one event");
    // Each event is a real change: types alternate, versions run 1, 2, 3, … with no gap or repeat.
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event["version"], json!(i as i64 + 1));
        assert_eq!(event["type"], if i % 2 == 0 { "follow" } else { "unfollow" });
    }
    assert_eq!(status, if events.len() % 2 == 1 { 1 } else { 0 });
}

async fn of_two_people_following_each_other_at_once_exactly_one_event_says_followed_back(backend: Backend) {
    let server = TestServer::start(backend).await;
    let pairs: Vec<(i64, i64)> = (0..24).map(|i| (10 + 2 * i, 11 + 2 * i)).collect();
    for follow in [true, false] {
        // Both directions of every pair at once: the second to commit sees the first under its lock.
        let calls = pairs.iter().flat_map(|&(a, b)| [(a, b), (b, a)]).map(|(from, to)| {
            let client = server.client("acme", from);
            tokio::spawn(async move {
                if follow {
                    client.follow(to).await
                } else {
                    client.unfollow(to).await
                }
            })
        });
        for reply in join_all(calls).await {
            assert_eq!(reply.expect("task")["changed"], true);
        }
        for &(a, b) in &pairs {
            let there = pair_events(server.database(), "acme", a, b).await;
            let back = pair_events(server.database(), "acme", b, a).await;
            let (there, back) = (there.last().unwrap(), back.last().unwrap());
            let flags = [&there["followed_back"], &back["followed_back"]];
            let set = flags.iter().filter(|f| ***f == json!(true)).count();
            assert_eq!(
                set, 1,
                "{a} and {b} (follow: {follow}): exactly one event ends or starts the mutual follow: {flags:?}"
            );
        }
    }
}

async fn outbox_failure_leaves_following_unchanged(backend: Backend) {
    let server = TestServer::start(backend).await;
    let alice = server.client("acme", 1);
    alice.follow(2).await;
    break_outbox(server.database()).await;

    let reply = alice.delete("/v1/me/following/2").await;
    assert!(reply.status >= 500, "{reply:?}");
    assert_eq!(reply.content_type, "application/problem+json");
    let reply = alice.put("/v1/me/following/3").await;
    assert!(reply.status >= 500, "{reply:?}");

    assert_eq!(pair_row(server.database(), "acme", 1, 2).await, Some((1, 1)), "the unfollow rolled back");
    assert_eq!(pair_row(server.database(), "acme", 1, 3).await, None, "the follow rolled back");
    assert_eq!(pair_events(server.database(), "acme", 1, 2).await.len(), 1);
    let status = server.client("acme", 1).get("/v1/me/relationships?user_ids=2,3").await;
    assert_eq!(status.body["relationships"][0]["following"], true);
    assert_eq!(status.body["relationships"][1]["following"], false);
}

/// Makes every insert into the outbox fail, as a full disk or a broken table would.
async fn break_outbox(db: &Database) {
    let trigger = match db.kind() {
        DatabaseKind::Sqlite => {
            "CREATE TRIGGER outbox_broken BEFORE INSERT ON outbox BEGIN SELECT RAISE(ABORT, 'outbox broken'); END"
        }
        DatabaseKind::MySql => {
            "CREATE TRIGGER outbox_broken BEFORE INSERT ON outbox FOR EACH ROW \
             SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'outbox broken'"
        }
    };
    db.writer().execute(trigger).await.expect("installing the failing trigger");
}
