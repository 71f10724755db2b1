//! A relation write in two round trips on either database, with the same statements: the first opens the
//! transaction and reads every edge the decision depends on under its lock (creating the edges it may
//! create, so concurrent writers of one edge queue on its exclusive lock instead of deadlocking on an
//! upgrade), both accounts and, for a follow, both users' counts, all in one `UNION ALL` (each part with its
//! own lock clause); `decide.rs` makes the decision in between; the second writes the changed edges with
//! one outbox row each (a block's flag, the follow counts), and commits — or only rolls back, when refused.
//!
//! Nothing waits on another service in between (`db::held`): a tenant's relation plugin is asked before
//! the transaction, on what [`look`] read, and the transaction uses its answer only if it finds the same
//! under its locks ([`Attempt::Ask`] otherwise).
//!
//! Several statements in one round trip means the text protocol, so values are written into the SQL as
//! literals (`edge.rs`; the payload as a hex literal). The transaction is opened by hand, so the connection
//! is closed (the server then rolls back) rather than returned to the pool unless it finished: a failed or
//! cancelled write leaves no open transaction, and no lock, behind. SQLite runs the same statements on its
//! one writer connection, which excludes every other writer, so its reads need no lock clauses.

use sqlx::pool::PoolConnection;
use sqlx::{Any, Executor, Row};

use super::command::{Act, FollowContext, FollowDecision, FollowPolicy, RelationChange, RelationCommand, WriteError};
use super::counts::{self, CountChanges, FollowCounts};
use super::decide::{decide, follow_context, needs_admission, Found};
use super::edge::{self, EdgeRow, RelStatus};
use crate::db::{held, Database, DatabaseKind};
use crate::graph::AccountState;
use crate::outbox;

/// A relation policy's answer and what it was given.
#[derive(Debug, Clone)]
pub(super) struct Asked {
    pub context: FollowContext,
    pub admit: FollowDecision,
}

/// How one transaction ended.
pub(super) enum Attempt {
    /// Committed (or refused, as an error).
    Done(RelationChange),
    /// Rolled back: the follow's plugin policy must be asked on this (what the transaction found), outside
    /// it, before it runs again.
    Ask(FollowContext),
}

/// The command's reads, without locks or a transaction: what a plugin policy is asked on before the
/// transaction opens (the transaction checks it is unchanged).
pub(super) async fn look(db: &Database, command: &RelationCommand<'_>) -> Result<Found, WriteError> {
    let statement = reads(db.kind(), command, false, command.act == Act::Follow);
    let mut conn = db.reader().acquire().await?;
    let rows = conn.fetch_all(statement.as_str()).await?;
    found(command, &rows)
}

/// Runs `command` in one transaction; a follow under a plugin policy uses `asked` only if the transaction
/// finds what it was asked on.
pub(super) async fn run(
    db: &Database,
    command: &RelationCommand<'_>,
    policy: &impl FollowPolicy,
    asked: Option<&Asked>,
) -> Result<Attempt, WriteError> {
    let kind = db.kind();
    let plugin_decides = policy.rule().is_none() && command.act == Act::Follow;
    let mut first = String::from("BEGIN;");
    first.extend(command.reads().iter().filter_map(|(edge, lock)| edge::create(kind, command.tenant, *edge, *lock)));
    if plugin_decides {
        first.extend(counts::create(kind, command.tenant, [command.actor, command.subject]));
    }
    first.push_str(&reads(kind, command, true, plugin_decides));
    let mut conn = OpenTransaction { conn: db.writer().acquire().await?, finished: false };
    held::holding("a relation write's transaction", async {
        let mut found = found(command, &conn.conn.fetch_all(first.as_str()).await?)?;
        if needs_admission(command, &found) {
            let context = follow_context(command, &found);
            found.admission = match (policy.rule(), asked) {
                (Some(rule), _) => rule(context),
                (None, Some(asked)) if asked.context == context => asked.admit.clone(),
                (None, _) => {
                    conn.finish("ROLLBACK").await?;
                    return Ok(Attempt::Ask(context));
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
        let tenant = command.tenant;
        let mut second = String::new();
        let mut counts = CountChanges::default();
        for change in &decision.changes {
            second.push_str(&edge::write(kind, tenant, change.edge, &change.row, command.at_ms));
            if change.edge.relation == outbox::Relation::Follow {
                let was = found.row(change.edge).status;
                counts.edge(change.edge.from.get(), change.edge.to.get(), was, change.row.status);
            }
        }
        second.push_str(&counts.statement(kind, tenant));
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
        Ok(Attempt::Done(decision.outcome))
    })
    .await
}

/// Every read `command` decides on, in one statement: its edges, both accounts (when it reads them) and,
/// for a follow decided by a plugin (`plugin_decides`), both users' counts. `locked`: with the lock
/// clauses (inside the transaction).
fn reads(kind: DatabaseKind, command: &RelationCommand<'_>, locked: bool, plugin_decides: bool) -> String {
    let tenant = command.tenant;
    let reads = command.reads();
    let mut selects: Vec<String> = reads
        .iter()
        .enumerate()
        .map(|(label, (edge, lock))| edge::read(kind, tenant, label, *edge, locked.then_some(*lock)))
        .collect();
    let users = [command.actor, command.subject];
    if command.reads_accounts() {
        selects.push(edge::read_accounts(kind, tenant, reads.len(), users, locked));
    }
    if plugin_decides {
        selects.push(counts::read(kind, tenant, reads.len() + 1, users, locked));
    }
    // Every read in one statement: the server parses and plans each statement anew (separate statements
    // measured 15% slower follows).
    kind.union_all(&selects)
}

/// What the rows of [`reads`] say.
fn found(command: &RelationCommand<'_>, rows: &[sqlx::any::AnyRow]) -> Result<Found, WriteError> {
    let reads = command.reads();
    let (accounts, counts) = (reads.len(), reads.len() + 1);
    let mut found = Found::default();
    for row in rows {
        let label = usize::try_from(row.try_get::<i64, _>(0)?).unwrap_or(usize::MAX);
        if label == accounts {
            let (private, state, user) =
                (row.try_get::<i64, _>(1)? == 1, AccountState::from_stored(row.try_get(2)?), row.try_get::<i64, _>(3)?);
            if user == command.subject.get() {
                (found.subject_private, found.subject_state) = (private, state);
            } else {
                found.actor_state = state;
            }
        } else if label == counts {
            let (followings, followers, user) = (row.try_get(1)?, row.try_get(2)?, row.try_get::<i64, _>(3)?);
            let counted = FollowCounts { followings, followers };
            if user == command.subject.get() {
                found.subject_counts = counted;
            } else {
                found.actor_counts = counted;
            }
        } else if let Some((edge, _)) = reads.get(label) {
            let row = EdgeRow {
                status: RelStatus::from_stored(row.try_get(1)?)?,
                version: row.try_get(2)?,
                created_at: row.try_get(3)?,
                expires_at: row.try_get(4)?,
                notifications: row.try_get::<i64, _>(5)? == 1,
                blocked: row.try_get::<i64, _>(6)? == 1,
                hidden: RelStatus::from_stored(row.try_get(7)?)?,
            };
            found.edges.push((*edge, row));
        }
    }
    Ok(found)
}

/// A pooled connection in a transaction opened by hand: closed rather than returned to the pool unless it
/// finished.
struct OpenTransaction {
    conn: PoolConnection<Any>,
    finished: bool,
}

impl OpenTransaction {
    /// Runs `statements`, the last of which ends the transaction, in one round trip. A failing statement
    /// stops the rest, the COMMIT included.
    async fn finish(&mut self, statements: &str) -> Result<(), sqlx::Error> {
        self.conn.execute(statements).await?;
        self.finished = true;
        Ok(())
    }
}

impl Drop for OpenTransaction {
    fn drop(&mut self) {
        if !self.finished {
            self.conn.close_on_drop();
        }
    }
}
