//! Reads served straight from the truth: relationship status, follow lists and counts.
//!
//! Lists are newest first, ordered by `(followed_at DESC, user_id DESC)`; the user id breaks ties so a
//! cursor over that pair is exact even when many follows share a millisecond. Every list and count query is
//! answered from the covering indexes of migration 0001 (no table lookups, no sorts).

use std::collections::{HashMap, HashSet};

use sqlx::{AnyPool, Row};

use super::{TenantId, UserId};
use crate::db::Database;

/// One side of the graph around a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Whom the user follows.
    Following,
    /// Who follows the user.
    Followers,
}

impl Direction {
    /// (column holding the user whose list it is, column holding the listed users).
    fn columns(self) -> (&'static str, &'static str) {
        match self {
            Direction::Following => ("from_user_id", "to_user_id"),
            Direction::Followers => ("to_user_id", "from_user_id"),
        }
    }
}

/// Where a page starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// The newest entry.
    Start,
    /// Strictly after this entry in list order (keyset pagination; stable while the list changes).
    After { followed_at_ms: i64, user_id: i64 },
    /// After skipping this many entries (offset pagination; for clients that need page numbers).
    Offset(u64),
}

/// A page to read: where it starts and how many entries at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    pub position: Position,
    pub limit: u32,
}

/// A user in a follow list, with the time of the (latest) follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedUser {
    pub user_id: i64,
    pub followed_at_ms: i64,
}

/// A page of a follow list. `has_more` is exact: one extra row is read to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub items: Vec<ListedUser>,
    pub has_more: bool,
}

/// How the caller and another user relate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Relationship {
    pub user_id: i64,
    pub following: bool,
    pub followed_by: bool,
}

/// How many users a user follows and is followed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub user_id: i64,
    pub followings: i64,
    pub followers: i64,
}

/// Reads one page of `user`'s following or follower list.
pub async fn list(
    db: &Database,
    tenant: &TenantId,
    user: UserId,
    direction: Direction,
    page: PageRequest,
) -> Result<Page, sqlx::Error> {
    let (owner, listed) = direction.columns();
    let base =
        format!("SELECT {listed}, created_at FROM following WHERE tenant_id = ? AND {owner} = ? AND rel_status = 1");
    let order = format!("ORDER BY created_at DESC, {listed} DESC");
    let fetch = i64::from(page.limit) + 1;
    let rows = match page.position {
        Position::Start => {
            sqlx::query(&format!("{base} {order} LIMIT ?"))
                .bind(tenant.as_str())
                .bind(user.get())
                .bind(fetch)
                .fetch_all(db.reader())
                .await?
        }
        Position::After { followed_at_ms, user_id } => {
            let sql = format!("{base} AND (created_at < ? OR (created_at = ? AND {listed} < ?)) {order} LIMIT ?");
            sqlx::query(&sql)
                .bind(tenant.as_str())
                .bind(user.get())
                .bind(followed_at_ms)
                .bind(followed_at_ms)
                .bind(user_id)
                .bind(fetch)
                .fetch_all(db.reader())
                .await?
        }
        Position::Offset(offset) => {
            sqlx::query(&format!("{base} {order} LIMIT ? OFFSET ?"))
                .bind(tenant.as_str())
                .bind(user.get())
                .bind(fetch)
                .bind(i64::try_from(offset).unwrap_or(i64::MAX))
                .fetch_all(db.reader())
                .await?
        }
    };
    let mut items = rows
        .iter()
        .map(|row| Ok(ListedUser { user_id: row.try_get(0)?, followed_at_ms: row.try_get(1)? }))
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    let has_more = items.len() > page.limit as usize;
    items.truncate(page.limit as usize);
    Ok(Page { items, has_more })
}

/// How `me` relates to each of `others`, in the order given.
pub async fn relationships(
    db: &Database,
    tenant: &TenantId,
    me: UserId,
    others: &[UserId],
) -> Result<Vec<Relationship>, sqlx::Error> {
    let (following, followed_by) = active_partners(db, tenant, me, others).await?;
    Ok(others
        .iter()
        .map(|other| Relationship {
            user_id: other.get(),
            following: following.contains(&other.get()),
            followed_by: followed_by.contains(&other.get()),
        })
        .collect())
}

/// Following and follower counts of each of `users`, in the order given.
pub async fn counts(db: &Database, tenant: &TenantId, users: &[UserId]) -> Result<Vec<Counts>, sqlx::Error> {
    let followings = count_by(db.reader(), tenant, Direction::Following, users).await?;
    let followers = count_by(db.reader(), tenant, Direction::Followers, users).await?;
    Ok(users
        .iter()
        .map(|user| Counts {
            user_id: user.get(),
            followings: followings.get(&user.get()).copied().unwrap_or(0),
            followers: followers.get(&user.get()).copied().unwrap_or(0),
        })
        .collect())
}

/// Those of `candidates` that `user` follows, and those that follow `user`, right now: one round trip of
/// one primary-key lookup per candidate and direction, whatever the follower counts on either side. Left to
/// itself the planner may walk a secondary index over all of `user`'s followers (a celebrity's million) or
/// all of a candidate's followings; so MariaDB/MySQL is told to use the primary key, and SQLite's
/// `+rel_status` keeps that column out of index choice, leaving the primary key as the one that matches.
async fn active_partners(
    db: &Database,
    tenant: &TenantId,
    user: UserId,
    candidates: &[UserId],
) -> Result<(HashSet<i64>, HashSet<i64>), sqlx::Error> {
    let (mut following, mut followed_by) = (HashSet::new(), HashSet::new());
    if candidates.is_empty() {
        return Ok((following, followed_by));
    }
    let (table, status) = (db.kind().by_primary_key("following"), db.kind().not_an_index("rel_status"));
    let select = |direction: Direction| {
        let (owner, listed) = direction.columns();
        let followers = i64::from(direction == Direction::Followers);
        format!(
            "SELECT {followers}, {listed} FROM {table} WHERE tenant_id = ? AND {owner} = ? AND {status} = 1 \
             AND {listed} IN ({})",
            placeholders(candidates.len())
        )
    };
    let sql = format!("{} UNION ALL {}", select(Direction::Following), select(Direction::Followers));
    let mut query = sqlx::query(&sql);
    for _ in 0..2 {
        query = query.bind(tenant.as_str()).bind(user.get());
        for candidate in candidates {
            query = query.bind(candidate.get());
        }
    }
    for row in query.fetch_all(db.reader()).await? {
        let (followers, partner): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
        if followers == 1 { &mut followed_by } else { &mut following }.insert(partner);
    }
    Ok((following, followed_by))
}

async fn count_by(
    pool: &AnyPool,
    tenant: &TenantId,
    direction: Direction,
    users: &[UserId],
) -> Result<HashMap<i64, i64>, sqlx::Error> {
    if users.is_empty() {
        return Ok(HashMap::new());
    }
    let (owner, _) = direction.columns();
    let sql = format!(
        "SELECT {owner}, COUNT(*) FROM following WHERE tenant_id = ? AND rel_status = 1 AND {owner} IN ({}) \
         GROUP BY {owner}",
        placeholders(users.len())
    );
    let mut query = sqlx::query(&sql).bind(tenant.as_str());
    for user in users {
        query = query.bind(user.get());
    }
    query.fetch_all(pool).await?.iter().map(|row| Ok((row.try_get(0)?, row.try_get(1)?))).collect()
}

/// `?, ?, …` for an `IN (…)` list of `n` bound values: every SQL value is a parameter.
fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}
