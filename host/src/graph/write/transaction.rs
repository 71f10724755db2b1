//! A relation write in two round trips on either database, with the same statements: the first opens the
//! transaction and reads every edge the decision depends on under its lock (creating the edges it may
//! create, so concurrent writers of one edge queue on its exclusive lock instead of deadlocking on an
//! upgrade) and the subject's settings, all in one `UNION ALL` (each part with its own lock clause);
//! `decide.rs` makes the decision in between; the second writes the changed edges with one outbox row each
//! (and a block's flag), and commits — or only commits (or rolls back, when refused).
//!
//! Several statements in one round trip means the text protocol, so values are written into the SQL as
//! literals (`edge.rs`; the payload as a hex literal). The transaction is opened by hand, so the connection
//! is closed (the server then rolls back) rather than returned to the pool unless it finished: a failed or
//! cancelled write leaves no open transaction, and no lock, behind. SQLite runs the same statements on its
//! one writer connection, which excludes every other writer, so its reads need no lock clauses.

use sqlx::pool::PoolConnection;
use sqlx::{Any, Executor, Row};

use super::command::{FollowContext, FollowPolicy, RelationChange, RelationCommand, WriteError};
use super::decide::{decide, needs_admission, Found};
use super::edge::Edge;
use super::edge::{self, EdgeRow};
use crate::db::Database;
use crate::graph::AccountState;
use crate::outbox;

pub(super) async fn run(
    db: &Database,
    command: &RelationCommand<'_>,
    policy: &impl FollowPolicy,
) -> Result<RelationChange, WriteError> {
    let (kind, tenant) = (db.kind(), command.tenant);
    let reads = command.reads();
    let mut first = String::from("BEGIN;");
    first.extend(reads.iter().filter_map(|(edge, lock)| edge::create(kind, tenant, *edge, *lock)));
    // Every read in one statement: the server parses and plans each statement anew (separate statements
    // measured 15% slower follows).
    let mut selects: Vec<String> =
        reads.iter().enumerate().map(|(label, (edge, lock))| edge::read(kind, tenant, label, *edge, *lock)).collect();
    let accounts = reads.len();
    if command.reads_accounts() {
        selects.push(edge::read_accounts(kind, tenant, accounts, [command.actor, command.subject]));
    }
    first.push_str(&kind.union_all(&selects));
    let mut conn = HandOpened { conn: db.writer().acquire().await?, finished: false };
    let mut found = Found::default();
    for row in conn.conn.fetch_all(first.as_str()).await? {
        let label = usize::try_from(row.try_get::<i64, _>(0)?).unwrap_or(usize::MAX);
        if label == accounts {
            let (private, state, user) =
                (row.try_get::<i64, _>(1)? == 1, AccountState::from_stored(row.try_get(2)?), row.try_get::<i64, _>(3)?);
            if user == command.subject.get() {
                (found.subject_private, found.subject_state) = (private, state);
            } else {
                found.actor_state = state;
            }
        } else if let Some((edge, _)) = reads.get(label) {
            let row = EdgeRow {
                status: row.try_get(1)?,
                version: row.try_get(2)?,
                created_at: row.try_get(3)?,
                expires_at: row.try_get(4)?,
                notifications: row.try_get::<i64, _>(5)? == 1,
                blocked: row.try_get::<i64, _>(6)? == 1,
                hidden: row.try_get(7)?,
            };
            found.edges.push((*edge, row));
        }
    }
    if needs_admission(command, &found) {
        let (follower, target) = (command.actor, command.subject);
        let follow = FollowContext {
            follower,
            target,
            followed_back: found
                .edges
                .iter()
                .any(|(e, row)| *e == Edge::follow(target, follower) && row.status == edge::ACTIVE),
            target_private: found.subject_private,
        };
        // The pair's row stays locked meanwhile: the policy decides on the state the change is made on.
        found.admission = match policy.admit(follow).await {
            Ok(admission) => admission,
            Err(failed) => {
                conn.finish("ROLLBACK").await?;
                return Err(failed);
            }
        };
    }
    let decision = match decide(command, &found) {
        Ok(decision) => decision,
        Err(refused) => {
            conn.finish("ROLLBACK").await?;
            return Err(refused);
        }
    };
    let mut second = String::new();
    for change in &decision.changes {
        second.push_str(&edge::write(kind, tenant, change.edge, &change.row, command.at_ms));
    }
    let events: Vec<_> = decision.changes.iter().map(|change| &change.event).collect();
    second.push_str(&outbox::insert(kind, &events, command.at_ms));
    if let Some((edge, blocked)) = decision.block_flag {
        second.push_str(&edge::set_blocked(kind, tenant, edge, blocked, command.at_ms));
    }
    for edge in &decision.unhidden {
        second.push_str(&edge::clear_hidden(tenant, *edge));
    }
    second.push_str("COMMIT");
    conn.finish(&second).await?;
    Ok(decision.outcome)
}

/// A pooled connection in a transaction opened by hand: closed rather than returned to the pool unless it
/// finished.
struct HandOpened {
    conn: PoolConnection<Any>,
    finished: bool,
}

impl HandOpened {
    /// Runs `statements`, the last of which ends the transaction, in one round trip. A failing statement
    /// stops the rest, the COMMIT included.
    async fn finish(&mut self, statements: &str) -> Result<(), sqlx::Error> {
        self.conn.execute(statements).await?;
        self.finished = true;
        Ok(())
    }
}

impl Drop for HandOpened {
    fn drop(&mut self) {
        if !self.finished {
            self.conn.close_on_drop();
        }
    }
}
