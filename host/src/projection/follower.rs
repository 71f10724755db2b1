//! The host's own projection: the `follower` table, the fan side of `following`. Each event is applied
//! only when its version is newer than the row's (last writer wins by version), so a redelivered batch, a
//! replayed partition or one pair's events out of order all leave the table equal to the truth.

use super::events::{relation_event, Unprojectable};
use crate::db::{Database, DatabaseKind};
use crate::outbox::ChangeEvent;
use crate::plugins::{Action, RelationEvent};

/// The status a follower row takes from `event`.
fn status(event: &RelationEvent) -> i64 {
    match event.action {
        Action::Follow => 1,
        Action::Unfollow => 0,
    }
}

/// Applies `events` in one transaction. `created_at` is the time of the latest follow, as in `following`.
pub async fn apply(db: &Database, events: &[ChangeEvent]) -> Result<(), FollowerError> {
    let rows = events.iter().map(relation_event).collect::<Result<Vec<_>, _>>()?;
    let upsert = newest_version_upsert(db.kind());
    let mut tx = db.writer().begin().await?;
    for row in rows {
        sqlx::query(&upsert)
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

/// The insert of a follower row that only a newer version overwrites. Assignments are phrased so that both
/// dialects agree: MySQL runs them left to right, each seeing those before it, SQLite all on the old row —
/// so `version` is compared in each and set last.
fn newest_version_upsert(kind: DatabaseKind) -> String {
    let new = |column| kind.inserted(column);
    let (version, newer) = (new("version"), format!("{} > version", new("version")));
    format!(
        "INSERT INTO follower (tenant_id, to_user_id, from_user_id, rel_status, version, created_at, updated_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?){on_conflict}\
         created_at = CASE WHEN {newer} AND {status} = 1 THEN {created} ELSE created_at END, \
         rel_status = CASE WHEN {newer} THEN {status} ELSE rel_status END, \
         updated_at = CASE WHEN {newer} THEN {updated} ELSE updated_at END, \
         version = CASE WHEN {newer} THEN {version} ELSE version END",
        on_conflict = kind.on_conflict_update(&["tenant_id", "to_user_id", "from_user_id"]),
        status = new("rel_status"),
        created = new("created_at"),
        updated = new("updated_at"),
    )
}

/// Why a batch was not applied; nothing of it was written.
#[derive(Debug, thiserror::Error)]
pub enum FollowerError {
    #[error(transparent)]
    Unprojectable(#[from] Unprojectable),
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
}
