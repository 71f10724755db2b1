//! Counts and follow lists served from the bundled projections (`follow-counts`, `follow-lists`) in the
//! cache, with the database as the fallback. A tenant's space is trusted only once a build completed it (its
//! `~ready` mark, see `build.rs`): before that, while it is rebuilt for a new version, or when the cache
//! fails, reads come from the truth — never from a partial projection. Lists keep the database's order:
//! score = follow time, ties by the fixed-width member, newest first; a space holds every follower of an
//! account, so any page of a huge account is a range read of its sorted set.

use strand_contract::{FOLLOWERS, FOLLOWING, FOLLOWINGS, FOLLOW_COUNTS, FOLLOW_LISTS};

use crate::cache::{member, Cache, CacheError, PageStart, Space};
use crate::db::Database;
use crate::graph::{self, Counts, Direction, ListedUser, Listing, Page, PageRequest, Position, TenantId, UserId};

/// Where reads are served from: the cache when it is complete for the tenant, else the database.
pub struct CachedReads {
    cache: Cache,
}

impl CachedReads {
    pub fn new(cache: Cache) -> Self {
        Self { cache }
    }

    /// Each user's followings and followers, in `users` order.
    pub async fn counts(&self, db: &Database, tenant: &TenantId, users: &[UserId]) -> Result<Vec<Counts>, sqlx::Error> {
        match self.cached_counts(tenant, users).await {
            Ok(Some(counts)) => return Ok(counts),
            Ok(None) => {}
            Err(error) => tracing::warn!(%error, "cached counts failed; reading the database"),
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
        match self.cached_list(tenant, user, direction, page).await {
            Ok(Some(page)) => return Ok(page),
            Ok(None) => {}
            Err(error) => tracing::warn!(%error, "cached list failed; reading the database"),
        }
        graph::list(db, tenant, user, Listing::Follows(direction), page).await
    }

    /// The cached counts, or `None` when the tenant's counters are not complete.
    async fn cached_counts(&self, tenant: &TenantId, users: &[UserId]) -> Result<Option<Vec<Counts>>, CacheError> {
        let space = Space::bundled(tenant.as_str(), FOLLOW_COUNTS);
        // The mark and the counters in one read.
        let mut keys = vec![space.ready_key()];
        for user in users {
            keys.push(space.counter(FOLLOWINGS, [user.get()]));
            keys.push(space.counter(FOLLOWERS, [user.get()]));
        }
        let values = self.cache.texts(&keys).await?;
        if values[0].is_none() {
            return Ok(None);
        }
        let number = |value: &Option<String>| value.as_deref().and_then(|v| v.parse().ok()).unwrap_or(0);
        Ok(Some(
            users
                .iter()
                .zip(values[1..].chunks(2))
                .map(|(user, pair)| Counts {
                    user_id: user.get(),
                    followings: number(&pair[0]),
                    followers: number(&pair[1]),
                })
                .collect(),
        ))
    }

    /// The cached page, or `None` when the tenant's lists are not complete.
    async fn cached_list(
        &self,
        tenant: &TenantId,
        user: UserId,
        direction: Direction,
        page: PageRequest,
    ) -> Result<Option<Page>, CacheError> {
        let space = Space::bundled(tenant.as_str(), FOLLOW_LISTS);
        if self.cache.built_by(space).await?.is_none() {
            return Ok(None);
        }
        let side = match direction {
            Direction::Following => FOLLOWING,
            Direction::Followers => FOLLOWERS,
        };
        let key = space.sorted_set(side, [user.get()]);
        let fetch = page.limit as usize + 1;
        let cursor_member;
        let from = match page.position {
            Position::Start => PageStart::Rank(0),
            Position::Offset(offset) => PageStart::Rank(usize::try_from(offset).unwrap_or(usize::MAX)),
            Position::After { followed_at_ms, user_id } => {
                cursor_member = member(user_id);
                PageStart::After(followed_at_ms as f64, &cursor_member)
            }
        };
        let mut items = self
            .cache
            .descending(&key, from, fetch)
            .await?
            .into_iter()
            .filter_map(|(m, score)| {
                Some(ListedUser { user_id: m.parse().ok()?, followed_at_ms: score as i64, expires_at_ms: None })
            })
            .collect::<Vec<_>>();
        let has_more = items.len() > page.limit as usize;
        items.truncate(page.limit as usize);
        Ok(Some(Page { items, has_more, resume_after: None }))
    }
}
