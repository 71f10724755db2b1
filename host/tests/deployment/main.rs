//! Production-shaped deployments of `strand` processes on MariaDB (binlog), Redis and Kafka: the fault
//! suite (`faults.rs`: processes SIGKILLed at random under a storm) and the scale-out recipe of the README
//! (`scale_out.rs`: two API nodes, two relays of which one is active, two workers sharing the partitions).

mod faults;
mod scale_out;

use std::path::{Path, PathBuf};
use std::time::Duration;

use strand::cache::{Cache, RedisCache};
use strand::graph::Database;
use strand::projection::{reconcile, Report};
use strand_test_support::{
    free_port, unique_server_id, Backend, Kafka, Redis, StrandProcess, TestDatabase, ADMIN_TOKEN, TEST_SECRET,
};

/// The settings every process of one deployment shares, and where their logs go.
pub struct Deployment {
    env: Vec<(&'static str, String)>,
    dir: tempfile::TempDir,
    database: TestDatabase,
    redis_url: String,
}

impl Deployment {
    pub async fn new() -> Self {
        let database = Backend::MariaDb.fresh_database().await.unwrap();
        let redis_url = Redis::shared().unwrap().url();
        let kafka = Kafka::shared().unwrap();
        let env = vec![
            ("STRAND_DATABASE_URL", database.url.clone()),
            ("STRAND_REDIS_URL", redis_url.clone()),
            ("STRAND_KAFKA_BROKERS", kafka.brokers()),
            ("STRAND_TOPIC_PREFIX", kafka.unique_prefix()),
            ("STRAND_RELAY_SERVER_ID", unique_server_id().to_string()),
            ("STRAND_JWT_HS256_SECRET", TEST_SECRET.to_owned()),
            ("STRAND_ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
            ("STRAND_REFRESH_MS", "200".to_owned()),
            ("STRAND_PLUGIN_CACHE_DIR", std::env::temp_dir().join("strand-test-plugin-cache").display().to_string()),
        ];
        Self { env, dir: tempfile::tempdir().unwrap(), database, redis_url }
    }

    /// An API node on `port` (no relay, no workers: they run as processes of their own).
    pub fn api(&self, name: &str, port: u16) -> StrandProcess {
        let own = [
            ("STRAND_LISTEN", format!("127.0.0.1:{port}")),
            ("STRAND_RELAY", "off".to_owned()),
            ("STRAND_WORKERS", "false".to_owned()),
        ];
        self.start(name, &["serve"], &own)
    }

    /// A binlog relay, with `/metrics` on `port`.
    pub fn relay(&self, name: &str, port: u16) -> StrandProcess {
        self.start(name, &["relay", "--mode", "binlog"], &[("STRAND_OPERATIONS_LISTEN", format!("127.0.0.1:{port}"))])
    }

    /// The projection workers, with `/metrics` on `port`; with a `worker_id`, a static member of its
    /// consumer groups, which a restarted worker of the same id reclaims at once.
    pub fn worker(&self, name: &str, port: u16, worker_id: Option<&str>) -> StrandProcess {
        let mut own = vec![("STRAND_OPERATIONS_LISTEN", format!("127.0.0.1:{port}"))];
        own.extend(worker_id.map(|id| ("STRAND_WORKER_ID", id.to_owned())));
        self.start(name, &["worker"], &own)
    }

    fn start(&self, name: &str, args: &[&str], own: &[(&'static str, String)]) -> StrandProcess {
        let env: Vec<(&str, String)> = self.env.iter().chain(own).cloned().collect();
        let binary = Path::new(env!("CARGO_BIN_EXE_strand"));
        StrandProcess::spawn(binary, args, &env, self.log(name)).expect("strand starts")
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.log"))
    }

    /// The last lines of each named process's log.
    pub fn logs(&self, names: &[&str]) -> String {
        let tail = |name: &&str| {
            let log = std::fs::read_to_string(self.log(name)).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            format!("--- {name}:\n{}", lines[lines.len().saturating_sub(15)..].join("\n"))
        };
        names.iter().map(tail).collect::<Vec<_>>().join("\n")
    }

    /// Waits (up to `limit`) until the outbox is empty and `strand reconcile`'s comparison is clean: every
    /// acknowledged write published and projected exactly once. The report, or why not.
    pub async fn settled(&self, limit: Duration) -> Result<Report, String> {
        let cache = Cache::Redis(RedisCache::connect(&self.redis_url).await.unwrap());
        let db = Database::open(&self.database.url, 4).await.unwrap();
        let outbox = || async {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM outbox").fetch_one(db.reader()).await.unwrap()
        };
        let settled = tokio::time::timeout(limit, async {
            loop {
                if outbox().await == 0 {
                    if let Ok(report) = reconcile(&db, Some(&cache), 1000).await {
                        if report.is_clean() {
                            return report;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        match settled.await {
            Ok(report) => Ok(report),
            Err(_) => {
                Err(format!("{} outbox rows; {}", outbox().await, reconcile(&db, Some(&cache), 1000).await.unwrap()))
            }
        }
    }
}

/// Waits until `GET http://127.0.0.1:{port}/healthz` answers 200.
pub async fn answering(port: u16, process: &StrandProcess) {
    let http = reqwest::Client::new();
    let answered = tokio::time::timeout(Duration::from_secs(60), async {
        while !http.get(format!("http://127.0.0.1:{port}/healthz")).send().await.is_ok_and(|r| r.status() == 200) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert!(answered.await.is_ok(), "port {port} did not answer within a minute:\n{}", process.log());
}

/// A fresh port for each process of a deployment.
pub fn port() -> u16 {
    free_port().unwrap()
}
