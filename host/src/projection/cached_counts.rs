//! Counts served from the `follow-counts` projection in Redis, with the database as the fallback. A tenant's
//! counters are trusted only once a backfill completed for it (the `~ready` marker `strand rebuild` sets):
//! before that, or when Redis fails, counts come from the truth — never from a partial projection.

use redis::aio::ConnectionManager;
use redis::AsyncCommands;

use crate::graph::{self, Counts, Database, TenantId, UserId};

/// The projector whose counters are served.
const COUNTERS: &str = "follow-counts";

/// Where counts are read.
pub enum CountReader {
    /// The `following` table (no Redis configured).
    Database,
    /// The counters projection, when ready for the tenant; else the database.
    Cached(ConnectionManager),
}

impl CountReader {
    pub async fn connect(redis_url: Option<&str>) -> Result<Self, redis::RedisError> {
        Ok(match redis_url {
            Some(url) => Self::Cached(ConnectionManager::new(redis::Client::open(url)?).await?),
            None => Self::Database,
        })
    }

    /// Each user's followings and followers, in `users` order.
    pub async fn counts(&self, db: &Database, tenant: &TenantId, users: &[UserId]) -> Result<Vec<Counts>, sqlx::Error> {
        if let Self::Cached(redis) = self {
            match cached(&mut redis.clone(), tenant, users).await {
                Ok(Some(counts)) => return Ok(counts),
                Ok(None) => {}
                Err(error) => tracing::warn!(%error, "Redis counts failed; reading the database"),
            }
        }
        graph::counts(db, tenant, users).await
    }
}

/// Marks `tenant`'s `plugin` data complete (after a backfill): its reads may be served from it.
pub async fn mark_ready(
    redis: &mut redis::aio::MultiplexedConnection,
    tenant: &TenantId,
    plugin: &str,
) -> Result<(), redis::RedisError> {
    redis.set(ready_key(tenant, plugin), 1).await
}

fn ready_key(tenant: &TenantId, plugin: &str) -> String {
    format!("{tenant}:{plugin}:~ready")
}

/// The cached counts, or `None` when the tenant's counters are not complete.
async fn cached(
    redis: &mut ConnectionManager,
    tenant: &TenantId,
    users: &[UserId],
) -> Result<Option<Vec<Counts>>, redis::RedisError> {
    let mut keys = vec![ready_key(tenant, COUNTERS)];
    for user in users {
        keys.push(format!("{tenant}:{COUNTERS}:followings:{user}"));
        keys.push(format!("{tenant}:{COUNTERS}:followers:{user}"));
    }
    let values: Vec<Option<i64>> = redis.mget(&keys).await?;
    if values.first().copied().flatten().is_none() {
        return Ok(None);
    }
    Ok(Some(
        users
            .iter()
            .zip(values[1..].chunks(2))
            .map(|(user, pair)| Counts {
                user_id: user.get(),
                followings: pair[0].unwrap_or(0),
                followers: pair[1].unwrap_or(0),
            })
            .collect(),
    ))
}
