//! Scans of the truth as a whole — a tenant's every edge, every tenant, every pair — for what is derived
//! from it or taken out of it: exports, projection builds and `strand plugin test --replay`, rebuilds and
//! reconciliation. Paged in primary-key order where a tenant's graph may be large; each row decoded here,
//! its `rel_status` as [`RelStatus`].

use sqlx::any::AnyRow;
use sqlx::Row;

use super::write::edge::{table, RelStatus, ACTIVE, REQUESTED};
use super::TenantId;
use crate::db::Database;
use crate::outbox::Relation;
use crate::util::time::now_ms;

/// One edge of a tenant that holds, as an export writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldEdge {
    pub from: i64,
    pub to: i64,
    pub at_ms: i64,
    /// A mute's end, epoch ms (none: for good).
    pub expires_at_ms: Option<i64>,
    /// A pending follow request rather than a follow.
    pub requested: bool,
}

/// Up to `limit` of `tenant`'s edges of `relation` that hold (follows and pending requests, blocks,
/// unexpired mutes) after the pair `after`, in primary-key order: one page of an export, whatever the
/// graph's size.
pub async fn held_edges_after(
    db: &Database,
    tenant: &TenantId,
    relation: Relation,
    after: (i64, i64),
    limit: u32,
) -> Result<Vec<HeldEdge>, sqlx::Error> {
    let (held, expires) = match relation {
        Relation::Mute => {
            (format!("f.rel_status = {ACTIVE} AND (f.expires_at IS NULL OR f.expires_at > ?)"), "f.expires_at")
        }
        Relation::Follow => (format!("f.rel_status IN ({ACTIVE}, {REQUESTED})"), "NULL"),
        Relation::Block => (format!("f.rel_status = {ACTIVE}"), "NULL"),
    };
    let sql = format!(
        "SELECT f.from_user_id, f.to_user_id, f.rel_status, f.created_at, {expires} FROM {} f WHERE f.tenant_id = ? \
         AND {held} AND {PAGE_AFTER}",
        table(relation)
    );
    let mut query = sqlx::query(&sql).bind(tenant.as_str());
    if relation == Relation::Mute {
        query = query.bind(now_ms());
    }
    let rows = bind_page_after(query, after, i64::from(limit)).fetch_all(db.reader()).await?;
    rows.iter()
        .map(|row| {
            Ok(HeldEdge {
                from: row.try_get(0)?,
                to: row.try_get(1)?,
                requested: RelStatus::from_stored(row.try_get(2)?)? == RelStatus::Requested,
                at_ms: row.try_get(3)?,
                expires_at_ms: row.try_get(4)?,
            })
        })
        .collect()
}

/// A page of an edge table `f` after a pair, in primary-key order ([`bind_page_after`] binds it).
const PAGE_AFTER: &str =
    "(f.from_user_id > ? OR (f.from_user_id = ? AND f.to_user_id > ?)) ORDER BY f.from_user_id, f.to_user_id LIMIT ?";

/// Binds [`PAGE_AFTER`]: up to `limit` pairs after `after`.
fn bind_page_after<'q>(
    query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    (from, to): (i64, i64),
    limit: i64,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    query.bind(from).bind(from).bind(to).bind(limit)
}

/// Every tenant with pairs in the truth: those a rebuild, or a build again after an import, goes through.
pub async fn tenants_with_pairs(db: &Database) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT DISTINCT tenant_id FROM following ORDER BY tenant_id").fetch_all(db.reader()).await
}

/// One stored edge with what a snapshot event of it says: its state and version, when it began and last
/// changed, whether the reverse pair is a follow (follow edges), a mute's end and flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEdge {
    pub from: i64,
    pub to: i64,
    pub status: RelStatus,
    pub version: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub followed_back: bool,
    pub expires_at_ms: Option<i64>,
    pub notifications: bool,
}

/// How many of `tenant`'s pairs of `relation` were ever changed (version 0 is a block's flag alone).
pub async fn changed_pairs(db: &Database, tenant: &TenantId, relation: Relation) -> Result<u64, sqlx::Error> {
    let sql = format!("SELECT COUNT(*) FROM {} WHERE tenant_id = ? AND version > 0", table(relation));
    let count: i64 = sqlx::query_scalar(&sql).bind(tenant.as_str()).fetch_one(db.reader()).await?;
    Ok(count.max(0) as u64)
}

/// Up to `limit` of `tenant`'s changed pairs of `relation` after the pair `after`, in primary-key order.
pub async fn stored_edges_after(
    db: &Database,
    tenant: &TenantId,
    relation: Relation,
    after: (i64, i64),
    limit: i64,
) -> Result<Vec<StoredEdge>, sqlx::Error> {
    let sql = format!("{} WHERE f.tenant_id = ? AND f.version > 0 AND {PAGE_AFTER}", stored_edges(relation));
    let query = bind_page_after(sqlx::query(&sql).bind(tenant.as_str()), after, limit);
    query.fetch_all(db.reader()).await?.iter().map(|row| stored_edge(relation, row)).collect()
}

/// `tenant`'s `last` follow edges changed most recently, newest first.
pub async fn recently_changed_follows(
    db: &Database,
    tenant: &TenantId,
    last: u32,
) -> Result<Vec<StoredEdge>, sqlx::Error> {
    let sql = format!(
        "{} WHERE f.tenant_id = ? AND f.version > 0 ORDER BY f.updated_at DESC LIMIT ?",
        stored_edges(Relation::Follow)
    );
    let rows = sqlx::query(&sql).bind(tenant.as_str()).bind(i64::from(last)).fetch_all(db.reader()).await?;
    rows.iter().map(|row| stored_edge(Relation::Follow, row)).collect()
}

/// An edge's row as `f` (see [`stored_edge`]).
fn stored_edges(relation: Relation) -> &'static str {
    match relation {
        Relation::Follow => {
            "SELECT f.from_user_id, f.to_user_id, f.rel_status, f.version, f.created_at, f.updated_at, \
             COALESCE(r.rel_status, 0), NULL, 0 FROM following f LEFT JOIN following r ON r.tenant_id = f.tenant_id \
             AND r.from_user_id = f.to_user_id AND r.to_user_id = f.from_user_id"
        }
        Relation::Block => {
            "SELECT f.from_user_id, f.to_user_id, f.rel_status, f.version, f.created_at, f.updated_at, 0, NULL, 0 \
             FROM blocks f"
        }
        Relation::Mute => {
            "SELECT f.from_user_id, f.to_user_id, f.rel_status, f.version, f.created_at, f.updated_at, 0, \
             f.expires_at, f.notifications FROM mutes f"
        }
    }
}

fn stored_edge(relation: Relation, row: &AnyRow) -> Result<StoredEdge, sqlx::Error> {
    let mute = relation == Relation::Mute;
    Ok(StoredEdge {
        from: row.try_get(0)?,
        to: row.try_get(1)?,
        status: RelStatus::from_stored(row.try_get(2)?)?,
        version: row.try_get(3)?,
        created_at_ms: row.try_get(4)?,
        updated_at_ms: row.try_get(5)?,
        followed_back: RelStatus::from_stored(row.try_get(6)?)? == ACTIVE,
        expires_at_ms: if mute { row.try_get(7)? } else { None },
        notifications: mute && row.try_get::<i64, _>(8)? == 1,
    })
}

/// The tables of follow pairs: the truth's, and the `follower` projection of it (the same pairs and
/// columns, keyed by followee), which reconciliation holds against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowPairs {
    Following,
    Follower,
}

/// Every changed pair of `table`, of every tenant: (tenant, follower, followee) → (state, version).
pub async fn every_follow_pair(
    db: &Database,
    table: FollowPairs,
) -> Result<Vec<((String, i64, i64), (RelStatus, i64))>, sqlx::Error> {
    let table = match table {
        FollowPairs::Following => "following",
        FollowPairs::Follower => "follower",
    };
    // Version 0: a row holding only a block's flag (no change of the pair ever), which nothing derives.
    let sql = format!("SELECT tenant_id, from_user_id, to_user_id, rel_status, version FROM {table} WHERE version > 0");
    let rows = sqlx::query(&sql).fetch_all(db.reader()).await?;
    rows.iter()
        .map(|row| {
            let pair = (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
            Ok((pair, (RelStatus::from_stored(row.try_get(3)?)?, row.try_get(4)?)))
        })
        .collect()
}

/// Every user's kept counts (`follow_counts`): (tenant, user) → (followings, followers).
pub async fn every_kept_count(db: &Database) -> Result<Vec<((String, i64), (i64, i64))>, sqlx::Error> {
    let rows: Vec<(String, i64, i64, i64)> =
        sqlx::query_as("SELECT tenant_id, user_id, followings, followers FROM follow_counts")
            .fetch_all(db.reader())
            .await?;
    Ok(rows
        .into_iter()
        .map(|(tenant, user, followings, followers)| ((tenant, user), (followings, followers)))
        .collect())
}
