//! Follow and unfollow: the pair's row and, when its state really changed, an outbox row, in one transaction.
//!
//! A real 0↔1 change is detected under the row's lock, never from a plain affected-rows count (sqlx's
//! MySQL driver sets CLIENT_FOUND_ROWS, so a no-op update reports one row). MariaDB/MySQL run the
//! transaction in two round trips (`mysql.rs`); SQLite, in process, statement by statement.
//! Deadlocks and lock time-outs are retried whole.

mod change;
mod mysql;
mod sqlite;

use std::time::Duration;

pub use change::{FollowChange, FollowCommand, WriteError};

use crate::db::{is_lock_conflict, Database, DatabaseKind};

/// How often a transaction that lost a lock race is tried again before the error is returned.
const MAX_ATTEMPTS: u32 = 8;

/// Carries out `command` idempotently: a follow of a pair already followed (or an unfollow of one not
/// followed) changes nothing and writes no event.
pub async fn set_following(db: &Database, command: FollowCommand<'_>) -> Result<FollowChange, WriteError> {
    if command.from == command.to {
        return Err(WriteError::SelfFollow);
    }
    let mut attempt = 1;
    loop {
        let tried = match db.kind() {
            DatabaseKind::MySql => mysql::set_following(db, &command).await,
            DatabaseKind::Sqlite => sqlite::set_following(db, &command).await,
        };
        match tried {
            Err(WriteError::Database(e)) if attempt < MAX_ATTEMPTS && is_lock_conflict(&e) => {
                let FollowCommand { tenant, from, to, .. } = command;
                tracing::debug!(%tenant, %from, %to, attempt, error = %e, "write lost a lock race; retrying");
                tokio::time::sleep(Duration::from_millis(2u64 << attempt)).await;
                attempt += 1;
            }
            result => return result,
        }
    }
}
