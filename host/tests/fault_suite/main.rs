//! The fault suite: a follow/unfollow storm over HTTP while the API, relay and worker processes of a
//! production-shaped deployment (MariaDB with binlog, Redis, Kafka) are killed with SIGKILL at random and
//! restarted. At the end `strand reconcile` finds no difference and the outbox is empty: no acknowledged
//! write and no event lost, none counted twice. Size: `FAULT_SUITE_OPERATIONS` per writer (default 60),
//! `FAULT_SUITE_KILLS` (default 12) — not `STRAND_*`: the processes would take them for settings;
//! `cargo test -p strand --test fault_suite -- --ignored --nocapture` (not in CI yet: see the `ignore`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::future::join_all;
use strand::cache::{Cache, RedisCache};
use strand::projection::reconcile;
use strand_test_support::{free_port, token, unique_server_id, Backend, Kafka, Redis, StrandProcess, TEST_SECRET};

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The three kinds of process, each restartable with the same settings.
struct Deployment {
    env: Vec<(&'static str, String)>,
    dir: PathBuf,
}

impl Deployment {
    fn start(&self, role: &str) -> StrandProcess {
        let args: &[&str] = match role {
            "api" => &["serve"],
            "relay" => &["relay", "--mode", "binlog"],
            _ => &["worker"],
        };
        let binary = Path::new(env!("CARGO_BIN_EXE_strand"));
        StrandProcess::spawn(binary, args, &self.env, self.dir.join(format!("{role}.log"))).expect("strand starts")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "known failure under investigation: in some runs the Kafka-group workers never catch up after \
            being SIGKILLed (outbox empty, follower table far behind after 2 minutes); run with --ignored"]
async fn a_storm_with_api_relay_and_workers_killed_at_random_loses_and_double_counts_nothing() {
    let (operations, kills) = (setting("FAULT_SUITE_OPERATIONS", 60) as i64, setting("FAULT_SUITE_KILLS", 12));
    let mut seed = getrandom::u64().unwrap() | 1;
    println!("random seed: {seed}");
    let mut below = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let database = Backend::MariaDb.fresh_database().await.unwrap();
    let redis_url = Redis::shared().unwrap().url();
    let kafka = Kafka::shared().unwrap();
    let port = free_port().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let deployment = Deployment {
        env: vec![
            ("STRAND_DATABASE_URL", database.url.clone()),
            ("STRAND_REDIS_URL", redis_url.clone()),
            ("STRAND_KAFKA_BROKERS", kafka.brokers()),
            ("STRAND_TOPIC_PREFIX", kafka.unique_prefix()),
            ("STRAND_RELAY_SERVER_ID", unique_server_id().to_string()),
            ("STRAND_LISTEN", format!("127.0.0.1:{port}")),
            ("STRAND_RELAY", "off".to_owned()),
            ("STRAND_WORKERS", "false".to_owned()),
            ("STRAND_JWT_HS256_SECRET", TEST_SECRET.to_owned()),
            ("STRAND_REFRESH_MS", "200".to_owned()),
            ("STRAND_PLUGIN_CACHE_DIR", std::env::temp_dir().join("strand-test-plugin-cache").display().to_string()),
        ],
        dir: dir.path().to_owned(),
    };
    let roles = ["api", "relay", "worker"];
    let mut processes: Vec<StrandProcess> = roles.iter().map(|role| deployment.start(role)).collect();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(60), async {
        while !http.get(format!("{base}/healthz")).send().await.is_ok_and(|r| r.status() == 200) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert!(answered.await.is_ok(), "the API did not answer within a minute:\n{}", processes[0].log());

    // 20 users of one tenant follow and unfollow each other; a request cut by a kill is retried.
    let writers = (1..=20_i64).map(|user| {
        let (http, base) = (http.clone(), base.clone());
        let bearer = token(TEST_SECRET, &user.to_string(), "faults", 3600);
        async move {
            for i in 0..operations {
                let target = 1 + (user * 7 + i * 13) % 20;
                if target == user {
                    continue;
                }
                let url = format!("{base}/v1/me/following/{target}");
                loop {
                    let request = if (i + user) % 3 == 0 { http.delete(&url) } else { http.put(&url) };
                    match request.bearer_auth(&bearer).send().await {
                        Ok(reply) if reply.status().is_success() || reply.status() == 429 => break,
                        Ok(reply) => {
                            assert!(reply.status().as_u16() < 500 || reply.status() == 503, "{}", reply.status())
                        }
                        // The API process is down: try again once it is back.
                        Err(_) => {}
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    });
    let storm = join_all(writers);
    let killer = async {
        for _ in 0..kills {
            // A random moment (not synchronisation), a random process.
            tokio::time::sleep(Duration::from_millis(200 + below(800))).await;
            let victim = below(3) as usize;
            let killed = std::mem::replace(&mut processes[victim], deployment.start(roles[victim]));
            killed.kill();
        }
        processes
    };
    let (_, processes) = tokio::join!(storm, killer);

    let cache = Cache::Redis(RedisCache::connect(&redis_url).await.unwrap());
    let db = strand::graph::Database::open(&database.url, 4).await.unwrap();
    let settled = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let outbox: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM outbox").fetch_one(db.reader()).await.unwrap();
            if outbox == 0 && reconcile(&db, Some(&cache), 1000).await.is_ok_and(|r| r.is_clean()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    if settled.await.is_err() {
        let outbox: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM outbox").fetch_one(db.reader()).await.unwrap();
        let report = reconcile(&db, Some(&cache), 1000).await.unwrap();
        let logs: Vec<String> =
            roles.iter().map(|r| format!("--- {r}:\n{}", tail(&dir.path().join(format!("{r}.log"))))).collect();
        panic!("not settled after 2 minutes: {outbox} outbox rows; {report}\n{}", logs.join("\n"));
    }
    let report = reconcile(&db, Some(&cache), 1000).await.unwrap();
    println!("{kills} kills; {report}");
    assert!(report.pairs_checked > 100, "a storm worth the name: {report}");
    drop(processes);
}

/// The last lines of a process log.
fn tail(path: &Path) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}
