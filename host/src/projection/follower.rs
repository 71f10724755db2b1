//! The host's own projection: the `follower` table, the fan side of `following`. Each event is applied
//! only when its version is newer than the row's (last writer wins by version), so a redelivered batch, a
//! replayed partition or one pair's events out of order all leave the table equal to the truth.

use chrono::DateTime;

use crate::graph::{Database, DatabaseKind, OutboxEvent};

/// Why an event cannot be projected (a poison event: retrying will not help).
#[derive(Debug, thiserror::Error)]
#[error("event {event_id} cannot be projected: {detail}")]
pub struct Unprojectable {
    pub event_id: String,
    pub detail: String,
}

/// One row change derived from an event.
struct FollowerRow<'e> {
    tenant: &'e str,
    to: i64,
    from: i64,
    status: i64,
    version: i64,
    at_ms: i64,
}

impl<'e> FollowerRow<'e> {
    fn from_event(event: &'e OutboxEvent) -> Result<Self, Unprojectable> {
        let poison = |detail: String| Unprojectable { event_id: event.event_id.clone(), detail };
        let status = match event.event_type.as_str() {
            "follow" => 1,
            "unfollow" => 0,
            other => return Err(poison(format!("unknown event type {other:?}"))),
        };
        let at_ms = DateTime::parse_from_rfc3339(&event.occurred_at)
            .map_err(|e| poison(format!("occurred_at {:?}: {e}", event.occurred_at)))?
            .timestamp_millis();
        Ok(Self { tenant: &event.tenant, to: event.to, from: event.from, status, version: event.version, at_ms })
    }
}

/// Applies `events` in one transaction. `created_at` is the time of the latest follow, as in `following`.
pub async fn apply(db: &Database, events: &[OutboxEvent]) -> Result<(), FollowerError> {
    let rows = events.iter().map(FollowerRow::from_event).collect::<Result<Vec<_>, _>>()?;
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
            .bind(row.tenant)
            .bind(row.to)
            .bind(row.from)
            .bind(row.status)
            .bind(row.version)
            .bind(row.at_ms)
            .bind(row.at_ms)
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
