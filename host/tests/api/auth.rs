//! Only a verified token speaks for a user: bad signatures, expiry, wrong audience or issuer, `alg: none`
//! and malformed headers are 401, and the caller is always the token's subject.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::json;
use strand_test_support::{on_every_backend, token, Backend, TestServer, TEST_SECRET};

on_every_backend!(bad_tokens_are_401, subject_may_be_a_number_or_a_decimal_string);

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

async fn bad_tokens_are_401(backend: Backend) {
    let server = TestServer::start_with(backend, |config| {
        config.jwt_audience = Some("strand".into());
        config.jwt_issuer = Some("https://id.example".into());
    })
    .await;
    let sign = |claims: serde_json::Value, secret: &str| {
        encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(secret.as_bytes())).unwrap()
    };
    let valid = json!({"sub": "1", "tenant": "acme", "exp": now() + 600, "aud": "strand", "iss": "https://id.example"});
    let good = sign(valid.clone(), TEST_SECRET);
    assert_eq!(server.client_with_token(&good).put("/v1/me/following/2").await.status, 200);

    let with = |key: &str, value: serde_json::Value| {
        let mut claims = valid.clone();
        claims[key] = value;
        claims
    };
    let header_none = URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#);
    let body = URL_SAFE_NO_PAD.encode(valid.to_string());
    let cases = [
        ("wrong signature", sign(valid.clone(), "another-secret")),
        ("expired", sign(with("exp", json!(now() - 3600)), TEST_SECRET)),
        ("wrong aud", sign(with("aud", json!("someone-else")), TEST_SECRET)),
        ("wrong iss", sign(with("iss", json!("https://evil.example")), TEST_SECRET)),
        ("alg none", format!("{header_none}.{body}.")),
        ("zero sub", sign(with("sub", json!("0")), TEST_SECRET)),
        ("non-numeric sub", sign(with("sub", json!("alice")), TEST_SECRET)),
        ("bad tenant", sign(with("tenant", json!("a:b")), TEST_SECRET)),
        ("garbage", "not.a.token".to_owned()),
    ];
    for (what, token) in cases {
        let reply = server.client_with_token(&token).put("/v1/me/following/3").await;
        assert_eq!((reply.status, reply.code()), (401, "invalid_token"), "{what}: {reply:?}");
        assert_eq!(reply.content_type, "application/problem+json", "{what}");
        assert_eq!(reply.headers.get("www-authenticate").map(|v| v.to_str().unwrap()), Some("Bearer"));
    }
    let reply = server.anonymous().get("/v1/users/1/counts").await;
    assert_eq!((reply.status, reply.code()), (401, "missing_token"));
    // Nothing a rejected caller sent was written.
    assert_eq!(super::pair_row(server.database(), "acme", 1, 3).await, None);
}

async fn subject_may_be_a_number_or_a_decimal_string(backend: Backend) {
    let server = TestServer::start(backend).await;
    let claims = json!({"sub": 5, "exp": now() + 600});
    let numeric = encode(&Header::default(), &claims, &EncodingKey::from_secret(TEST_SECRET.as_bytes())).unwrap();
    assert_eq!(server.client_with_token(&numeric).follow(6).await["changed"], true);
    // No tenant claim: the configured default tenant.
    assert_eq!(super::pair_row(server.database(), "default", 5, 6).await, Some((1, 1)));
    let text = token(TEST_SECRET, "5", "default", 600);
    assert_eq!(server.client_with_token(&text).follow(6).await["changed"], false);
}

/// With only a public key configured, ES256 tokens it verifies are accepted and HS256 ones are not.
#[tokio::test]
async fn es256_public_key_verifies_and_hs256_is_then_refused() {
    let dir = tempfile::tempdir().unwrap();
    let private = dir.path().join("private.pem");
    let public = dir.path().join("public.pem");
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).output().expect("openssl is installed");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    openssl(&["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", private.to_str().unwrap()]);
    openssl(&["pkey", "-in", private.to_str().unwrap(), "-pubout", "-out", public.to_str().unwrap()]);

    let server = TestServer::start_with(Backend::Sqlite, |config| {
        config.jwt_hs256_secret = None;
        config.jwt_public_key_file = Some(public.clone());
    })
    .await;
    let key = EncodingKey::from_ec_pem(&std::fs::read(&private).unwrap()).unwrap();
    let es256 = encode(&Header::new(Algorithm::ES256), &json!({"sub": "1", "exp": now() + 600}), &key).unwrap();
    assert_eq!(server.client_with_token(&es256).follow(2).await["changed"], true);

    let hs256 = token(TEST_SECRET, "1", "default", 600);
    let reply = server.client_with_token(&hs256).put("/v1/me/following/3").await;
    assert_eq!((reply.status, reply.code()), (401, "invalid_token"), "{reply:?}");
}
