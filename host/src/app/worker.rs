//! `strand worker`: the projection workers alone (bus → follower table, and with Redis every projector),
//! e.g. beside API nodes started with `workers = false`.

use std::future::Future;

use super::resources::Resources;
use super::{bind_operations, serve_operations, supervise_companions, StartupError};
use crate::config::Config;
use crate::ops::tasks::Tasks;
use crate::projection::Projections;

/// Runs the projection workers until `shutdown`, each restarted if it ends (see `crate::ops::tasks`).
pub async fn run_workers(config: &Config, shutdown: impl Future<Output = ()>) -> Result<(), StartupError> {
    let resources = Resources::open(config).await?;
    let cache = match &resources.redis {
        Some(_) => Some(resources.cache(config)),
        None => {
            tracing::warn!("no redis_url: only the follower table is projected here (`strand serve` projects the rest in its own memory)");
            None
        }
    };
    let tasks = Tasks::default();
    supervise_companions(&tasks, &resources, config.refresh_every());
    let operations = bind_operations(config).await?.map(|listener| tokio::spawn(serve_operations(listener)));
    Projections::build(resources.worker_factory(config), &resources.plugins, cache, config.refresh_every())
        .await?
        .supervise(&tasks);
    tracing::info!(tasks = tasks.len(), "projection workers are running");
    shutdown.await;
    tasks.shutdown().await;
    if let Some(operations) = operations {
        operations.abort();
    }
    resources.db.close().await;
    Ok(())
}
