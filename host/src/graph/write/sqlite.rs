//! A follow or unfollow on SQLite, statement by statement: in process, round trips cost nothing.

use sqlx::Row;

use super::change::{FollowChange, FollowCommand, WriteError};
use crate::db::Database;
use crate::outbox::AGGREGATE_TYPE;

/// SQLite: in-process, so round trips cost nothing; its single writer connection excludes every other
/// writer, so plain reads see the state the change is decided on.
pub(super) async fn set_following(db: &Database, command: &FollowCommand<'_>) -> Result<FollowChange, WriteError> {
    let (tenant, from, to, now_ms) = (command.tenant, command.from, command.to, command.at_ms);
    let follow = command.follows();
    let mut tx = db.writer().begin().await?;
    if follow {
        sqlx::query(
            "INSERT INTO following (tenant_id, from_user_id, to_user_id, rel_status, version, created_at, updated_at) \
             VALUES (?, ?, ?, 0, 0, ?, ?) ON CONFLICT DO NOTHING",
        )
        .bind(tenant.as_str())
        .bind(from.get())
        .bind(to.get())
        .bind(now_ms)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
    }
    let pair = "SELECT rel_status, version, created_at FROM following \
                WHERE tenant_id = ? AND from_user_id = ? AND to_user_id = ?";
    let current =
        sqlx::query(pair).bind(tenant.as_str()).bind(from.get()).bind(to.get()).fetch_optional(&mut *tx).await?;
    let Some(row) = current else {
        // Unfollowing a pair that never existed: nothing to change, nothing to publish.
        return Ok(FollowChange { following: false, changed: false, version: 0 });
    };
    let (status, version, followed_at): (i64, i64, i64) = (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
    if (status == 1) == follow {
        tx.commit().await?;
        return Ok(FollowChange { following: follow, changed: false, version });
    }
    let version = version + 1;
    // A follow restarts the pair's follow time: lists are ordered by the latest follow.
    let followed_at = if follow { now_ms } else { followed_at };
    sqlx::query(
        "UPDATE following SET rel_status = ?, version = ?, created_at = ?, updated_at = ? \
         WHERE tenant_id = ? AND from_user_id = ? AND to_user_id = ?",
    )
    .bind(i64::from(follow))
    .bind(version)
    .bind(followed_at)
    .bind(now_ms)
    .bind(tenant.as_str())
    .bind(from.get())
    .bind(to.get())
    .execute(&mut *tx)
    .await?;
    let reverse: Option<i64> =
        sqlx::query_scalar(pair.replacen("rel_status, version, created_at", "rel_status", 1).as_str())
            .bind(tenant.as_str())
            .bind(to.get())
            .bind(from.get())
            .fetch_optional(&mut *tx)
            .await?;
    let event = command.change_event(version, reverse == Some(1));
    sqlx::query(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, event_key, payload, created_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(&event.tenant)
    .bind(AGGREGATE_TYPE)
    .bind(event.aggregate_id())
    .bind(event.event_type.as_str())
    .bind(event.key())
    .bind(event.payload())
    .bind(now_ms)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(FollowChange { following: follow, changed: true, version })
}
