//! What Strand's tests and benchmarks share: throwaway database servers, the real server in-process, and an
//! HTTP client that mints its own tokens. Tests read as specifications; this crate keeps the plumbing out.

pub mod bench;
mod doc_examples;
mod kafka;
mod mariadb;
mod process;
mod random;
mod redis;
mod server;
mod test_plugins;
mod watched;

pub use doc_examples::Examples;
pub use kafka::{Kafka, Received};
pub use mariadb::MariaDb;
pub use process::{plugin_cache_dir, StrandCommand, StrandProcess};
pub use random::Random;
pub use redis::{Redis, RedisCluster};
pub use server::{token, unique_server_id, ApiClient, Reply, TestServer, ADMIN_TOKEN, TEST_SECRET};
pub use test_plugins::test_plugin;

use std::net::TcpListener;

use tempfile::TempDir;

/// The database kinds every scenario runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The embedded default: an SQLite file in a temporary directory.
    Sqlite,
    /// A database on the process's throwaway MariaDB (binlog on, as production runs it).
    MariaDb,
}

/// A fresh, empty database; an SQLite file is removed when this is dropped.
pub struct TestDatabase {
    pub url: String,
    pub(crate) _dir: Option<TempDir>,
}

impl TestDatabase {
    /// A database the test made itself (on a server of its own, say): nothing to remove afterwards.
    pub fn at(url: String) -> Self {
        Self { url, _dir: None }
    }
}

impl Backend {
    pub async fn fresh_database(self) -> anyhow::Result<TestDatabase> {
        start_watchdog();
        match self {
            Backend::Sqlite => {
                let dir = tempfile::Builder::new().prefix("strand-sqlite-").tempdir()?;
                let url = format!("sqlite://{}?mode=rwc", dir.path().join("strand.db").display());
                Ok(TestDatabase { url, _dir: Some(dir) })
            }
            Backend::MariaDb => Ok(TestDatabase { url: MariaDb::shared()?.create_database().await?, _dir: None }),
        }
    }
}

/// Waits until `condition` holds, checking every 10 ms, and fails the test with `what` after `limit`.
/// Tests synchronise on conditions like this, never on fixed sleeps.
pub async fn wait_until<F, Fut>(what: &str, limit: std::time::Duration, condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    if let Err(timed_out) = try_wait_until(what, limit, condition).await {
        panic!("{timed_out}");
    }
}

/// [`wait_until`], with the time-out returned (saying what was awaited), for a test that adds what it
/// knows (e.g. its processes' logs) to the failure.
pub async fn try_wait_until<F, Fut>(what: &str, limit: std::time::Duration, mut condition: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    // A check that never finishes fails at the deadline too, not when CI gives up on the run.
    loop {
        match tokio::time::timeout_at(deadline, condition()).await {
            Ok(true) => return Ok(()),
            Ok(false) if tokio::time::Instant::now() < deadline => {}
            Ok(false) => return Err(format!("timed out after {limit:?} waiting until {what}")),
            Err(_) => return Err(format!("timed out after {limit:?} waiting until {what} (a check never finished)")),
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// How long one test process may run before the watchdog ends it (`STRAND_TEST_WATCHDOG_SECS`; the
/// longest binary of the suite takes about 3 minutes on 2 cores).
const WATCHDOG_DEFAULT_SECS: u64 = 1200;

/// Starts, once per process, a thread that aborts the process (naming the reason) if it outlives the
/// watchdog's limit: a test that hangs where no deadline reaches — a runtime waiting at its end for a task
/// that never finishes — fails the run with a reason instead of holding CI until its own limit. Benchmarks
/// (run with `--bench`) take as long as they take.
pub fn start_watchdog() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    if std::env::args().any(|arg| arg == "--bench") {
        return;
    }
    STARTED.call_once(|| {
        let secs = std::env::var("STRAND_TEST_WATCHDOG_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(WATCHDOG_DEFAULT_SECS);
        let spawned = std::thread::Builder::new().name("test-watchdog".into()).spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(secs));
            eprintln!("test watchdog: this test process ran past {secs} s; a test hangs (the last ones reported as running over 60 seconds); aborting");
            std::process::abort();
        });
        if let Err(error) = spawned {
            eprintln!("test watchdog: cannot start ({error}); hangs are not caught");
        }
    });
}

/// A TCP port that was free a moment ago, for servers that must be told their port up front. Never the
/// same twice in one test process: a test restarting a server on its port leaves it free for a moment,
/// and another test must not be handed it then.
pub fn free_port() -> std::io::Result<u16> {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if HANDED_OUT.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(port) {
            return Ok(port);
        }
    }
}

/// Runs each named `async fn scenario(backend: Backend)` as two tests, `scenario::sqlite` and
/// `scenario::mariadb`, so every behaviour is specified once and checked on both database kinds.
#[macro_export]
macro_rules! on_every_backend {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                super::$scenario($crate::Backend::Sqlite).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn mariadb() {
                super::$scenario($crate::Backend::MariaDb).await
            }
        }
    )*};
}

/// The rows of `user` in `tenant`'s edge tables, both ways, holding more than their pair's ids and last
/// version (what an erasure keeps of a deleted account's pairs, as every projection does): 0 once it is erased.
pub async fn rows_holding(db: &strand::db::Database, tenant: &str, user: i64) -> i64 {
    let mut rows = 0;
    for table in ["following", "blocks", "mutes"] {
        let sql = format!(
            "SELECT COUNT(*) FROM {table} WHERE tenant_id = ? AND (from_user_id = ? OR to_user_id = ?) AND \
             (rel_status <> 0 OR created_at <> 0 OR updated_at <> 0)"
        );
        let n: i64 = sqlx::query_scalar(&sql).bind(tenant).bind(user).bind(user).fetch_one(db.reader()).await.unwrap();
        rows += n;
    }
    rows
}

/// Counts `tenant`'s follows again into `follow_counts`, for a test or bench that wrote `following` rows
/// straight into the truth (the write path keeps the counts itself).
pub async fn recount_follows(db: &strand::db::Database, tenant: &str) {
    let writer = db.writer();
    sqlx::query("DELETE FROM follow_counts WHERE tenant_id = ?").bind(tenant).execute(writer).await.unwrap();
    let counted = "INSERT INTO follow_counts (tenant_id, user_id, followings, followers) \
        SELECT tenant_id, user_id, SUM(followings), SUM(followers) FROM ( \
          SELECT tenant_id, from_user_id AS user_id, COUNT(*) AS followings, 0 AS followers FROM following \
          WHERE tenant_id = ? AND rel_status = 1 GROUP BY tenant_id, from_user_id \
          UNION ALL SELECT tenant_id, to_user_id AS user_id, 0 AS followings, COUNT(*) AS followers FROM following \
          WHERE tenant_id = ? AND rel_status = 1 GROUP BY tenant_id, to_user_id) AS counted GROUP BY tenant_id, user_id";
    sqlx::query(counted).bind(tenant).bind(tenant).execute(writer).await.expect("counting the follows");
}

/// Rows still in the outbox: 0 once the relay has published (and deleted) everything.
pub async fn outbox_rows(db: &strand::db::Database) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT COUNT(*) FROM outbox").fetch_one(db.reader()).await
}
