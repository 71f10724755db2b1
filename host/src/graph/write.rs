//! Follow and unfollow: the pair's row and, when its state really changed, an outbox row, in one transaction.
//!
//! A real 0↔1 change is detected under the row's lock, never from a plain affected-rows count (sqlx's
//! MySQL driver sets CLIENT_FOUND_ROWS, so a no-op update reports one row). MariaDB/MySQL run the
//! transaction in two round trips (`write_mysql.rs`); SQLite, in process, statement by statement.
//! Deadlocks and lock time-outs are retried whole.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, SecondsFormat};
use serde::Serialize;
use sqlx::Row;

use super::{Database, DatabaseKind, EventId, TenantId, UserId};

/// The aggregate type of follow events; the relay's default topic is derived from it (`strand.following`).
pub const AGGREGATE_TYPE: &str = "following";

/// How often a transaction that lost a lock race is tried again before the error is returned.
const MAX_ATTEMPTS: u32 = 8;

/// What a follow or unfollow did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FollowChange {
    /// Whether `from` follows `to` after the call.
    pub following: bool,
    /// Whether the call changed the state (and so wrote an outbox event).
    pub changed: bool,
    /// The pair's version after the call (0 when the pair never existed).
    pub version: i64,
}

/// What a change did to its pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventType {
    Follow,
    Unfollow,
}

impl EventType {
    /// As the outbox's `event_type` column and the bus's `event-type` header spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Follow => "follow",
            EventType::Unfollow => "unfollow",
        }
    }
}

/// The event written to the outbox on every real change; consumers dedupe and order by it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct OutboxEvent {
    /// [`EventId`]: `tenant:from:to:version`, one change forever.
    pub event_id: String,
    #[serde(rename = "type")]
    pub event_type: EventType,
    pub tenant: String,
    pub from: i64,
    pub to: i64,
    pub version: i64,
    /// RFC 3339, milliseconds, UTC.
    pub occurred_at: String,
    /// Whether `to` followed `from` when this change committed (read under lock in the change's
    /// transaction): a follow with it starts a mutual follow, an unfollow with it ends one. Events written
    /// before it existed read as `false`.
    #[serde(default)]
    pub followed_back: bool,
}

impl OutboxEvent {
    /// The outbox row's `aggregate_id`: `from:to`.
    pub fn aggregate_id(&self) -> String {
        format!("{}:{}", self.from, self.to)
    }

    /// The message key: one user's actions share it, so the bus keeps them in order.
    pub fn key(&self) -> String {
        format!("{}:{}", self.tenant, self.from)
    }

    /// The outbox row's `payload`: the event as JSON.
    pub fn payload(&self) -> String {
        serde_json::to_string(self).expect("an OutboxEvent always serialises")
    }
}

/// Why a write was refused or failed. Nothing is half-written in any case: the transaction rolls back.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("a user cannot follow themselves")]
    SelfFollow,
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
}

/// Makes `from` follow (`follow = true`) or stop following `to`, idempotently.
pub async fn set_following(
    db: &Database,
    tenant: &TenantId,
    from: UserId,
    to: UserId,
    follow: bool,
    now_ms: i64,
) -> Result<FollowChange, WriteError> {
    if from == to {
        return Err(WriteError::SelfFollow);
    }
    let mut attempt = 1;
    loop {
        match try_set_following(db, tenant, from, to, follow, now_ms).await {
            Err(WriteError::Database(e)) if attempt < MAX_ATTEMPTS && is_lock_conflict(&e) => {
                tracing::debug!(%tenant, %from, %to, attempt, error = %e, "write lost a lock race; retrying");
                tokio::time::sleep(Duration::from_millis(2u64 << attempt)).await;
                attempt += 1;
            }
            result => return result,
        }
    }
}

async fn try_set_following(
    db: &Database,
    tenant: &TenantId,
    from: UserId,
    to: UserId,
    follow: bool,
    now_ms: i64,
) -> Result<FollowChange, WriteError> {
    match db.kind() {
        DatabaseKind::MySql => super::write_mysql::set_following(db, tenant, from, to, follow, now_ms).await,
        DatabaseKind::Sqlite => set_following_sqlite(db, tenant, from, to, follow, now_ms).await,
    }
}

/// SQLite: in-process, so round trips cost nothing; its single writer connection excludes every other
/// writer, so plain reads see the state the change is decided on.
async fn set_following_sqlite(
    db: &Database,
    tenant: &TenantId,
    from: UserId,
    to: UserId,
    follow: bool,
    now_ms: i64,
) -> Result<FollowChange, WriteError> {
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
    let event = change_event(tenant, from, to, follow, version, now_ms, reverse == Some(1));
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

/// The event of a real change of `from → to` to `version` at `now_ms`.
pub(super) fn change_event(
    tenant: &TenantId,
    from: UserId,
    to: UserId,
    follow: bool,
    version: i64,
    now_ms: i64,
    followed_back: bool,
) -> OutboxEvent {
    OutboxEvent {
        event_id: EventId { tenant: tenant.as_str(), from: from.get(), to: to.get(), version }.to_string(),
        event_type: if follow { EventType::Follow } else { EventType::Unfollow },
        tenant: tenant.to_string(),
        from: from.get(),
        to: to.get(),
        version,
        occurred_at: rfc3339_millis(now_ms),
        followed_back,
    }
}

/// Wall-clock time in epoch milliseconds: the time a write records and lists are ordered by.
pub fn now_ms() -> i64 {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).expect("the clock is after 1970");
    i64::try_from(since_epoch.as_millis()).expect("milliseconds since 1970 fit in i64")
}

/// Formats epoch milliseconds the way every Strand API and event does.
pub fn rfc3339_millis(ms: i64) -> String {
    match DateTime::from_timestamp_millis(ms) {
        Some(time) => time.to_rfc3339_opts(SecondsFormat::Millis, true),
        // Only reachable past the year 262143; say so rather than invent a time.
        None => format!("out-of-range:{ms}"),
    }
}

/// Deadlock (MySQL 1213, SQLSTATE 40001), lock wait time-out (1205) or a busy SQLite: safe to retry whole.
pub fn is_lock_conflict(error: &sqlx::Error) -> bool {
    let Some(db_error) = error.as_database_error() else {
        return false;
    };
    let code = db_error.code();
    let message = db_error.message();
    matches!(code.as_deref(), Some("40001") | Some("5") | Some("517"))
        || message.contains("Lock wait timeout")
        || message.contains("database is locked")
}
