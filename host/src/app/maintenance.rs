//! `strand rebuild` and `strand reconcile`: one-off commands over the truth and what is derived from it.

use super::resources::load_plugins;
use super::{open_database, StartupError};
use crate::bus::Topology;
use crate::cache::{Cache, RedisCache};
use crate::config::Config;
use crate::projection::{
    rebuild_follower, rebuild_projector, reconcile, PluginProjection, RebuildError, ReconcileError, Report, RetainedLog,
};

/// Why a maintenance command failed.
#[derive(Debug, thiserror::Error)]
pub enum MaintenanceError {
    #[error(transparent)]
    Startup(#[from] StartupError),
    #[error("cannot rebuild")]
    Rebuild(#[from] RebuildError),
    #[error(
        "rebuilding a projector needs redis_url: without it, its data lives in the `strand serve` process, \
         which builds it at start"
    )]
    RebuildNeedsRedis,
    #[error("no projection {0:?}: `follower` or a projector plugin's name")]
    UnknownProjection(String),
    #[error("cannot reconcile")]
    Reconcile(#[from] ReconcileError),
}

/// `strand reconcile`: the truth against the follower table and, with Redis configured, the bundled
/// counters and `sample_lists` list caches.
pub async fn run_reconcile(config: &Config, sample_lists: usize) -> Result<Report, MaintenanceError> {
    let db = open_database(config).await?;
    let cache = match &config.redis_url {
        Some(url) => Some(Cache::Redis(RedisCache::connect(url).await.map_err(StartupError::from)?)),
        None => None,
    };
    let report = reconcile(&db, cache.as_ref(), sample_lists).await?;
    db.close().await;
    Ok(report)
}

/// `strand rebuild <projection>`: `follower`, or a projector's name (needs Redis); reports progress per page
/// as `(tenant, done, total)` (an empty tenant for the follower table) and returns the rows or pairs done.
pub async fn run_rebuild(
    config: &Config,
    projection: &str,
    progress: impl FnMut(&str, u64, u64),
) -> Result<u64, MaintenanceError> {
    let db = open_database(config).await?;
    let done = if projection == "follower" {
        rebuild_follower(&db).await?
    } else {
        let url = config.redis_url.as_deref().ok_or(MaintenanceError::RebuildNeedsRedis)?;
        let plugins = load_plugins(config, &db).await?;
        if !plugins.projector_names().contains(projection) {
            return Err(MaintenanceError::UnknownProjection(projection.to_owned()));
        }
        let cache = Cache::Redis(
            RedisCache::connect(url).await.map_err(StartupError::from)?.with_quota(config.projector_quota()),
        );
        let mut projector = PluginProjection::new(plugins, projection, cache, db.clone());
        let topology = Topology::new(&config.topic_prefix);
        if let Some(log) = RetainedLog::unless_kafka(config.kafka_brokers.is_some(), &db, &topology) {
            projector = projector.with_log(log);
        }
        rebuild_projector(&projector, progress).await?
    };
    db.close().await;
    Ok(done)
}
