//! Counts and follow lists served from the bundled projections in Redis (`follow-counts`, `follow-lists`),
//! with the database as the fallback. A tenant's projection is trusted only once a backfill completed for it
//! (the `~ready` marker `strand rebuild` sets): before that, or when Redis fails, reads come from the truth —
//! never from a partial projection. Lists keep the database's order: score = follow time, ties by the
//! fixed-width member, newest first.

use redis::aio::ConnectionManager;
use redis::AsyncCommands;

use super::effects::member;
use crate::graph::{self, Counts, Database, Direction, ListedUser, Page, PageRequest, Position, TenantId, UserId};

/// The projector whose counters are served.
const COUNTERS: &str = "follow-counts";
/// The projector whose sorted sets are served as lists.
const LISTS: &str = "follow-lists";

/// Where reads are served from.
pub enum CachedReads {
    /// The `following` table (no Redis configured).
    Database,
    /// The projections, when complete for the tenant; else the database.
    Redis(ConnectionManager),
}

impl CachedReads {
    pub async fn connect(redis_url: Option<&str>) -> Result<Self, redis::RedisError> {
        Ok(match redis_url {
            Some(url) => Self::Redis(ConnectionManager::new(redis::Client::open(url)?).await?),
            None => Self::Database,
        })
    }

    /// Each user's followings and followers, in `users` order.
    pub async fn counts(&self, db: &Database, tenant: &TenantId, users: &[UserId]) -> Result<Vec<Counts>, sqlx::Error> {
        if let Self::Redis(redis) = self {
            match cached_counts(&mut redis.clone(), tenant, users).await {
                Ok(Some(counts)) => return Ok(counts),
                Ok(None) => {}
                Err(error) => tracing::warn!(%error, "Redis counts failed; reading the database"),
            }
        }
        graph::counts(db, tenant, users).await
    }

    /// One page of `user`'s following or follower list.
    pub async fn list(
        &self,
        db: &Database,
        tenant: &TenantId,
        user: UserId,
        direction: Direction,
        page: PageRequest,
    ) -> Result<Page, sqlx::Error> {
        if let Self::Redis(redis) = self {
            match cached_list(&mut redis.clone(), tenant, user, direction, page).await {
                Ok(Some(page)) => return Ok(page),
                Ok(None) => {}
                Err(error) => tracing::warn!(%error, "Redis list failed; reading the database"),
            }
        }
        graph::list(db, tenant, user, direction, page).await
    }
}

/// Marks `plugin`'s data complete for `tenant` (after its backfill), or for every tenant (`None`, after a
/// rebuild of all of them): reads may be served from it.
pub async fn mark_ready(
    redis: &mut redis::aio::MultiplexedConnection,
    tenant: Option<&TenantId>,
    plugin: &str,
) -> Result<(), redis::RedisError> {
    let key = match tenant {
        Some(tenant) => ready_key(tenant, plugin),
        None => everywhere_ready_key(plugin),
    };
    redis.set(key, 1).await
}

fn ready_key(tenant: &TenantId, plugin: &str) -> String {
    format!("{tenant}:{plugin}:~ready")
}

/// Outside every tenant's key space: `~` is not allowed in tenant ids.
fn everywhere_ready_key(plugin: &str) -> String {
    format!("~:{plugin}:ready")
}

/// Whether `plugin`'s data is complete for `tenant`, from its two readiness markers.
fn ready(markers: &[Option<i64>]) -> bool {
    markers.iter().any(Option::is_some)
}

/// The cached counts, or `None` when the tenant's counters are not complete.
async fn cached_counts(
    redis: &mut ConnectionManager,
    tenant: &TenantId,
    users: &[UserId],
) -> Result<Option<Vec<Counts>>, redis::RedisError> {
    let mut keys = vec![ready_key(tenant, COUNTERS), everywhere_ready_key(COUNTERS)];
    for user in users {
        keys.push(format!("{tenant}:{COUNTERS}:followings:{user}"));
        keys.push(format!("{tenant}:{COUNTERS}:followers:{user}"));
    }
    let values: Vec<Option<i64>> = redis.mget(&keys).await?;
    if !ready(&values[..2]) {
        return Ok(None);
    }
    Ok(Some(
        users
            .iter()
            .zip(values[2..].chunks(2))
            .map(|(user, pair)| Counts {
                user_id: user.get(),
                followings: pair[0].unwrap_or(0),
                followers: pair[1].unwrap_or(0),
            })
            .collect(),
    ))
}

/// The cached page, or `None` when the tenant's lists are not complete.
async fn cached_list(
    redis: &mut ConnectionManager,
    tenant: &TenantId,
    user: UserId,
    direction: Direction,
    page: PageRequest,
) -> Result<Option<Page>, redis::RedisError> {
    let markers: Vec<Option<i64>> = redis.mget(&[ready_key(tenant, LISTS), everywhere_ready_key(LISTS)]).await?;
    if !ready(&markers) {
        return Ok(None);
    }
    let side = match direction {
        Direction::Following => "following",
        Direction::Followers => "followers",
    };
    let key = format!("{tenant}:{LISTS}:{side}:{user}");
    let fetch = page.limit as isize + 1;
    let entries: Vec<(String, f64)> = match page.position {
        Position::Start => redis.zrevrange_withscores(&key, 0, fetch - 1).await?,
        Position::Offset(offset) => {
            let start = isize::try_from(offset).unwrap_or(isize::MAX - fetch);
            redis.zrevrange_withscores(&key, start, start + fetch - 1).await?
        }
        Position::After { followed_at_ms, user_id } => {
            // Same time, smaller id (few: one millisecond's follows), then strictly older times.
            let cursor_member = member(user_id);
            let mut tied: Vec<(String, f64)> =
                redis.zrangebyscore_withscores(&key, followed_at_ms, followed_at_ms).await?;
            tied.retain(|(m, _)| *m < cursor_member);
            tied.reverse();
            let older: Vec<(String, f64)> =
                redis.zrevrangebyscore_limit_withscores(&key, format!("({followed_at_ms}"), "-inf", 0, fetch).await?;
            tied.into_iter().chain(older).collect()
        }
    };
    let mut items = entries
        .into_iter()
        .filter_map(|(m, score)| Some(ListedUser { user_id: m.parse().ok()?, followed_at_ms: score as i64 }))
        .collect::<Vec<_>>();
    let has_more = items.len() > page.limit as usize;
    items.truncate(page.limit as usize);
    Ok(Some(Page { items, has_more }))
}
