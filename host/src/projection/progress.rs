//! Backfill progress in the database (`projection_backfill`), so the admin API of any node shows what the
//! worker process running a backfill has done.

use serde::{Deserialize, Serialize};
use sqlx::Row;

use crate::db::Database;
use crate::graph::TenantId;
use crate::util::time::now_ms;

/// One projector's backfill for one tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BackfillProgress {
    pub projection: String,
    pub tenant: String,
    /// The plugin version being built (0: the bundled one).
    pub plugin_version: i64,
    /// Pairs replayed so far, of `total` when the backfill started.
    pub done: i64,
    pub total: i64,
    pub state: BackfillState,
}

crate::str_enum! {
    /// Where a backfill stands, as `projection_backfill.state` and the admin API name it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum BackfillState("backfill state") {
        /// Replaying the truth into the space.
        Backfilling = "backfilling",
        /// Built: the projector follows the bus.
        Complete = "complete",
    }
}

/// Records where `projection`'s backfill of `tenant` with `plugin_version` stands.
pub async fn record(
    db: &Database,
    projection: &str,
    tenant: &TenantId,
    plugin_version: i64,
    (done, total): (u64, u64),
    state: BackfillState,
) -> Result<(), sqlx::Error> {
    let upsert = db.kind().upsert(
        "projection_backfill",
        &["projection", "tenant_id", "plugin_version", "done", "total", "state", "updated_at"],
        &["projection", "tenant_id"],
    );
    sqlx::query(&upsert)
        .bind(projection)
        .bind(tenant.as_str())
        .bind(plugin_version)
        .bind(done as i64)
        .bind(total as i64)
        .bind(state.as_str())
        .bind(now_ms())
        .execute(db.writer())
        .await?;
    Ok(())
}

/// Every recorded backfill, by projection and tenant.
pub async fn all(db: &Database) -> Result<Vec<BackfillProgress>, sqlx::Error> {
    sqlx::query(
        "SELECT projection, tenant_id, plugin_version, done, total, state FROM projection_backfill \
         ORDER BY projection, tenant_id",
    )
    .fetch_all(db.reader())
    .await?
    .iter()
    .map(|row| {
        Ok(BackfillProgress {
            projection: row.try_get(0)?,
            tenant: row.try_get(1)?,
            plugin_version: row.try_get(2)?,
            done: row.try_get(3)?,
            total: row.try_get(4)?,
            state: row.try_get::<String, _>(5)?.parse()?,
        })
    })
    .collect()
}
