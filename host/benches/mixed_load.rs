//! One production-shaped `strand serve` process (MariaDB with the binlog relay, Redis, Kafka, projection
//! workers in-process), measured from outside:
//! 1. the highest throughput of a mixed load — 80% reads (relationship status, counts, a following page),
//!    20% follows/unfollows — with closed-loop clients;
//! 2. p50/p99 latency at 80% of that rate, open loop: requests leave on a fixed schedule and latency counts
//!    from the scheduled moment, so a slow answer cannot hide the queue behind it;
//! 3. resident memory (VmRSS) idle, with 100 tenants × 3 plugins deployed (rate limiter, router, projector;
//!    every component made distinct with a custom section, so none shares compiled code), and once each
//!    tenant's plugins have run.
//!
//! `cargo bench -p strand --bench mixed_load` (`MIXED_LOAD_SECONDS` per phase, default 10;
//! `MIXED_LOAD_CONCURRENCY`, default 64; `MIXED_LOAD_TENANTS`, default 100). Figures are printed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use strand::plugins::{PluginKind, BUNDLED};
use strand_test_support::{
    free_port, token, unique_server_id, Backend, Kafka, Redis, StrandCommand, ADMIN_TOKEN, TEST_SECRET,
};

const USERS: u64 = 2000;

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let seconds = setting("MIXED_LOAD_SECONDS", 10);
    let concurrency = setting("MIXED_LOAD_CONCURRENCY", 64);
    let tenants = setting("MIXED_LOAD_TENANTS", 100);
    let database = Backend::MariaDb.fresh_database().await.expect("a database");
    let kafka = Kafka::shared().expect("a broker");
    let port = free_port().expect("a port");
    let dir = tempfile::tempdir().expect("a directory");
    let command = StrandCommand::new(env!("CARGO_BIN_EXE_strand"), &database.url)
        .set("redis_url", Redis::shared().expect("Redis").url())
        .set("kafka_brokers", kafka.brokers())
        .set("topic_prefix", kafka.unique_prefix())
        .set("relay", "binlog")
        .set("relay_server_id", unique_server_id())
        .set("listen", format!("127.0.0.1:{port}"))
        .set("jwt_hs256_secret", TEST_SECRET)
        .set("admin_token", ADMIN_TOKEN)
        .set("database_max_connections", 32)
        // Compiled afresh: what a node deploying these plugins for the first time holds.
        .set("plugin_cache_dir", dir.path().join("plugin-cache").display())
        .set("log", "warn");
    let server = command.spawn(&["serve"], dir.path().join("strand.log")).expect("strand starts");
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder().pool_max_idle_per_host(256).build().expect("a client");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !http.get(format!("{base}/healthz")).send().await.is_ok_and(|r| r.status() == 200) {
        assert!(Instant::now() < deadline, "strand did not start:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let idle_rss = rss_kib(server.id());

    let load = Load::new(http.clone(), base.clone());
    load.seed(concurrency).await;
    let mut closed = load.closed_loop(concurrency, Duration::from_secs(seconds)).await;
    let max = closed.completed as f64 / closed.elapsed.as_secs_f64();
    let rate = max * 0.8;
    let mut open = load.open_loop(rate, Duration::from_secs(seconds)).await;
    let loaded_rss = rss_kib(server.id());

    println!("mixed_load: one `strand serve` (MariaDB binlog relay, Redis, Kafka, workers in-process), 2 cores shared with the load generator");
    println!("mix: 80% reads (40% relationships of 5, 20% counts, 20% following page of 20), 20% follow/unfollow; {USERS} users");
    closed.print(&format!("closed loop, {concurrency} clients"));
    println!("maximum throughput: {max:.0} req/s");
    open.print(&format!("open loop at 80% = {rate:.0} req/s"));
    println!("errors (5xx or transport): closed {}, open {}", closed.errors, open.errors);

    let (deployed, took) = deploy_plugins(&http, &base, tenants).await;
    let deployed_rss = rss_kib(server.id());
    exercise_tenants(&http, &base, tenants).await;
    let used_rss = rss_kib(server.id());
    println!("resident memory (VmRSS): idle {} MiB; after the load {} MiB", idle_rss / 1024, loaded_rss / 1024);
    println!(
        "  {tenants} tenants × 3 plugins deployed ({deployed} components, {:.1} s): {} MiB (+{:.0} KiB per plugin); \
         after each tenant's plugins ran: {} MiB",
        took.as_secs_f64(),
        deployed_rss / 1024,
        deployed_rss.saturating_sub(loaded_rss) as f64 / deployed as f64,
        used_rss / 1024
    );
    drop(server);
}

/// Resident set of process `pid`, KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("a number")
}

struct Load {
    http: reqwest::Client,
    base: String,
    tokens: Arc<Vec<String>>,
    next: Arc<AtomicU64>,
}

#[derive(Default)]
struct Outcome {
    completed: u64,
    errors: u64,
    elapsed: Duration,
    reads: Vec<Duration>,
    writes: Vec<Duration>,
}

impl Outcome {
    fn add(&mut self, other: Outcome) {
        self.completed += other.completed;
        self.errors += other.errors;
        self.reads.extend(other.reads);
        self.writes.extend(other.writes);
    }

    fn print(&mut self, label: &str) {
        let quantiles = |v: &mut Vec<Duration>| {
            v.sort();
            let q = |q: f64| v.get(((v.len().max(1) - 1) as f64 * q) as usize).copied().unwrap_or_default();
            format!("p50 {:>8.2?} p99 {:>8.2?} ({} requests)", q(0.5), q(0.99), v.len())
        };
        let mut all: Vec<Duration> = self.reads.iter().chain(&self.writes).copied().collect();
        println!(
            "{label}: {:.0} req/s\n  all    {}\n  reads  {}\n  writes {}",
            self.completed as f64 / self.elapsed.as_secs_f64(),
            quantiles(&mut all),
            quantiles(&mut self.reads),
            quantiles(&mut self.writes)
        );
    }
}

impl Load {
    fn new(http: reqwest::Client, base: String) -> Self {
        let tokens = (1..=USERS).map(|u| token(TEST_SECRET, &u.to_string(), "mix", 3600)).collect();
        Self { http, base, tokens: Arc::new(tokens), next: Arc::new(AtomicU64::new(1)) }
    }

    /// Every user follows 10 others, so reads find lists, counts and relationships.
    async fn seed(&self, concurrency: u64) {
        let per = USERS / concurrency + 1;
        let clients = (0..concurrency).map(|c| {
            let (http, base, tokens) = (self.http.clone(), self.base.clone(), self.tokens.clone());
            async move {
                for user in (c * per + 1)..((c + 1) * per + 1).min(USERS + 1) {
                    for k in 1..=10 {
                        let target = (user + k * 37) % USERS + 1;
                        let url = format!("{base}/v1/me/following/{target}");
                        let reply = http.put(url).bearer_auth(&tokens[user as usize - 1]).send().await;
                        assert!(reply.is_ok_and(|r| r.status().is_success() || r.status() == 400), "seeding");
                    }
                }
            }
        });
        join_all(clients).await;
    }

    /// One request of the mix, chosen by a sequence number (a fixed pattern, so runs compare).
    fn request(&self) -> (bool, reqwest::RequestBuilder) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let user = n.wrapping_mul(2_654_435_761) % USERS + 1;
        let bearer = &self.tokens[user as usize - 1];
        let other = (user + n % 997) % USERS + 1;
        let base = &self.base;
        let (write, request) = match n % 10 {
            0 => (true, self.http.put(format!("{base}/v1/me/following/{other}"))),
            1 => (true, self.http.delete(format!("{base}/v1/me/following/{other}"))),
            2..=5 => {
                let ids: Vec<String> = (0..5).map(|i| ((other + i * 13) % USERS + 1).to_string()).collect();
                (false, self.http.get(format!("{base}/v1/me/relationships?user_ids={}", ids.join(","))))
            }
            6 | 7 => (false, self.http.get(format!("{base}/v1/users/{other}/counts"))),
            _ => (false, self.http.get(format!("{base}/v1/users/{other}/following?limit=20"))),
        };
        (write, request.bearer_auth(bearer))
    }

    async fn send(request: reqwest::RequestBuilder) -> bool {
        match request.send().await {
            Ok(reply) => !reply.status().is_server_error() && reply.bytes().await.is_ok(),
            Err(_) => false,
        }
    }

    async fn closed_loop(&self, concurrency: u64, length: Duration) -> Outcome {
        let started = Instant::now();
        let clients = (0..concurrency).map(|_| async {
            let mut outcome = Outcome::default();
            while started.elapsed() < length {
                let (write, request) = self.request();
                let sent = Instant::now();
                let ok = Self::send(request).await;
                outcome.record(write, ok, sent.elapsed());
            }
            outcome
        });
        let mut total = Outcome::default();
        for outcome in join_all(clients).await {
            total.add(outcome);
        }
        total.elapsed = started.elapsed();
        total
    }

    async fn open_loop(&self, rate: f64, length: Duration) -> Outcome {
        let interval = Duration::from_secs_f64(1.0 / rate);
        let started = tokio::time::Instant::now();
        let mut in_flight = Vec::new();
        let mut k = 0u32;
        loop {
            let due = started + interval * k;
            if due - started >= length {
                break;
            }
            tokio::time::sleep_until(due).await;
            let (write, request) = self.request();
            in_flight.push(tokio::spawn(async move {
                let ok = Self::send(request).await;
                (write, ok, due.elapsed())
            }));
            k += 1;
        }
        let mut outcome = Outcome::default();
        for task in join_all(in_flight).await {
            let (write, ok, latency) = task.expect("a request task");
            outcome.record(write, ok, latency);
        }
        outcome.elapsed = started.elapsed();
        outcome
    }
}

impl Outcome {
    fn record(&mut self, write: bool, ok: bool, latency: Duration) {
        self.completed += 1;
        self.errors += u64::from(!ok);
        if write { &mut self.writes } else { &mut self.reads }.push(latency);
    }
}

/// `wasm` with a custom section naming `tenant`: the same behaviour, another component (another hash).
fn distinct(wasm: &[u8], tenant: &str) -> Vec<u8> {
    let name = b"strand-bench-tenant";
    let mut content = leb128(name.len() as u64);
    content.extend_from_slice(name);
    content.extend_from_slice(tenant.as_bytes());
    let mut out = wasm.to_vec();
    out.push(0);
    out.extend(leb128(content.len() as u64));
    out.extend(content);
    out
}

fn leb128(mut value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// Deploys a rate limiter, a router and a projector for each of `tenants` tenants; the count deployed and
/// how long it took.
async fn deploy_plugins(http: &reqwest::Client, base: &str, tenants: u64) -> (u64, Duration) {
    let bundled = |kind: PluginKind, name: &str| {
        BUNDLED.iter().find(|p| p.kind == kind && p.name == name).expect("a bundled plugin").wasm
    };
    let slots = [
        ("rate-limiter", "default", bundled(PluginKind::RateLimiter, "default")),
        ("router", "default", bundled(PluginKind::Router, "default")),
        ("projector", "tenant-counts", bundled(PluginKind::Projector, "follow-counts")),
    ];
    let started = Instant::now();
    let mut deployed = 0;
    for t in 0..tenants {
        let tenant = format!("t{t:03}");
        for (kind, name, wasm) in &slots {
            let url = format!("{base}/admin/v1/tenants/{tenant}/plugins/{kind}/{name}");
            let reply = http.put(url).bearer_auth(ADMIN_TOKEN).body(distinct(wasm, &tenant)).send().await;
            let reply = reply.expect("the admin API answers");
            assert!(reply.status().is_success(), "deploy: {}", reply.text().await.unwrap_or_default());
            deployed += 1;
        }
    }
    (deployed, started.elapsed())
}

/// One follow per tenant (its rate limiter runs; the relay routes it with its router; a worker projects it
/// with its projector), then waits until nothing is left to publish or project.
async fn exercise_tenants(http: &reqwest::Client, base: &str, tenants: u64) {
    for t in 0..tenants {
        let bearer = token(TEST_SECRET, "1", &format!("t{t:03}"), 3600);
        let reply = http.put(format!("{base}/v1/me/following/2")).bearer_auth(bearer).send().await.expect("an answer");
        assert!(reply.status().is_success(), "{}", reply.status());
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let lag: serde_json::Value = http
            .get(format!("{base}/admin/v1/lag"))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .expect("lag answers")
            .json()
            .await
            .expect("lag is JSON");
        let behind: i64 =
            lag["consumers"].as_array().map_or(1, |c| c.iter().map(|c| c["behind"].as_i64().unwrap_or(1)).sum());
        if lag["relay"]["outbox_rows"] == 0 && behind == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "the pipeline did not drain: {lag}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
