//! The host's own projection: the `follower` table, the fan side of `following`. Each event is applied
//! only when its version is newer than the row's (last writer wins by version), so a redelivered batch, a
//! replayed partition or one pair's events out of order all leave the table equal to the truth.

use super::events::{relation_event, Unprojectable};
use crate::graph::{Database, DatabaseKind};
use crate::outbox::OutboxEvent;
use crate::plugins::{Action, RelationEvent};

/// The status a follower row takes from `event`.
fn status(event: &RelationEvent) -> i64 {
    match event.action {
        Action::Follow => 1,
        Action::Unfollow => 0,
    }
}

/// Applies `events` in one transaction. `created_at` is the time of the latest follow, as in `following`.
pub async fn apply(db: &Database, events: &[OutboxEvent]) -> Result<(), FollowerError> {
    let rows = events.iter().map(relation_event).collect::<Result<Vec<_>, _>>()?;
    let upsert = match db.kind() {
        // Assignments run left to right and see earlier ones: `version` is compared first, set last.
        DatabaseKind::MySql => {
            "INSERT INTO follower (tenant_id, to_user_id, from_user_id, rel_status, version, created_at, updated_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE \
             created_at = IF(VALUES(version) > version AND VALUES(rel_status) = 1, VALUES(created_at), created_at), \
             rel_status = IF(VALUES(version) > version, VALUES(rel_status), rel_status), \
             updated_at = IF(VALUES(version) > version, VALUES(updated_at), updated_at), \
             version = GREATEST(version, VALUES(version))"
        }
        DatabaseKind::Sqlite => {
            "INSERT INTO follower (tenant_id, to_user_id, from_user_id, rel_status, version, created_at, updated_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, to_user_id, from_user_id) DO UPDATE SET \
             created_at = CASE WHEN excluded.rel_status = 1 THEN excluded.created_at ELSE follower.created_at END, \
             rel_status = excluded.rel_status, updated_at = excluded.updated_at, version = excluded.version \
             WHERE excluded.version > follower.version"
        }
    };
    let mut tx = db.writer().begin().await?;
    for row in rows {
        sqlx::query(upsert)
            .bind(&row.tenant)
            .bind(row.followee)
            .bind(row.follower)
            .bind(status(&row))
            .bind(row.version)
            .bind(row.occurred_at_ms)
            .bind(row.occurred_at_ms)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Why a batch was not applied; nothing of it was written.
#[derive(Debug, thiserror::Error)]
pub enum FollowerError {
    #[error(transparent)]
    Unprojectable(#[from] Unprojectable),
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
}
