//! A counter projection added to a running system is built from the truth while writes go on, then follows
//! the bus — whose oldest events are gone (retention) — and ends exactly equal to the truth; deployed through
//! the admin API, the same happens without a restart, and a new version with another shape gets a fresh
//! space, built the same way.

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use strand::bus::{EmbeddedBus, Publisher};
use strand::cache::{Cache, Space};
use strand::config::RelayMode;
use strand::db::Database;
use strand::plugins::{PluginRegistry, PluginRuntime, BUNDLED};
use strand::projection::{EventSource, PluginProjection, Projection, Rebuild, Worker};
use strand_test_support::{outbox_rows, test_plugin, wait_until, Backend, Redis, TestServer};
use tokio::sync::oneshot;

use super::{pipeline, redis_cache, storm};

/// Whether `plugin`'s counters of users 1..=6 (`followers:{user}`, and `followings:{user}` if `both`)
/// equal the truth of `tenant`.
pub(super) async fn counters_equal_truth(
    db: &Database,
    cache: &Cache,
    tenant: &str,
    (plugin, version): (&str, i64),
    both: bool,
) -> bool {
    let truth: Vec<(i64, i64)> =
        sqlx::query_as("SELECT from_user_id, to_user_id FROM following WHERE tenant_id = ? AND rel_status = 1")
            .bind(tenant)
            .fetch_all(db.reader())
            .await
            .unwrap();
    let space = Space { tenant, plugin, version };
    let mut keys = Vec::new();
    let mut expected = Vec::new();
    for user in 1..=6_i64 {
        keys.push(space.counter("followers", [user]));
        expected.push(truth.iter().filter(|(_, to)| *to == user).count() as i64);
        if both {
            keys.push(space.counter("followings", [user]));
            expected.push(truth.iter().filter(|(from, _)| *from == user).count() as i64);
        }
    }
    let counted = cache.texts(&keys).await.unwrap();
    let counted: Vec<i64> = counted.iter().map(|c| c.as_deref().map_or(0, |c| c.parse().unwrap())).collect();
    counted == expected
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_counter_projection_is_built_to_the_exact_truth_under_write_load() {
    let tenant = format!("bf{}", std::process::id());
    let server = TestServer::start_with(Backend::Sqlite, |c| {
        c.relay = RelayMode::Poll;
        c.relay_idle_ms = 10;
    })
    .await;
    let db = server.database().clone();
    storm(&server, &tenant, 0).await;
    wait_until("the history is on the bus", Duration::from_secs(30), || async { outbox_rows(&db).await.unwrap() == 0 })
        .await;
    // Retention: the bus no longer has the oldest half of the history.
    sqlx::query("DELETE FROM bus_log WHERE topic = 'strand.following' AND seq <= (SELECT MAX(seq) / 2 FROM bus_log)")
        .execute(db.writer())
        .await
        .unwrap();

    let cache = redis_cache(&Redis::shared().unwrap().url()).await;
    let runtime = Arc::new(PluginRuntime::new(Default::default(), None).unwrap());
    let registry = Arc::new(PluginRegistry::load(runtime, db.clone()).await.unwrap());
    let projection = PluginProjection::new(registry, "follow-counts", cache.clone(), db.clone());
    let bus = EmbeddedBus::new(db.clone());
    let source = EventSource::embedded(bus.clone(), "projector.follow-counts", "strand.following").await.unwrap();
    let worker = Worker::new(
        source,
        Projection::Plugin(projection),
        Publisher::Embedded(bus),
        "strand.dead-letter.projector.follow-counts".into(),
    );
    // The worker builds the tenant's space while writes go on, then reads the (truncated) bus.
    let (stop, stopped) = oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(async move {
        let _stop_or_drop = stopped.await;
    }));
    storm(&server, &tenant, 1).await;
    storm(&server, &tenant, 2).await;

    wait_until("every counter equals the truth", Duration::from_secs(30), || async {
        counters_equal_truth(&db, &cache, &tenant, ("follow-counts", 0), true).await
    })
    .await;
    drop(stop);
    running.await.unwrap();
}

/// The admin API's backfill record of projector `name` for `tenant`.
pub(super) async fn backfill_record(server: &TestServer, name: &str, tenant: &str) -> serde_json::Value {
    let reply = server.admin().get("/admin/v1/projections").await;
    let records = reply.body["backfills"].as_array().unwrap();
    let found = records.iter().find(|b| b["projection"] == format!("projector.{name}") && b["tenant"] == tenant);
    found.cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deployed_counter_projections_are_built_to_the_exact_truth_under_write_load_without_a_restart() {
    let tenant = format!("hd{}", std::process::id());
    let redis_url = Redis::shared().unwrap().url();
    let cache = redis_cache(&redis_url).await;
    let server = pipeline(&redis_url).await;
    storm(&server, &tenant, 0).await;
    let path = format!("/admin/v1/tenants/{tenant}/plugins/projector/late");
    let admin = server.admin();
    // Version 1 counts followers (it traps only on user 666, who never acts here).
    let deploy = admin.upload(Method::PUT, &path, test_plugin("hostile-projector"));
    let (deployed, ()) = tokio::join!(deploy, storm(&server, &tenant, 1));
    assert_eq!(deployed.status, 200, "{deployed:?}");
    storm(&server, &tenant, 2).await;
    let db = server.database();
    wait_until("version 1's counters equal the truth", Duration::from_secs(60), || async {
        counters_equal_truth(db, &cache, &tenant, ("late", 1), false).await
    })
    .await;
    let record = backfill_record(&server, "late", &tenant).await;
    assert_eq!((record["plugin_version"].as_i64(), record["state"].as_str()), (Some(1), Some("complete")), "{record}");
    assert!(record["total"].as_i64().unwrap() > 0 && record["done"] == record["total"], "{record}");

    // Version 2 has another shape (followings too): a fresh space — the followers are not counted twice.
    let counts = BUNDLED.iter().find(|b| b.name == "follow-counts").unwrap().wasm.to_vec();
    let (deployed, ()) = tokio::join!(admin.upload(Method::PUT, &path, counts), storm(&server, &tenant, 3));
    assert_eq!(deployed.status, 200, "{deployed:?}");
    storm(&server, &tenant, 4).await;
    wait_until("version 2's counters equal the truth", Duration::from_secs(60), || async {
        let record = backfill_record(&server, "late", &tenant).await;
        record["plugin_version"] == 2
            && record["state"] == "complete"
            && counters_equal_truth(db, &cache, &tenant, ("late", 2), true).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_builds_of_one_space_run_once() {
    let tenant = format!("sf{}", std::process::id());
    let server = TestServer::start(Backend::Sqlite).await;
    storm(&server, &tenant, 0).await;
    let db = server.database().clone();
    let cache = redis_cache(&Redis::shared().unwrap().url()).await;
    let runtime = Arc::new(PluginRuntime::new(Default::default(), None).unwrap());
    let registry = Arc::new(PluginRegistry::load(runtime, db.clone()).await.unwrap());
    // Two builders, as in two worker processes: each its own lock owner.
    let builders: Vec<PluginProjection> =
        (0..2).map(|_| PluginProjection::new(registry.clone(), "follow-counts", cache.clone(), db.clone())).collect();
    let tenant_id = tenant.parse().unwrap();
    let plugin = builders[0].active(&tenant_id).unwrap();
    let runs = builders.iter().map(|b| b.build(&tenant_id, &plugin, Rebuild::Always, |_, _| {}));
    let replayed: Vec<u64> = futures::future::join_all(runs).await.into_iter().map(Result::unwrap).collect();
    let pairs: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM following WHERE tenant_id = ?")
        .bind(&tenant)
        .fetch_one(db.reader())
        .await
        .unwrap();
    assert_eq!(replayed.iter().sum::<u64>(), pairs as u64, "one build, the other waited for it: {replayed:?}");
    assert!(counters_equal_truth(&db, &cache, &tenant, ("follow-counts", 0), true).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn strand_plugin_deploy_follows_a_projectors_build_to_completion() {
    let tenant = format!("cl{}", std::process::id());
    let redis_url = Redis::shared().unwrap().url();
    let server = pipeline(&redis_url).await;
    storm(&server, &tenant, 0).await;
    let wasm = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(wasm.path(), test_plugin("hostile-projector")).unwrap();
    let address = format!("http://{}", server.addr);
    let args = ["plugin", "deploy", "--tenant", &tenant, "--kind", "projector", "--name", "cli-late"];
    let path = wasm.path().to_str().unwrap();
    let (code, output) = super::strand_command(
        &[&args[..], &["--server", &address, path]].concat(),
        &server.config.database_url,
        &redis_url,
    )
    .await;
    assert_eq!(code, 0, "{output}");
    assert!(output.contains(&format!("projector.cli-late version 1 is built for {tenant}")), "{output}");
    assert!(output.contains("] "), "a progress bar: {output}");
    let cache = redis_cache(&redis_url).await;
    assert!(cache.built_by(Space { tenant: &tenant, plugin: "cli-late", version: 1 }).await.unwrap().is_some());
}
