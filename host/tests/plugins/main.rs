//! The plugin runtime, registry and rate limiting against the real server, throwaway Redis and MariaDB.

mod hot_swap;
mod logs;
mod policies;
mod rate_limits;
mod relation_policy;
mod replay;
mod rollout;
mod sandbox;
mod wit_versions;

use reqwest::Method;
use serde_json::Value;
use strand::plugins::BUNDLED;
use strand_test_support::{Reply, TestServer};

/// Deploys `wasm` as `tenant`'s `kind/name` through the admin API.
pub async fn deploy(server: &TestServer, tenant: &str, kind: &str, name: &str, wasm: Vec<u8>) -> Reply {
    server.admin().upload(Method::PUT, &format!("/admin/v1/tenants/{tenant}/plugins/{kind}/{name}"), wasm).await
}

/// Rolls `tenant`'s `kind/name` back to `version`.
pub async fn rollback(server: &TestServer, tenant: &str, kind: &str, name: &str, version: i64) -> Reply {
    let path = format!("/admin/v1/tenants/{tenant}/plugins/{kind}/{name}/rollback");
    server.admin().send_json(Method::POST, &path, &serde_json::json!({ "version": version })).await
}

/// The component of a bundled plugin, by name (`default` for the rate limiter and router).
pub fn bundled(kind: &str, name: &str) -> Vec<u8> {
    BUNDLED.iter().find(|b| b.kind.as_str() == kind && b.name == name).expect("a bundled plugin").wasm.to_vec()
}

pub fn code(body: &Value) -> &str {
    body["code"].as_str().unwrap_or("")
}
