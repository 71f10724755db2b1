//! Projections of the bus's events, against real databases.

mod backfill;
mod cache;
mod cached_reads;
mod cluster;
mod faults;
mod follower;
mod history;
mod hostile;
mod kept;
mod mutual;
mod outages;
mod readable;
mod reconcile;
mod relations;
mod shadow;
mod worker;

use std::time::Duration;

use std::sync::Arc;

use futures::future::join_all;
use strand::cache::{Cache, RedisCache};
use strand_test_support::{wait_until, Backend, Redis, RedisCluster, StrandCommand, TestServer, ADMIN_TOKEN};

/// Every cache backend, named: one Redis, a Redis Cluster (3 masters, each with a replica) and the
/// in-process one.
pub async fn backends() -> [(&'static str, Cache); 3] {
    let redis = redis_cache(&Redis::shared().unwrap().url()).await;
    let cluster = redis_cache(&RedisCluster::shared().unwrap().url()).await;
    [("redis", redis), ("cluster", cluster), ("memory", Cache::Memory(Arc::default()))]
}

/// Users 1..=6 of `tenant` following and unfollowing each other concurrently over HTTP.
pub async fn storm(server: &TestServer, tenant: &str, round: i64) {
    let writers = (1..=6).map(|user| {
        let client = server.client(tenant, user);
        async move {
            for i in 0..25 {
                let target = 1 + (user * 7 + i * 5 + round) % 6;
                if target != user {
                    if (i + round) % 4 == 3 {
                        client.unfollow(target).await
                    } else {
                        client.follow(target).await
                    };
                }
            }
        }
    });
    join_all(writers).await;
}

/// Runs `strand <args>` against the server's database and Redis (with the test admin token) until it exits; its exit code and output.
pub async fn strand_command(args: &[&str], database_url: &str, redis_url: &str) -> (i32, String) {
    let log = tempfile::NamedTempFile::new().unwrap();
    let command = StrandCommand::new(env!("CARGO_BIN_EXE_strand"), database_url)
        .set("redis_url", redis_url)
        .set("admin_token", ADMIN_TOKEN);
    let mut process = command.spawn(args, log.path().to_owned()).unwrap();
    let mut status = None;
    wait_until("the command exits", Duration::from_secs(60), || {
        status = process.exited();
        std::future::ready(status.is_some())
    })
    .await;
    (status.unwrap().code().unwrap_or(-1), process.log())
}

/// The whole pipeline on the embedded default plus Redis: poll relay, workers (new projectors picked up
/// within 100 ms), projections in Redis at `redis_url`.
pub async fn pipeline(redis_url: &str) -> TestServer {
    TestServer::start_pipeline(Backend::Sqlite, Some(redis_url)).await
}

/// The cache in Redis at `url`, as the workers and `strand reconcile` use it.
pub async fn redis_cache(url: &str) -> Cache {
    Cache::Redis(RedisCache::connect(url).await.unwrap())
}
