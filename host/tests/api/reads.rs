//! Relationship status, follow lists (cursor and offset pages) and counts, read from the truth.

use std::collections::HashSet;

use serde_json::{json, Value};
use strand_test_support::{on_every_backend, ApiClient, Backend, TestServer};

on_every_backend!(
    relationships_report_following_followed_by_and_mutual,
    cursor_pages_over_ties_return_every_row_exactly_once,
    offset_pages_walk_the_same_order_as_cursors,
    counts_for_one_and_many_users,
    tenants_never_see_each_other,
    paging_parameters_are_validated,
);

async fn relationships_report_following_followed_by_and_mutual(backend: Backend) {
    let server = TestServer::start(backend).await;
    let me = server.client("acme", 1);
    me.follow(2).await;
    me.follow(3).await;
    server.client("acme", 3).follow(1).await;
    server.client("acme", 4).follow(1).await;

    let reply = me.get("/v1/me/relationships?user_ids=2,3,4,5").await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(
        reply.body,
        json!({"relationships": [
            {"user_id": 2, "following": true, "followed_by": false, "mutual": false, "requested": false, "requested_by": false, "blocking": false, "blocked_by": false, "muting": false, "muting_expires_at": null, "muting_notifications": false},
            {"user_id": 3, "following": true, "followed_by": true, "mutual": true, "requested": false, "requested_by": false, "blocking": false, "blocked_by": false, "muting": false, "muting_expires_at": null, "muting_notifications": false},
            {"user_id": 4, "following": false, "followed_by": true, "mutual": false, "requested": false, "requested_by": false, "blocking": false, "blocked_by": false, "muting": false, "muting_expires_at": null, "muting_notifications": false},
            {"user_id": 5, "following": false, "followed_by": false, "mutual": false, "requested": false, "requested_by": false, "blocking": false, "blocked_by": false, "muting": false, "muting_expires_at": null, "muting_notifications": false},
        ]})
    );
}

async fn cursor_pages_over_ties_return_every_row_exactly_once(backend: Backend) {
    let server = TestServer::start(backend).await;
    let me = server.client("acme", 1);
    for other in 2..=41 {
        me.follow(other).await;
        server.client("acme", other).follow(1).await;
    }
    // Make ties: most follows share one millisecond, the rest a second one.
    sqlx::query(
        "UPDATE following SET created_at = CASE WHEN (from_user_id + to_user_id) % 5 = 0 THEN 2000 ELSE 1000 END",
    )
    .execute(server.database().writer())
    .await
    .unwrap();

    for list in ["/v1/users/1/following", "/v1/users/1/followers"] {
        let ids = walk_by_cursor(&me, list, 7).await;
        assert_eq!(ids.len(), 40, "{list}: {ids:?}");
        assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 40, "{list}: no entry twice");
        let mut expected: Vec<(i64, i64)> = (2..=41).map(|u| (if (1 + u) % 5 == 0 { 2000 } else { 1000 }, u)).collect();
        expected.sort_by(|a, b| b.cmp(a));
        assert_eq!(ids, expected.iter().map(|(_, u)| *u).collect::<Vec<_>>(), "{list}: newest first, ties by id");
    }
}

async fn offset_pages_walk_the_same_order_as_cursors(backend: Backend) {
    let server = TestServer::start(backend).await;
    let me = server.client("acme", 1);
    for other in 2..=12 {
        me.follow(other).await;
    }
    let by_cursor = walk_by_cursor(&me, "/v1/users/1/following", 4).await;
    let mut by_offset = Vec::new();
    for offset in (0..12).step_by(4) {
        let page = me.get(&format!("/v1/users/1/following?limit=4&offset={offset}")).await;
        assert_eq!(page.status, 200, "{page:?}");
        by_offset.extend(ids_of(&page.body));
        assert_eq!(page.body["has_more"], offset + 4 < 11);
    }
    assert_eq!(by_offset, by_cursor);
    let first = me.get("/v1/users/1/following?limit=2").await.body;
    assert!(first["items"][0]["followed_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{first}");
}

async fn counts_for_one_and_many_users(backend: Backend) {
    let server = TestServer::start(backend).await;
    let me = server.client("acme", 1);
    me.follow(2).await;
    me.follow(3).await;
    me.unfollow(3).await;
    server.client("acme", 2).follow(1).await;

    let one = me.get("/v1/users/1/counts").await;
    assert_eq!(one.body, json!({"user_id": 1, "followings": 1, "followers": 1}));
    let many = me.get("/v1/counts?user_ids=1,2,3,99").await;
    assert_eq!(
        many.body,
        json!({"counts": [
            {"user_id": 1, "followings": 1, "followers": 1},
            {"user_id": 2, "followings": 1, "followers": 1},
            {"user_id": 3, "followings": 0, "followers": 0},
            {"user_id": 99, "followings": 0, "followers": 0},
        ]})
    );
}

async fn tenants_never_see_each_other(backend: Backend) {
    let server = TestServer::start(backend).await;
    server.client("acme", 1).follow(2).await;
    server.client("acme", 2).follow(1).await;

    let other = server.client("globex", 1);
    let status = other.get("/v1/me/relationships?user_ids=2").await.body;
    assert_eq!(status["relationships"][0]["following"], false);
    assert_eq!(status["relationships"][0]["followed_by"], false);
    assert_eq!(other.get("/v1/users/1/following").await.body["items"], json!([]));
    assert_eq!(other.get("/v1/users/1/followers").await.body["items"], json!([]));
    assert_eq!(other.get("/v1/users/1/counts").await.body["followings"], 0);
    // The same user ids in another tenant are other people: globex's follow is its own, version 1.
    assert_eq!(other.follow(2).await["changed"], true);
    assert_eq!(super::pair_row(server.database(), "globex", 1, 2).await, Some((1, 1)));
    assert_eq!(super::pair_row(server.database(), "acme", 1, 2).await, Some((1, 1)));
}

async fn paging_parameters_are_validated(backend: Backend) {
    let server = TestServer::start(backend).await;
    let me = server.client("acme", 1);
    for (query, code) in [
        ("limit=0", "invalid_limit"),
        ("limit=101", "invalid_limit"),
        ("limit=abc", "invalid_query"),
        ("cursor=nonsense", "invalid_cursor"),
        ("cursor=djE6MToy&offset=3", "invalid_pagination"),
        ("offset=-1", "invalid_query"),
    ] {
        let reply = me.get(&format!("/v1/users/1/following?{query}")).await;
        assert_eq!((reply.status, reply.code()), (400, code), "{query}: {reply:?}");
    }
    let too_many = (1..=101).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    let reply = me.get(&format!("/v1/counts?user_ids={too_many}")).await;
    assert_eq!((reply.status, reply.code()), (400, "too_many_user_ids"));
    let reply = me.get("/v1/me/relationships").await;
    assert_eq!((reply.status, reply.code()), (400, "invalid_query"));
}

/// Reads a whole list page by page through `next_cursor` and returns the user ids in order.
async fn walk_by_cursor(client: &ApiClient, list: &str, limit: u32) -> Vec<i64> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1000 {
        let path = match &cursor {
            Some(c) => format!("{list}?limit={limit}&cursor={c}"),
            None => format!("{list}?limit={limit}"),
        };
        let page = client.get(&path).await;
        assert_eq!(page.status, 200, "{path}: {page:?}");
        ids.extend(ids_of(&page.body));
        match page.body["next_cursor"].as_str() {
            Some(next) => {
                assert_eq!(page.body["has_more"], true);
                cursor = Some(next.to_owned());
            }
            None => {
                assert_eq!(page.body["has_more"], false);
                return ids;
            }
        }
    }
    panic!("{list} did not end within 1000 pages");
}

fn ids_of(page: &Value) -> Vec<i64> {
    page["items"].as_array().expect("items").iter().map(|i| i["user_id"].as_i64().expect("user_id")).collect()
}
