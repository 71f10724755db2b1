//! A projector's output is untrusted input. The hostile projector (`tests/plugins/hostile-projector`)
//! returns, per followee, one row of the table of outputs the host must refuse or contain; each refused
//! event is refused whole (its effects, marker and version together), the other tenant's projection stays
//! exact, and every cache backend ends with the same data. A batch that would take a counter out of range is
//! refused before its counters change, on every backend.

use std::collections::BTreeMap;
use std::sync::Arc;

use strand::cache::{Applied, Cache, DataKind, Gate, PageStart, Space, COUNTER_LIMIT};
use strand::db::Database;
use strand::graph::{self, TenantId, UserId};
use strand::outbox::ChangeEvent;
use strand::plugins::{Effect, Key, PluginKind, PluginRegistry, PluginRuntime, PluginSlot, RelationEvent};
use strand::projection::{PluginProjection, PluginProjectionError};
use strand_test_support::{test_plugin, Backend};

use super::backends;

/// Followees on which the hostile projector returns output the host refuses at the call (900 expiry
/// beyond any clock, 901 a counter step of `i64::MAX`, 903 nine ids, 904 a NaN score); on 902 it writes
/// one key as a counter, a sorted set and a value, which the host keeps apart.
const REFUSED: [i64; 4] = [900, 901, 903, 904];
const KINDS_APART: i64 = 902;
/// Its follows trap the projector.
const TRAPPING_FOLLOWER: i64 = 666;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_output_is_refused_whole_and_both_backends_end_equal() {
    let database = Backend::Sqlite.fresh_database().await.unwrap();
    let db = Database::open(&database.url, 4).await.unwrap();
    let runtime = Arc::new(PluginRuntime::new(Default::default(), None).unwrap());
    let registry = Arc::new(PluginRegistry::load(runtime, db.clone()).await.unwrap());
    let evil: TenantId = format!("evil{}", std::process::id()).parse().unwrap();
    let acme: TenantId = format!("acme{}", std::process::id()).parse().unwrap();
    for tenant in [&evil, &acme] {
        let slot = PluginSlot::new(tenant.clone(), PluginKind::Projector, "hostile").unwrap();
        registry.deploy(slot, test_plugin("hostile-projector")).await.expect("it passes conformance");
    }
    let follow = |tenant: &TenantId, from: i64, to: i64| {
        let (db, tenant) = (db.clone(), tenant.clone());
        async move {
            let (from, to) = (UserId::try_from(from).unwrap(), UserId::try_from(to).unwrap());
            graph::change(&db, graph::RelationCommand::follow(&tenant, from, to)).await.unwrap();
        }
    };
    // Every hostile row of evil's between acme's ordinary follows, some before the spaces are built
    // (the backfill meets them) and some after (live events).
    follow(&acme, 1, 10).await;
    follow(&evil, 1, REFUSED[0]).await;
    let before_build = outbox(&db).await;
    for (n, followee) in REFUSED.iter().chain([&KINDS_APART]).enumerate() {
        follow(&evil, 2, *followee).await;
        follow(&acme, 2 + n as i64, 10).await;
    }
    follow(&evil, TRAPPING_FOLLOWER, 10).await;
    follow(&evil, 3, 10).await;
    let live: Vec<ChangeEvent> = outbox(&db).await.split_off(before_build.len());

    let mut results = Vec::new();
    for (backend, cache) in backends().await {
        let projection = PluginProjection::new(registry.clone(), "hostile", cache.clone(), db.clone());
        for tenant in [&evil, &acme] {
            cache.clear(Space { tenant: tenant.as_str(), plugin: "hostile", version: 1 }).await.unwrap();
        }
        // As the worker does: the batch again without each event the projection refuses (dead-lettered).
        let mut dead = Vec::new();
        for batch in [&before_build, &live] {
            let mut pending = batch.clone();
            loop {
                match projection.apply(&pending).await {
                    Ok(()) => break,
                    Err(PluginProjectionError::Unprojectable(poison)) => {
                        dead.push(poison.event_id.clone());
                        pending.retain(|e| e.event_id != poison.event_id);
                    }
                    Err(other) => panic!("{backend}: not a refusal of one event: {other}"),
                }
            }
        }
        dead.sort();
        let data = dump(&cache, &[&evil, &acme]).await;
        let acme_followers = Space { tenant: acme.as_str(), plugin: "hostile", version: 1 }.counter("followers", [10]);
        assert_eq!(data[&acme_followers], "6", "{backend}: acme's projection is exact");
        let evil_apart = Space { tenant: evil.as_str(), plugin: "hostile", version: 1 };
        assert_eq!(data[&evil_apart.counter("followers", [KINDS_APART])], "2", "{backend}: the counter is one key");
        assert_eq!(data[&evil_apart.value("followers", [KINDS_APART])], "not a number", "{backend}: the value another");
        assert_eq!(data[&evil_apart.counter("followers", [10])], "1", "{backend}: the trapping follow is not counted");
        for followee in REFUSED {
            let refused = evil_apart.counter("followers", [followee]);
            assert!(!data.contains_key(&refused), "{backend}: nothing of a refused event applied: {data:?}");
        }
        results.push((dead, data));
    }
    let expected_dead: Vec<String> = {
        let mut ids: Vec<String> = REFUSED.iter().map(|f| format!("{evil}:2:{f}:1")).collect();
        ids.push(format!("{evil}:1:{}:1", REFUSED[0]));
        ids.push(format!("{evil}:{TRAPPING_FOLLOWER}:10:1"));
        ids.sort();
        ids
    };
    assert_eq!(results[0].0, expected_dead, "the refused events, each dead-lettered once, on Redis");
    for other in &results[1..] {
        assert_eq!(&results[0], other, "every backend refuses the same events and ends with the same data");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_that_would_take_a_counter_out_of_range_changes_nothing() {
    let tenant = format!("range{}", std::process::id());
    for (backend, cache) in backends().await {
        let space = Space { tenant: &tenant, plugin: "range", version: 1 };
        cache.clear(space).await.unwrap();
        cache.mark_built(space, "v").await.unwrap();
        let key = |name: &str| Key { space: name.into(), ids: vec![] };
        let event = |follower: i64| RelationEvent {
            event_id: format!("{tenant}:{follower}:1:1"),
            tenant: tenant.clone(),
            kind: strand::plugins::RelationKind::Follow,
            follower,
            followee: 1,
            version: 1,
            occurred_at_ms: 1,
            followed_back: false,
            actor: None,
            expires_at_ms: None,
            notifications: false,
        };
        let near = [vec![Effect::CounterAdd((key("n"), COUNTER_LIMIT - 1))]];
        assert_eq!(cache.apply(space, &[event(1)], &near, Gate::Built("v")).await.unwrap(), Applied::Events(1));
        let batch = [event(2), event(3)];
        let effects = [
            vec![Effect::CounterAdd((key("m"), 1))],
            vec![
                Effect::CounterAdd((key("n"), 2)),
                Effect::ZsetAdd(strand::plugins::ZsetEntry { key: key("s"), member: 3, score: 1.0 }),
            ],
        ];
        let refused = cache.apply(space, &batch, &effects, Gate::Built("v")).await.unwrap();
        assert_eq!(refused, Applied::OutOfRange, "{backend}");
        let counters = cache.texts(&[space.counter("n", []), space.counter("m", [])]).await.unwrap();
        assert_eq!(counters, vec![Some((COUNTER_LIMIT - 1).to_string()), None], "{backend}: nothing changed");
        assert!(cache.descending(&space.sorted_set("s", []), PageStart::Rank(0), 10).await.unwrap().is_empty());
        // Nor was any marker written: the first event, alone, is new.
        assert_eq!(cache.apply(space, &batch[..1], &effects[..1], Gate::Built("v")).await.unwrap(), Applied::Events(1));
    }
}

/// The outbox's events, in order.
async fn outbox(db: &Database) -> Vec<ChangeEvent> {
    let payloads: Vec<String> =
        sqlx::query_scalar("SELECT payload FROM outbox ORDER BY id").fetch_all(db.reader()).await.unwrap();
    payloads.iter().map(|p| serde_json::from_str(p).unwrap()).collect()
}

/// Every counter, value and sorted set the hostile projector may write for `tenants`, present ones only.
async fn dump(cache: &Cache, tenants: &[&TenantId]) -> BTreeMap<String, String> {
    let mut data = BTreeMap::new();
    for tenant in tenants {
        let space = Space { tenant: tenant.as_str(), plugin: "hostile", version: 1 };
        for followee in [10, 900, 901, 902, 903, 904] {
            let followers = Key { space: "followers".into(), ids: vec![followee] };
            for kind in [DataKind::Counter, DataKind::Value] {
                let key = space.key(kind, &followers);
                if let Some(text) = cache.texts(std::slice::from_ref(&key)).await.unwrap().remove(0) {
                    data.insert(key, text);
                }
            }
            let set = space.key(DataKind::SortedSet, &followers);
            let members = cache.descending(&set, PageStart::Rank(0), 100).await.unwrap();
            if !members.is_empty() {
                data.insert(set, format!("{members:?}"));
            }
        }
    }
    data
}
