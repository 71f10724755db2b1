//! The seed-compatible surface: same shapes as the seed's relation module, with its bugs fixed.

use serde_json::json;
use strand::api::NEXT_CURSOR_HEADER as NEXT_CURSOR;
use strand_test_support::{on_every_backend, Backend, TestServer};

on_every_backend!(seed_relation_flow_counts_once_and_refuses_self_follow, seed_lists_are_arrays_with_a_cursor_header);

async fn seed_relation_flow_counts_once_and_refuses_self_follow(backend: Backend) {
    let server = TestServer::start(backend).await;
    let alice = server.client("acme", 1);
    let bob = server.client("acme", 2);

    let reply = alice.post("/api/v1/relation/follow?toUserId=2").await;
    assert_eq!((reply.status, reply.body.clone()), (200, json!(true)), "{reply:?}");
    let status = alice.get("/api/v1/relation/status?toUserId=2").await.body;
    assert_eq!(status, json!({"following": true, "followedBy": false, "mutual": false}));
    let counter = |user: i64| {
        let alice = alice.clone();
        async move { alice.get(&format!("/api/v1/relation/counter?userId={user}")).await.body }
    };
    assert_eq!(
        counter(1).await,
        json!({"followings": 1, "followers": 0, "posts": 0, "likedPosts": 0, "favedPosts": 0})
    );
    assert_eq!(counter(2).await["followers"], 1);

    // The seed double counted a repeated follow; here it changes nothing.
    assert_eq!(alice.post("/api/v1/relation/follow?toUserId=2").await.body, json!(true));
    assert_eq!(counter(2).await["followers"], 1);

    bob.post("/api/v1/relation/follow?toUserId=1").await;
    assert_eq!(alice.get("/api/v1/relation/status?toUserId=2").await.body["mutual"], true);

    assert_eq!(alice.post("/api/v1/relation/unfollow?toUserId=2").await.body, json!(true));
    assert_eq!(counter(1).await["followings"], 0);
    assert_eq!(counter(2).await["followers"], 0);

    let reply = alice.post("/api/v1/relation/follow?toUserId=1").await;
    assert_eq!((reply.status, reply.code()), (422, "self_follow"));
    let reply = alice.post("/api/v1/relation/follow?toUserId=abc").await;
    assert_eq!((reply.status, reply.code()), (400, "invalid_user_id"));
    let reply = alice.post("/api/v1/relation/follow").await;
    assert_eq!((reply.status, reply.code()), (400, "invalid_query"));
}

async fn seed_lists_are_arrays_with_a_cursor_header(backend: Backend) {
    let server = TestServer::start(backend).await;
    let alice = server.client("acme", 1);
    for other in 2..=6 {
        alice.follow(other).await;
        server.client("acme", other).follow(1).await;
    }
    let first = alice.get("/api/v1/relation/following?userId=1&limit=3").await;
    assert_eq!(first.status, 200, "{first:?}");
    let ids: Vec<i64> = first.body.as_array().unwrap().iter().map(|u| u["id"].as_i64().unwrap()).collect();
    assert_eq!(ids.len(), 3);
    let cursor = first.headers[NEXT_CURSOR].to_str().unwrap().to_owned();
    let rest = alice.get(&format!("/api/v1/relation/following?userId=1&limit=3&cursor={cursor}")).await;
    assert_eq!(rest.body.as_array().unwrap().len(), 2);
    assert!(rest.headers.get(NEXT_CURSOR).is_none(), "no cursor after the last page");

    let by_offset = alice.get("/api/v1/relation/followers?userId=1&limit=10&offset=4").await;
    assert_eq!(by_offset.body.as_array().unwrap().len(), 1);
}
