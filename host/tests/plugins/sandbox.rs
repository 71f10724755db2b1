//! Hostile plugins: stopped by their limits, the failure mode applied, the host serving on.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use strand::plugins::{PluginError, PluginKind, PluginLimits, PluginRuntime, WriteKind, WriteRequest};
use strand_test_support::{test_plugin, Backend, Redis, TestServer};

use super::deploy;

/// Targets on which the hostile limiter loops, traps, exhausts memory and floods its output.
const HOSTILE_TARGETS: [i64; 4] = [666, 667, 668, 669];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_plugins_are_stopped_and_the_tenants_failure_mode_applies() {
    let server = TestServer::start(Backend::Sqlite).await;
    let deployed = deploy(&server, "acme", "rate-limiter", "default", test_plugin("hostile-limiter")).await;
    assert_eq!(deployed.status, 200, "it behaves on the conformance samples: {deployed:?}");
    let alice = server.client("acme", 1);

    for target in HOSTILE_TARGETS {
        let reply = alice.put(&format!("/v1/me/following/{target}")).await;
        assert_eq!(reply.status, 200, "fails open by default (target {target}): {reply:?}");
    }
    let closed = server
        .admin()
        .send_json(Method::PUT, "/admin/v1/tenants/acme/settings", &json!({"rate_limit_failure": "closed"}))
        .await;
    assert_eq!(closed.status, 200, "{closed:?}");
    for target in HOSTILE_TARGETS {
        let reply = alice.delete(&format!("/v1/me/following/{target}")).await;
        assert_eq!((reply.status, reply.code()), (503, "rate_limiter_unavailable"), "fails closed (target {target})");
    }
    // The host and the plugin keep serving ordinary requests, for this tenant and for others.
    assert_eq!(alice.put("/v1/me/following/5").await.status, 200);
    assert_eq!(server.client("globex", 1).put("/v1/me/following/666").await.status, 200);
    let settings = server.admin().get("/admin/v1/tenants/acme/settings").await;
    assert_eq!(settings.body, json!({"rate_limit_failure": "closed", "allow_pinned_versions": false}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_says_why_a_call_was_stopped() {
    let deadline = Duration::from_millis(50);
    let on_the_clock = PluginRuntime::new(PluginLimits { deadline, memory_bytes: 16 << 20, fuel: None }, None).unwrap();
    // The other stops must not race the clock: a debug build on a loaded machine can take 50 ms to get there
    // (burning 5 M of fuel included).
    let roomy =
        PluginRuntime::new(PluginLimits { deadline: Duration::from_secs(10), ..on_the_clock.limits() }, None).unwrap();
    let metered = PluginRuntime::new(PluginLimits { fuel: Some(5_000_000), ..roomy.limits() }, None).unwrap();
    let wasm = test_plugin("hostile-limiter");
    let request = |target| WriteRequest { tenant: "acme".into(), user: 1, write: WriteKind::Follow, target, now_ms: 0 };
    let call = async |runtime: &PluginRuntime, target| {
        let plugin = runtime.prepare(PluginKind::RateLimiter, &wasm).expect("a rate-limiter component");
        runtime.decide(&plugin, runtime.limits(), &[request(target)]).await.result.map(|_| ()).unwrap_err()
    };

    let timeout = call(&on_the_clock, 666).await;
    assert!(matches!(timeout, PluginError::Timeout(d) if d == deadline), "{timeout}");
    assert!(matches!(call(&metered, 666).await, PluginError::OutOfFuel(5_000_000)));
    // A Rust panic traps (its hook writes to stderr: the empty WASI takes the text and it goes nowhere).
    let trap = call(&roomy, 667).await;
    assert!(matches!(&trap, PluginError::Trap(_)), "{trap}");
    let memory = call(&roomy, 668).await;
    assert!(matches!(&memory, PluginError::Trap(_)) && memory.to_string().contains("memory"), "{memory}");
    let oversized = call(&roomy, 669).await;
    assert!(matches!(&oversized, PluginError::InvalidOutput(m) if m.contains("too long")), "{oversized}");
}

/// A spinning plugin yields its thread at every epoch tick: on a runtime with one thread, another task runs
/// while the plugin spins towards its deadline (a plugin that held the thread would let it run only after).
#[tokio::test(flavor = "current_thread")]
async fn a_spinning_plugin_shares_its_thread_with_other_tasks_until_its_deadline() {
    let limits = PluginLimits { deadline: Duration::from_millis(50), memory_bytes: 16 << 20, fuel: None };
    let runtime = PluginRuntime::new(limits, None).unwrap();
    let plugin = runtime.prepare(PluginKind::RateLimiter, &test_plugin("hostile-limiter")).expect("a rate limiter");
    let spin = WriteRequest { tenant: "acme".into(), user: 1, write: WriteKind::Follow, target: 666, now_ms: 0 };
    let others_ran = AtomicUsize::new(0);
    let call = async {
        let called = runtime.decide(&plugin, runtime.limits(), &[spin]).await;
        (called.result.map(|_| ()), others_ran.load(Ordering::Relaxed))
    };
    let other_task = async {
        loop {
            others_ran.fetch_add(1, Ordering::Relaxed);
            tokio::task::yield_now().await;
        }
    };
    let (result, others_ran_meanwhile) = tokio::select! {
        called = call => called,
        _ = other_task => unreachable!("the other task never ends"),
    };
    assert!(matches!(result, Err(PluginError::Timeout(_))), "{result:?}");
    assert!(others_ran_meanwhile > 1, "the other task ran {others_ran_meanwhile} times during the call");
}

/// Targets on which the hostile limiter charges buckets no store can carry out (refill 1e-300, cost above
/// capacity, refill NaN).
const IMPOSSIBLE_BUCKETS: [i64; 3] = [670, 671, 672];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn impossible_buckets_are_refused_on_both_stores_and_other_tenants_write_on() {
    let redis = Redis::shared().unwrap().url();
    for store in [None, Some(redis)] {
        let server = TestServer::start_with(Backend::Sqlite, |c| c.redis_url = store.clone()).await;
        let deployed = deploy(&server, "evil", "rate-limiter", "default", test_plugin("hostile-limiter")).await;
        assert_eq!(deployed.status, 200, "{deployed:?}");
        let (evil, acme) = (server.client("evil", 1), server.client("acme", 1));
        for target in IMPOSSIBLE_BUCKETS {
            let reply = evil.put(&format!("/v1/me/following/{target}")).await;
            assert_eq!(reply.status, 200, "refused output fails open by default ({store:?}, {target}): {reply:?}");
            // Before the fix, one such write poisoned the in-process buckets' lock for every tenant.
            for followee in 2..=6 {
                assert_eq!(acme.put(&format!("/v1/me/following/{followee}")).await.status, 200, "{store:?}");
            }
        }
        let closed = json!({"rate_limit_failure": "closed"});
        let set = server.admin().send_json(Method::PUT, "/admin/v1/tenants/evil/settings", &closed).await;
        assert_eq!(set.status, 200, "{set:?}");
        for target in IMPOSSIBLE_BUCKETS {
            let reply = evil.delete(&format!("/v1/me/following/{target}")).await;
            assert_eq!((reply.status, reply.code()), (503, "rate_limiter_unavailable"), "{store:?}, {target}");
        }
        assert_eq!(acme.delete("/v1/me/following/2").await.status, 200, "{store:?}");
        assert_eq!(server.anonymous().get("/healthz").await.status, 200);
        let metrics = server.metrics().await;
        // One recorder per test process: both loops' servers count into it.
        let counted =
            r#"strand_plugin_invalid_output_total{tenant="evil",kind="rate-limiter",plugin="default",stage="call"}"#;
        assert!(metrics.contains(counted), "{counted} missing from:\n{metrics}");
    }
}

/// The hostile limiter needs 24 MiB on this target, above the default 16 MiB.
const NEEDS_24_MIB: i64 = 673;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_version_runs_within_its_own_limits_which_the_platform_caps() {
    let server = TestServer::start(Backend::Sqlite).await;
    let closed = json!({"rate_limit_failure": "closed"});
    assert_eq!(server.admin().send_json(Method::PUT, "/admin/v1/tenants/acme/settings", &closed).await.status, 200);
    let path = "/admin/v1/tenants/acme/plugins/rate-limiter/default";
    let with = |query: &str| {
        let (admin, path) = (server.admin(), format!("{path}{query}"));
        async move { admin.upload(Method::PUT, &path, test_plugin("hostile-limiter")).await }
    };
    let alice = server.client("acme", 1);
    let target = format!("/v1/me/following/{NEEDS_24_MIB}");

    assert_eq!(with("").await.status, 200);
    assert_eq!(alice.put(&target).await.status, 503, "16 MiB by default: out of memory, fails closed");
    let roomy = with("?memory_bytes=67108864").await;
    assert_eq!(roomy.status, 200, "{roomy:?}");
    assert_eq!(roomy.body["plugin"]["limits"]["memory_bytes"], 64 << 20);
    assert_eq!(alice.put(&target).await.status, 200, "its own 64 MiB");

    for (query, limit) in
        [("?memory_bytes=1073741824", "memory_bytes"), ("?deadline_ms=60000", "deadline_ms"), ("?fuel=0", "fuel")]
    {
        let refused = with(query).await;
        assert_eq!((refused.status, refused.code()), (400, "limit_too_high"), "{query}: {refused:?}");
        assert!(refused.body["detail"].as_str().unwrap().contains(limit), "names {limit}: {refused:?}");
    }
    let listed = server.admin().get("/admin/v1/tenants/acme/plugins").await.body;
    let memory: Vec<i64> =
        listed["plugins"].as_array().unwrap().iter().map(|p| p["limits"]["memory_bytes"].as_i64().unwrap()).collect();
    assert_eq!(memory, [16 << 20, 64 << 20], "plugin list shows each version's limits: {listed}");

    // The limits are the version's, across a restart.
    let server = server.restart().await;
    assert_eq!(server.client("acme", 1).delete(&target).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_component_of_tens_of_mib_deploys_compiles_once_and_runs_within_its_limits() {
    let server = TestServer::start(Backend::Sqlite).await;
    let big = test_plugin("big-limiter");
    assert!(big.len() > 20 << 20, "as big as a JS or Python component: {} bytes", big.len());
    let path = "/admin/v1/tenants/acme/plugins/rate-limiter/default";
    let tight = server.admin().upload(Method::PUT, path, big.clone()).await;
    assert_eq!((tight.status, tight.code()), (422, "conformance_failed"), "20 MiB of data in 16 MiB: {tight:?}");
    let deployed =
        server.admin().upload(Method::PUT, &format!("{path}?memory_bytes=67108864&deadline_ms=500"), big).await;
    assert_eq!(deployed.status, 200, "{deployed:?}");
    assert_eq!(server.client("acme", 1).put("/v1/me/following/2").await.status, 200);
    // Compiled once: the machine code is cached under the component's hash for every later load.
    let sha256 = deployed.body["plugin"]["sha256"].as_str().unwrap().to_owned();
    let cache = server.config.plugin_cache_dir.clone().expect("test servers cache compiled plugins");
    let cached =
        std::fs::read_dir(&cache).unwrap().flatten().any(|f| f.file_name().to_string_lossy().starts_with(&sha256));
    assert!(cached, "{sha256} compiled into {}", cache.display());
    let server = server.restart().await;
    assert_eq!(server.client("acme", 1).delete("/v1/me/following/2").await.status, 200);
}
