//! Backfill: the truth replayed as snapshot events — every edge of a tenant, page by page, as an event at
//! its current version — which `build.rs` applies to a projector's space under the space's build lock.
//! Per-pair floors (see `cache`) make the snapshot and the bus meet without a gap or a double count, whatever
//! the bus still retains: a bus event the snapshot covers is skipped, a later one applies (writes go on
//! meanwhile: they are later versions, or new pairs, and wait in the bus). Pages need no common snapshot:
//! each pair's row is consistent on its own. Rows at version 0 (a block's flag on a pair never followed)
//! are no state of the pair and are left out.

use sqlx::Row;

use crate::db::Database;
use crate::graph::TenantId;
use crate::outbox::{EventId, EventType, Relation};
use crate::plugins::{RelationEvent, RelationKind};

/// Pairs per page: one plugin call and one cache script each, so a tenant's build holds the shared Redis and
/// its plugin instance no longer than a couple of live batches do.
const PAGE: i64 = 500;

/// A tenant's edges in the truth, read page by page in `(from, to)` order: the follow edges (follows and
/// requests), then — for a relation projector, which receives every kind — blocks, then mutes.
pub struct Snapshot<'a> {
    db: &'a Database,
    tenant: &'a TenantId,
    /// The tables still to read, the one being read first.
    edges: Vec<Relation>,
    /// Whether pending requests are snapshot as such (for a relation projector), or as no follow.
    every_kind: bool,
    after: (i64, i64),
    /// Edges when the snapshot started (writes go on meanwhile).
    pub total: u64,
}

impl<'a> Snapshot<'a> {
    /// A snapshot of the follow edges, and of every edge when `every_kind`.
    pub async fn start(db: &'a Database, tenant: &'a TenantId, every_kind: bool) -> Result<Self, sqlx::Error> {
        let edges =
            if every_kind { vec![Relation::Follow, Relation::Block, Relation::Mute] } else { vec![Relation::Follow] };
        let mut total = 0;
        for relation in &edges {
            let sql = format!("SELECT COUNT(*) FROM {} WHERE tenant_id = ? AND version > 0", table(*relation));
            let count: i64 = sqlx::query_scalar(&sql).bind(tenant.as_str()).fetch_one(db.reader()).await?;
            total += count.max(0) as u64;
        }
        Ok(Self { db, tenant, edges, every_kind, after: (i64::MIN, i64::MIN), total })
    }

    /// The next page of snapshot events; empty once every edge was read.
    pub async fn next_page(&mut self) -> Result<Vec<RelationEvent>, sqlx::Error> {
        while let Some(&relation) = self.edges.first() {
            let (after_from, after_to) = self.after;
            let sql = format!(
                "{} WHERE f.tenant_id = ? AND f.version > 0 AND (f.from_user_id > ? OR (f.from_user_id = ? \
                 AND f.to_user_id > ?)) \
                 ORDER BY f.from_user_id, f.to_user_id LIMIT ?",
                snapshot_rows(relation)
            );
            let rows = sqlx::query(&sql)
                .bind(self.tenant.as_str())
                .bind(after_from)
                .bind(after_from)
                .bind(after_to)
                .bind(PAGE)
                .fetch_all(self.db.reader())
                .await?;
            let Some(last) = rows.last() else {
                self.edges.remove(0);
                self.after = (i64::MIN, i64::MIN);
                continue;
            };
            self.after = (last.try_get(0)?, last.try_get(1)?);
            return rows.iter().map(|row| snapshot_event(self.tenant, relation, self.every_kind, row)).collect();
        }
        Ok(Vec::new())
    }
}

/// The `last` pairs of `tenant` changed most recently, newest first, as snapshot events (pending requests as
/// such when `every_kind`): the real inputs `strand plugin test --replay` runs a candidate on.
pub async fn recent_changes(
    db: &Database,
    tenant: &TenantId,
    last: u32,
    every_kind: bool,
) -> Result<Vec<RelationEvent>, sqlx::Error> {
    let sql = format!(
        "{} WHERE f.tenant_id = ? AND f.version > 0 ORDER BY f.updated_at DESC LIMIT ?",
        snapshot_rows(Relation::Follow)
    );
    let rows = sqlx::query(&sql).bind(tenant.as_str()).bind(i64::from(last)).fetch_all(db.reader()).await?;
    rows.iter().map(|row| snapshot_event(tenant, Relation::Follow, every_kind, row)).collect()
}

fn table(relation: Relation) -> &'static str {
    match relation {
        Relation::Follow => "following",
        Relation::Block => "blocks",
        Relation::Mute => "mutes",
    }
}

/// An edge's row (as `f`): from, to, status, version, created, updated, whether the reverse follow edge is
/// a follow (a snapshot event says whether it was followed back too), and a mute's end and flag.
fn snapshot_rows(relation: Relation) -> &'static str {
    match relation {
        Relation::Follow => {
            "SELECT f.from_user_id, f.to_user_id, f.rel_status, f.version, f.created_at, f.updated_at, \
             COALESCE(r.rel_status, 0) FROM following f LEFT JOIN following r ON r.tenant_id = f.tenant_id \
             AND r.from_user_id = f.to_user_id AND r.to_user_id = f.from_user_id"
        }
        Relation::Block => {
            "SELECT f.from_user_id, f.to_user_id, f.rel_status, f.version, f.created_at, f.updated_at, 0 FROM blocks f"
        }
        Relation::Mute => {
            "SELECT f.from_user_id, f.to_user_id, f.rel_status, f.version, f.created_at, f.updated_at, 0, \
             f.expires_at, f.notifications FROM mutes f"
        }
    }
}

/// The event that brings a projection to the state of the edge in `row` (of [`snapshot_rows`]): the kind
/// that leaves the edge so (an ended edge: the kind that ends it, which only raises floors). A pending
/// request is a `follow-requested` for a relation projector (`every_kind`); for the others, which are
/// handed follows only, no follow: an `unfollow`.
fn snapshot_event(
    tenant: &TenantId,
    relation: Relation,
    every_kind: bool,
    row: &sqlx::any::AnyRow,
) -> Result<RelationEvent, sqlx::Error> {
    let (follower, followee, version): (i64, i64, i64) = (row.try_get(0)?, row.try_get(1)?, row.try_get(3)?);
    let status: i64 = row.try_get(2)?;
    let requested = every_kind && relation == Relation::Follow && status == 2;
    let holds = status == 1 || requested;
    let event_type = match (relation, status) {
        (Relation::Follow, 1) => EventType::Follow,
        (Relation::Follow, _) if requested => EventType::FollowRequested,
        (Relation::Follow, _) => EventType::Unfollow,
        (Relation::Block, 1) => EventType::Block,
        (Relation::Block, _) => EventType::Unblock,
        (Relation::Mute, 1) => EventType::Mute,
        (Relation::Mute, _) => EventType::Unmute,
    };
    let mute = relation == Relation::Mute;
    Ok(RelationEvent {
        event_id: EventId { tenant: tenant.as_str(), relation, from: follower, to: followee, version }.to_string(),
        tenant: tenant.to_string(),
        kind: RelationKind::from(event_type),
        follower,
        followee,
        version,
        occurred_at_ms: row.try_get(if holds { 4 } else { 5 })?,
        followed_back: row.try_get::<i64, _>(6)? == 1,
        actor: None,
        expires_at_ms: if mute { row.try_get(7)? } else { None },
        notifications: mute && row.try_get::<i64, _>(8)? == 1,
    })
}
