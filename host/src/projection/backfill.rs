//! Backfill: the truth replayed as snapshot events — every pair of a tenant, page by page, as an event at
//! its current version — which `build.rs` applies to a projector's space under the space's build lock.
//! Per-pair floors (see `cache`) make the snapshot and the bus meet without a gap or a double count, whatever
//! the bus still retains: a bus event the snapshot covers is skipped, a later one applies (writes go on
//! meanwhile: they are later versions, or new pairs, and wait in the bus). Pages need no common snapshot:
//! each pair's row is consistent on its own.

use sqlx::Row;

use crate::db::Database;
use crate::graph::TenantId;
use crate::outbox::EventId;
use crate::plugins::{Action, RelationEvent};

/// Pairs per page.
const PAGE: i64 = 500;

/// A tenant's pairs in the truth, read page by page in `(follower, followee)` order.
pub struct Snapshot<'a> {
    db: &'a Database,
    tenant: &'a TenantId,
    after: (i64, i64),
    /// Pairs when the snapshot started (writes go on meanwhile).
    pub total: u64,
}

impl<'a> Snapshot<'a> {
    pub async fn start(db: &'a Database, tenant: &'a TenantId) -> Result<Self, sqlx::Error> {
        let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM following WHERE tenant_id = ?")
            .bind(tenant.as_str())
            .fetch_one(db.reader())
            .await?;
        Ok(Self { db, tenant, after: (i64::MIN, i64::MIN), total: total.max(0) as u64 })
    }

    /// The next page of snapshot events; empty once every pair was read.
    pub async fn next_page(&mut self) -> Result<Vec<RelationEvent>, sqlx::Error> {
        let (after_from, after_to) = self.after;
        let sql = format!(
            "{SNAPSHOT_ROWS} WHERE f.tenant_id = ? AND (f.from_user_id > ? OR (f.from_user_id = ? AND f.to_user_id > ?)) \
             ORDER BY f.from_user_id, f.to_user_id LIMIT ?"
        );
        let rows = sqlx::query(&sql)
            .bind(self.tenant.as_str())
            .bind(after_from)
            .bind(after_from)
            .bind(after_to)
            .bind(PAGE)
            .fetch_all(self.db.reader())
            .await?;
        if let Some(last) = rows.last() {
            self.after = (last.try_get(0)?, last.try_get(1)?);
        }
        rows.iter().map(|row| snapshot_event(self.tenant, row)).collect()
    }
}

/// The `last` pairs of `tenant` changed most recently, newest first, as snapshot events: the real inputs
/// `strand plugin test --replay` runs a candidate on.
pub async fn recent_changes(db: &Database, tenant: &TenantId, last: u32) -> Result<Vec<RelationEvent>, sqlx::Error> {
    let sql = format!("{SNAPSHOT_ROWS} WHERE f.tenant_id = ? ORDER BY f.updated_at DESC LIMIT ?");
    let rows = sqlx::query(&sql).bind(tenant.as_str()).bind(i64::from(last)).fetch_all(db.reader()).await?;
    rows.iter().map(|row| snapshot_event(tenant, row)).collect()
}

/// A pair's row with its reverse edge's state: a snapshot event says whether it was followed back too.
const SNAPSHOT_ROWS: &str = "SELECT f.from_user_id, f.to_user_id, f.rel_status, f.version, f.created_at, \
     f.updated_at, COALESCE(r.rel_status, 0) FROM following f LEFT JOIN following r ON r.tenant_id = f.tenant_id \
     AND r.from_user_id = f.to_user_id AND r.to_user_id = f.from_user_id";

/// The event that brings a projection to the pair's state in `row` (of [`SNAPSHOT_ROWS`]).
fn snapshot_event(tenant: &TenantId, row: &sqlx::any::AnyRow) -> Result<RelationEvent, sqlx::Error> {
    let (follower, followee, version): (i64, i64, i64) = (row.try_get(0)?, row.try_get(1)?, row.try_get(3)?);
    let active = row.try_get::<i64, _>(2)? == 1;
    Ok(RelationEvent {
        event_id: EventId::follow(tenant.as_str(), follower, followee, version).to_string(),
        tenant: tenant.to_string(),
        action: if active { Action::Follow } else { Action::Unfollow },
        follower,
        followee,
        version,
        occurred_at_ms: if active { row.try_get(4)? } else { row.try_get(5)? },
        followed_back: row.try_get::<i64, _>(6)? == 1,
    })
}
