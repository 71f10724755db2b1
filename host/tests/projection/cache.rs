//! The cache's backends — Redis, a Redis Cluster and the embedded default's in-process one — mean the same: the bundled
//! projectors' effects equal the truth (follows, and blocks ending them) whatever the delivery (every batch twice, every other one first
//! backwards so that one pair's events arrive out of order, then a full replay); gates refuse what they
//! must; pages come in the same order, ties included.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use strand::cache::{Applied, BuildFrom, Cache, Exceeded, Gate, MemoryCache, PageStart, Quota, Space};
use strand::db::Database;
use strand::graph::{self, TenantId, UserId};
use strand::outbox::ChangeEvent;
use strand::plugins::{
    project_with_retries, Action, CappedZsetAdd, Effect, GuardedZsetAdd, Key, PluginRegistry, PluginRuntime,
    RelationEvent, RetryPolicy, ZsetEntry, ZsetMemberWhile,
};
use strand::projection::relation_event;
use strand_test_support::Backend;

use super::backends;

/// Runs every bundled projector of `tenant` on the `events` it receives (the bundled ones: follows) and
/// applies the effects to its complete space.
async fn project(registry: &PluginRegistry, cache: &Cache, tenant: &TenantId, events: &[RelationEvent]) {
    for projector in registry.projectors(tenant) {
        let events: Vec<RelationEvent> = events.iter().filter(|e| projector.prepared.receives(e)).cloned().collect();
        let effects: Vec<Vec<Effect>> =
            project_with_retries(registry, projector.clone(), Arc::new(events.clone()), RetryPolicy::default())
                .await
                .unwrap();
        let space = Space { tenant: tenant.as_str(), plugin: &projector.name, version: projector.version };
        let applied = cache.apply(space, &events, &effects, Gate::Built(&projector.sha256)).await.unwrap();
        assert_ne!(applied, Applied::Refused);
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
            // Blocks end follows both ways through ordinary unfollow events (a follow across one is refused).
            let act = match step % 13 {
                5 => graph::Act::Block,
                9 => graph::Act::Unblock,
                _ if (step / 7) % 3 != 1 => graph::Act::Follow,
                _ => graph::Act::Unfollow,
            };
            match graph::change(&db, graph::RelationCommand::new(&tenant, from, act, to)).await {
                Ok(_) | Err(graph::WriteError::Blocked) => {}
                Err(e) => panic!("{e}"),
            }
        }
    }
    let payloads: Vec<String> =
        sqlx::query_scalar("SELECT payload FROM outbox ORDER BY id").fetch_all(db.reader()).await.unwrap();
    let events: Vec<RelationEvent> =
        payloads.iter().map(|p| relation_event(&serde_json::from_str::<ChangeEvent>(p).unwrap()).unwrap()).collect();
    let truth: Vec<(i64, i64, i64)> = sqlx::query_as(
        "SELECT from_user_id, to_user_id, created_at FROM following WHERE tenant_id = ? AND rel_status = 1",
    )
    .bind(tenant.as_str())
    .fetch_all(db.reader())
    .await
    .unwrap();

    let runtime = Arc::new(PluginRuntime::new(Default::default(), None).unwrap());
    let registry = PluginRegistry::load(runtime, db.clone()).await.unwrap();
    for (backend, cache) in backends().await {
        for projector in registry.projectors(&tenant) {
            let space = Space { tenant: tenant.as_str(), plugin: &projector.name, version: projector.version };
            cache.clear(space).await.unwrap();
            cache.mark_built(space, &projector.sha256).await.unwrap();
        }
        // A pair recurs every 77 steps: batches of 100 hold some pairs twice.
        for (n, batch) in events.chunks(100).enumerate() {
            let backwards: Vec<_> = batch.iter().rev().cloned().collect();
            let (first, again) = if n % 2 == 0 { (batch, &backwards[..]) } else { (&backwards[..], batch) };
            project(&registry, &cache, &tenant, first).await;
            project(&registry, &cache, &tenant, again).await;
        }
        let backwards: Vec<_> = events.iter().rev().cloned().collect();
        project(&registry, &cache, &tenant, &backwards).await;

        let mut following: BTreeMap<i64, BTreeSet<(String, i64)>> = BTreeMap::new();
        let mut followers: BTreeMap<i64, i64> = BTreeMap::new();
        for (from, to, at) in &truth {
            following.entry(*from).or_default().insert((format!("{to:020}"), *at));
            *followers.entry(*to).or_default() += 1;
        }
        let (lists, counts) =
            (Space::bundled(tenant.as_str(), "follow-lists"), Space::bundled(tenant.as_str(), "follow-counts"));
        for user in 1..=11_i64 {
            let listed =
                cache.descending(&lists.sorted_set("following", [user]), PageStart::Rank(0), 100).await.unwrap();
            let listed: BTreeSet<(String, i64)> = listed.into_iter().map(|(m, s)| (m, s as i64)).collect();
            assert_eq!(listed, following.remove(&user).unwrap_or_default(), "{backend}: user {user}'s following list");
            let count = cache.texts(&[counts.counter("followers", [user])]).await.unwrap().remove(0);
            let count: i64 = count.map_or(0, |c| c.parse().unwrap());
            assert_eq!(count, followers.get(&user).copied().unwrap_or(0), "{backend}: user {user}'s follower count");
        }
    }
}

fn event(tenant: &str, follower: i64, followee: i64, version: i64, at: i64) -> RelationEvent {
    RelationEvent {
        event_id: format!("{tenant}:{follower}:{followee}:{version}"),
        tenant: tenant.to_owned(),
        kind: Action::Follow.into(),
        follower,
        followee,
        version,
        occurred_at_ms: at,
        followed_back: false,
        actor: None,
        expires_at_ms: None,
        notifications: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gates_refuse_live_events_before_completion_and_snapshots_without_the_lock() {
    let tenant = format!("gt{}", std::process::id());
    for (backend, cache) in backends().await {
        let space = Space { tenant: &tenant, plugin: backend, version: 1 };
        cache.clear(space).await.unwrap();
        let events = [event(&tenant, 1, 2, 1, 10)];
        let effects = [vec![Effect::CounterAdd((Key { space: "n".into(), ids: vec![] }, 1))]];
        let apply = |gate| cache.apply(space, &events, &effects, gate);
        assert_eq!(apply(Gate::Built("v1")).await.unwrap(), Applied::Refused, "{backend}: never built");
        let building = Gate::Building { owner: "a", ttl: Duration::from_secs(5), from: BuildFrom::Truth };
        assert_eq!(apply(building).await.unwrap(), Applied::Refused, "{backend}: no lock");

        assert!(cache.lock(space, "a", Duration::from_secs(5)).await.unwrap());
        assert!(!cache.lock(space, "b", Duration::from_secs(5)).await.unwrap(), "{backend}: one holder");
        assert!(cache.lock(space, "a", Duration::from_secs(5)).await.unwrap(), "{backend}: renewed by its holder");
        assert_eq!(apply(building).await.unwrap(), Applied::Events(1));
        cache.unlock(space, "b").await.unwrap();
        assert!(!cache.lock(space, "b", Duration::from_secs(5)).await.unwrap(), "{backend}: only the holder unlocks");
        cache.unlock(space, "a").await.unwrap();
        assert_eq!(apply(building).await.unwrap(), Applied::Refused, "{backend}: lock released");

        cache.mark_built(space, "v1").await.unwrap();
        assert_eq!(apply(Gate::Built("v2")).await.unwrap(), Applied::Refused, "{backend}: built by another version");
        // The snapshot covered version 1: the same event from the bus counts nothing more.
        assert_eq!(apply(Gate::Built("v1")).await.unwrap(), Applied::Events(0), "{backend}");
        assert_eq!(cache.texts(&[space.counter("n", [])]).await.unwrap(), vec![Some("1".to_owned())], "{backend}");
        cache.clear(space).await.unwrap();
        assert_eq!(cache.built_by(space).await.unwrap(), None, "{backend}: cleared, mark included");
        assert_eq!(cache.texts(&[space.counter("n", [])]).await.unwrap(), vec![None], "{backend}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pages_capped_and_guarded_sets_agree_between_backends() {
    let tenant = format!("pg{}", std::process::id());
    let mut results = Vec::new();
    for (backend, cache) in backends().await {
        let space = Space { tenant: &tenant, plugin: "pages", version: 1 };
        cache.clear(space).await.unwrap();
        cache.mark_built(space, "v").await.unwrap();
        let key = |name: &str| Key { space: name.into(), ids: vec![1] };
        let entry = |name: &str, member: i64, score: f64| ZsetEntry { key: key(name), member, score };
        // 40 follows over 8 milliseconds (ties), into a full set, a capped one and a guarded capped one.
        let events: Vec<RelationEvent> = (1..=40).map(|u| event(&tenant, u, 1000 + u, 1, u % 8)).collect();
        let effects: Vec<Vec<Effect>> = events
            .iter()
            .map(|e| {
                let score = e.occurred_at_ms as f64;
                let capped = CappedZsetAdd { entry: entry("capped", e.follower, score), keep: 10 };
                vec![
                    Effect::CounterAdd((key("count"), 1)),
                    Effect::ZsetAdd(entry("all", e.follower, score)),
                    Effect::ZsetAddCapped(capped.clone()),
                    Effect::ZsetAddGuarded(GuardedZsetAdd { add: capped, counter: key("count"), at_least: 30 }),
                ]
            })
            .collect();
        let guarded: Vec<Vec<Effect>> =
            effects.iter().map(|e| vec![e[0].clone(), e[1].clone(), e[2].clone(), rename(&e[3], "guarded")]).collect();
        assert_eq!(cache.apply(space, &events, &guarded, Gate::Built("v")).await.unwrap(), Applied::Events(40));
        let mut pages = Vec::new();
        for set in ["all", "capped", "guarded"] {
            let set = space.sorted_set(set, [1]);
            pages.push(cache.descending(&set, PageStart::Rank(0), 100).await.unwrap());
            pages.push(cache.descending(&set, PageStart::Rank(7), 5).await.unwrap());
            // After a tie's middle member: the rest of the tie (smaller members), then older ones.
            let after = format!("{:020}", 21);
            pages.push(cache.descending(&set, PageStart::After(5.0, &after), 6).await.unwrap());
        }
        assert_eq!(pages[0].len(), 40, "{backend}");
        assert_eq!(pages[3].len(), 10, "{backend}: capped");
        assert!(pages[6].len() <= 10, "{backend}: guarded and capped");
        results.push(pages);
    }
    for other in &results[1..] {
        assert_eq!(&results[0], other, "the backends page alike");
    }
}

/// A guarded add into the set `name` instead.
fn rename(effect: &Effect, name: &str) -> Effect {
    let Effect::ZsetAddGuarded(guarded) = effect else { unreachable!("a guarded add") };
    let mut guarded = guarded.clone();
    guarded.add.entry.key.space = name.to_owned();
    Effect::ZsetAddGuarded(guarded)
}

/// A deployed version's space is held to its quota alike on every backend: a sorted set never passes its
/// members (a capped add always fits), a space at its keys takes nothing more (a bundled version's space is
/// not limited), and every backend counts the same usage as effects write and delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn quotas_hold_a_space_alike_on_every_backend() {
    let tenant = format!("qt{}", std::process::id());
    let quota = Quota { keys: 6, bytes: u64::MAX, members: 5 };
    let mut usages = Vec::new();
    for (backend, cache) in backends().await {
        let cache = match cache {
            Cache::Redis(redis) => Cache::Redis(redis.with_quota(quota)),
            Cache::Memory(_) => Cache::Memory(Arc::new(MemoryCache::new(quota))),
        };
        let space = Space { tenant: &tenant, plugin: "quota", version: 1 };
        cache.clear(space).await.unwrap();
        cache.mark_built(space, "v").await.unwrap();
        let fans = |id: i64| ZsetEntry { key: Key { space: "fans".into(), ids: vec![7] }, member: id, score: 1.0 };
        let apply = |events: Vec<RelationEvent>, effects: Vec<Vec<Effect>>| {
            let cache = cache.clone();
            async move { cache.apply(space, &events, &effects, Gate::Built("v")).await.unwrap() }
        };
        let one = |id: i64, effects: Vec<Effect>| apply(vec![event(&tenant, id, 7, 1, id)], vec![effects]);
        // One batch of six followers (six home shards): refused whole, then five of them apply.
        let batch = |ids: std::ops::RangeInclusive<i64>| {
            let events: Vec<RelationEvent> = ids.clone().map(|id| event(&tenant, id, 7, 1, id)).collect();
            (events, ids.map(|id| vec![Effect::ZsetAdd(fans(id))]).collect::<Vec<_>>())
        };
        let (six, adds) = batch(1..=6);
        assert_eq!(apply(six, adds).await, Applied::OverQuota(Exceeded::Members(5)), "{backend}: six at once");
        let (five, adds) = batch(1..=5);
        assert_eq!(apply(five, adds).await, Applied::Events(5), "{backend}");
        let sixth = one(6, vec![Effect::ZsetAdd(fans(6))]).await;
        assert_eq!(sixth, Applied::OverQuota(Exceeded::Members(5)), "{backend}: a sixth member");
        assert_eq!(cache.cardinality(&space.sorted_set("fans", [7])).await.unwrap(), 5, "{backend}");
        let capped = CappedZsetAdd { entry: fans(6), keep: 5 };
        assert_eq!(one(6, vec![Effect::ZsetAddCapped(capped)]).await, Applied::Events(1), "{backend}: capped");
        // Keys: the set, then values until the space holds its 6.
        for id in 7..=11 {
            let value = Effect::ValueSet((Key { space: "v".into(), ids: vec![id] }, "x".repeat(10)));
            assert_eq!(one(id, vec![value]).await, Applied::Events(1), "{backend}: key {id}");
        }
        let full = one(12, vec![Effect::CounterAdd((Key { space: "n".into(), ids: vec![] }, 1))]).await;
        assert_eq!(full, Applied::OverQuota(Exceeded::Keys(6)), "{backend}: a seventh key");
        let usage = cache.usage(space).await.unwrap();
        assert_eq!(usage.keys, 6, "{backend}");
        let bundled = Space { tenant: &tenant, plugin: "quota", version: 0 };
        cache.clear(bundled).await.unwrap();
        cache.mark_built(bundled, "v").await.unwrap();
        let many: Vec<RelationEvent> = (1..=20).map(|id| event(&tenant, id, 8, 1, id)).collect();
        let adds: Vec<Vec<Effect>> = many.iter().map(|e| vec![Effect::ZsetAdd(fans(e.follower))]).collect();
        let applied = cache.apply(bundled, &many, &adds, Gate::Built("v")).await.unwrap();
        assert_eq!(applied, Applied::Events(20), "{backend}: the bundled version's space is not limited");
        usages.push(usage);
        cache.clear(space).await.unwrap();
        cache.clear(bundled).await.unwrap();
    }
    assert!(usages.windows(2).all(|pair| pair[0] == pair[1]), "every backend counts alike: {usages:?}");
}

/// The `APPLY` script gathers a batch's counter adds and plain sorted-set adds per key and reads and writes
/// its floors and pair versions once per hash: a batch must end exactly as its events applied one call each
/// (where nothing is gathered across events) — counters, sets, values, usage and which events were new —,
/// live and in a build, on every backend. Random effects over a few keys, so that adds, capped and guarded
/// adds, removals, counters read by guards, values and expiries meet on the same keys; redelivered and stale
/// events included. Seeded (`STRAND_TEST_APPLY_SEED`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_ends_as_its_events_applied_one_by_one_on_every_backend() {
    let tenant = format!("ab{}", std::process::id());
    let mut random = strand_test_support::Random::seeded("STRAND_TEST_APPLY_SEED");
    let rounds: Vec<(Vec<RelationEvent>, Vec<Vec<Effect>>)> =
        (0..4).map(|_| random_batch(&mut random, &tenant, 40)).collect();
    for (backend, cache) in backends().await {
        for build in [false, true] {
            let whole = Space { tenant: &tenant, plugin: "whole", version: 1 };
            let alone = Space { tenant: &tenant, plugin: "alone", version: 1 };
            let building = Gate::Building { owner: "t", ttl: Duration::from_secs(60), from: BuildFrom::Truth };
            let gate = if build { building } else { Gate::Built("v") };
            for space in [whole, alone] {
                cache.clear(space).await.unwrap();
                if build {
                    assert!(cache.lock(space, "t", Duration::from_secs(60)).await.unwrap());
                } else {
                    cache.mark_built(space, "v").await.unwrap();
                }
            }
            let (mut new_whole, mut new_alone) = (0, 0);
            for (events, effects) in &rounds {
                let Applied::Events(n) = cache.apply(whole, events, effects, gate).await.unwrap() else {
                    panic!("{backend}: the batch applies")
                };
                new_whole += n;
                for (event, effects) in events.iter().zip(effects) {
                    let one = cache.apply(alone, std::slice::from_ref(event), std::slice::from_ref(effects), gate);
                    let Applied::Events(n) = one.await.unwrap() else { panic!("{backend}: an event applies") };
                    new_alone += n;
                }
            }
            let mode = if build { "build" } else { "live" };
            assert_eq!(new_whole, new_alone, "{backend} ({mode}): events new");
            assert_eq!(state(&cache, whole).await, state(&cache, alone).await, "{backend} ({mode}): the data");
            assert_eq!(cache.usage(whole).await.unwrap(), cache.usage(alone).await.unwrap(), "{backend} ({mode})");
            for space in [whole, alone] {
                cache.unlock(space, "t").await.unwrap();
                cache.clear(space).await.unwrap();
            }
        }
    }
}

/// The key names [`random_batch`] writes, each of every kind (an expiry names all three).
const NAMES: [&str; 3] = ["a", "b", "c"];

/// `size` follows of a few pairs, some redelivered, some older than one before, each with one to four
/// random effects on the keys `NAMES` with its follower's home shard as first id (guards in the same shard,
/// as they need).
fn random_batch(
    random: &mut strand_test_support::Random,
    tenant: &str,
    size: usize,
) -> (Vec<RelationEvent>, Vec<Vec<Effect>>) {
    let mut pick = |n: u64| random.below(n) as i64;
    let mut events = Vec::with_capacity(size);
    let mut effects = Vec::with_capacity(size);
    for _ in 0..size {
        // Followers of two home shards, 1 and 2, each event's keys in its follower's shard: a call applies
        // its shard groups one after the other, so two groups touch keys of their own and each applies in
        // the batch's order.
        let shard = 1 + pick(2);
        let (follower, followee, version) = (shard + 64 * pick(4), 1 + pick(3), 1 + pick(4));
        events.push(event(tenant, follower, followee, version, pick(5)));
        let key = |name: i64| Key { space: NAMES[name as usize].into(), ids: vec![shard] };
        let mut one = Vec::new();
        for _ in 0..1 + pick(4) {
            let entry = ZsetEntry { key: key(pick(3)), member: 1 + pick(6), score: pick(5) as f64 };
            one.push(match pick(9) {
                0 | 1 => Effect::CounterAdd((key(pick(3)), pick(7) - 3)),
                2 | 3 => Effect::ZsetAdd(entry),
                4 => Effect::ZsetAddCapped(CappedZsetAdd { entry, keep: 3 }),
                5 => {
                    let add = CappedZsetAdd { entry, keep: pick(2) as u32 * 4 };
                    Effect::ZsetAddGuarded(GuardedZsetAdd { add, counter: key(pick(3)), at_least: pick(3) })
                }
                6 => Effect::ZsetMemberWhile(ZsetMemberWhile { entry, counter: key(pick(3)), at_least: pick(3) }),
                7 => Effect::ZsetRemove((key(pick(3)), 1 + pick(6))),
                _ => match pick(3) {
                    0 => Effect::ValueSet((key(pick(3)), "x".repeat(1 + pick(4) as usize))),
                    1 => Effect::ValueDelete(key(pick(3))),
                    _ => Effect::Expire((key(pick(3)), 3_600_000)),
                },
            });
        }
        effects.push(one);
    }
    (events, effects)
}

/// Every key `random_batch` may write in `space`: counters, sets (members and scores) and values.
async fn state(cache: &Cache, space: Space<'_>) -> Vec<(Option<String>, Vec<(String, f64)>, Option<String>)> {
    let mut state = Vec::new();
    for (name, shard) in NAMES.into_iter().flat_map(|name| [(name, 1), (name, 2)]) {
        let counter = cache.texts(&[space.counter(name, [shard])]).await.unwrap().remove(0);
        let set = cache.descending(&space.sorted_set(name, [shard]), PageStart::Rank(0), 100).await.unwrap();
        let value = cache.texts(&[space.value(name, [shard])]).await.unwrap().remove(0);
        state.push((counter, set, value));
    }
    state
}
