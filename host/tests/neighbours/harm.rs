//! One test per harm evil can do, beside acme's steady load.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use strand_test_support::{test_plugin, wait_until};

use strand::cache::{Cache, RedisCache, Space};

use super::{acme_beside, deploy, evil_loop, neighbourhood, parked_relay_rows};

/// Limits under which a spinning plugin runs to its 2 s deadline (the platform's maxima), not out of fuel.
const SPINS_TO_DEADLINE: &str = "deadline_ms=2000&fuel=5000000000";

/// A tenant id as long as one may be (64 bytes): its own topics' names are long too.
const LONG_EVIL: &str = "evil-with-a-tenant-id-as-long-as-tenant-ids-may-be-0123456789abc";

/// Evil's router sends each event to a topic the broker refuses (its name is past Kafka's 249 bytes once
/// prefixed): evil's rows are parked — visible to evil's admin — and acme's are published as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_router_naming_refused_topics_parks_only_its_tenants_rows() {
    let server = neighbourhood(|_| {}).await;
    let deployed = deploy(&server, LONG_EVIL, "router/default", "", test_plugin("fanout-router")).await;
    assert_eq!(deployed.status, 200, "{deployed:?}");
    let harm = async {
        evil_loop(&server, LONG_EVIL, 778..779, 1).await;
    };
    acme_beside(&server, harm).await;
    let parked = parked_relay_rows(&server, LONG_EVIL, |rows| rows > 0).await;
    assert!(parked["reason"].as_str().unwrap_or("").contains("refused"), "{parked}");
}

/// Evil's router spins to its 2 s deadline on every event: past the relay's budget per batch its rows are
/// parked and retried beside the relay (then published through the default route), and acme's rows are
/// not held up behind them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_router_spinning_to_its_deadline_holds_up_only_its_tenant() {
    let server = neighbourhood(|c| c.plugin_max_deadline_ms = 2000).await;
    let evil = "evil-router";
    let deployed = deploy(&server, evil, "router/default", SPINS_TO_DEADLINE, test_plugin("fanout-router")).await;
    assert_eq!(deployed.status, 200, "{deployed:?}");
    let harm = async {
        evil_loop(&server, evil, 777..778, 1).await;
    };
    acme_beside(&server, harm).await;
    let parked = format!(r#"strand_relay_parked_rows_total{{tenant="{evil}"}}"#);
    assert!(server.metrics().await.contains(&parked), "evil's rows were parked");
    // Retried with the router's own deadline, a spinning router falls back to the default route.
    parked_relay_rows(&server, evil, |rows| rows == 0).await;
}

/// Evil and acme both deploy a projector named `friends` (one worker serves the name for both); evil's
/// spins to its 2 s deadline on its every event. Evil's events are parked past its budget (and dead-lettered
/// after their tries); acme's `friends` counters equal its follower counts all along. Evil cannot deploy
/// under a bundled projector's name either.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_projector_timing_out_on_every_event_holds_up_only_its_tenant() {
    let server = neighbourhood(|c| c.plugin_max_deadline_ms = 2000).await;
    for tenant in ["evil-projector", "acme"] {
        let query = format!("{SPINS_TO_DEADLINE}&readable=counter:followers");
        let deployed = deploy(&server, tenant, "projector/friends", &query, test_plugin("hostile-projector")).await;
        assert_eq!(deployed.status, 200, "{deployed:?}");
    }
    let bundled =
        deploy(&server, "evil-projector", "projector/top-followers", "", test_plugin("hostile-projector")).await;
    assert_eq!((bundled.status, bundled.code()), (400, "reserved_plugin_name"), "{bundled:?}");
    let harm = async {
        evil_loop(&server, "evil-projector", 1..4, 906).await;
    };
    acme_beside(&server, harm).await;
    let acme = server.client("acme", 1);
    wait_until("acme's friends counters equal its follower counts", Duration::from_secs(60), || async {
        for user in 1..=12 {
            let counted = acme.get(&format!("/v1/projections/friends/followers/{user}")).await;
            let truth = acme.get(&format!("/v1/users/{user}/counts")).await;
            if counted.status != 200 || counted.body["value"] != truth.body["followers"] {
                return false;
            }
        }
        true
    })
    .await;
}

/// Evil's projector spins on every event past its tenant's budget (5 s here), so its events are parked and
/// retried, each try spinning that long again. The tries run beside the live path: for longer than a whole
/// try and the wait after it, each of acme's follows shows in its projection within half a try, however
/// the two interleave (a try in the worker's loop held every live batch behind it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_tenants_retries_never_hold_up_the_live_batches() {
    const BUDGET: Duration = Duration::from_secs(5);
    let server = neighbourhood(|c| {
        c.plugin_max_deadline_ms = 5000;
        c.projection_tenant_budget_ms = BUDGET.as_millis() as u64;
    })
    .await;
    let evil = "evil-retried";
    for tenant in [evil, "acme"] {
        let query = "deadline_ms=5000&fuel=5000000000&readable=counter:followers";
        let deployed = deploy(&server, tenant, "projector/friends", query, test_plugin("hostile-projector")).await;
        assert_eq!(deployed.status, 200, "{deployed:?}");
    }
    assert_eq!(server.client(evil, 1).put("/v1/me/following/906").await.status, 200);
    wait_until("evil's event is parked", BUDGET * 4, || async {
        let parked = server.admin().get(&format!("/admin/v1/tenants/{evil}/parked")).await;
        parked.body["projections"]
            .as_array()
            .is_some_and(|all| all.iter().any(|p| p["projection"] == "projector.friends"))
    })
    .await;
    let (follower, reader) = (server.client("acme", 2), server.client("acme", 1));
    let sampling = std::time::Instant::now();
    for target in 5000.. {
        if sampling.elapsed() > BUDGET * 3 {
            break;
        }
        assert_eq!(follower.put(&format!("/v1/me/following/{target}")).await.status, 200);
        let path = format!("/v1/projections/friends/followers/{target}");
        let shown = format!("acme's follow of {target} counted within half of evil's try");
        wait_until(&shown, BUDGET / 2, || async { reader.get(&path).await.body["value"] == 1 }).await;
    }
}

/// Evil's projector fills its space: one uncapped sorted set every follower joins (past the quota's 20
/// members), then a 1 KiB value per event (past its 100 keys) while acme writes. The set never holds more
/// than its quota, the space stops at its own (give or take a batch), evil sees why its events wait and
/// they are dead-lettered, and acme writes and converges as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_projector_filling_its_space_past_its_quota_stops_there_alone() {
    let server = neighbourhood(|c| {
        c.projection_set_members = 20;
        c.projection_space_keys = 100;
    })
    .await;
    let evil = "evil-quota";
    assert_eq!(deploy(&server, evil, "projector/fill", "", test_plugin("hostile-projector")).await.status, 200);
    // What evil's own team sees, with its tenant key.
    let keys = format!("/admin/v1/tenants/{evil}/keys");
    let issued = server.admin().send_json(Method::POST, &keys, &json!({"name": "ops"})).await;
    let evil_team = server.client_with_token(issued.body["secret"].as_str().expect("a tenant key"));
    for user in 1..=30 {
        assert_eq!(server.client(evil, user).put("/v1/me/following/907").await.status, 200);
    }
    wait_until("evil sees its events wait for its quota", Duration::from_secs(60), || async {
        let parked = evil_team.get(&format!("/admin/v1/tenants/{evil}/parked")).await;
        parked.body["projections"].as_array().is_some_and(|all| {
            let waits_for_quota = |p: &serde_json::Value| p["reason"].as_str().unwrap_or("").contains("quota");
            all.iter().any(|p| p["projection"] == "projector.fill" && waits_for_quota(p))
        })
    })
    .await;
    let harm = async {
        evil_loop(&server, evil, 1..4, 908).await;
    };
    acme_beside(&server, harm).await;
    let cache = Cache::Redis(RedisCache::connect(server.config.redis_url.as_deref().unwrap()).await.unwrap());
    let space = Space { tenant: evil, plugin: "fill", version: 1 };
    let fans = cache.cardinality(&space.sorted_set("fans", [907])).await.unwrap();
    assert_eq!(fans, 20, "the set holds its quota, no more");
    wait_until("evil's space reached its quota of keys", Duration::from_secs(60), || async {
        cache.usage(space).await.unwrap().keys >= 100
    })
    .await;
    let usage = cache.usage(space).await.unwrap();
    // A space passes its quota by at most a batch (of 1 KiB values, one key each).
    assert!(usage.keys <= 100 + 60, "evil's space stopped at its quota of 100 keys: {usage:?}");
    let refused =
        r#"strand_plugin_invalid_output_total{tenant="evil-quota",kind="projector",plugin="fill",stage="quota"}"#;
    assert!(server.metrics().await.contains(refused), "{refused} missing");
    wait_until("evil's events are dead-lettered", Duration::from_secs(60), || async {
        server.metrics().await.contains(r#"strand_dead_letters_total{projection="projector.fill",tenant="#)
    })
    .await;
}

/// Evil deploys projector names up to the platform's maximum and no more; a name it removes (and no other
/// tenant has) has its worker stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn projector_names_are_capped_per_tenant_and_a_removed_ones_worker_stops() {
    let server = neighbourhood(|c| c.plugin_max_projectors = 3).await;
    for name in ["n1", "n2", "n3"] {
        let slot = format!("projector/{name}");
        assert_eq!(deploy(&server, "evil", &slot, "", test_plugin("hostile-projector")).await.status, 200);
    }
    let fourth = deploy(&server, "evil", "projector/n4", "", test_plugin("hostile-projector")).await;
    assert_eq!((fourth.status, fourth.code()), (409, "too_many_projectors"), "{fourth:?}");
    let again = deploy(&server, "evil", "projector/n3", "", test_plugin("hostile-projector")).await;
    assert_eq!(again.status, 200, "a new version of a name it has is no new name");
    wait_until("n3's worker runs", Duration::from_secs(30), || async {
        server.metrics().await.contains(r#"strand_task_up{task="projector.n3"} 1"#)
    })
    .await;
    assert_eq!(server.admin().call(Method::DELETE, "/admin/v1/tenants/evil/plugins/projector/n3").await.status, 204);
    wait_until("n3's worker stopped", Duration::from_secs(30), || async {
        server.metrics().await.contains(r#"strand_task_up{task="projector.n3"} 0"#)
    })
    .await;
    let ready = server.anonymous().get("/readyz").await;
    assert_eq!(ready.status, 200, "a retired worker is not a task down: {ready:?}");
    let fourth = deploy(&server, "evil", "projector/n4", "", test_plugin("hostile-projector")).await;
    assert_eq!(fourth.status, 200, "room again: {fourth:?}");
}

/// Evil's limiter spins to its 2 s deadline on every request, from many connections at once: it holds at
/// most its share of the instance pool and runs at most its share of the cores (paused beyond), and acme (failing closed: a policy call that
/// could not run would be a 503) writes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_limiter_spinning_at_its_deadline_cannot_take_the_instance_pool() {
    let server = neighbourhood(|c| {
        c.plugin_max_deadline_ms = 2000;
        c.plugin_max_fuel = 0;
        c.plugin_fuel = 0;
        c.plugin_tenant_instances = 16;
    })
    .await;
    let deployed =
        deploy(&server, "evil", "rate-limiter/default", "deadline_ms=2000", test_plugin("hostile-limiter")).await;
    assert_eq!(deployed.status, 200, "{deployed:?}");
    let harm = async {
        // 48 connections spinning at once: three times evil's share of 16.
        evil_loop(&server, "evil", 1..49, 666).await;
    };
    acme_beside(&server, harm).await;
    // Evil's calls beyond what it may run at once wait, then fail as busy at their deadline (2 s), which
    // acme's load, quick beside it, may not last: the harm goes on until they do.
    let busy = r#"strand_plugin_calls_total{tenant="evil",kind="rate-limiter",plugin="default",outcome="busy"}"#;
    tokio::select! {
        () = evil_loop(&server, "evil", 1..49, 666) => unreachable!("evil's loop never ends"),
        () = wait_until("evil met its share", Duration::from_secs(60), || async { server.metrics().await.contains(busy) }) => {}
    }
    let metrics = server.metrics().await;
    assert!(
        !metrics.contains(r#"tenant="acme",kind="rate-limiter",plugin="default",outcome="busy""#),
        "acme never did"
    );
    // Spinning, evil's calls ran past its share of the cores and were paused; acme's never were.
    assert!(metrics.contains(r#"strand_plugin_paused_microseconds_total{tenant="evil",kind="rate-limiter"}"#));
    assert!(!metrics.contains(r#"strand_plugin_paused_microseconds_total{tenant="acme""#), "acme was never paused");
}

/// While evil's pathological component compiles (tens of thousands of functions, compiled afresh), acme
/// deploys, rolls back and removes its limiter at once; an upload past the compile budget is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_big_upload_compiling_holds_up_no_one_else() {
    let slow = slow_to_compile();
    {
        let server = neighbourhood(|c| c.plugin_cache_dir = None).await;
        let evil_deploy = deploy(&server, "evil-uploads", "rate-limiter/default", "", slow.clone());
        tokio::pin!(evil_deploy);
        let acme_changes = async {
            let small = test_plugin("deny-all");
            assert_eq!(deploy(&server, "acme", "rate-limiter/default", "", small.clone()).await.status, 200);
            assert_eq!(deploy(&server, "acme", "rate-limiter/default", "", small).await.status, 200);
            let path = "/admin/v1/tenants/acme/plugins/rate-limiter/default/rollback";
            assert_eq!(server.admin().send_json(Method::POST, path, &json!({"version": 1})).await.status, 200);
            assert_eq!(
                server.admin().call(Method::DELETE, "/admin/v1/tenants/acme/plugins/rate-limiter/default").await.status,
                204
            );
        };
        tokio::select! {
            () = acme_changes => {}
            evil = &mut evil_deploy => panic!("evil's compile ended before acme's changes, which waited for it: {evil:?}"),
        }
        let evil = evil_deploy.await;
        assert_eq!((evil.status, evil.code()), (422, "wrong_world"), "compiled, then refused: {evil:?}");
    }
    let hasty = neighbourhood(|c| {
        c.plugin_cache_dir = None;
        c.plugin_compile_budget_ms = 1;
    })
    .await;
    let refused = deploy(&hasty, "evil-uploads", "rate-limiter/default", "", slow).await;
    assert_eq!((refused.status, refused.code()), (422, "compile_too_slow"), "{refused:?}");
}

/// Evil deploys its limiter in a loop, and projectors under ever new names: `/metrics` grows by no series
/// per version, and by at most 32 plugin names of evil's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deploy_loops_grow_no_metric_series() {
    let server = neighbourhood(|_| {}).await;
    let evil = "evil-deployer";
    for _ in 0..10 {
        assert_eq!(deploy(&server, evil, "rate-limiter/default", "", test_plugin("deny-all")).await.status, 200);
        assert_eq!(server.client(evil, 1).put("/v1/me/following/2").await.status, 429);
    }
    let metrics = server.metrics().await;
    let tenant = format!(r#"tenant="{evil}""#);
    let evil_series: Vec<&str> = metrics.lines().filter(|l| l.contains(&tenant)).collect();
    assert!(evil_series.iter().all(|l| !l.contains("version=")), "no version label: {evil_series:?}");
    let limiter_calls = |l: &&&str| l.starts_with("strand_plugin_calls_total") && l.contains(r#"kind="rate-limiter""#);
    let calls = evil_series.iter().filter(limiter_calls).count();
    assert_eq!(calls, 1, "ten versions, one series: {evil_series:?}");
}

/// A component whose one core module has 60 000 functions of 120 instructions each: valid, slow to compile
/// (seconds), and of no world (refused once compiled).
fn slow_to_compile() -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            out.push(if n == 0 { byte } else { byte | 0x80 });
            if n == 0 {
                return;
            }
        }
    }
    fn section(id: u8, body: &[u8], out: &mut Vec<u8>) {
        out.push(id);
        leb(body.len(), out);
        out.extend_from_slice(body);
    }
    const FUNCTIONS: usize = 60_000;
    let mut body = vec![0x00]; // no locals
    for i in 0..60 {
        body.extend_from_slice(&[0x41, (i % 64) as u8, 0x1a]); // i32.const i; drop
    }
    body.push(0x0b); // end
    let mut module = b"\0asm\x01\0\0\0".to_vec();
    section(1, &[0x01, 0x60, 0x00, 0x00], &mut module); // one type: [] -> []
    let mut functions = Vec::new();
    leb(FUNCTIONS, &mut functions);
    functions.extend(std::iter::repeat_n(0x00, FUNCTIONS));
    section(3, &functions, &mut module);
    let mut code = Vec::new();
    leb(FUNCTIONS, &mut code);
    for _ in 0..FUNCTIONS {
        leb(body.len(), &mut code);
        code.extend_from_slice(&body);
    }
    section(10, &code, &mut module);
    let mut component = b"\0asm\x0d\0\x01\0".to_vec();
    section(1, &module, &mut component); // a core module
    component
}
