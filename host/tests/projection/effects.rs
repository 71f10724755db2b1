//! The bundled projectors' effects on a real Redis equal the truth whatever the delivery: every batch
//! twice, every other one first backwards (so one pair's events arrive out of order), then a full replay.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use redis::AsyncCommands;
use strand::graph::{self, Database, OutboxEvent, TenantId, UserId};
use strand::plugins::{project_with_retries, Effect, PluginRegistry, PluginRuntime, RelationEvent, RetryPolicy};
use strand::projection::effects::RedisEffects;
use strand::projection::relation_event;
use strand_test_support::{Backend, Redis};

/// Runs every bundled projector of `tenant` on `events` and applies the effects.
async fn project(registry: &PluginRegistry, redis: &RedisEffects, tenant: &TenantId, events: &[RelationEvent]) {
    for projector in registry.projectors(tenant) {
        let effects: Vec<Vec<Effect>> =
            project_with_retries(registry, projector.clone(), Arc::new(events.to_vec()), RetryPolicy::default())
                .await
                .unwrap();
        redis.apply(tenant.as_str(), &projector.name, events, &effects, false).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counters_and_lists_equal_the_truth_under_redelivery_reordering_and_replay() {
    let database = Backend::Sqlite.fresh_database().await.unwrap();
    let db = Database::open(&database.url, 4).await.unwrap();
    let tenant: TenantId = format!("fx{}", std::process::id()).parse().unwrap();
    for step in 0..400_i64 {
        let (from, to) = (1 + step % 7, 1 + (step * 5 + 3) % 11);
        if from != to {
            let (from, to) = (UserId::try_from(from).unwrap(), UserId::try_from(to).unwrap());
            graph::set_following(&db, &tenant, from, to, (step / 7) % 3 != 1, graph::now_ms()).await.unwrap();
        }
    }
    let payloads: Vec<String> =
        sqlx::query_scalar("SELECT payload FROM outbox ORDER BY id").fetch_all(db.reader()).await.unwrap();
    let events: Vec<RelationEvent> =
        payloads.iter().map(|p| relation_event(&serde_json::from_str::<OutboxEvent>(p).unwrap()).unwrap()).collect();

    let runtime = Arc::new(PluginRuntime::new(Default::default(), None).unwrap());
    let registry = PluginRegistry::load(runtime, db.clone()).await.unwrap();
    let url = Redis::shared().unwrap().url();
    let redis = RedisEffects::connect(&url).await.unwrap();
    // A pair recurs every 77 steps: batches of 100 hold some pairs twice.
    for (n, batch) in events.chunks(100).enumerate() {
        let backwards: Vec<_> = batch.iter().rev().cloned().collect();
        let (first, again) = if n % 2 == 0 { (batch, &backwards[..]) } else { (&backwards[..], batch) };
        project(&registry, &redis, &tenant, first).await;
        project(&registry, &redis, &tenant, again).await;
    }
    let backwards: Vec<_> = events.iter().rev().cloned().collect();
    project(&registry, &redis, &tenant, &backwards).await;

    let truth: Vec<(i64, i64, i64)> = sqlx::query_as(
        "SELECT from_user_id, to_user_id, created_at FROM following WHERE tenant_id = ? AND rel_status = 1",
    )
    .bind(tenant.as_str())
    .fetch_all(db.reader())
    .await
    .unwrap();
    let mut following: BTreeMap<i64, BTreeSet<(String, i64)>> = BTreeMap::new();
    let mut followers: BTreeMap<i64, i64> = BTreeMap::new();
    for (from, to, at) in &truth {
        following.entry(*from).or_default().insert((format!("{to:020}"), *at));
        *followers.entry(*to).or_default() += 1;
    }
    let mut conn = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
    for user in 1..=11_i64 {
        let listed: Vec<(String, f64)> =
            conn.zrange_withscores(format!("{tenant}:follow-lists:following:{user}"), 0, -1).await.unwrap();
        let listed: BTreeSet<(String, i64)> = listed.into_iter().map(|(m, s)| (m, s as i64)).collect();
        assert_eq!(listed, following.remove(&user).unwrap_or_default(), "user {user}'s following list");
        let count: Option<i64> = conn.get(format!("{tenant}:follow-counts:followers:{user}")).await.unwrap();
        assert_eq!(count.unwrap_or(0), followers.get(&user).copied().unwrap_or(0), "user {user}'s follower count");
    }
}
