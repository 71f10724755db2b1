//! Projection figures, printed (never asserted):
//! - events/s through each bundled projector (WASM) and its Redis effects (one Lua call per batch of 256;
//!   on a 3-master Redis Cluster, one per shard of the batch), first delivery and a redelivery of the same
//!   events (markers make it a no-op);
//! - the same for a deployed projector alone and with a shadow version beside it (every event projected
//!   and applied twice), and the time from `promote` to reads served by the shadow's space;
//! - follow → visible in the `follower` table and in Redis counters, p50/p99, at 50 follows/s through the
//!   whole pipeline (HTTP, outbox, poll relay, embedded bus, workers) on SQLite;
//! - count, list and relationship reads over HTTP (16 clients), with an account of 20,000 followers: from
//!   the database (no cache), then from the projections once built (relationships always come from the
//!   database).
//!
//! `cargo bench -p strand --bench projection` (needs `redis-server`; see docs/development.md).

use std::sync::Arc;
use std::time::{Duration, Instant};

use strand::cache::{Cache, RedisCache, Space};
use strand::config::RelayMode;
use strand::db::Database;
use strand::graph::{self, TenantId, UserId};
use strand::outbox::{ChangeEvent, EventType};
use strand::plugins::{PluginKind, PluginRegistry, PluginRuntime, PluginSlot, RolloutStage, BUNDLED};
use strand::projection::{spaces, PluginProjection};
use strand_test_support::{Backend, Redis, RedisCluster, TestServer};

const EVENTS: i64 = 20_000;
const BATCH: usize = 256;

fn events(tenant: &str) -> Vec<ChangeEvent> {
    (0..EVENTS)
        .map(|i| {
            let (from, to) = (1 + i % 1000, 1001 + i / 1000);
            ChangeEvent {
                event_id: format!("{tenant}:{from}:{to}:1"),
                event_type: EventType::Follow,
                tenant: tenant.into(),
                from,
                to,
                version: 1,
                occurred_at: "2026-11-30T00:00:00.000Z".into(),
                followed_back: false,
                actor: None,
                expires_at: None,
                notifications: None,
            }
        })
        .collect()
}

async fn count(db: &Database, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(db.reader()).await.expect("count")
}

#[tokio::main]
async fn main() {
    let redis_url = Redis::shared().expect("redis").url();
    let database = Backend::Sqlite.fresh_database().await.expect("database");
    let db = Database::open(&database.url, 4).await.expect("open");
    let runtime = Arc::new(PluginRuntime::new(Default::default(), None).expect("runtime"));
    let registry = Arc::new(PluginRegistry::load(runtime, db.clone()).await.expect("registry"));
    let cache = Cache::Redis(RedisCache::connect(&redis_url).await.expect("redis"));
    let cluster_url = RedisCluster::shared().expect("redis cluster").url();
    let on_cluster = Cache::Redis(RedisCache::connect(&cluster_url).await.expect("redis cluster"));
    println!("projector + Redis effects, {EVENTS} events in batches of {BATCH}");
    for (store, cache) in [("redis", &cache), ("cluster", &on_cluster)] {
        for name in ["follow-counts", "follow-lists", "top-followers"] {
            let projection = PluginProjection::new(registry.clone(), name, cache.clone(), db.clone());
            let tenant = format!("bench{}{store}", std::process::id());
            let events = events(&tenant);
            for delivery in ["first", "again"] {
                let started = Instant::now();
                for batch in events.chunks(BATCH) {
                    projection.apply(batch).await.expect("applied");
                }
                let per_second = events.len() as f64 / started.elapsed().as_secs_f64();
                println!("{store:<8} {name:<14} {delivery:<6} {per_second:>9.0} events/s");
            }
        }
    }
    shadow_figures(&registry, &cache, &db).await;

    let server = TestServer::start_with(Backend::Sqlite, |c| {
        c.relay = RelayMode::Poll;
        c.relay_idle_ms = 5;
        c.workers = true;
        c.redis_url = Some(redis_url.clone());
    })
    .await;
    let mut redis = redis::Client::open(redis_url.as_str())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let (mut in_table, mut in_counter) = (Vec::new(), Vec::new());
    let mut ticks = tokio::time::interval(Duration::from_millis(20));
    for i in 0..200_i64 {
        ticks.tick().await;
        let (from, to) = (1 + i, 100_000 + i);
        server.client("lag", from).follow(to).await;
        let committed = Instant::now();
        let row = format!("SELECT COUNT(*) FROM follower WHERE tenant_id = 'lag' AND to_user_id = {to}");
        let mut seen_row = None;
        loop {
            if seen_row.is_none() && count(server.database(), &row).await == 1 {
                seen_row = Some(committed.elapsed());
            }
            let counted: Option<i64> = redis::AsyncCommands::get(
                &mut redis,
                Space::bundled("lag", "follow-counts").counter("followers", [to]),
            )
            .await
            .expect("get");
            if seen_row.is_some() && counted == Some(1) {
                in_counter.push(committed.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        in_table.push(seen_row.expect("seen"));
    }
    for (what, lags) in [("follower table", &mut in_table), ("Redis counter", &mut in_counter)] {
        lags.sort();
        println!("follow → {what:<14} at 50/s: p50 {:?}  p99 {:?}", lags[lags.len() / 2], lags[lags.len() * 99 / 100]);
    }

    // Reads over HTTP: a server without a cache, then the pipeline server once its spaces are built.
    let uncached = TestServer::start_with(Backend::Sqlite, |c| c.workers = false).await;
    let paths = [
        "/v1/users/7/counts",
        "/v1/users/7/following?limit=20",
        "/v1/users/7/followers?limit=20",
        "/v1/me/relationships?user_ids=1007,1008",
    ];
    for (server, source) in [(&uncached, "database"), (&server, "projections")] {
        let tenant: TenantId = "reads".parse().expect("tenant");
        let db = server.database();
        for i in 0..2_000_i64 {
            let (from, to) = (UserId::try_from(1 + i % 50).expect("id"), UserId::try_from(1_000 + i).expect("id"));
            graph::change(db, graph::RelationCommand::follow(&tenant, from, to)).await.expect("follow");
        }
        for follower in 10_000..30_000_i64 {
            let (from, to) = (UserId::try_from(follower).expect("id"), UserId::try_from(7).expect("id"));
            graph::change(db, graph::RelationCommand::follow(&tenant, from, to)).await.expect("follow");
        }
        if source == "projections" {
            wait_built(&cache, &["follow-counts", "follow-lists"]).await;
        }
        http_reads(server, &paths, source).await;
        if source == "projections" {
            // The generic read of a projector's declared spaces (as a deployed projector is read), beside
            // the dedicated routes above over the same data.
            let declared =
                ["/v1/projections/follow-counts/followers/7", "/v1/projections/follow-lists/followers/7?limit=20"];
            http_reads(server, &declared, "declared").await;
        }
    }
}

/// A deployed counter projector's events/s alone and with a shadow, then promote → reads of the shadow.
async fn shadow_figures(registry: &Arc<PluginRegistry>, cache: &Cache, db: &Database) {
    let counts = BUNDLED.iter().find(|b| b.name == "follow-counts").expect("bundled").wasm.to_vec();
    let projection = PluginProjection::new(registry.clone(), "counts-copy", cache.clone(), db.clone());
    for shadowed in [false, true] {
        let tenant = format!("shadow{}{shadowed}", std::process::id());
        let slot =
            PluginSlot::new(tenant.parse().expect("tenant"), PluginKind::Projector, "counts-copy").expect("slot");
        registry.deploy(slot.clone(), counts.clone()).await.expect("deploy");
        if shadowed {
            registry
                .deploy_with(
                    slot.clone(),
                    counts.clone(),
                    Default::default(),
                    Some(RolloutStage::Shadow),
                    Default::default(),
                )
                .await
                .expect("shadow");
        }
        let events = events(&tenant);
        // The first batch builds the (empty) spaces.
        projection.apply(&events[..BATCH]).await.expect("applied");
        let started = Instant::now();
        for batch in events[BATCH..].chunks(BATCH) {
            projection.apply(batch).await.expect("applied");
        }
        let per_second = (events.len() - BATCH) as f64 / started.elapsed().as_secs_f64();
        let label = if shadowed { "with a shadow" } else { "alone" };
        println!("deployed counts {label:<14} {per_second:>9.0} events/s");
        if !shadowed {
            continue;
        }
        let was_live = registry.live_versions(&slot);
        let asked = Instant::now();
        registry.promote(slot.clone()).await.expect("promote");
        let active = registry.active(&slot.tenant, PluginKind::Projector, "counts-copy").expect("active");
        let space = Space { tenant: &tenant, plugin: "counts-copy", version: active.version };
        let key = space.counter("followers", [1001]);
        let read = cache.texts(std::slice::from_ref(&key)).await.expect("read").pop().flatten();
        let complete = cache.built_by(space).await.expect("mark").is_some();
        let served = asked.elapsed();
        assert!(complete && read.as_deref() == Some("1000"), "the shadow's space serves at once: {read:?}");
        let dropping = Instant::now();
        spaces::retire(cache, registry, &slot, &was_live).await;
        println!(
            "promote → reads served by the shadow's space: {served:?}; the old space dropped in {:?}",
            dropping.elapsed()
        );
    }
}

/// Waits until the `reads` tenant's spaces of `plugins` are complete and caught up with the outbox.
async fn wait_built(cache: &Cache, plugins: &[&str]) {
    let key = Space::bundled("reads", "follow-counts").counter("followers", [7]);
    loop {
        let mut built = true;
        for plugin in plugins {
            built &= cache.built_by(Space::bundled("reads", plugin)).await.expect("cache").is_some();
        }
        let followers = cache.texts(std::slice::from_ref(&key)).await.expect("cache").pop().flatten();
        if built && followers.as_deref() == Some("20000") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// p50/p99 and requests/s of each of `paths`, 16 clients at once.
async fn http_reads(server: &TestServer, paths: &[&str], source: &str) {
    const REQUESTS: usize = 4_000;
    const CLIENTS: usize = 16;
    for path in paths {
        let started = Instant::now();
        let clients = (0..CLIENTS).map(|_| {
            let client = server.client("reads", 7);
            async move {
                let mut latencies = Vec::with_capacity(REQUESTS / CLIENTS);
                for _ in 0..REQUESTS / CLIENTS {
                    let sent = Instant::now();
                    assert_eq!(client.get(path).await.status, 200);
                    latencies.push(sent.elapsed());
                }
                latencies
            }
        });
        let mut latencies: Vec<Duration> = futures::future::join_all(clients).await.into_iter().flatten().collect();
        let per_second = latencies.len() as f64 / started.elapsed().as_secs_f64();
        latencies.sort();
        println!(
            "{source:<11} {path:<42} {per_second:>7.0} req/s  p50 {:?}  p99 {:?}",
            latencies[latencies.len() / 2],
            latencies[latencies.len() * 99 / 100]
        );
    }
}
