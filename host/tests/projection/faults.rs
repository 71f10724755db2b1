//! A randomized follow/unfollow storm over a few hundred users while `strand worker` processes are killed
//! with SIGKILL at random points and restarted: at the end `strand reconcile` finds no difference — no
//! event lost, none counted twice.

use std::path::Path;
use std::time::Duration;

use futures::future::join_all;
use strand::config::RelayMode;
use strand::projection::reconcile;
use strand_test_support::{wait_until, Backend, Redis, StrandCommand, StrandProcess, TestServer};

use super::redis_cache;

fn worker_process(database_url: &str, redis_url: &str, log: &Path) -> StrandProcess {
    let command = StrandCommand::new(env!("CARGO_BIN_EXE_strand"), database_url).set("redis_url", redis_url);
    command.spawn(&["worker"], log.to_owned()).expect("strand worker starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_killed_at_random_points_lose_and_double_count_nothing() {
    let mut random = strand_test_support::Random::seeded("STRAND_TEST_FAULT_SEED");
    let mut below = move |n: u64| random.below(n);
    let tenant = format!("wk{}", std::process::id());
    let redis_url = Redis::shared().unwrap().url();
    let server = TestServer::start_with(Backend::MariaDb, |c| {
        c.relay = RelayMode::Binlog;
        c.redis_url = Some(redis_url.clone());
    })
    .await;
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("worker.log");

    // 8 writers × 250 operations between 300 users; a third of them unfollows.
    let plan: Vec<Vec<(i64, i64, bool)>> = (0..8)
        .map(|_| {
            (0..250)
                .map(|_| (1 + below(300) as i64, 1 + below(300) as i64, below(3) != 0))
                .filter(|(from, to, _)| from != to)
                .collect()
        })
        .collect();
    let writers = plan.into_iter().map(|operations| {
        let (server, tenant) = (&server, &tenant);
        async move {
            for (from, to, follow) in operations {
                let client = server.client(tenant, from);
                if follow {
                    client.follow(to).await
                } else {
                    client.unfollow(to).await
                };
            }
        }
    });
    let storm = join_all(writers);
    let killer = async {
        let mut kills = 0;
        while kills < 8 {
            let worker = worker_process(&server.config.database_url, &redis_url, &log);
            // A random moment of the worker's life (not synchronisation): starting, applying, committing.
            tokio::time::sleep(Duration::from_millis(100 + below(600))).await;
            worker.kill();
            kills += 1;
        }
        kills
    };
    let (_, kills) = tokio::join!(storm, killer);
    let _last = worker_process(&server.config.database_url, &redis_url, &log);

    let cache = redis_cache(&redis_url).await;
    wait_until("the projections caught up with the truth", Duration::from_secs(90), || {
        let (db, cache) = (server.database().clone(), cache.clone());
        async move { reconcile(&db, Some(&cache), 1000).await.unwrap().is_clean() }
    })
    .await;
    let report = reconcile(server.database(), Some(&cache), 1000).await.unwrap();
    println!("{kills} kills; {report}");
    assert!(report.pairs_checked > 500, "a storm worth the name: {report}");
}
