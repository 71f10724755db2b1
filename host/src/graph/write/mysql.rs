//! A follow or unfollow on MariaDB/MySQL in two round trips (the SQLite path makes six calls, in process).
//!
//! The first round trip opens the transaction, makes the change only if it is a real one — the UPDATE's
//! WHERE carries the old state, so it matches (and counts, also with CLIENT_FOUND_ROWS) exactly when the
//! state differs, and it takes the row's exclusive lock either way — then reads the pair under that lock
//! and the reverse pair under a shared lock held to commit (of two people following each other at once,
//! exactly one event says `followed_back`). For a follow the row is first created if missing, with
//! `INSERT … ON DUPLICATE KEY UPDATE`, which takes the exclusive lock straight away, so concurrent writers
//! of one pair queue on it instead of deadlocking on a shared-to-exclusive upgrade. The second round trip
//! writes the outbox row and commits — or only commits, when nothing changed.
//!
//! Several statements in one round trip means the text protocol, so values are written into the SQL as
//! literals: integers, a tenant id (`[A-Za-z0-9._-]`, checked when it was parsed) and the payload as a hex
//! literal — nothing a caller sent is ever parsed as SQL. The transaction is opened by hand, so the
//! connection is closed (the server then rolls back) rather than returned to the pool unless it commits:
//! a failed or cancelled write leaves no open transaction, and no lock, behind.

use std::fmt::Write;

use sqlx::pool::PoolConnection;
use sqlx::{Any, Executor, Row};

use super::change::{FollowChange, FollowCommand, WriteError};
use crate::db::Database;
use crate::outbox::AGGREGATE_TYPE;

pub(super) async fn set_following(db: &Database, command: &FollowCommand<'_>) -> Result<FollowChange, WriteError> {
    let (tenant, from, to, now_ms) = (command.tenant, command.from, command.to, command.at_ms);
    let follow = command.follows();
    let mut conn = HandOpened { conn: db.writer().acquire().await?, committed: false };
    let (t, f, o) = (tenant.as_str(), from.get(), to.get());
    let pair = format!("tenant_id = '{t}' AND from_user_id = {f} AND to_user_id = {o}");
    let reverse = format!("tenant_id = '{t}' AND from_user_id = {o} AND to_user_id = {f}");
    let mut first = String::from("BEGIN;");
    if follow {
        write!(
            first,
            "INSERT INTO following (tenant_id, from_user_id, to_user_id, rel_status, version, created_at, updated_at) \
             VALUES ('{t}', {f}, {o}, 0, 0, {now_ms}, {now_ms}) ON DUPLICATE KEY UPDATE rel_status = rel_status;\
             UPDATE following SET rel_status = 1, version = version + 1, created_at = {now_ms}, updated_at = {now_ms} \
             WHERE {pair} AND rel_status = 0;"
        )
    } else {
        write!(
            first,
            "UPDATE following SET rel_status = 0, version = version + 1, updated_at = {now_ms} \
             WHERE {pair} AND rel_status = 1;"
        )
    }
    .expect("writing to a String");
    write!(
        first,
        "SELECT ROW_COUNT(), version FROM following WHERE {pair} FOR UPDATE;\
         SELECT rel_status FROM following WHERE {reverse} LOCK IN SHARE MODE;"
    )
    .expect("writing to a String");
    let rows = conn.conn.fetch_all(first.as_str()).await?;
    // The pair's row (two columns) if it exists, then the reverse pair's (one column) if it exists.
    let pair_row = rows.iter().find(|row| row.len() == 2);
    let reverse_status: Option<i64> = rows.iter().find(|row| row.len() == 1).map(|row| row.try_get(0)).transpose()?;
    let Some(pair_row) = pair_row else {
        // Unfollowing a pair that never existed: nothing to change, nothing to publish.
        conn.commit("").await?;
        return Ok(FollowChange { following: false, changed: false, version: 0 });
    };
    let (changed, version): (i64, i64) = (pair_row.try_get(0)?, pair_row.try_get(1)?);
    if changed == 0 {
        conn.commit("").await?;
        return Ok(FollowChange { following: follow, changed: false, version });
    }
    let event = command.change_event(version, reverse_status == Some(1));
    let outbox = format!(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, event_key, payload, created_at) \
         VALUES ('{t}', '{AGGREGATE_TYPE}', '{}', '{}', '{}', CONVERT(X'{}' USING utf8mb4), {now_ms});",
        event.aggregate_id(),
        event.event_type.as_str(),
        event.key(),
        hex::encode(event.payload()),
    );
    conn.commit(&outbox).await?;
    Ok(FollowChange { following: follow, changed: true, version })
}

/// A pooled connection in a transaction opened by hand: closed rather than returned to the pool unless it
/// committed.
struct HandOpened {
    conn: PoolConnection<Any>,
    committed: bool,
}

impl HandOpened {
    /// Runs `statements` (each ending in `;`, or none) and commits, in one round trip. A failing statement
    /// stops the rest, the COMMIT included.
    async fn commit(&mut self, statements: &str) -> Result<(), sqlx::Error> {
        self.conn.execute(format!("{statements}COMMIT").as_str()).await?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for HandOpened {
    fn drop(&mut self) {
        if !self.committed {
            self.conn.close_on_drop();
        }
    }
}
