//! Noisy neighbours, measured: tenant acme's write latency (p50/p99) and projection lag alone, then beside
//! tenant evil doing harm, side by side in one run on one in-process node (MariaDB binlog relay, Redis,
//! Kafka, workers):
//! - a relation policy spinning to its 2 s deadline on the follows of 6 users (asked before the follow's
//!   transaction: it holds no connection and no lock acme's writes wait for);
//! - a rate limiter spinning to its 2 s deadline from 48 connections (the instance pool's per-tenant share);
//! - a router spinning to its deadline on every event (the relay's per-tenant budget and parking);
//! - a projector under the name acme uses too, spinning on every event (the workers' per-tenant budget);
//! - that projector filling its space with a 1 KiB value per event past its quota of 1 000 keys.
//!
//! acme writes from 8 connections (follow/unfollow); its projection lag is the time from a follow's answer
//! until the cached count shows it (sampled 8 times per phase; 20 000 ms means "not within 20 s"). `cargo bench -p strand --bench neighbours`
//! (`NEIGHBOURS_WRITES` per writer, default 50; `NEIGHBOURS_BACKEND=sqlite`: the embedded default instead —
//! SQLite with its one writer connection, the poll relay, the embedded bus and the in-process cache). Figures
//! are printed, not asserted.

use std::time::{Duration, Instant};

use reqwest::Method;
use strand::config::{Config, RelayMode};
use strand_test_support::{test_plugin, ApiClient, Backend, TestServer};

const WRITERS: i64 = 8;
/// The longest projection lag a sample waits for.
const LAG_CAP: Duration = Duration::from_secs(20);
/// Lag samples per phase.
const LAG_SAMPLES: i64 = 8;

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let writes: i64 = std::env::var("NEIGHBOURS_WRITES").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    let limits = |c: &mut Config| {
        c.plugin_fuel = 0;
        c.plugin_max_fuel = 0;
        c.plugin_tenant_instances = 16;
        c.projection_space_keys = 1000;
    };
    let embedded = std::env::var("NEIGHBOURS_BACKEND").is_ok_and(|backend| backend == "sqlite");
    let server = match embedded {
        true => {
            TestServer::start_with(Backend::Sqlite, |c| {
                (c.relay, c.relay_idle_ms, c.workers, c.refresh_ms) = (RelayMode::Poll, 10, true, 100);
                limits(c);
            })
            .await
        }
        false => TestServer::start_node(limits).await,
    };
    let node = if embedded { "the embedded default (SQLite)" } else { "MariaDB binlog relay, Redis, Kafka" };
    let deploy = |tenant: &'static str, slot: &'static str, plugin: &'static str| {
        let admin = server.admin();
        async move {
            let readable = if slot.starts_with("projector") { "&readable=counter:followers" } else { "" };
            let path = format!("/admin/v1/tenants/{tenant}/plugins/{slot}?deadline_ms=2000{readable}");
            let reply = admin.upload(Method::PUT, &path, test_plugin(plugin)).await;
            assert_eq!(reply.status, 200, "{reply:?}");
        }
    };
    deploy("acme", "projector/friends", "hostile-projector").await;
    deploy("evil", "projector/friends", "hostile-projector").await;
    // Warm up: every space built, the topics created.
    phase(&server, writes / 5, 1000).await;

    println!("neighbours: acme's writes (8 connections) and projection lag, alone and beside evil's harm; one in-process node on {node}, 2 cores");
    println!("{:<48} {:>10} {:>10} {:>14} {:>14}", "evil is", "p50 ms", "p99 ms", "lag p50 ms", "lag p99 ms");
    report("idle", phase(&server, writes, 2000).await);

    deploy("evil", "relation-policy/default", "trapping-relation-policy").await;
    report("spinning its relation policy (6 followers)", beside(&server, writes, 2500, evil(&server, 1..7, 667)).await);

    deploy("evil", "rate-limiter/default", "hostile-limiter").await;
    report("spinning its limiter (48 connections)", beside(&server, writes, 3000, evil(&server, 1..49, 666)).await);

    deploy("evil", "router/default", "fanout-router").await;
    report("spinning its router on every event", beside(&server, writes, 4000, evil(&server, 777..778, 1)).await);

    report(
        "spinning its projector `friends` on every event",
        beside(&server, writes, 5000, evil(&server, 1..4, 906)).await,
    );

    report(
        "filling its space of `friends` past its quota",
        beside(&server, writes, 6000, evil(&server, 1..4, 908)).await,
    );
}

/// acme's phase beside `harm`, which runs until the phase ends.
async fn beside(
    server: &TestServer,
    writes: i64,
    targets: i64,
    harm: impl std::future::Future<Output = ()>,
) -> Figures {
    tokio::select! {
        figures = phase(server, writes, targets) => figures,
        () = harm => unreachable!("evil's harm runs until dropped"),
    }
}

/// Evil's `users` following and unfollowing `target`, without end.
async fn evil(server: &TestServer, users: std::ops::Range<i64>, target: i64) {
    let loops = users.map(|user| {
        let client = server.client("evil", user);
        async move {
            loop {
                client.put(&format!("/v1/me/following/{target}")).await;
                client.delete(&format!("/v1/me/following/{target}")).await;
            }
        }
    });
    futures::future::join_all(loops).await;
}

struct Figures {
    writes: Vec<Duration>,
    lags: Vec<Duration>,
}

/// acme's writers, `writes` each, then [`LAG_SAMPLES`] follows of fresh users from `targets` on, each timed
/// until its cached count shows it. Each phase writes as users of its own (numbered from `targets`), so no
/// phase meets the bundled rate limit's buckets an earlier one emptied.
async fn phase(server: &TestServer, writes: i64, targets: i64) -> Figures {
    let writers = (targets + 1..=targets + WRITERS).map(|user| {
        let client = server.client("acme", user);
        async move {
            let mut latencies = Vec::new();
            for i in 0..writes {
                let target = 100 + (user * 7 + i) % 50;
                let path = format!("/v1/me/following/{target}");
                let started = Instant::now();
                let reply = if i % 3 == 2 { client.delete(&path).await } else { client.put(&path).await };
                assert_eq!(reply.status, 200, "acme's write failed: {reply:?}");
                latencies.push(started.elapsed());
            }
            latencies
        }
    });
    let writes = futures::future::join_all(writers).await.into_iter().flatten().collect();
    let reader = server.client("acme", 1);
    let mut lags = Vec::new();
    for target in targets..targets + LAG_SAMPLES {
        server.client("acme", 2).follow(target).await;
        let followed = Instant::now();
        lags.push(until_counted(&reader, target, followed).await);
    }
    Figures { writes, lags }
}

/// How long after `followed` the cached count of `target` shows its one follower; [`LAG_CAP`] when it
/// takes longer (printed as such).
async fn until_counted(reader: &ApiClient, target: i64, followed: Instant) -> Duration {
    let path = format!("/v1/projections/friends/followers/{target}");
    while followed.elapsed() < LAG_CAP {
        if reader.get(&path).await.body["value"] == 1 {
            return followed.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    LAG_CAP
}

fn report(evil: &str, figures: Figures) {
    let at = |mut sample: Vec<Duration>, q: usize| {
        sample.sort();
        sample[(sample.len() * q / 100).min(sample.len() - 1)].as_secs_f64() * 1000.0
    };
    let (writes, lags) = (figures.writes, figures.lags);
    println!(
        "{evil:<48} {:>10.1} {:>10.1} {:>14.1} {:>14.1}",
        at(writes.clone(), 50),
        at(writes, 99),
        at(lags.clone(), 50),
        at(lags, 99)
    );
}
