//! The real Strand server, started in-process on a free port, and a client that speaks for one user.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::Method;
use serde_json::Value;
use strand::api::{mint_hs256, MintClaims};
use strand::app::Server;
use strand::config::{Config, RelayMode};
use strand::db::Database;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::{Backend, TestDatabase};

/// The HS256 secret test servers verify with.
pub const TEST_SECRET: &str = "strand-test-secret-of-32-or-more-bytes";
/// How long a test waits for an upload's answer: past the server's default compile budget.
const UPLOAD_WAIT: Duration = Duration::from_secs(150);

/// The admin token of test servers.
pub const ADMIN_TOKEN: &str = "strand-test-admin-token-of-32-or-more-bytes";

/// A binlog replica id no other relay of this machine's test runs uses: the server disconnects an older
/// replica when another registers with its id.
pub fn unique_server_id() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    1_000_000 + (std::process::id() % 40_000) * 100 + NEXT.fetch_add(1, Ordering::Relaxed) % 100
}

/// A running server on a fresh database; stopped (gracefully) when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    pub config: Config,
    db: Database,
    http: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
    _database: TestDatabase,
}

impl TestServer {
    pub async fn start(backend: Backend) -> Self {
        Self::start_with(backend, |_| {}).await
    }

    /// The whole flow in one process: the poll relay (idling 10 ms), the workers, plugins refreshed every
    /// 100 ms; projector data in Redis at `redis_url`, else in this process's memory.
    pub async fn start_pipeline(backend: Backend, redis_url: Option<&str>) -> Self {
        Self::start_with(backend, |c| {
            c.relay = RelayMode::Poll;
            c.relay_idle_ms = 10;
            c.workers = true;
            c.redis_url = redis_url.map(str::to_owned);
            c.refresh_ms = 100;
        })
        .await
    }

    /// A whole production-shaped node on MariaDB: the binlog relay (idling 10 ms), the workers, Redis and the
    /// Kafka-protocol broker (topics under a prefix of its own), plugins refreshed every 100 ms; `adjust` may
    /// change the rest.
    pub async fn start_node(adjust: impl FnOnce(&mut Config)) -> Self {
        let kafka = crate::Kafka::shared().expect("a broker");
        Self::start_with(Backend::MariaDb, |c| {
            c.relay = RelayMode::Binlog;
            c.relay_idle_ms = 10;
            c.workers = true;
            c.refresh_ms = 100;
            c.redis_url = Some(crate::Redis::shared().expect("Redis").url());
            c.kafka_brokers = Some(kafka.brokers());
            c.topic_prefix = kafka.unique_prefix();
            adjust(c);
        })
        .await
    }

    /// Starts a server whose configuration `adjust` may change (keys, tenants, limits).
    pub async fn start_with(backend: Backend, adjust: impl FnOnce(&mut Config)) -> Self {
        let database = backend.fresh_database().await.expect("a fresh test database");
        let mut config = Config {
            listen: "127.0.0.1:0".parse().expect("a socket address"),
            database_url: database.url.clone(),
            jwt_hs256_secret: Some(TEST_SECRET.to_owned()),
            admin_token: Some(ADMIN_TOKEN.to_owned()),
            // Shared by every test server: each component is compiled once per machine, not per test.
            plugin_cache_dir: Some(crate::plugin_cache_dir()),
            // The outbox is part of what the write-path tests check: only relay tests turn the relay on.
            relay: RelayMode::Off,
            workers: false,
            relay_server_id: unique_server_id(),
            ..Config::default()
        };
        adjust(&mut config);
        Self::start_on(database, config).await
    }

    async fn start_on(database: TestDatabase, config: Config) -> Self {
        let server = Server::build(&config).await.expect("the server starts");
        let addr = server.local_addr().expect("a bound address");
        let db = server.database().clone();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run_until(async move {
            // Either a stop request or the TestServer being dropped ends the server.
            let _stopped_or_dropped = rx.await;
        }));
        Self {
            addr,
            config,
            db,
            // No call of a test waits forever: a hung server fails the test.
            http: reqwest::Client::builder().timeout(Duration::from_secs(60)).build().expect("an HTTP client"),
            shutdown: Some(tx),
            task: Some(task),
            _database: database,
        }
    }

    /// Stops this server and starts a new one on the same database and configuration, as a process
    /// restart would (nothing in memory survives).
    pub async fn restart(self) -> Self {
        self.restart_with(|_| {}).await
    }

    /// Restarts this server (as [`Self::restart`]) with its configuration changed by `adjust`.
    pub async fn restart_with(mut self, adjust: impl FnOnce(&mut Config)) -> Self {
        self.shutdown_now().await;
        let database = std::mem::replace(&mut self._database, TestDatabase { url: String::new(), _dir: None });
        let mut config = self.config.clone();
        adjust(&mut config);
        Self::start_on(database, config).await
    }

    /// A second node on this server's database and configuration, as a scaled-out deployment runs.
    pub async fn sibling(&self) -> Self {
        Self::start_on(TestDatabase { url: self.config.database_url.clone(), _dir: None }, self.config.clone()).await
    }

    /// Calls the admin API with the admin token.
    pub fn admin(&self) -> ApiClient {
        self.client_with_token(ADMIN_TOKEN)
    }

    /// `/metrics` as the platform admin scrapes it (it answers the admin token only).
    pub async fn metrics(&self) -> String {
        let response = self.http.get(self.url("/metrics")).bearer_auth(ADMIN_TOKEN).send().await.expect("/metrics");
        assert_eq!(response.status(), 200, "/metrics with the admin token");
        response.text().await.expect("the metrics' text")
    }

    /// The server's database, for checking the truth behind the API.
    pub fn database(&self) -> &Database {
        &self.db
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// A client calling as `user` of `tenant`, with a valid one-hour token.
    pub fn client(&self, tenant: &str, user: i64) -> ApiClient {
        self.client_with_token(&token(TEST_SECRET, &user.to_string(), tenant, 3600))
    }

    pub fn client_with_token(&self, token: &str) -> ApiClient {
        ApiClient { http: self.http.clone(), base: format!("http://{}", self.addr), token: Some(token.to_owned()) }
    }

    /// A client sending no Authorization header.
    pub fn anonymous(&self) -> ApiClient {
        ApiClient { http: self.http.clone(), base: format!("http://{}", self.addr), token: None }
    }

    /// Ends this server as a SIGKILL would its process — no drain: every request, transaction, relay batch,
    /// worker batch and job batch in flight is dropped where it stands, and this process's memory (the
    /// embedded cache) is lost — then starts a new one on the same database and configuration.
    pub async fn crash_and_restart(mut self) -> Self {
        self.shutdown.take();
        if let Some(task) = self.task.take() {
            task.abort();
            let ended = task.await;
            assert!(ended.as_ref().is_err_and(|e| e.is_cancelled()) || ended.is_ok(), "the server task: {ended:?}");
        }
        let database = std::mem::replace(&mut self._database, TestDatabase { url: String::new(), _dir: None });
        Self::start_on(database, self.config.clone()).await
    }

    /// Stops accepting, drains in-flight requests and waits for the server to finish.
    pub async fn stop(mut self) {
        self.shutdown_now().await;
    }

    async fn shutdown_now(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            // The server may already be gone; then there is nothing to stop.
            let _already_stopped = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("the server task does not panic").expect("the server stops cleanly");
        }
    }
}

/// An HS256 token for `sub` of `tenant`, valid for `ttl_secs` (negative: already expired).
pub fn token(secret: &str, sub: &str, tenant: &str, ttl_secs: i64) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs() as i64;
    let claims = MintClaims {
        sub: sub.to_owned(),
        tenant: tenant.to_owned(),
        exp: (now + ttl_secs) as u64,
        iss: None,
        aud: None,
    };
    mint_hs256(secret, &claims)
}

/// What the server answered.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Reply {
    /// The problem+json `code`, for error replies.
    pub fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or("")
    }
}

/// Calls the API as one caller.
#[derive(Clone)]
pub struct ApiClient {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl ApiClient {
    /// The same server, called as `user` of `tenant` (a fresh one-hour token).
    pub fn as_user(&self, tenant: &str, user: i64) -> ApiClient {
        ApiClient { token: Some(token(TEST_SECRET, &user.to_string(), tenant, 3600)), ..self.clone() }
    }

    pub async fn call(&self, method: Method, path: &str) -> Reply {
        self.send(method, path, Vec::new(), None).await
    }

    /// Sends a component (or any bytes) as the request body.
    pub async fn upload(&self, method: Method, path: &str, body: Vec<u8>) -> Reply {
        self.send(method, path, body, Some("application/wasm")).await
    }

    /// Sends `body` as NDJSON (an import's graph).
    pub async fn send_ndjson(&self, method: Method, path: &str, body: String) -> Reply {
        self.send(method, path, body.into_bytes(), Some("application/x-ndjson")).await
    }

    /// Sends `body` as JSON.
    pub async fn send_json(&self, method: Method, path: &str, body: &Value) -> Reply {
        self.send(method, path, body.to_string().into_bytes(), Some("application/json")).await
    }

    async fn send(&self, method: Method, path: &str, body: Vec<u8>, content_type: Option<&str>) -> Reply {
        // An upload is compiled within the server's compile budget (120 s by default; a JavaScript component
        // of a debug build on a loaded machine takes a good part of it): its answer may take that long.
        let wait = if content_type == Some("application/wasm") { UPLOAD_WAIT } else { Duration::from_secs(30) };
        let mut request = self.http.request(method, format!("{}{path}", self.base)).timeout(wait).body(body);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("the server answers");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        let bytes = response.bytes().await.expect("a complete body");
        let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap_or(Value::Null) };
        Reply { status, content_type, headers, body }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.call(Method::GET, path).await
    }

    pub async fn put(&self, path: &str) -> Reply {
        self.call(Method::PUT, path).await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.call(Method::DELETE, path).await
    }

    pub async fn post(&self, path: &str) -> Reply {
        self.call(Method::POST, path).await
    }

    /// Follows `user` and returns the reply body, asserting success.
    pub async fn follow(&self, user: i64) -> Value {
        let reply = self.put(&format!("/v1/me/following/{user}")).await;
        assert_eq!(reply.status, 200, "follow {user}: {reply:?}");
        reply.body
    }

    /// Unfollows `user` and returns the reply body, asserting success.
    pub async fn unfollow(&self, user: i64) -> Value {
        let reply = self.delete(&format!("/v1/me/following/{user}")).await;
        assert_eq!(reply.status, 200, "unfollow {user}: {reply:?}");
        reply.body
    }
}
