//! Blocks, private accounts with follow requests, mutes, removing a follower, known followers: Mastodon's
//! semantics, each change a versioned change of its edge with its own outbox event.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};
use sqlx::Row;
use strand::db::Database;
use strand::graph::{change, Act, RelationCommand, TenantId, UserId};
use strand_test_support::{on_every_backend, test_plugin, wait_until, ApiClient, Backend, TestServer};

use super::{pair_events, pair_row};

on_every_backend!(
    a_block_ends_follows_and_requests_both_ways_and_refuses_new_ones_until_unblocked,
    a_private_account_gets_requests_it_authorizes_or_rejects_and_going_public_authorizes_the_rest,
    a_mute_is_the_muters_alone_and_ends_by_itself,
    removing_a_follower_ends_their_follow_and_the_event_names_who_acted,
    known_followers_are_the_callers_follows_who_follow_the_user,
    a_known_followers_page_walks_a_bounded_number_of_follows,
    the_seed_routes_answer_for_requests_and_blocks,
    every_relation_write_passes_the_rate_limiter,
);

/// Every outbox event of `tenant` in commit order: (type, from, to, version, actor).
async fn events(db: &Database, tenant: &str) -> Vec<(String, i64, i64, i64, i64)> {
    sqlx::query("SELECT payload FROM outbox WHERE tenant_id = ? ORDER BY id")
        .bind(tenant)
        .fetch_all(db.reader())
        .await
        .expect("reading outbox")
        .iter()
        .map(|row| {
            let e: Value = serde_json::from_str(&row.get::<String, _>(0)).expect("outbox payloads are JSON");
            let n = |field: &str| e[field].as_i64().unwrap_or_else(|| panic!("{field} in {e}"));
            (e["type"].as_str().unwrap().to_owned(), n("from"), n("to"), n("version"), n("actor"))
        })
        .collect()
}

fn event(kind: &str, from: i64, to: i64, version: i64, actor: i64) -> (String, i64, i64, i64, i64) {
    (kind.to_owned(), from, to, version, actor)
}

async fn relationship(client: &ApiClient, other: i64) -> Value {
    let reply = client.get(&format!("/v1/me/relationships?user_ids={other}")).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    reply.body["relationships"][0].clone()
}

async fn ids(client: &ApiClient, path: &str) -> Vec<i64> {
    let reply = client.get(path).await;
    assert_eq!(reply.status, 200, "{path}: {reply:?}");
    reply.body["items"].as_array().unwrap().iter().map(|item| item["user_id"].as_i64().unwrap()).collect()
}

async fn counts(client: &ApiClient, user: i64) -> (i64, i64) {
    let reply = client.get(&format!("/v1/users/{user}/counts")).await;
    (reply.body["followings"].as_i64().unwrap(), reply.body["followers"].as_i64().unwrap())
}

async fn a_block_ends_follows_and_requests_both_ways_and_refuses_new_ones_until_unblocked(backend: Backend) {
    let server = TestServer::start(backend).await;
    let (alice, bob, carol) = (server.client("acme", 1), server.client("acme", 2), server.client("acme", 3));
    alice.follow(2).await;
    bob.follow(1).await;
    assert_eq!(carol.put("/v1/me/settings").await.status, 400, "a body is required");
    let private = carol.send_json(reqwest::Method::PUT, "/v1/me/settings", &json!({"private": true})).await;
    assert_eq!(private.body, json!({"private": true}), "{private:?}");
    assert_eq!(alice.follow(3).await, json!({"user_id": 3, "following": false, "requested": true, "changed": true}));

    let blocked = alice.put("/v1/me/blocks/2").await;
    assert_eq!(blocked.status, 200, "{blocked:?}");
    assert_eq!(blocked.body["changed"], true);
    let r = &blocked.body["relationship"];
    assert_eq!((&r["blocking"], &r["following"], &r["followed_by"]), (&json!(true), &json!(false), &json!(false)));
    assert_eq!(alice.put("/v1/me/blocks/2").await.body["changed"], false, "blocking again changes nothing");
    // Carol blocks the pending requester: the request is rejected by the block.
    assert_eq!(carol.put("/v1/me/blocks/1").await.body["changed"], true);

    let log = events(server.database(), "acme").await;
    assert_eq!(
        log[3..],
        [
            event("unfollow", 1, 2, 2, 1),
            event("unfollow", 2, 1, 2, 1),
            event("block", 1, 2, 1, 1),
            event("follow_request_rejected", 1, 3, 2, 3),
            event("block", 3, 1, 1, 3),
        ]
    );
    assert_eq!(pair_row(server.database(), "acme", 1, 2).await, Some((0, 2)));
    assert_eq!(pair_row(server.database(), "acme", 1, 3).await, Some((0, 2)));

    // While the block holds, neither may follow or request the other.
    for (client, target) in [(&alice, 2), (&bob, 1), (&alice, 3), (&carol, 1)] {
        let refused = client.put(&format!("/v1/me/following/{target}")).await;
        assert_eq!((refused.status, refused.code()), (403, "blocked"), "{refused:?}");
        assert_eq!(refused.content_type, "application/problem+json");
    }
    assert_eq!(relationship(&bob, 1).await["blocked_by"], true);
    assert_eq!(relationship(&bob, 1).await["blocking"], false);
    assert_eq!(ids(&alice, "/v1/me/blocks").await, [2]);
    assert_eq!(counts(&alice, 1).await, (0, 0));

    let unblocked = alice.delete("/v1/me/blocks/2").await;
    assert_eq!(unblocked.body["changed"], true);
    assert_eq!(unblocked.body["relationship"]["following"], false, "unblocking restores nothing");
    assert!(ids(&alice, "/v1/me/blocks").await.is_empty());
    assert_eq!(events(server.database(), "acme").await.last(), Some(&event("unblock", 1, 2, 2, 1)));
    assert_eq!(bob.follow(1).await["following"], true, "the block is gone");
    assert_eq!(alice.put("/v1/me/blocks/1").await.code(), "self_relation");
}

async fn a_private_account_gets_requests_it_authorizes_or_rejects_and_going_public_authorizes_the_rest(
    backend: Backend,
) {
    let server = TestServer::start(backend).await;
    let star = server.client("acme", 100);
    let set_private = |private: bool| {
        let star = star.clone();
        async move {
            let reply = star.send_json(reqwest::Method::PUT, "/v1/me/settings", &json!({"private": private})).await;
            assert_eq!(reply.status, 200, "{reply:?}");
        }
    };
    set_private(true).await;
    assert_eq!(star.get("/v1/me/settings").await.body, json!({"private": true}));
    for fan in 1..=5 {
        let fan = server.client("acme", fan);
        assert_eq!(fan.follow(100).await["requested"], true);
        assert_eq!(fan.follow(100).await["changed"], false, "asking again changes nothing");
    }
    assert_eq!(counts(&star, 100).await, (0, 0), "requests are not counted");
    assert!(ids(&star, "/v1/users/100/followers").await.is_empty(), "nor listed");
    assert_eq!(ids(&star, "/v1/me/follow_requests").await, [5, 4, 3, 2, 1]);
    assert_eq!(ids(&server.client("acme", 1), "/v1/me/follow_requests/outgoing").await, [100]);
    assert_eq!(relationship(&star, 1).await["requested_by"], true);
    assert_eq!(relationship(&server.client("acme", 1), 100).await["requested"], true);

    let authorized = star.post("/v1/me/follow_requests/1/authorize").await;
    assert_eq!(authorized.status, 200, "{authorized:?}");
    assert_eq!(authorized.body["relationship"]["followed_by"], true);
    assert_eq!(star.post("/v1/me/follow_requests/1/authorize").await.body["changed"], false);
    assert_eq!(star.post("/v1/me/follow_requests/2/reject").await.body["relationship"]["requested_by"], false);
    // The requester withdraws with the ordinary unfollow.
    assert_eq!(server.client("acme", 3).unfollow(100).await["requested"], false);
    assert_eq!(counts(&star, 100).await, (0, 1));
    let kinds: Vec<String> =
        pair_events(server.database(), "acme", 1, 100).await.iter().map(|e| e["type"].to_string()).collect();
    assert_eq!(kinds, [r#""follow_requested""#, r#""follow""#]);
    assert_eq!(pair_events(server.database(), "acme", 1, 100).await[1]["actor"], 100, "the account authorized it");
    assert_eq!(pair_events(server.database(), "acme", 2, 100).await[1]["type"], "follow_request_rejected");
    assert_eq!(pair_events(server.database(), "acme", 3, 100).await[1]["type"], "follow_request_withdrawn");

    // Going public authorizes the pending requests (4 and 5), each with its follow event.
    set_private(false).await;
    assert!(ids(&star, "/v1/me/follow_requests").await.is_empty());
    assert_eq!(
        ids(&star, "/v1/users/100/followers").await.into_iter().collect::<BTreeSet<_>>(),
        BTreeSet::from([1, 4, 5])
    );
    assert_eq!(counts(&star, 100).await, (0, 3));
    assert_eq!(server.client("acme", 6).follow(100).await["following"], true, "a public account is followed at once");
}

async fn a_mute_is_the_muters_alone_and_ends_by_itself(backend: Backend) {
    let server = TestServer::start(backend).await;
    let (alice, bob) = (server.client("acme", 1), server.client("acme", 2));
    alice.follow(2).await;
    let muted = alice.put("/v1/me/mutes/2").await;
    assert_eq!(muted.status, 200, "{muted:?}");
    let r = &muted.body["relationship"];
    assert_eq!(
        (&r["muting"], &r["muting_notifications"], &r["muting_expires_at"]),
        (&json!(true), &json!(true), &Value::Null)
    );
    assert_eq!(r["following"], true, "a mute touches no follow");
    assert_eq!(alice.put("/v1/me/mutes/2").await.body["changed"], false);
    // The muted user never sees it.
    let seen = relationship(&bob, 1).await;
    assert_eq!((&seen["muting"], &seen["followed_by"]), (&json!(false), &json!(true)), "{seen}");
    assert_eq!(ids(&alice, "/v1/me/mutes").await, [2]);
    assert!(ids(&bob, "/v1/me/mutes").await.is_empty());
    assert_eq!(counts(&alice, 2).await, (0, 1));

    // Three seconds: long enough that the answer still shows the mute on a loaded machine, short enough to
    // wait for its end.
    let quiet = json!({"duration": 3, "notifications": false});
    let changed = alice.send_json(reqwest::Method::PUT, "/v1/me/mutes/2", &quiet).await;
    assert_eq!(changed.body["changed"], true, "{changed:?}");
    assert!(changed.body["relationship"]["muting_expires_at"].is_string());
    assert_eq!(changed.body["relationship"]["muting_notifications"], false);
    let too_long = alice.send_json(reqwest::Method::PUT, "/v1/me/mutes/2", &json!({"duration": 1u64 << 40})).await;
    assert_eq!((too_long.status, too_long.code()), (400, "invalid_duration"));
    let unknown = alice.send_json(reqwest::Method::PUT, "/v1/me/mutes/2", &json!({"forever": true})).await;
    assert_eq!((unknown.status, unknown.code()), (400, "invalid_body"));
    wait_until("the three-second mute ends by itself", Duration::from_secs(15), || async {
        relationship(&alice, 2).await["muting"] == false
    })
    .await;
    assert!(ids(&alice, "/v1/me/mutes").await.is_empty());

    alice.put("/v1/me/mutes/2").await;
    assert_eq!(alice.delete("/v1/me/mutes/2").await.body["relationship"]["muting"], false);
    let kinds: Vec<String> = events(server.database(), "acme").await.into_iter().map(|e| e.0).collect();
    assert_eq!(kinds, ["follow", "mute", "mute", "mute", "unmute"]);
}

async fn removing_a_follower_ends_their_follow_and_the_event_names_who_acted(backend: Backend) {
    let server = TestServer::start(backend).await;
    let (alice, bob) = (server.client("acme", 1), server.client("acme", 2));
    bob.follow(1).await;
    alice.follow(2).await;
    let removed = alice.delete("/v1/me/followers/2").await;
    assert_eq!(removed.status, 200, "{removed:?}");
    assert_eq!((&removed.body["changed"], &removed.body["relationship"]["followed_by"]), (&json!(true), &json!(false)));
    assert_eq!(removed.body["relationship"]["following"], true, "the caller's own follow stays");
    assert_eq!(alice.delete("/v1/me/followers/2").await.body["changed"], false);
    let last = pair_events(server.database(), "acme", 2, 1).await.pop().unwrap();
    assert_eq!(
        (&last["type"], &last["actor"], &last["from"], &last["followed_back"]),
        (&json!("unfollow"), &json!(1), &json!(2), &json!(true))
    );
    assert_eq!(bob.follow(1).await["following"], true, "a soft block: they may follow again");
}

async fn known_followers_are_the_callers_follows_who_follow_the_user(backend: Backend) {
    let server = TestServer::start(backend).await;
    let (me, target) = (1, 1000);
    // I follow 2..=40; every third of 2..=60 follows the target; a request and a block do not count.
    let mut expected = BTreeSet::new();
    for user in 2..=60 {
        if user <= 40 {
            server.client("acme", me).follow(user).await;
        }
        if user % 3 == 0 {
            server.client("acme", user).follow(target).await;
            if user <= 40 {
                expected.insert(user);
            }
        }
    }
    let caller = server.client("acme", me);
    let mut seen = Vec::new();
    let mut path = format!("/v1/users/{target}/known_followers?limit=4");
    loop {
        let page = caller.get(&path).await;
        assert_eq!(page.status, 200, "{page:?}");
        seen.extend(page.body["items"].as_array().unwrap().iter().map(|i| i["user_id"].as_i64().unwrap()));
        match page.body["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/users/{target}/known_followers?limit=4&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen.iter().copied().collect::<BTreeSet<_>>(), expected);
    assert_eq!(seen.len(), expected.len(), "no one twice");
    let count = caller.get(&format!("/v1/users/{target}/known_followers/count")).await;
    assert_eq!((count.status, &count.body), (200, &json!({"total": expected.len()})));
    // Newest follow of mine first.
    assert!(seen.windows(2).all(|w| w[0] > w[1]), "{seen:?}");
    // A follower the caller stops following is no longer known; one the target blocks is no follower.
    caller.unfollow(3).await;
    server.client("acme", target).put("/v1/me/blocks/6").await;
    let after = caller.get(&format!("/v1/users/{target}/known_followers?limit=100")).await;
    assert_eq!(after.body["items"].as_array().unwrap().len(), expected.len() - 2);
    let count = caller.get(&format!("/v1/users/{target}/known_followers/count")).await;
    assert_eq!(count.body["total"], expected.len() as i64 - 2);
}

/// A caller whose 600 newest follows follow nobody it asks about: the first page walks 250 of them and
/// answers none, with a cursor from where it stopped; the pages after walk on and find the two.
async fn a_known_followers_page_walks_a_bounded_number_of_follows(backend: Backend) {
    let server = TestServer::start(backend).await;
    let tenant: TenantId = "acme".parse().unwrap();
    let user = |id: i64| UserId::try_from(id).unwrap();
    for followed in 2..=601 {
        change(server.database(), RelationCommand::new(&tenant, user(1), Act::Follow, user(followed))).await.unwrap();
    }
    for follower in [2, 3] {
        change(server.database(), RelationCommand::new(&tenant, user(follower), Act::Follow, user(1000)))
            .await
            .unwrap();
    }
    let caller = server.client("acme", 1);
    let first = caller.get("/v1/users/1000/known_followers?limit=10").await;
    assert_eq!((first.status, first.body["items"].as_array().map(Vec::len)), (200, Some(0)), "{first:?}");
    assert_eq!(first.body["has_more"], true);
    let (mut found, mut pages, mut page) = (Vec::new(), 1, first);
    while let Some(cursor) = page.body["next_cursor"].as_str() {
        page = caller.get(&format!("/v1/users/1000/known_followers?limit=10&cursor={cursor}")).await;
        found.extend(page.body["items"].as_array().unwrap().iter().map(|i| i["user_id"].as_i64().unwrap()));
        pages += 1;
    }
    assert_eq!((found, pages), (vec![3, 2], 3), "600 follows walked 250 at a time: {page:?}");
    let count = caller.get("/v1/users/1000/known_followers/count").await;
    assert_eq!(count.body["total"], 2);
}

async fn the_seed_routes_answer_for_requests_and_blocks(backend: Backend) {
    let server = TestServer::start(backend).await;
    let (alice, bob) = (server.client("acme", 1), server.client("acme", 2));
    bob.send_json(reqwest::Method::PUT, "/v1/me/settings", &json!({"private": true})).await;
    let requested = alice.post("/api/v1/relation/follow?toUserId=2").await;
    assert_eq!((requested.status, &requested.body), (200, &json!(false)), "a pending request is not a follow");
    let status = alice.get("/api/v1/relation/status?toUserId=2").await;
    assert_eq!(status.body["following"], false);
    bob.put("/v1/me/blocks/1").await;
    let refused = alice.post("/api/v1/relation/follow?toUserId=2").await;
    assert_eq!((refused.status, refused.code()), (403, "blocked"));
    assert_eq!(alice.post("/api/v1/relation/unfollow?toUserId=2").await.body, json!(true));
}

/// Blocks, mutes, unblocks and settings are writes like follows: the bundled policy's burst (100) holds for
/// each of them; a limited write changes nothing.
async fn every_relation_write_passes_the_rate_limiter(backend: Backend) {
    let server = TestServer::start(backend).await;
    let writes = [("PUT", "/v1/me/blocks"), ("PUT", "/v1/me/mutes"), ("DELETE", "/v1/me/blocks")];
    for (user, (method, route)) in (1..).zip(writes) {
        let client = server.client("acme", user);
        let mut statuses = Vec::new();
        for target in 1_000..1_130 {
            let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            statuses.push(client.send_json(method, &format!("{route}/{target}"), &json!({})).await.status);
        }
        let limited = statuses.iter().filter(|status| **status == 429).count();
        assert!(
            statuses[..100].iter().all(|status| *status == 200),
            "{method} {route}: the burst passes: {statuses:?}"
        );
        assert!(limited >= 25, "{method} {route}: past the burst, limited: {statuses:?}");
    }
    let blocks: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM blocks WHERE tenant_id = 'acme' AND from_user_id = 1 AND rel_status = 1",
    )
    .fetch_one(server.database().reader())
    .await
    .unwrap();
    assert!(blocks <= 105, "a limited block wrote nothing: {blocks}");
    let settings = server.client("acme", 9);
    let mut statuses = Vec::new();
    for i in 0..130 {
        let private = json!({"private": i % 2 == 0});
        statuses.push(settings.send_json(reqwest::Method::PUT, "/v1/me/settings", &private).await.status);
    }
    assert!(statuses.contains(&429), "settings too: {statuses:?}");

    // A 0.4.0 limiter is told which write it decides on.
    let deny_all = test_plugin("deny-all");
    let path = "/admin/v1/tenants/denied/plugins/rate-limiter/default";
    assert_eq!(server.admin().upload(reqwest::Method::PUT, path, deny_all).await.status, 200);
    let denied = server.client("denied", 1);
    for (method, route, write) in [
        ("PUT", "/v1/me/following/2", "follow"),
        ("PUT", "/v1/me/blocks/2", "block"),
        ("DELETE", "/v1/me/mutes/2", "unmute"),
        ("DELETE", "/v1/me/followers/2", "remove-follower"),
        ("PUT", "/v1/me/settings", "settings"),
    ] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let reply = denied.send_json(method, route, &json!({"private": true})).await;
        let detail = reply.body["detail"].as_str().unwrap_or_default().to_owned();
        assert_eq!(reply.status, 429, "{route}: {reply:?}");
        assert!(detail.ends_with(&format!("deny-all test policy: {write}")), "{route}: {detail}");
    }
}
