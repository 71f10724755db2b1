//! A counter projection added to a running system is backfilled from the truth while writes go on, then
//! follows the bus — whose oldest events are gone (retention) — and ends exactly equal to the truth; deployed
//! through the admin API, the same happens without a restart.

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use reqwest::Method;
use strand::bus::{EmbeddedBus, Publisher};
use strand::config::RelayMode;
use strand::graph::{Database, TenantId};
use strand::plugins::{PluginRegistry, PluginRuntime};
use strand::projection::effects::RedisEffects;
use strand::projection::{backfill, EventSource, PluginProjection, Projection, Worker};
use strand_test_support::{test_plugin, wait_until, Backend, Redis, TestServer};
use tokio::sync::oneshot;

use super::{pipeline, storm};

async fn counts_match_truth(db: &Database, tenant: &str, redis: &mut redis::aio::MultiplexedConnection) -> bool {
    let truth: Vec<(i64, i64)> =
        sqlx::query_as("SELECT from_user_id, to_user_id FROM following WHERE tenant_id = ? AND rel_status = 1")
            .bind(tenant)
            .fetch_all(db.reader())
            .await
            .unwrap();
    for user in 1..=6_i64 {
        let followers = truth.iter().filter(|(_, to)| *to == user).count() as i64;
        let followings = truth.iter().filter(|(from, _)| *from == user).count() as i64;
        let counted: (Option<i64>, Option<i64>) = redis
            .mget(&[
                format!("{tenant}:follow-counts:followers:{user}"),
                format!("{tenant}:follow-counts:followings:{user}"),
            ])
            .await
            .unwrap();
        if (counted.0.unwrap_or(0), counted.1.unwrap_or(0)) != (followers, followings) {
            return false;
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_counter_projection_is_backfilled_to_the_exact_truth_under_write_load() {
    let tenant = format!("bf{}", std::process::id());
    let server = TestServer::start_with(Backend::Sqlite, |c| {
        c.relay = RelayMode::Poll;
        c.relay_idle_ms = 10;
    })
    .await;
    let db = server.database().clone();
    storm(&server, &tenant, 0).await;
    let outbox = || async { sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM outbox").fetch_one(db.reader()).await };
    wait_until("the history is on the bus", Duration::from_secs(30), || async { outbox().await.unwrap() == 0 }).await;
    // Retention: the bus no longer has the oldest half of the history.
    sqlx::query("DELETE FROM bus_log WHERE topic = 'strand.following' AND seq <= (SELECT MAX(seq) / 2 FROM bus_log)")
        .execute(db.writer())
        .await
        .unwrap();

    let url = Redis::shared().unwrap().url();
    let runtime = Arc::new(PluginRuntime::new(Default::default(), None).unwrap());
    let registry = Arc::new(PluginRegistry::load(runtime, db.clone()).await.unwrap());
    let effects = Arc::new(RedisEffects::connect(&url).await.unwrap());
    let projection = PluginProjection::new(registry, "follow-counts", effects);
    let tenant_id: TenantId = tenant.parse().unwrap();

    // Writes go on while the backfill runs; then the live worker reads the bus from its (truncated) start.
    let mut reports = Vec::new();
    let (_, replayed) = tokio::join!(
        storm(&server, &tenant, 1),
        backfill(&db, &projection, &tenant_id, |done, total| {
            reports.push((done, total));
            std::future::ready(())
        })
    );
    assert!(replayed.unwrap() > 0 && reports.last().is_some_and(|(done, total)| done >= total), "{reports:?}");
    let bus = EmbeddedBus::new(db.clone());
    let source = EventSource::embedded(bus.clone(), "projector.follow-counts", "strand.following").await.unwrap();
    let worker = Worker::new(
        source,
        Projection::Plugin(projection),
        Publisher::Embedded(bus),
        "strand.dead-letter.projector.follow-counts".into(),
    );
    let (stop, stopped) = oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(async move {
        let _stop_or_drop = stopped.await;
    }));
    storm(&server, &tenant, 2).await;

    let redis = redis::Client::open(url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    wait_until("every counter equals the truth", Duration::from_secs(30), || {
        let (db, tenant, mut redis) = (db.clone(), tenant.clone(), redis.clone());
        async move { counts_match_truth(&db, &tenant, &mut redis).await }
    })
    .await;
    drop(stop);
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_counter_projection_deployed_under_write_load_is_backfilled_to_the_exact_truth_without_a_restart() {
    let tenant = format!("hd{}", std::process::id());
    let redis_url = Redis::shared().unwrap().url();
    let server = pipeline(&redis_url).await;
    storm(&server, &tenant, 0).await;
    // The new projector counts followers (it traps only on user 666, who never acts here).
    let path = format!("/admin/v1/tenants/{tenant}/plugins/projector/late");
    let admin = server.admin();
    let deploy = admin.upload(Method::PUT, &path, test_plugin("hostile-projector"));
    let (deployed, ()) = tokio::join!(deploy, storm(&server, &tenant, 1));
    assert_eq!(deployed.status, 200, "{deployed:?}");
    storm(&server, &tenant, 2).await;

    let redis = redis::Client::open(redis_url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    wait_until("the new counters equal the truth", Duration::from_secs(60), || {
        let (db, tenant, mut redis) = (server.database().clone(), tenant.clone(), redis.clone());
        async move {
            let truth: Vec<(i64,)> =
                sqlx::query_as("SELECT to_user_id FROM following WHERE tenant_id = ? AND rel_status = 1")
                    .bind(&tenant)
                    .fetch_all(db.reader())
                    .await
                    .unwrap();
            for user in 1..=6_i64 {
                let expected = truth.iter().filter(|(to,)| *to == user).count() as i64;
                let counted: Option<i64> = redis.get(format!("{tenant}:late:followers:{user}")).await.unwrap();
                if counted.unwrap_or(0) != expected {
                    return false;
                }
            }
            true
        }
    })
    .await;
    let reply = server.admin().get("/admin/v1/projections").await;
    let backfill = &reply.body["backfills"][0];
    assert_eq!(
        (backfill["projection"].as_str(), backfill["tenant"].as_str(), backfill["state"].as_str()),
        (Some("projector.late"), Some(tenant.as_str()), Some("complete")),
        "{reply:?}"
    );
    assert!(backfill["total"].as_i64().unwrap() > 0 && backfill["done"] == backfill["total"], "{reply:?}");
}
