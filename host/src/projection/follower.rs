//! The host's own projection: the `follower` table, the fan side of `following` — every state of its pairs,
//! pending requests included (`rel_status` 2), so it equals the truth row for row. Each event is applied
//! only when its version is newer than the row's (last writer wins by version), so a redelivered batch, a
//! replayed partition or one pair's events out of order all leave the table equal to the truth.

use sqlx::{Any, Executor, Transaction};

use super::events::{occurred_at_ms, Unprojectable};
use crate::db::{Database, DatabaseKind};
use crate::graph::TenantId;
use crate::graph::WrittenFollow;
use crate::outbox::{ChangeEvent, EventType};

/// The status a follower row takes from an event of its pair; `None`: not an event of a follow's pair.
fn status(event: EventType) -> Option<i64> {
    match event {
        EventType::Follow => Some(1),
        EventType::FollowRequested => Some(2),
        EventType::Unfollow | EventType::FollowRequestWithdrawn | EventType::FollowRequestRejected => Some(0),
        EventType::Block | EventType::Unblock | EventType::Mute | EventType::Unmute => None,
    }
}

/// Applies `events` in one transaction. `created_at` is the time of the latest follow (or request), as in
/// `following`.
pub async fn apply(db: &Database, events: &[ChangeEvent]) -> Result<(), FollowerError> {
    let mut rows = Vec::with_capacity(events.len());
    for event in events {
        let at = occurred_at_ms(event)?;
        if let Some(status) = status(event.event_type) {
            rows.push((event, status, at));
        }
    }
    let upsert = newest_version_upsert(db.kind(), "(?, ?, ?, ?, ?, ?, ?)");
    let mut tx = db.writer().begin().await?;
    for (event, status, at) in rows {
        sqlx::query(&upsert)
            .bind(&event.tenant)
            .bind(event.to)
            .bind(event.from)
            .bind(status)
            .bind(event.version)
            .bind(at)
            .bind(at)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Writes the rows an import wrote into `following` in the import's own transaction (an import has no
/// events to feed the worker), in one statement; a newer row the worker wrote meanwhile is kept.
pub async fn apply_imported(
    tx: &mut Transaction<'_, Any>,
    kind: DatabaseKind,
    tenant: &TenantId,
    rows: &[WrittenFollow],
) -> Result<(), sqlx::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let values: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "('{tenant}', {}, {}, {}, {}, {}, {})",
                r.to, r.from, r.status, r.version, r.created_at, r.created_at
            )
        })
        .collect();
    tx.execute(newest_version_upsert(kind, &values.join(", ")).as_str()).await?;
    Ok(())
}

/// The insert of follower rows (`values`: placeholders or literals in the table's column order) that only a
/// newer version overwrites. Assignments are phrased so that both dialects agree: MySQL runs them left to
/// right, each seeing those before it, SQLite all on the old row — so `version` is compared in each and set
/// last.
fn newest_version_upsert(kind: DatabaseKind, values: &str) -> String {
    let new = |column| kind.inserted(column);
    let (version, newer) = (new("version"), format!("{} > version", new("version")));
    format!(
        "INSERT INTO follower (tenant_id, to_user_id, from_user_id, rel_status, version, created_at, updated_at) \
         VALUES {values}{on_conflict}\
         created_at = CASE WHEN {newer} AND {status} > 0 THEN {created} ELSE created_at END, \
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
