//! Production-shaped deployments of `strand` processes on MariaDB (binlog), Redis and Kafka: the fault
//! suite (`faults.rs`: processes SIGKILLed at random under a storm) and the scale-out recipe of the README
//! (`scale_out.rs`: two API nodes, two relays of which one is active, two workers sharing the partitions)
//! and one follow traced across them all (`traces.rs`); the OCI image run alone (`image.rs`) and the
//! Kubernetes manifests run by `podman kube play` (`kube.rs`); upgrades across schema versions
//! (`upgrades.rs`); a dump restored into a fresh server (`backup.rs`).

mod accounts;
mod backup;
mod containers;
mod faults;
mod image;
mod import;
mod kube;
mod scale_out;
mod traces;
mod upgrades;

use std::path::PathBuf;
use std::time::Duration;

use strand::cache::{Cache, RedisCache};
use strand::db::Database;
use strand::projection::{reconcile, Report};
use strand_test_support::{
    free_port, outbox_rows, rows_holding, unique_server_id, Backend, Kafka, Redis, StrandCommand, StrandProcess,
    TestDatabase, ADMIN_TOKEN, TEST_SECRET,
};

/// The settings every process of one deployment shares, and where their logs go.
pub struct Deployment {
    command: StrandCommand,
    dir: tempfile::TempDir,
    database: TestDatabase,
    redis_url: String,
}

impl Deployment {
    pub async fn new() -> Self {
        Self::on(Backend::MariaDb.fresh_database().await.unwrap(), Redis::shared().unwrap().url())
    }

    /// A deployment on `database` and the Redis at `redis_url`, with topics of its own on the shared broker.
    pub fn on(database: TestDatabase, redis_url: String) -> Self {
        let kafka = Kafka::shared().unwrap();
        let command = StrandCommand::new(env!("CARGO_BIN_EXE_strand"), &database.url)
            .set("redis_url", &redis_url)
            .set("kafka_brokers", kafka.brokers())
            .set("topic_prefix", kafka.unique_prefix())
            .set("relay_server_id", unique_server_id())
            .set("jwt_hs256_secret", TEST_SECRET)
            .set("admin_token", ADMIN_TOKEN)
            .set("refresh_ms", 200);
        Self { command, dir: tempfile::tempdir().unwrap(), database, redis_url }
    }

    /// Runs the processes started after this with another `strand` binary (another release's).
    pub fn use_binary(&mut self, binary: &std::path::Path) {
        self.command = self.command.clone().with_binary(binary);
    }

    /// Sets `key` to `value` for every process started after this.
    pub fn set(&mut self, key: &str, value: impl ToString) {
        self.command = self.command.clone().set(key, value);
    }

    /// An API node on `port` (no relay, no workers: they run as processes of their own).
    pub fn api(&self, name: &str, port: u16) -> StrandProcess {
        self.api_with(name, port, &[])
    }

    /// [`Deployment::api`] with more `settings`.
    pub fn api_with(&self, name: &str, port: u16, settings: &[(&str, &str)]) -> StrandProcess {
        let mut node = self.command.clone().set("listen", format!("127.0.0.1:{port}")).set("relay", "off");
        for (key, value) in settings {
            node = node.set(key, value);
        }
        self.start(name, &["serve"], node.set("workers", false))
    }

    /// The rows of `user` in the truth's edge tables of `tenant` holding more than their pairs' ids and
    /// versions ([`rows_holding`]).
    pub async fn rows_of(&self, tenant: &str, user: i64) -> i64 {
        rows_holding(&Database::open(&self.database.url, 1).await.unwrap(), tenant, user).await
    }

    /// Every process's `STRAND_*` settings (a later one wins), e.g. for a container's environment.
    pub fn settings(&self) -> &[(String, String)] {
        self.command.env()
    }

    pub fn database_url(&self) -> String {
        self.database.url.clone()
    }

    pub fn redis_url(&self) -> &str {
        &self.redis_url
    }

    /// `strand args…` run once (a CLI command) with the deployment's settings, its output in its log.
    pub fn cli(&self, name: &str, args: &[&str]) -> StrandProcess {
        self.start(name, args, self.command.clone())
    }

    /// A binlog relay, with `/metrics` on `port`.
    pub fn relay(&self, name: &str, port: u16) -> StrandProcess {
        let relay = self.command.clone().set("operations_listen", format!("127.0.0.1:{port}"));
        self.start(name, &["relay", "--mode", "binlog"], relay)
    }

    /// A binlog relay started as after a restore: its checkpoint (another server's binlog) dropped first.
    pub fn relay_after_restore(&self, name: &str, port: u16) -> StrandProcess {
        let relay = self.command.clone().set("operations_listen", format!("127.0.0.1:{port}"));
        self.start(name, &["relay", "--mode", "binlog", "--reset-checkpoint"], relay)
    }

    /// The projection workers, with `/metrics` on `port`; with a `worker_id`, a static member of its
    /// consumer groups, which a restarted worker of the same id reclaims at once.
    pub fn worker(&self, name: &str, port: u16, worker_id: Option<&str>) -> StrandProcess {
        let mut worker = self.command.clone().set("operations_listen", format!("127.0.0.1:{port}"));
        if let Some(id) = worker_id {
            worker = worker.set("worker_id", id);
        }
        self.start(name, &["worker"], worker)
    }

    fn start(&self, name: &str, args: &[&str], command: StrandCommand) -> StrandProcess {
        command.spawn(args, self.log(name)).expect("strand starts")
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
        let settled = tokio::time::timeout(limit, async {
            loop {
                if outbox_rows(&db).await.unwrap() == 0 {
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
            Err(_) => Err(format!(
                "{} outbox rows; {}",
                outbox_rows(&db).await.unwrap(),
                reconcile(&db, Some(&cache), 1000).await.unwrap()
            )),
        }
    }
}

/// Waits until `GET http://127.0.0.1:{port}/healthz` answers 200.
pub async fn answering(port: u16, process: &StrandProcess) {
    answering_with(port, || process.log()).await
}

/// [`answering`] for a server whose log `log` reads (a container's, say).
pub async fn answering_with(port: u16, log: impl Fn() -> String) {
    let http = reqwest::Client::new();
    let answered = tokio::time::timeout(Duration::from_secs(60), async {
        while !http.get(format!("http://127.0.0.1:{port}/healthz")).send().await.is_ok_and(|r| r.status() == 200) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert!(answered.await.is_ok(), "port {port} did not answer within a minute:\n{}", log());
}

/// `GET {base}/v1/users/{user}/counts` as `bearer`: the user's followings and followers.
pub async fn counts(base: &str, bearer: &str, user: i64) -> serde_json::Value {
    let reply = reqwest::Client::new()
        .get(format!("{base}/v1/users/{user}/counts"))
        .bearer_auth(bearer)
        .send()
        .await
        .expect("the API answers");
    reply.json().await.expect("counts as JSON")
}

/// A fresh port for each process of a deployment.
pub fn port() -> u16 {
    free_port().unwrap()
}
