//! `strand worker`: the projection workers alone (bus → follower table, and with Redis every projector),
//! e.g. beside API nodes started with `workers = false`.

use std::future::Future;

use super::{open_database, refreshed_plugins, worker_factory, StartupError};
use crate::cache::{Cache, RedisCache};
use crate::config::Config;
use crate::projection::Projections;
use crate::tasks::Tasks;

/// Runs the projection workers until `shutdown`, each restarted if it ends (see `crate::tasks`).
pub async fn run_workers(config: &Config, shutdown: impl Future<Output = ()>) -> Result<(), StartupError> {
    let db = open_database(config).await?;
    let (plugins, refresher) = refreshed_plugins(config, &db).await?;
    let cache = match &config.redis_url {
        Some(url) => Some(Cache::Redis(RedisCache::connect(url).await?)),
        None => {
            tracing::warn!("no redis_url: only the follower table is projected here (`strand serve` projects the rest in its own memory)");
            None
        }
    };
    let tasks = Tasks::default();
    Projections::build(worker_factory(config, &db)?, &plugins, cache, config.refresh_every()).await?.supervise(&tasks);
    tracing::info!(tasks = tasks.len(), "projection workers are running");
    shutdown.await;
    tasks.shutdown().await;
    refresher.abort();
    db.close().await;
    Ok(())
}
