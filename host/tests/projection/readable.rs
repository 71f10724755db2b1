//! Spaces a projector version declares readable, served by `GET /v1/projections/{plugin}/{space}/{ids}`:
//! a projector deployed at runtime is read through the API — a counter equal to the counts, a sorted set
//! paged by cursor and offset equal to the follower list — for its tenant only; undeclared spaces are 404,
//! a space not built yet is 503 `projection_building`.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use strand::plugins::BUNDLED;
use strand_test_support::{wait_until, ApiClient, Backend, Redis, TestServer};

use super::{pipeline, storm};

fn bundled(name: &str) -> Vec<u8> {
    BUNDLED.iter().find(|b| b.name == name).unwrap().wasm.to_vec()
}

/// Every member of `path`'s sorted set, read `limit` at a time by cursor.
async fn all_pages(client: &ApiClient, path: &str, limit: u32) -> Vec<i64> {
    let (mut members, mut cursor) = (Vec::new(), String::new());
    loop {
        let reply = client.get(&format!("{path}?limit={limit}&cursor={cursor}")).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.body["shape"], "sorted-set", "{reply:?}");
        let items = reply.body["items"].as_array().unwrap();
        assert!(items.len() <= limit as usize);
        members.extend(items.iter().map(|i| i["member"].as_i64().unwrap()));
        match reply.body["next_cursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => return members,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runtime_projectors_declared_counter_and_sorted_set_are_served_paged_and_per_tenant() {
    let tenant = format!("rd{}", std::process::id());
    let server = pipeline(&Redis::shared().unwrap().url()).await;
    storm(&server, &tenant, 0).await;
    let admin = server.admin();
    let base = format!("/admin/v1/tenants/{tenant}/plugins/projector");
    let deploy = |name: &str, readable: &str, wasm: &str| {
        let path = format!("{base}/{name}?readable={readable}");
        let (admin, wasm) = (admin.clone(), bundled(wasm));
        async move { admin.upload(Method::PUT, &path, wasm).await }
    };
    let refused = deploy("tally", "gauge:followers", "follow-counts").await;
    assert_eq!((refused.status, refused.body["code"].as_str()), (400, Some("invalid_readable")), "{refused:?}");
    let tally = deploy("tally", "counter:followers", "follow-counts").await;
    assert_eq!(tally.status, 200, "{tally:?}");
    assert_eq!(tally.body["plugin"]["readable"], json!([{"space": "followers", "shape": "counter"}]));
    assert_eq!(deploy("roster", "sorted-set:followers", "follow-lists").await.status, 200);
    storm(&server, &tenant, 1).await;

    let alice = server.client(&tenant, 1);
    wait_until("every declared counter equals the counts", Duration::from_secs(60), || async {
        for user in 1..=6 {
            let read = alice.get(&format!("/v1/projections/tally/followers/{user}")).await;
            let counts = alice.get(&format!("/v1/users/{user}/counts")).await;
            if read.body != json!({"shape": "counter", "value": counts.body["followers"]}) {
                return false;
            }
        }
        true
    })
    .await;
    wait_until("the declared sorted set is built", Duration::from_secs(60), || async {
        alice.get("/v1/projections/roster/followers/1").await.status == 200
    })
    .await;
    // The last storm's events may still be on their way to either view: wait until they agree.
    let followers = |user: i64| {
        let alice = alice.clone();
        async move {
            let list = alice.get(&format!("/v1/users/{user}/followers?limit=100")).await;
            let items = list.body["items"].as_array().unwrap();
            items.iter().map(|i| i["user_id"].as_i64().unwrap()).collect::<Vec<i64>>()
        }
    };
    wait_until(
        "every declared sorted set, paged by cursor, equals the follower list",
        Duration::from_secs(60),
        || async {
            for user in 1..=6 {
                let path = format!("/v1/projections/roster/followers/{user}");
                if all_pages(&alice, &path, 2).await != followers(user).await {
                    return false;
                }
            }
            true
        },
    )
    .await;
    for user in 1..=6 {
        let expected = followers(user).await;
        let path = format!("/v1/projections/roster/followers/{user}");
        let second = alice.get(&format!("{path}?limit=2&offset=2")).await;
        let members: Vec<i64> =
            second.body["items"].as_array().unwrap().iter().map(|i| i["member"].as_i64().unwrap()).collect();
        assert_eq!(members, expected.iter().skip(2).take(2).copied().collect::<Vec<_>>(), "offset paging");
    }

    // Only what was declared, only for the tenant that deployed it.
    for (client, path) in [
        (&alice, "/v1/projections/tally/followings/1"),
        (&alice, "/v1/projections/nope/followers/1"),
        (&server.client("someone-else", 1), "/v1/projections/tally/followers/1"),
    ] {
        let reply = client.get(path).await;
        assert_eq!((reply.status, reply.body["code"].clone()), (404, Value::from("not_found")), "{path}: {reply:?}");
    }
    let bad = alice.get("/v1/projections/tally/followers/x").await;
    assert_eq!((bad.status, bad.body["code"].as_str()), (400, Some("invalid_ids")), "{bad:?}");
    let bad = alice.get("/v1/projections/roster/followers/1?cursor=garbage").await;
    assert_eq!((bad.status, bad.body["code"].as_str()), (400, Some("invalid_cursor")), "{bad:?}");
    // The bundled projectors declare theirs too.
    let bundled_read = alice.get("/v1/projections/follow-counts/followers/2").await;
    let counts = alice.get("/v1/users/2/counts").await;
    assert_eq!(bundled_read.body, json!({"shape": "counter", "value": counts.body["followers"]}), "{bundled_read:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_space_not_built_yet_answers_503_projection_building_never_a_partial_answer() {
    // No workers: nothing ever builds the tenant's spaces.
    let server = TestServer::start_with(Backend::Sqlite, |c| c.workers = false).await;
    let bob = server.client("unbuilt", 1);
    bob.follow(2).await;
    let reply = bob.get("/v1/projections/follow-counts/followers/2").await;
    assert_eq!((reply.status, reply.body["code"].as_str()), (503, Some("projection_building")), "{reply:?}");
    assert!(reply.body["detail"].as_str().unwrap().contains("not started yet"), "{reply:?}");
    assert!(reply.headers.contains_key("retry-after"), "{reply:?}");
}

/// A projector giving every member of a sorted set the same score: a page by cursor is still a bounded
/// read (by rank, not a scan of every tied member), and paging by cursor visits every member exactly once,
/// in the same order on Redis and in memory; an offset past the maximum is `400 offset_too_large`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sorted_set_of_one_score_pages_by_cursor_on_every_cache() {
    let redis = Redis::shared().unwrap();
    for redis_url in [Some(redis.url()), None] {
        let tenant = format!("tied{}{}", std::process::id(), redis_url.is_some());
        let server = TestServer::start_pipeline(Backend::Sqlite, redis_url.as_deref()).await;
        let path = format!("/admin/v1/tenants/{tenant}/plugins/projector/tied?readable=sorted-set:tied");
        let deployed =
            server.admin().upload(Method::PUT, &path, strand_test_support::test_plugin("hostile-projector")).await;
        assert_eq!(deployed.status, 200, "{deployed:?}");
        let followers: Vec<i64> = (1..=150).collect();
        for &user in &followers {
            server.client(&tenant, user).follow(905).await;
        }
        server.client(&tenant, 7).unfollow(905).await;
        let reader = server.client(&tenant, 1);
        let set = "/v1/projections/tied/tied/905";
        wait_until("every follow is in the tied set", Duration::from_secs(60), || async {
            let reply = reader.get(&format!("{set}?limit=1")).await;
            reply.status == 200 && reply.body["total"] == 149
        })
        .await;
        let paged = all_pages(&reader, set, 7).await;
        // Members are stored so that their order is the ids' (one score: highest id first).
        let expected: Vec<i64> = followers.iter().rev().copied().filter(|&u| u != 7).collect();
        assert_eq!(paged, expected, "each member once, descending by (score, member)");
        let deep = reader.get(&format!("{set}?offset=10001")).await;
        assert_eq!((deep.status, deep.code()), (400, "offset_too_large"), "{deep:?}");
        let deep_list = reader.get("/v1/users/905/followers?offset=10001").await;
        assert_eq!((deep_list.status, deep_list.code()), (400, "offset_too_large"));
    }
}
