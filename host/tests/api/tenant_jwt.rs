//! A tenant may bring its own token verification: once it registered keys, its tokens verify only with
//! them (by `kid`, two at once for rotation) — never with the global key — and other tenants' tokens never
//! with its keys.

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use reqwest::Method;
use serde_json::{json, Value};
use strand_test_support::{on_every_backend, token, wait_until, Backend, TestServer, TEST_SECRET};

on_every_backend!(
    a_tenants_own_keys_alone_verify_its_tokens_and_rotate,
    a_tenant_whose_stored_keys_are_unusable_fails_closed_and_refusals_tell_nothing
);

const FIRST: &str = "acme-idp-first-secret-0123456789abcdef";
const SECOND: &str = "acme-idp-second-secret-0123456789abcdef";
const ISSUER: &str = "https://idp.acme.example";

/// An HS256 token for user 1 of `tenant`, signed with `secret`, naming `kid`, with `claims` added.
fn signed(secret: &str, kid: Option<&str>, tenant: &str, claims: Value) -> String {
    let exp = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() + 600;
    let mut body = json!({"sub": "1", "tenant": tenant, "exp": exp});
    body.as_object_mut().unwrap().extend(claims.as_object().unwrap().clone());
    let header = Header { kid: kid.map(str::to_owned), ..Header::new(Algorithm::HS256) };
    encode(&header, &body, &EncodingKey::from_secret(secret.as_bytes())).unwrap()
}

async fn follow_with(server: &TestServer, token: &str) -> u16 {
    server.client_with_token(token).put("/v1/me/following/2").await.status
}

async fn a_tenants_own_keys_alone_verify_its_tokens_and_rotate(backend: Backend) {
    let server = TestServer::start(backend).await;
    let global_acme = token(TEST_SECRET, "1", "acme", 600);
    assert_eq!(follow_with(&server, &global_acme).await, 200, "without keys of its own, the global key");
    let set = |kid: &str, secret: &str| {
        let path = format!("/admin/v1/tenants/acme/jwt-keys/{kid}");
        let body = json!({"algorithm": "HS256", "key": secret, "issuer": ISSUER});
        let admin = server.admin();
        async move { admin.send_json(Method::PUT, &path, &body).await }
    };
    let short = set("k0", "short").await;
    assert_eq!((short.status, short.code()), (400, "invalid_jwt_key"));
    let first = set("k1", FIRST).await;
    assert_eq!(first.status, 200, "{first:?}");
    assert!(!first.body.to_string().contains(FIRST), "the secret is never shown: {}", first.body);

    let issued = json!({"iss": ISSUER});
    assert_eq!(follow_with(&server, &global_acme).await, 401, "the global key no longer speaks for acme");
    assert_eq!(follow_with(&server, &signed(FIRST, Some("k1"), "acme", issued.clone())).await, 200);
    assert_eq!(follow_with(&server, &signed(FIRST, None, "acme", issued.clone())).await, 200, "no kid: tried");
    assert_eq!(follow_with(&server, &signed(FIRST, Some("k1"), "acme", json!({}))).await, 401, "iss required");
    assert_eq!(
        follow_with(&server, &signed(FIRST, Some("k1"), "globex", issued.clone())).await,
        401,
        "not for another tenant"
    );
    assert_eq!(follow_with(&server, &token(TEST_SECRET, "1", "globex", 600)).await, 200, "globex keeps the global key");

    // Rotation: both keys verify while the second is rolled out; a third is refused.
    assert_eq!(set("k2", SECOND).await.status, 200);
    assert_eq!(follow_with(&server, &signed(FIRST, Some("k1"), "acme", issued.clone())).await, 200);
    assert_eq!(follow_with(&server, &signed(SECOND, Some("k2"), "acme", issued.clone())).await, 200);
    assert_eq!(
        follow_with(&server, &signed(FIRST, Some("k2"), "acme", issued.clone())).await,
        401,
        "kid picks the key"
    );
    let third = set("k3", "acme-idp-third-secret-0123456789abcdef").await;
    assert_eq!((third.status, third.code()), (409, "too_many_jwt_keys"));
    let listed = server.admin().get("/admin/v1/tenants/acme/jwt-keys").await.body;
    let kids: Vec<&str> = listed["keys"].as_array().unwrap().iter().map(|k| k["kid"].as_str().unwrap()).collect();
    assert_eq!(kids, ["k1", "k2"]);

    assert_eq!(server.admin().call(Method::DELETE, "/admin/v1/tenants/acme/jwt-keys/k1").await.status, 204);
    assert_eq!(follow_with(&server, &signed(FIRST, Some("k1"), "acme", issued.clone())).await, 401, "retired");
    assert_eq!(follow_with(&server, &signed(SECOND, Some("k2"), "acme", issued.clone())).await, 200);
    assert_eq!(server.admin().call(Method::DELETE, "/admin/v1/tenants/acme/jwt-keys/k2").await.status, 204);
    assert_eq!(follow_with(&server, &global_acme).await, 200, "no keys left: the global key again");
    let audit = server.admin().get("/admin/v1/audit?tenant=acme").await.body;
    let actions: Vec<&str> =
        audit["entries"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        ["remove_jwt_key", "remove_jwt_key", "set_jwt_key", "set_jwt_key", "set_jwt_key", "set_jwt_key"]
    );
}

/// A tenant whose every stored key fails to parse (a corrupted row, a key type a later release dropped) has
/// its tokens refused — never verified with the global key instead. And a refused token's answer is the
/// same whether or not its tenant registered keys, so it tells an unauthenticated caller nothing.
async fn a_tenant_whose_stored_keys_are_unusable_fails_closed_and_refusals_tell_nothing(backend: Backend) {
    let server = TestServer::start_with(backend, |config| config.refresh_ms = 100).await;
    let body = json!({"algorithm": "HS256", "key": FIRST});
    assert_eq!(server.admin().send_json(Method::PUT, "/admin/v1/tenants/acme/jwt-keys/k1", &body).await.status, 200);
    let wrong = "a-wrong-secret-that-is-long-enough-0123456789";
    let acme_refused =
        server.client_with_token(&signed(wrong, None, "acme", json!({}))).put("/v1/me/following/2").await;
    let globex_refused =
        server.client_with_token(&signed(wrong, None, "globex", json!({}))).put("/v1/me/following/2").await;
    assert_eq!((acme_refused.status, globex_refused.status), (401, 401));
    assert_eq!(
        acme_refused.body["detail"], globex_refused.body["detail"],
        "with or without keys of its own: one answer"
    );

    sqlx::query("UPDATE tenant_jwt_keys SET key_material = 'not usable', algorithm = 'RS256' WHERE tenant_id = 'acme'")
        .execute(server.database().writer())
        .await
        .unwrap();
    let global_acme = token(TEST_SECRET, "1", "acme", 600);
    // The node re-reads keys every 100 ms: a test that failed would see the global key accepted for good.
    let refreshed = || async {
        let reply = server.client_with_token(&signed(FIRST, None, "acme", json!({}))).put("/v1/me/following/3").await;
        reply.status == 401
    };
    wait_until("the unusable key is read", std::time::Duration::from_secs(10), refreshed).await;
    let reply = server.client_with_token(&global_acme).put("/v1/me/following/2").await;
    assert_eq!((reply.status, reply.code()), (401, "invalid_token"), "fail closed: {reply:?}");
    assert_eq!(reply.body["detail"], globex_refused.body["detail"]);
    assert_eq!(follow_with(&server, &token(TEST_SECRET, "1", "globex", 600)).await, 200, "other tenants unaffected");
}
