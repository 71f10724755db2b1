//! Tenant keys fence a tenant's team into its own tenant: everything it needs there, `403 forbidden` for
//! another tenant's routes and the platform admin's, nothing changed by a refused call; every change (and
//! refused attempt) in the audit log with who made it.

use reqwest::Method;
use serde_json::{json, Value};
use strand_test_support::{on_every_backend, test_plugin, ApiClient, Backend, TestServer};

on_every_backend!(a_tenant_key_reaches_only_its_own_tenant, the_audit_log_records_who_changed_what);

/// Issues a key `name` for `tenant` as the admin; its secret.
async fn issue_key(server: &TestServer, tenant: &str, name: &str) -> String {
    let path = format!("/admin/v1/tenants/{tenant}/keys");
    let issued = server.admin().send_json(Method::POST, &path, &json!({ "name": name })).await;
    assert_eq!(issued.status, 201, "{issued:?}");
    let secret = issued.body["secret"].as_str().expect("the secret, once").to_owned();
    assert!(secret.starts_with("stk_") && secret.len() > 40, "{secret}");
    secret
}

/// Every admin route of `tenant`, as (method, path, body).
fn tenant_routes(tenant: &str) -> Vec<(Method, String, Option<Value>)> {
    let t = format!("/admin/v1/tenants/{tenant}");
    vec![
        (Method::PUT, format!("{t}/plugins/rate-limiter/default"), None),
        (Method::GET, format!("{t}/plugins"), None),
        (Method::GET, format!("{t}/plugins/rate-limiter/default/logs"), None),
        (Method::POST, format!("{t}/plugins/rate-limiter/default/rollback"), Some(json!({"version": 1}))),
        (Method::DELETE, format!("{t}/plugins/rate-limiter/default"), None),
        (Method::GET, format!("{t}/settings"), None),
        (Method::PUT, format!("{t}/settings"), Some(json!({"rate_limit_failure": "closed"}))),
        (Method::GET, format!("{t}/keys"), None),
        (Method::POST, format!("{t}/keys"), Some(json!({"name": "stolen"}))),
        (Method::DELETE, format!("{t}/keys/ci"), None),
        (Method::GET, format!("{t}/jwt-keys"), None),
        (Method::PUT, format!("{t}/jwt-keys/k1"), Some(json!({"algorithm": "HS256", "key": "x".repeat(40)}))),
        (Method::DELETE, format!("{t}/jwt-keys/k1"), None),
        (Method::GET, format!("{t}/parked"), None),
        (Method::GET, format!("{t}/figures"), None),
        (Method::GET, format!("{t}/accounts/1/relations?with=2"), None),
        (Method::GET, format!("{t}/accounts/1/relations/followers"), None),
    ]
}

async fn call(client: &ApiClient, method: Method, path: &str, body: Option<Value>) -> strand_test_support::Reply {
    match (method.clone(), body) {
        (Method::PUT, None) => client.upload(method, path, test_plugin("deny-all")).await,
        (_, Some(body)) => client.send_json(method, path, &body).await,
        (_, None) => client.call(method, path).await,
    }
}

async fn a_tenant_key_reaches_only_its_own_tenant(backend: Backend) {
    let server = TestServer::start(backend).await;
    let acme_key = issue_key(&server, "acme", "ci").await;
    issue_key(&server, "globex", "ci").await;
    let acme = server.client_with_token(&acme_key);
    let again = server.admin().send_json(Method::POST, "/admin/v1/tenants/acme/keys", &json!({"name": "ci"})).await;
    assert_eq!((again.status, again.code()), (409, "key_exists"));

    // What the tenant's team needs, for its own tenant.
    let deployed =
        acme.upload(Method::PUT, "/admin/v1/tenants/acme/plugins/rate-limiter/default", test_plugin("deny-all")).await;
    assert_eq!(deployed.status, 200, "{deployed:?}");
    assert_eq!(server.client("acme", 1).put("/v1/me/following/2").await.status, 429, "its deny-all policy is active");
    for (method, path, body) in tenant_routes("acme").into_iter().filter(|(_, p, _)| !p.contains("keys")) {
        let path = path.clone();
        let reply = call(&acme, method.clone(), &path, body).await;
        assert!(reply.status < 300, "{method} {path} with acme's own key: {reply:?}");
    }
    for path in ["/admin/v1/tenants/acme/keys", "/admin/v1/projections", "/admin/v1/lag", "/admin/v1/audit"] {
        let reply = acme.get(path).await;
        assert_eq!(reply.status, 200, "{path}: {reply:?}");
    }
    let listed = acme.get("/admin/v1/tenants/acme/keys").await.body;
    assert_eq!(listed["keys"][0]["name"], "ci");
    assert!(listed["keys"][0]["last_used_at"].is_string(), "its use is recorded: {listed}");
    assert!(!listed.to_string().contains("stk_"), "never a secret: {listed}");

    // Another tenant's routes and the platform admin's: 403, and nothing changes.
    let globex_before = server.admin().get("/admin/v1/tenants/globex/plugins").await.body;
    let mut refused = tenant_routes("globex");
    // The rollout routes too (for acme itself they answer 404: nothing runs).
    refused.push((Method::POST, "/admin/v1/tenants/globex/plugins/rate-limiter/default/promote".into(), None));
    refused.push((Method::POST, "/admin/v1/tenants/globex/plugins/projector/late/abort".into(), None));
    refused.push((Method::GET, "/admin/v1/tenants/globex/plugins/projector/late/diff".into(), None));
    refused.push((Method::GET, "/admin/v1/tenants".into(), None));
    // The node's charts are every tenant's figures together.
    refused.push((Method::GET, "/admin/v1/history".into(), None));
    refused.push((Method::POST, "/admin/v1/tenants/acme/keys".into(), Some(json!({"name": "more"}))));
    refused.push((Method::DELETE, "/admin/v1/tenants/acme/keys/ci".into(), None));
    refused.push((Method::GET, "/admin/v1/audit?tenant=globex".into(), None));
    refused.push((Method::PUT, "/admin/v1/tenants/not%20a%20tenant/plugins/router/default".into(), None));
    for (method, path, body) in refused {
        let reply = call(&acme, method.clone(), &path, body).await;
        assert_eq!((reply.status, reply.code()), (403, "forbidden"), "{method} {path}: {reply:?}");
        assert_eq!(reply.content_type, "application/problem+json");
    }
    assert_eq!(server.admin().get("/admin/v1/tenants/globex/plugins").await.body, globex_before);
    assert_eq!(
        server.admin().get("/admin/v1/tenants/globex/settings").await.body,
        json!({"rate_limit_failure": "open", "allow_pinned_versions": false})
    );
    assert_eq!(server.client("globex", 1).put("/v1/me/following/2").await.status, 200, "globex is untouched");
    let audit = server.admin().get("/admin/v1/audit?tenant=globex").await.body;
    let globex_actors: Vec<&str> =
        audit["entries"].as_array().unwrap().iter().map(|e| e["actor"].as_str().unwrap()).collect();
    assert_eq!(globex_actors, ["admin"], "only the admin's key creation: {audit}");
    let own = acme.get("/admin/v1/audit").await.body;
    assert!(own["entries"].as_array().unwrap().iter().all(|e| e["tenant"] == "acme"), "{own}");

    // A bogus key, then a revoked one: 401.
    let bogus = server.client_with_token("stk_bogus").get("/admin/v1/tenants/acme/plugins").await;
    assert_eq!((bogus.status, bogus.code()), (401, "invalid_admin_token"));
    assert_eq!(server.admin().call(Method::DELETE, "/admin/v1/tenants/acme/keys/ci").await.status, 204);
    let revoked = acme.get("/admin/v1/tenants/acme/plugins").await;
    assert_eq!((revoked.status, revoked.code()), (401, "invalid_admin_token"));
    let gone = server.admin().call(Method::DELETE, "/admin/v1/tenants/acme/keys/ci").await;
    assert_eq!((gone.status, gone.code()), (404, "key_not_found"));
}

async fn the_audit_log_records_who_changed_what(backend: Backend) {
    let server = TestServer::start(backend).await;
    let key = issue_key(&server, "acme", "deployer").await;
    let team = server.client_with_token(&key);
    let path = "/admin/v1/tenants/acme/plugins/rate-limiter/default";
    assert_eq!(team.upload(Method::PUT, path, test_plugin("deny-all")).await.status, 200);
    let garbage = team.upload(Method::PUT, path, b"not wasm".to_vec()).await;
    assert_eq!((garbage.status, garbage.code()), (422, "invalid_component"));
    let rollback = format!("{path}/rollback");
    let missing = team.send_json(Method::POST, &rollback, &json!({"version": 7})).await;
    assert_eq!(missing.status, 404);
    let settings = json!({"rate_limit_failure": "closed"});
    assert_eq!(server.admin().send_json(Method::PUT, "/admin/v1/tenants/acme/settings", &settings).await.status, 200);
    assert_eq!(team.call(Method::DELETE, path).await.status, 204);

    let page = server.admin().get("/admin/v1/audit?limit=3").await.body;
    let older = server.admin().get(&format!("/admin/v1/audit?before={}", page["next_before"])).await.body;
    let entries: Vec<Value> =
        page["entries"].as_array().unwrap().iter().chain(older["entries"].as_array().unwrap()).cloned().collect();
    let summary: Vec<(String, String, String, String)> = entries
        .iter()
        .map(|e| {
            let text = |f: &str| e[f].as_str().unwrap_or("-").to_owned();
            (text("actor"), text("action"), text("slot"), text("outcome"))
        })
        .collect();
    let expected = [
        ("key:deployer", "remove", "rate-limiter/default", "ok"),
        ("admin", "set_settings", "-", "ok"),
        ("key:deployer", "rollback", "rate-limiter/default", "refused"),
        ("key:deployer", "deploy", "rate-limiter/default", "refused"),
        ("key:deployer", "deploy", "rate-limiter/default", "ok"),
        ("admin", "create_key", "-", "ok"),
    ];
    let expected: Vec<(String, String, String, String)> =
        expected.iter().map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string())).collect();
    assert_eq!(summary, expected, "newest first, over two pages");
    assert_eq!(page["entries"].as_array().unwrap().len(), 3);
    assert!(older["next_before"].is_null(), "the end: {older}");
    let deployed = &entries[4];
    assert_eq!(deployed["version"], 1);
    assert_eq!(deployed["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(deployed["tenant"], "acme");
    assert!(entries[3]["sha256"].is_string(), "a refused upload is named by its hash: {}", entries[3]);
    assert!(entries[3]["detail"].as_str().unwrap().contains("invalid_component"), "{}", entries[3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cli_issues_lists_and_revokes_keys_and_deploys_with_one() {
    let server = TestServer::start(Backend::Sqlite).await;
    let url = server.url("");
    let strand = |args: &[&str], credential: (&str, &str)| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_strand"));
        command.args(args).args(["--server", &url]).env_remove("STRAND_ADMIN_TOKEN").env_remove("STRAND_TENANT_KEY");
        command.env(credential.0, credential.1).env("STRAND_CONFIG", "/nonexistent/strand.toml");
        async move {
            let output = tokio::time::timeout(std::time::Duration::from_secs(60), command.output())
                .await
                .expect("the command ends")
                .expect("the command runs");
            (
                output.status.code(),
                String::from_utf8_lossy(&output.stdout).into_owned(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            )
        }
    };
    let admin = ("STRAND_ADMIN_TOKEN", strand_test_support::ADMIN_TOKEN);
    let (code, out, err) = strand(&["tenant", "key", "create", "--tenant", "acme", "--name", "cli"], admin).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let issued: Value = serde_json::from_str(&out).expect("the key as JSON");
    let secret = issued["secret"].as_str().unwrap().to_owned();

    let wasm = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(wasm.path(), test_plugin("deny-all")).unwrap();
    let deploy = ["plugin", "deploy", "--tenant", "acme", "--kind", "rate-limiter", wasm.path().to_str().unwrap()];
    let (code, out, err) = strand(&deploy, ("STRAND_TENANT_KEY", &secret)).await;
    assert_eq!(code, Some(0), "the team deploys with its key: {out}{err}");
    let mut other = deploy;
    other[3] = "globex";
    let (code, _, err) = strand(&other, ("STRAND_TENANT_KEY", &secret)).await;
    assert_ne!(code, Some(0));
    assert!(err.contains("403"), "{err}");

    let (code, out, _) = strand(&["tenant", "key", "list", "--tenant", "acme"], ("STRAND_TENANT_KEY", &secret)).await;
    assert_eq!(code, Some(0));
    assert!(out.contains("\"cli\"") && !out.contains(&secret), "{out}");
    let (code, out, err) = strand(&["tenant", "key", "revoke", "--tenant", "acme", "--name", "cli"], admin).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, _, err) = strand(&["tenant", "key", "list", "--tenant", "acme"], ("STRAND_TENANT_KEY", &secret)).await;
    assert_ne!(code, Some(0));
    assert!(err.contains("401"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_projectors_the_api_serves_cannot_be_replaced_by_anyone() {
    let server = TestServer::start(Backend::Sqlite).await;
    let counts = strand::plugins::BUNDLED.iter().find(|b| b.name == "follow-counts").unwrap().wasm.to_vec();
    for name in strand_contract::SERVED_PROJECTORS {
        let path = format!("/admin/v1/tenants/acme/plugins/projector/{name}");
        let reply = server.admin().upload(Method::PUT, &path, counts.clone()).await;
        assert_eq!((reply.status, reply.code()), (400, "reserved_plugin_name"), "{name}: {reply:?}");
    }
    let listed = server.admin().get("/admin/v1/tenants/acme/plugins").await;
    assert_eq!(listed.body["plugins"], json!([]), "nothing was deployed");
}

/// An empty secret — what an unset variable in a compose file becomes — or a short one stops the start,
/// naming the setting: an empty admin token would otherwise match a request with no credential at all, and
/// an empty HMAC key would let anyone mint every tenant's tokens.
#[tokio::test]
async fn an_empty_or_short_secret_stops_the_start_by_name() {
    let strong = strand_test_support::ADMIN_TOKEN;
    for (admin, secret, named) in [
        ("", strong, "admin_token"),
        ("short", strong, "admin_token"),
        (strong, "", "jwt_hs256_secret"),
        (strong, "0123456789abcdef", "jwt_hs256_secret"),
    ] {
        let config = strand::config::Config {
            admin_token: Some(admin.to_owned()),
            jwt_hs256_secret: Some(secret.to_owned()),
            listen: "127.0.0.1:0".parse().unwrap(),
            ..Default::default()
        };
        let error = strand::app::Server::build(&config).await.err().expect("refused to start").to_string();
        assert!(error.contains(&format!("`{named}`")), "{admin:?}/{secret:?}: {error}");
    }
}

/// A request with no credential is never compared to the admin token: 401, on every admin route.
#[tokio::test]
async fn no_credential_never_reaches_the_admin_api() {
    let server = TestServer::start(Backend::Sqlite).await;
    for (method, path, _) in tenant_routes("acme") {
        let reply = server.anonymous().call(method.clone(), &path).await;
        assert_eq!((reply.status, reply.code()), (401, "invalid_admin_token"), "{method} {path}");
        let empty = server.client_with_token("").call(method.clone(), &path).await;
        assert_eq!((empty.status, empty.code()), (401, "invalid_admin_token"), "{method} {path}: empty bearer");
    }
}

/// A key's `last_used_at` is written at most once a minute: a team polling the admin API does not take the
/// database's single writer (SQLite) from every tenant's follows on each request.
#[tokio::test]
async fn a_keys_last_use_is_written_at_most_once_a_minute() {
    let server = TestServer::start(Backend::Sqlite).await;
    let acme = server.client_with_token(&issue_key(&server, "acme", "ci").await);
    let last_used = || async {
        sqlx::query_scalar::<_, Option<i64>>("SELECT last_used_at FROM tenant_keys WHERE name = 'ci'")
            .fetch_one(server.database().reader())
            .await
            .unwrap()
    };
    let db = server.database();
    let set_last_used = |at: i64| async move {
        sqlx::query("UPDATE tenant_keys SET last_used_at = ? WHERE name = 'ci'")
            .bind(at)
            .execute(db.writer())
            .await
            .unwrap();
    };
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    assert_eq!(acme.get("/admin/v1/whoami").await.status, 200);
    assert!(last_used().await.is_some(), "the first use is recorded");
    let recent = now() - 1_000;
    set_last_used(recent).await;
    for _ in 0..5 {
        assert_eq!(acme.get("/admin/v1/whoami").await.status, 200);
    }
    assert_eq!(last_used().await, Some(recent), "used again within the minute: not written");
    set_last_used(now() - 61_000).await;
    assert_eq!(acme.get("/admin/v1/whoami").await.status, 200);
    assert!(last_used().await.unwrap() >= now() - 5_000, "a minute later it is written again");
}
