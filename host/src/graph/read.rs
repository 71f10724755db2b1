//! Reads served straight from the truth: relationship status, lists (follows, follow requests, blocks,
//! mutes, known followers) and counts.
//!
//! Lists are newest first, ordered by `(since DESC, user_id DESC)`; the user id breaks ties so a cursor over
//! that pair is exact even when many share a millisecond. Every list and count query is answered from the
//! covering indexes of the `following`, `blocks` and `mutes` tables (no sorts); known followers walk the
//! caller's follows on theirs and probe each.

use std::collections::HashMap;

use sqlx::Row;

use super::write::edge::{RelStatus, ACTIVE, NONE};
use super::{TenantId, UserId};
use crate::db::{Database, DatabaseKind};
use crate::util::time::now_ms;

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

/// A list of users around a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// Follows, either way.
    Follows(Direction),
    /// Pending follow requests: `Followers` the ones the user received, `Following` the ones they sent.
    Requests(Direction),
    /// Whom the user blocks.
    Blocks,
    /// Whom the user mutes (mutes past their end are left out).
    Mutes,
}

impl Listing {
    /// (table, column of the list's owner, column of the listed users, status, extra condition, the mute's end).
    fn source(self) -> (&'static str, &'static str, &'static str, RelStatus, &'static str, &'static str) {
        match self {
            Listing::Follows(direction) => {
                let (owner, listed) = direction.columns();
                ("following", owner, listed, RelStatus::Active, "", "NULL")
            }
            Listing::Requests(direction) => {
                let (owner, listed) = direction.columns();
                ("following", owner, listed, RelStatus::Requested, "", "NULL")
            }
            Listing::Blocks => ("blocks", "from_user_id", "to_user_id", RelStatus::Active, "", "NULL"),
            Listing::Mutes => (
                "mutes",
                "from_user_id",
                "to_user_id",
                RelStatus::Active,
                " AND (expires_at IS NULL OR expires_at > ?)",
                "expires_at",
            ),
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

/// A user in a list, with the time the listed edge began (the latest follow, the request, the block or mute).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedUser {
    pub user_id: i64,
    pub followed_at_ms: i64,
    /// A mute's end, in a list of mutes.
    pub expires_at_ms: Option<i64>,
}

/// A page of a list. `has_more` is exact: one extra row is read to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub items: Vec<ListedUser>,
    pub has_more: bool,
    /// Where the next page starts when it is not after the last item: a page that stopped at its bound of
    /// work before it was full (known followers).
    pub resume_after: Option<ListedUser>,
}

/// How the caller and another user relate. The caller's mutes are the caller's alone: whether the other
/// user mutes the caller is never read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Relationship {
    pub user_id: i64,
    pub following: bool,
    pub followed_by: bool,
    /// The caller's follow request to the user is pending.
    pub requested: bool,
    /// The user's follow request to the caller is pending.
    pub requested_by: bool,
    pub blocking: bool,
    pub blocked_by: bool,
    pub muting: bool,
    pub muting_expires_at_ms: Option<i64>,
    pub muting_notifications: bool,
}

/// How many users a user follows and is followed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub user_id: i64,
    pub followings: i64,
    pub followers: i64,
}

/// Reads one page of `user`'s `listing`.
pub async fn list(
    db: &Database,
    tenant: &TenantId,
    user: UserId,
    listing: Listing,
    page: PageRequest,
) -> Result<Page, sqlx::Error> {
    let (table, owner, listed, status, extra, expires) = listing.source();
    let base = format!(
        "SELECT {listed}, created_at, {expires} FROM {table} WHERE tenant_id = ? AND {owner} = ? AND rel_status = {status}{extra}"
    );
    let paged = PagedQuery::new(base, "created_at", listed, page);
    let mut query = sqlx::query(&paged.sql).bind(tenant.as_str()).bind(user.get());
    if !extra.is_empty() {
        query = query.bind(now_ms());
    }
    paged.read(db, query).await
}

/// The most of `me`'s follows one page of known followers walks (cursor pages; an offset page walks what
/// it skips).
pub const KNOWN_FOLLOWERS_WALK: i64 = 250;

/// A page of the users `me` follows who follow `user`: `me`'s follows walked newest first on their index,
/// each probed by the pair's primary key, until the page is full or [`KNOWN_FOLLOWERS_WALK`] follows were
/// walked — then the page may hold fewer than its limit (none, even), with `has_more` and a cursor from
/// where the walk stopped, as Bluesky's pages may. A page's work is bounded whatever the data's shape,
/// never by `user`'s followers (a celebrity's million), and nothing is sorted.
pub async fn known_followers(
    db: &Database,
    tenant: &TenantId,
    me: UserId,
    user: UserId,
    page: PageRequest,
) -> Result<Page, sqlx::Error> {
    let bound = match page.position {
        Position::Offset(_) => None,
        Position::Start | Position::After { .. } => walk_bound(db, tenant, me, page.position).await?,
    };
    let mut base = format!("SELECT f.to_user_id, f.created_at, NULL {}", known_followers_of(db.kind()));
    if bound.is_some() {
        base.push_str(" AND (f.created_at > ? OR (f.created_at = ? AND f.to_user_id >= ?))");
    }
    let paged = PagedQuery::new(base, "f.created_at", "f.to_user_id", page);
    let mut query = sqlx::query(&paged.sql).bind(user.get()).bind(tenant.as_str()).bind(me.get());
    if let Some(bound) = bound {
        query = query.bind(bound.followed_at_ms).bind(bound.followed_at_ms).bind(bound.user_id);
    }
    let mut found = paged.read(db, query).await?;
    if !found.has_more && bound.is_some() {
        // The walk stopped at its bound: the next page walks on from there.
        found.has_more = true;
        found.resume_after = bound;
    }
    Ok(found)
}

/// The last follow of `me`'s that a page starting at `position` walks, when `me` has more than
/// [`KNOWN_FOLLOWERS_WALK`] from there: read from the follows' index alone, no probe.
async fn walk_bound(
    db: &Database,
    tenant: &TenantId,
    me: UserId,
    position: Position,
) -> Result<Option<ListedUser>, sqlx::Error> {
    let after = match position {
        Position::After { .. } => " AND (created_at < ? OR (created_at = ? AND to_user_id < ?))",
        _ => "",
    };
    let sql = format!(
        "SELECT to_user_id, created_at FROM following WHERE tenant_id = ? AND from_user_id = ? AND rel_status = \
         {ACTIVE}{after} ORDER BY created_at DESC, to_user_id DESC LIMIT 1 OFFSET {}",
        KNOWN_FOLLOWERS_WALK - 1
    );
    let mut query = sqlx::query(&sql).bind(tenant.as_str()).bind(me.get());
    if let Position::After { followed_at_ms, user_id } = position {
        query = query.bind(followed_at_ms).bind(followed_at_ms).bind(user_id);
    }
    let row = query.fetch_optional(db.reader()).await?;
    row.map(|row| Ok(ListedUser { user_id: row.try_get(0)?, followed_at_ms: row.try_get(1)?, expires_at_ms: None }))
        .transpose()
}

/// How many users `me` follows who follow `user`: a probe per follow of `me`'s (apart from the pages, so a
/// client that shows no total pays for none).
pub async fn known_followers_count(
    db: &Database,
    tenant: &TenantId,
    me: UserId,
    user: UserId,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(&format!("SELECT COUNT(*) {}", known_followers_of(db.kind())))
        .bind(user.get())
        .bind(tenant.as_str())
        .bind(me.get())
        .fetch_one(db.reader())
        .await
}

/// The join of `me`'s follows (`f`, read first) to the follows of `user` among them (`g`, by primary key);
/// binds `user`, the tenant, `me`.
fn known_followers_of(kind: DatabaseKind) -> String {
    let joined = kind.join_in_order("following f", "following g");
    format!(
        "FROM {joined} ON g.tenant_id = f.tenant_id AND g.from_user_id = f.to_user_id AND g.to_user_id = ? \
         AND g.rel_status = {ACTIVE} WHERE f.tenant_id = ? AND f.from_user_id = ? AND f.rel_status = {ACTIVE}"
    )
}

/// A page of a query selecting (listed user, time, a mute's end), newest first by `(time, listed)`: its SQL
/// ends in the page's conditions, whose values [`PagedQuery::read`] binds after the query's own.
struct PagedQuery {
    sql: String,
    page: PageRequest,
}

impl PagedQuery {
    fn new(base: String, time: &str, listed: &str, page: PageRequest) -> Self {
        let order = format!("ORDER BY {time} DESC, {listed} DESC");
        let sql = match page.position {
            Position::Start => format!("{base} {order} LIMIT ?"),
            Position::After { .. } => {
                format!("{base} AND ({time} < ? OR ({time} = ? AND {listed} < ?)) {order} LIMIT ?")
            }
            Position::Offset(_) => format!("{base} {order} LIMIT ? OFFSET ?"),
        };
        Self { sql, page }
    }

    async fn read<'q>(
        &self,
        db: &Database,
        mut query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    ) -> Result<Page, sqlx::Error> {
        let limit = self.page.limit;
        if let Position::After { followed_at_ms, user_id } = self.page.position {
            query = query.bind(followed_at_ms).bind(followed_at_ms).bind(user_id);
        }
        query = query.bind(i64::from(limit) + 1);
        if let Position::Offset(offset) = self.page.position {
            query = query.bind(i64::try_from(offset).unwrap_or(i64::MAX));
        }
        let rows = query.fetch_all(db.reader()).await?;
        let mut items = rows
            .iter()
            .map(|row| {
                Ok(ListedUser {
                    user_id: row.try_get(0)?,
                    followed_at_ms: row.try_get(1)?,
                    expires_at_ms: row.try_get(2)?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        let has_more = items.len() > limit as usize;
        items.truncate(limit as usize);
        Ok(Page { items, has_more, resume_after: None })
    }
}

/// How `me` relates to each of `others`, in the order given.
pub async fn relationships(
    db: &Database,
    tenant: &TenantId,
    me: UserId,
    others: &[UserId],
) -> Result<Vec<Relationship>, sqlx::Error> {
    let mut found: HashMap<i64, Relationship> = others
        .iter()
        .map(|other| (other.get(), Relationship { user_id: other.get(), ..Relationship::default() }))
        .collect();
    for edge in edges_between(db, tenant, me, others).await? {
        let Some(r) = found.get_mut(&edge.partner) else { continue };
        match (edge.source, edge.status) {
            (EdgeSource::Following, RelStatus::Active) => r.following = true,
            (EdgeSource::Following, RelStatus::Requested) => r.requested = true,
            (EdgeSource::FollowedBy, RelStatus::Active) => r.followed_by = true,
            (EdgeSource::FollowedBy, RelStatus::Requested) => r.requested_by = true,
            (EdgeSource::Blocking, _) => r.blocking = true,
            (EdgeSource::BlockedBy, _) => r.blocked_by = true,
            (EdgeSource::Muting, _) => {
                r.muting = true;
                r.muting_expires_at_ms = edge.expires_at_ms;
                r.muting_notifications = edge.notifications;
            }
            _ => {}
        }
    }
    Ok(others.iter().map(|other| found[&other.get()]).collect())
}

/// Following and follower counts of each of `users`, in the order given: one primary-key lookup each in
/// `follow_counts` (kept by every write), whatever the users' follower counts.
pub async fn counts(db: &Database, tenant: &TenantId, users: &[UserId]) -> Result<Vec<Counts>, sqlx::Error> {
    if users.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT user_id, followings, followers FROM follow_counts WHERE tenant_id = ? AND user_id IN ({})",
        placeholders(users.len())
    );
    let query = users.iter().fold(sqlx::query(&sql).bind(tenant.as_str()), |query, user| query.bind(user.get()));
    let mut counted = HashMap::new();
    for row in query.fetch_all(db.reader()).await? {
        counted.insert(row.try_get::<i64, _>(0)?, (row.try_get::<i64, _>(1)?, row.try_get::<i64, _>(2)?));
    }
    Ok(users
        .iter()
        .map(|user| {
            let (followings, followers) = counted.get(&user.get()).copied().unwrap_or((0, 0));
            Counts { user_id: user.get(), followings, followers }
        })
        .collect())
}

/// Where an edge between `me` and a candidate was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EdgeSource {
    Following,
    FollowedBy,
    Blocking,
    BlockedBy,
    Muting,
}

impl EdgeSource {
    const ALL: [EdgeSource; 5] = [
        EdgeSource::Following,
        EdgeSource::FollowedBy,
        EdgeSource::Blocking,
        EdgeSource::BlockedBy,
        EdgeSource::Muting,
    ];

    /// (table, column holding `me`, column holding the candidate, condition on the row beyond its pair).
    fn query(self) -> (&'static str, &'static str, &'static str, String) {
        let (held, follow_or_request) = (format!("rel_status = {ACTIVE}"), format!("rel_status <> {NONE}"));
        match self {
            EdgeSource::Following => ("following", "from_user_id", "to_user_id", follow_or_request),
            EdgeSource::FollowedBy => ("following", "to_user_id", "from_user_id", follow_or_request),
            EdgeSource::Blocking => ("blocks", "from_user_id", "to_user_id", held),
            EdgeSource::BlockedBy => ("blocks", "to_user_id", "from_user_id", held),
            EdgeSource::Muting => ("mutes", "from_user_id", "to_user_id", held),
        }
    }
}

/// An edge between `me` and one of the candidates.
struct FoundEdge {
    source: EdgeSource,
    partner: i64,
    status: RelStatus,
    expires_at_ms: Option<i64>,
    notifications: bool,
}

/// Every edge that holds between `me` and each of `candidates` — follows and requests both ways, blocks both
/// ways, `me`'s mutes (a mute past its end is none) — right now: one round trip of one primary-key lookup per
/// candidate and edge, whatever the follower counts on either side. Left to itself the planner may walk a
/// secondary index over all of `me`'s followers (a celebrity's million) or all of a candidate's followings;
/// so MariaDB/MySQL is told to use the primary key, and SQLite's `+rel_status` keeps that column out of index
/// choice, leaving the primary key as the one that matches.
async fn edges_between(
    db: &Database,
    tenant: &TenantId,
    me: UserId,
    candidates: &[UserId],
) -> Result<Vec<FoundEdge>, sqlx::Error> {
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let kind = db.kind();
    let selects: Vec<String> = EdgeSource::ALL
        .iter()
        .enumerate()
        .map(|(i, source)| {
            let (table, mine, theirs, condition) = source.query();
            let condition = condition.replacen("rel_status", &kind.not_an_index("rel_status"), 1);
            let table = kind.by_primary_key(table);
            let muting = *source == EdgeSource::Muting;
            let mute = if muting { "expires_at, notifications" } else { "NULL, 0" };
            let unexpired = if muting { " AND (expires_at IS NULL OR expires_at > ?)" } else { "" };
            format!(
                "SELECT {i}, {theirs}, rel_status, {mute} FROM {table} WHERE tenant_id = ? AND {mine} = ? AND {condition}{unexpired} \
                 AND {theirs} IN ({})",
                placeholders(candidates.len())
            )
        })
        .collect();
    let sql = selects.join(" UNION ALL ");
    let mut query = sqlx::query(&sql);
    for source in EdgeSource::ALL {
        query = query.bind(tenant.as_str()).bind(me.get());
        if source == EdgeSource::Muting {
            query = query.bind(now_ms());
        }
        for candidate in candidates {
            query = query.bind(candidate.get());
        }
    }
    query
        .fetch_all(db.reader())
        .await?
        .iter()
        .map(|row| {
            let source = usize::try_from(row.try_get::<i64, _>(0)?).ok().and_then(|i| EdgeSource::ALL.get(i).copied());
            Ok(FoundEdge {
                source: source.ok_or_else(|| sqlx::Error::Protocol("an edge of no known source".into()))?,
                partner: row.try_get(1)?,
                status: RelStatus::from_stored(row.try_get(2)?)?,
                expires_at_ms: row.try_get(3)?,
                notifications: row.try_get::<i64, _>(4)? == 1,
            })
        })
        .collect()
}

/// `?, ?, …` for an `IN (…)` list of `n` bound values: every SQL value is a parameter.
fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}
