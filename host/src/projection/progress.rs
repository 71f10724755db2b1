//! Backfill progress in the database (`projection_backfill`), so the admin API of any node shows what the
//! worker process running a backfill has done.

use serde::Serialize;
use sqlx::Row;

use crate::graph::{now_ms, Database, DatabaseKind, TenantId};

/// One projector's backfill for one tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct BackfillProgress {
    pub projection: String,
    pub tenant: String,
    /// Pairs replayed so far, of `total` when the backfill started.
    pub done: i64,
    pub total: i64,
    /// `backfilling`, or `complete` once the projector follows the bus.
    pub state: String,
}

/// Records where `projection`'s backfill of `tenant` stands.
pub async fn record(
    db: &Database,
    projection: &str,
    tenant: &TenantId,
    (done, total): (u64, u64),
    state: &str,
) -> Result<(), sqlx::Error> {
    let upsert = match db.kind() {
        DatabaseKind::MySql => {
            "INSERT INTO projection_backfill (projection, tenant_id, done, total, state, updated_at) \
             VALUES (?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE done = VALUES(done), total = VALUES(total), \
             state = VALUES(state), updated_at = VALUES(updated_at)"
        }
        DatabaseKind::Sqlite => {
            "INSERT INTO projection_backfill (projection, tenant_id, done, total, state, updated_at) \
             VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (projection, tenant_id) DO UPDATE SET done = excluded.done, \
             total = excluded.total, state = excluded.state, updated_at = excluded.updated_at"
        }
    };
    sqlx::query(upsert)
        .bind(projection)
        .bind(tenant.as_str())
        .bind(done as i64)
        .bind(total as i64)
        .bind(state)
        .bind(now_ms())
        .execute(db.writer())
        .await?;
    Ok(())
}

/// Every recorded backfill, by projection and tenant.
pub async fn all(db: &Database) -> Result<Vec<BackfillProgress>, sqlx::Error> {
    sqlx::query(
        "SELECT projection, tenant_id, done, total, state FROM projection_backfill ORDER BY projection, tenant_id",
    )
    .fetch_all(db.reader())
    .await?
    .iter()
    .map(|row| {
        Ok(BackfillProgress {
            projection: row.try_get(0)?,
            tenant: row.try_get(1)?,
            done: row.try_get(2)?,
            total: row.try_get(3)?,
            state: row.try_get(4)?,
        })
    })
    .collect()
}
