//! The HTTP surface as a whole: unknown routes, methods and oversized bodies are problem+json, and the
//! OpenAPI document describes every route.

use reqwest::Method;
use strand_test_support::{Backend, TestServer};

#[tokio::test]
async fn unknown_routes_methods_and_big_bodies_are_problem_json() {
    let server = TestServer::start_with(Backend::Sqlite, |config| config.max_body_bytes = 1024).await;
    let client = server.client("acme", 1);

    let reply = client.get("/v1/nothing-here").await;
    assert_eq!((reply.status, reply.code()), (404, "not_found"), "{reply:?}");
    assert_eq!(reply.content_type, "application/problem+json");

    let reply = client.call(Method::PATCH, "/v1/me/following/2").await;
    assert_eq!((reply.status, reply.code()), (405, "method_not_allowed"), "{reply:?}");

    let big = reqwest::Client::new()
        .put(server.url("/v1/me/following/2"))
        .bearer_auth(strand_test_support::token(strand_test_support::TEST_SECRET, "1", "acme", 60))
        .body(vec![b'x'; 4096])
        .send()
        .await
        .unwrap();
    assert_eq!(big.status(), 413);
    assert_eq!(big.headers()["content-type"], "application/problem+json");
    assert_eq!(super::pair_row(server.database(), "acme", 1, 2).await, None);
}

#[tokio::test]
async fn openapi_document_covers_every_route() {
    let server = TestServer::start(Backend::Sqlite).await;
    let doc = server.anonymous().get("/openapi.json").await;
    assert_eq!(doc.status, 200);
    let paths = doc.body["paths"].as_object().expect("paths");
    let expected = [
        ("/v1/me/following/{user_id}", &["put", "delete"][..]),
        ("/v1/me/relationships", &["get"]),
        ("/v1/users/{id}/following", &["get"]),
        ("/v1/users/{id}/followers", &["get"]),
        ("/v1/users/{id}/counts", &["get"]),
        ("/v1/counts", &["get"]),
        ("/v1/projections/{plugin}/{space}/{ids}", &["get"]),
        ("/v1/me/blocks/{user_id}", &["put", "delete"]),
        ("/v1/me/blocks", &["get"]),
        ("/v1/me/mutes/{user_id}", &["put", "delete"]),
        ("/v1/me/mutes", &["get"]),
        ("/v1/me/follow_requests", &["get"]),
        ("/v1/me/follow_requests/outgoing", &["get"]),
        ("/v1/me/follow_requests/{user_id}/authorize", &["post"]),
        ("/v1/me/follow_requests/{user_id}/reject", &["post"]),
        ("/v1/me/followers/{user_id}", &["delete"]),
        ("/v1/me/settings", &["get", "put"]),
        ("/v1/users/{id}/known_followers", &["get"]),
        ("/v1/users/{id}/known_followers/count", &["get"]),
        ("/v1/me/export/{list}", &["get"]),
        ("/api/v1/relation/follow", &["post"]),
        ("/api/v1/relation/unfollow", &["post"]),
        ("/api/v1/relation/status", &["get"]),
        ("/api/v1/relation/following", &["get"]),
        ("/api/v1/relation/followers", &["get"]),
        ("/api/v1/relation/counter", &["get"]),
        ("/admin/v1/tenants/{tenant}/plugins", &["get"]),
        ("/admin/v1/tenants/{tenant}/plugins/{kind}/{name}", &["put", "delete"]),
        ("/admin/v1/tenants/{tenant}/plugins/{kind}/{name}/rollback", &["post"]),
        ("/admin/v1/tenants/{tenant}/settings", &["get", "put"]),
        ("/admin/v1/projections", &["get"]),
        ("/admin/v1/tenants", &["get"]),
        ("/admin/v1/lag", &["get"]),
        ("/admin/v1/history", &["get"]),
        ("/admin/v1/tenants/{tenant}/keys", &["get", "post"]),
        ("/admin/v1/tenants/{tenant}/keys/{name}", &["delete"]),
        ("/admin/v1/audit", &["get"]),
        ("/admin/v1/whoami", &["get"]),
        ("/admin/v1/tenants/{tenant}/plugins/{kind}/{name}/promote", &["post"]),
        ("/admin/v1/tenants/{tenant}/plugins/{kind}/{name}/abort", &["post"]),
        ("/admin/v1/tenants/{tenant}/plugins/{kind}/{name}/diff", &["get"]),
        ("/admin/v1/tenants/{tenant}/plugins/{kind}/{name}/logs", &["get"]),
        ("/admin/v1/tenants/{tenant}/jwt-keys", &["get"]),
        ("/admin/v1/tenants/{tenant}/jwt-keys/{kid}", &["put", "delete"]),
        ("/admin/v1/tenants/{tenant}/parked", &["get"]),
        ("/admin/v1/tenants/{tenant}/accounts/{user}/jobs", &["post"]),
        ("/admin/v1/tenants/{tenant}/accounts/{user}", &["get"]),
        ("/admin/v1/tenants/{tenant}/accounts/{user}/relations", &["get"]),
        ("/admin/v1/tenants/{tenant}/accounts/{user}/relations/{list}", &["get"]),
        ("/admin/v1/tenants/{tenant}/figures", &["get"]),
        ("/admin/v1/tenants/{tenant}/jobs", &["get"]),
        ("/admin/v1/tenants/{tenant}/jobs/{id}", &["get"]),
        ("/admin/v1/tenants/{tenant}/export", &["get"]),
        ("/admin/v1/tenants/{tenant}/import", &["post"]),
        ("/healthz", &["get"]),
        ("/readyz", &["get"]),
        ("/metrics", &["get"]),
    ];
    for (path, methods) in expected {
        for method in methods {
            assert!(paths.get(path).and_then(|p| p.get(*method)).is_some(), "{method} {path} missing from OpenAPI");
        }
    }
    assert_eq!(paths.len(), expected.len(), "a route the test does not know of: {:?}", paths.keys());
    assert!(doc.body["components"]["securitySchemes"]["bearer"].is_object());
    assert!(doc.body["components"]["securitySchemes"]["admin"].is_object());
}
