//! Plugin costs, printed (never asserted):
//! - the bundled `follow-counts` projector per event, as WASM (built against WIT 0.2.0 and, as deployed
//!   before it, 0.1.0) and compiled natively, at batch 1, 16, 256;
//! - instantiation (a call on an empty batch);
//! - the JavaScript rate limiter and Python projector examples beside Rust's: size, compile, instantiation,
//!   per input;
//! - a hot swap (deploy: compile, conformance run, store, swap), cold and with the compile cache warm;
//! - the rate-limit decision (policy call + bucket) added to a follow, embedded and on Redis, and with a
//!   canary of the policy running (the canary choice's added latency).
//!
//! `cargo bench -p strand --bench plugins`

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strand::db::Database;
use strand::graph::{TenantId, UserId};
use strand::plugins::{
    Action, OnePerTenant, PluginKind, PluginLimits, PluginRegistry, PluginRuntime, PluginSlot, RelationEvent,
    RolloutStage, WriteKind, WriteRequest, BUNDLED,
};
use strand::ratelimit::{LocalBuckets, RateLimiting, RedisBuckets, TokenBuckets, WriteIntent};
use strand::tenancy::settings::TenantSettings;
use strand_test_support::{Backend, Redis};

const EVENTS: usize = 100_000;
const OLD_FOLLOW_COUNTS: &[u8] = include_bytes!("../tests/fixtures/wit-0.1.0/follow_counts.wasm");

fn events(n: usize) -> Vec<RelationEvent> {
    (0..n as i64)
        .map(|i| RelationEvent {
            event_id: format!("bench:{i}:{}:1", i + 1),
            tenant: "bench".into(),
            kind: if i % 3 == 0 { Action::Unfollow } else { Action::Follow }.into(),
            follower: i,
            followee: i + 1,
            version: 1,
            occurred_at_ms: 1_700_000_000_000 + i,
            followed_back: i % 2 == 0,
            actor: None,
            expires_at_ms: None,
            notifications: false,
        })
        .collect()
}

fn native_events(n: usize) -> Vec<strand_plugin_sdk::RelationEvent> {
    events(n)
        .into_iter()
        .map(|e| strand_plugin_sdk::RelationEvent {
            action: match e.action() {
                Some(Action::Follow) => strand_plugin_sdk::Action::Follow,
                _ => strand_plugin_sdk::Action::Unfollow,
            },
            follower: e.follower,
            followee: e.followee,
            version: e.version,
            occurred_at_ms: e.occurred_at_ms,
            followed_back: e.followed_back,
        })
        .collect()
}

fn per_event(elapsed: Duration, events: usize) -> f64 {
    elapsed.as_secs_f64() * 1e6 / events as f64
}

#[tokio::main]
async fn main() {
    let runtime = Arc::new(PluginRuntime::new(Default::default(), None).expect("runtime"));
    let counts = BUNDLED.iter().find(|b| b.name == "follow-counts").expect("bundled follow-counts");
    let projector = runtime.prepare(PluginKind::Projector, counts.wasm).expect("prepared");
    // The same plugin as built against `strand:plugin@0.1.0` (tenant and event id in every event).
    let old = runtime.prepare(PluginKind::Projector, OLD_FOLLOW_COUNTS).expect("prepared 0.1.0");

    println!("projector follow-counts, {EVENTS} events per row (µs/event)");
    println!("{:>6} {:>10} {:>10} {:>10} {:>7}", "batch", "wasm 0.2", "wasm 0.1", "native", "ratio");
    let all = events(EVENTS);
    let all_native = native_events(EVENTS);
    for batch in [1usize, 16, 256] {
        let mut per_version = Vec::new();
        for plugin in [&projector, &old] {
            let started = Instant::now();
            for chunk in all.chunks(batch) {
                black_box(runtime.project(plugin, runtime.limits(), chunk).await.result.expect("projected"));
            }
            per_version.push(per_event(started.elapsed(), EVENTS));
        }
        let [wasm, wasm_old] = [per_version[0], per_version[1]];
        let started = Instant::now();
        for chunk in all_native.chunks(batch) {
            let effects: Vec<Vec<_>> =
                chunk.iter().map(<follow_counts::FollowCounts as strand_plugin_sdk::Projector>::project).collect();
            black_box(effects);
        }
        let native = per_event(started.elapsed(), EVENTS);
        println!("{batch:>6} {wasm:>10.3} {wasm_old:>10.3} {native:>10.3} {:>6.1}x", wasm / native);
    }

    let rounds = 20_000;
    let started = Instant::now();
    for _ in 0..rounds {
        black_box(runtime.project(&projector, runtime.limits(), &[]).await.result.expect("empty call"));
    }
    println!("instantiate + empty call: {:.1} µs", per_event(started.elapsed(), rounds));
    print_other_languages(&all).await;

    let database = Backend::Sqlite.fresh_database().await.expect("bench database");
    let db = Database::open(&database.url, 4).await.expect("database");
    let cache = tempfile::tempdir().expect("cache dir");
    let cached_runtime =
        Arc::new(PluginRuntime::new(Default::default(), Some(cache.path().to_owned())).expect("runtime"));
    let registry = Arc::new(PluginRegistry::load(cached_runtime, db.clone()).await.expect("registry"));
    let slot = PluginSlot::new("bench".parse().expect("tenant"), PluginKind::Projector, "counts").expect("slot");
    // A component this cache has never seen, then the same again: compile cost vs the rest of a swap.
    let fresh = strand_test_support::test_plugin("hostile-projector");
    for label in ["hot swap (deploy), cold compile", "hot swap (deploy), cached compile"] {
        let started = Instant::now();
        registry.deploy(slot.clone(), fresh.clone()).await.expect("deploy");
        println!("{label}: {:.1} ms", started.elapsed().as_secs_f64() * 1e3);
    }

    let tenants = Arc::new(TenantSettings::load(db).await.expect("tenants"));
    let redis_url = Redis::shared().expect("throwaway redis").url();
    let stores = [
        ("embedded", TokenBuckets::Local(LocalBuckets::default())),
        ("redis", TokenBuckets::Redis(RedisBuckets::connect(&redis_url).await.expect("redis"))),
    ];
    let tenant: TenantId = "bench".parse().expect("tenant");
    for (label, buckets) in stores {
        let limiter = RateLimiting::new(registry.clone(), tenants.clone(), buckets);
        print_decisions(&format!("rate-limit decision ({label})"), &limiter, &tenant).await;
    }

    // The same decision while a canary of the policy takes 10% of the users: the choice's added cost.
    let policy = BUNDLED.iter().find(|b| b.kind == PluginKind::RateLimiter).expect("bundled policy").wasm.to_vec();
    let slot = PluginSlot::new(tenant.clone(), PluginKind::RateLimiter, "default").expect("slot");
    registry.deploy(slot.clone(), policy.clone()).await.expect("stable policy");
    let limiter = RateLimiting::new(registry.clone(), tenants.clone(), TokenBuckets::Local(LocalBuckets::default()));
    print_decisions("rate-limit decision (embedded, deployed policy)", &limiter, &tenant).await;
    registry
        .deploy_with(slot, policy, Default::default(), Some(RolloutStage::Canary(10)), Default::default())
        .await
        .expect("canary");
    print_decisions("rate-limit decision (embedded, deployed policy + 10% canary)", &limiter, &tenant).await;
    let rounds = 1_000_000;
    let started = Instant::now();
    for user in 0..rounds {
        black_box(registry.choose(&tenant, OnePerTenant::RateLimiter, &user.to_string(), None));
    }
    println!("canary choice alone: {:.0} ns", started.elapsed().as_secs_f64() * 1e9 / rounds as f64);
}

/// The JavaScript and Python examples beside Rust: size, compile, instantiation and per-input cost. They
/// are built by `strand plugin build plugins/js-rate-limit` and `… plugins/py-follow-counts` (the authoring
/// test does both); a missing one is reported, not built here.
async fn print_other_languages(events: &[RelationEvent]) {
    // Their runtimes need more than the default 16 MiB and 50 ms for a cold call.
    let limits = PluginLimits { deadline: Duration::from_secs(5), memory_bytes: 256 << 20, fuel: None };
    let runtime = PluginRuntime::new(limits, None).expect("runtime");
    let requests: Vec<WriteRequest> = events
        .iter()
        .map(|e| WriteRequest {
            tenant: e.tenant.clone(),
            user: e.follower,
            write: if e.action() == Some(Action::Unfollow) { WriteKind::Unfollow } else { WriteKind::Follow },
            target: e.followee,
            now_ms: 0,
        })
        .collect();
    let rust_limiter = BUNDLED.iter().find(|b| b.kind == PluginKind::RateLimiter).expect("bundled policy").wasm;
    let rust_counts = BUNDLED.iter().find(|b| b.name == "follow-counts").expect("bundled counts").wasm;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins");
    let read = |example: &str| std::fs::read(root.join(example).join("dist/plugin.wasm")).ok();
    let rows = [
        ("rate limiter, Rust", Some(rust_limiter.to_vec()), PluginKind::RateLimiter),
        ("rate limiter, JavaScript", read("js-rate-limit"), PluginKind::RateLimiter),
        ("projector, Rust", Some(rust_counts.to_vec()), PluginKind::Projector),
        ("projector, Python", read("py-follow-counts"), PluginKind::Projector),
    ];
    println!("by language: size, compile, instantiate + empty call, per input at batch 1 and 256 (µs)");
    for (label, wasm, kind) in rows {
        let Some(wasm) = wasm else {
            println!("{label}: not built (strand plugin build plugins/…)");
            continue;
        };
        let started = Instant::now();
        let plugin = runtime.prepare(kind, &wasm).expect("prepared");
        let compile = started.elapsed();
        let call = async |inputs: usize| match kind {
            PluginKind::RateLimiter => runtime.decide(&plugin, limits, &requests[..inputs]).await.result.map(|_| ()),
            _ => runtime.project(&plugin, limits, &events[..inputs]).await.result.map(|_| ()),
        };
        call(1).await.expect("a first call");
        let timed = async |inputs: usize, rounds: usize| {
            let started = Instant::now();
            for _ in 0..rounds {
                call(inputs).await.expect("a call");
            }
            started.elapsed().as_secs_f64() * 1e6 / rounds as f64
        };
        let empty = timed(0, 200).await;
        let (one, batch) = (timed(1, 200).await, timed(256, 20).await / 256.0);
        println!(
            "{label}: {:.1} MiB, compile {:.0} ms, instantiate {empty:.0} µs, per input {one:.1} / {batch:.2}",
            wasm.len() as f64 / (1 << 20) as f64,
            compile.as_secs_f64() * 1e3
        );
    }
}

/// p50 and p99 of 5,000 decisions of distinct users.
async fn print_decisions(label: &str, limiter: &RateLimiting, tenant: &TenantId) {
    let mut latencies = Vec::with_capacity(5000);
    for i in 0..5000 {
        let user = UserId::try_from(i + 1).expect("positive");
        let target = UserId::try_from(i + 2).expect("positive");
        let intent = WriteIntent { tenant, user, write: WriteKind::Follow, target, pinned_version: None };
        let started = Instant::now();
        black_box(limiter.check(&intent).await);
        latencies.push(started.elapsed());
    }
    latencies.sort();
    println!("{label}: p50 {:?}  p99 {:?}", latencies[latencies.len() / 2], latencies[latencies.len() * 99 / 100]);
}
