//! An import's batch of follows into the truth, by the rule table a single follow obeys
//! (`graph::follow_by_host`: a block either way or an inactive account refuses it, a private target turns it
//! into a request, a follow that holds is kept, a request the target no longer has to approve becomes the
//! follow), written without an outbox row: an import is projected by building the tenant's projections
//! from the truth, not by one bus event per edge.
//!
//! Set-based where the rule table leaves one answer: a line whose pair is met once in the batch and that is
//! not a request is a new follow exactly when its pair has no row, the reverse pair carries no block and
//! both accounts are active and public — one `INSERT … SELECT` skips the others and returns the pairs it
//! wrote. Every other line (and a plain one that met a row) is decided by the rule table itself, from its
//! pair read under lock, in the batch's order. `tests/api/import.rs` checks both against the rule table on
//! random batches and states.
//!
//! The batch runs inside a transaction the caller owns, so the caller's projection of the written rows (the
//! `follower` table) commits with them, and a batch run again after a crash finds its rows and keeps them.

use std::collections::{HashMap, HashSet};

use sqlx::{Any, Executor, Row, Transaction};

use crate::db::DatabaseKind;
use crate::graph::{
    follow_by_host, AccountState, CountChanges, PairState, RelStatus, TenantId, UserId, WriteError, WrittenFollow,
};

/// One follow of an imported graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportedFollow {
    pub from: UserId,
    pub to: UserId,
    /// When it began (its `followed_at`).
    pub at_ms: i64,
    /// A pending request in the source rather than a follow.
    pub requested: bool,
}

/// What became of one imported follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It begins as a follow.
    Followed,
    /// It begins as a pending request (the source said so, or the target is private).
    Requested,
    /// The pair already holds a follow or request (or the same follow came earlier in the batch): kept as
    /// it is.
    Kept,
    /// A block between the two refuses it.
    Blocked,
    /// One of the accounts is suspended or deleted.
    Inactive,
}

/// A pair's row as the batch read it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct PairRow {
    status: RelStatus,
    version: i64,
    blocked: bool,
}

/// An account as the batch read it (no row: active and public).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Account {
    private: bool,
    state: AccountState,
}

/// Decides one follow from what its batch read — the pair's row as the batch left it so far (`None`: never
/// related), whether the reverse pair carries a block, both accounts — by the one rule table a single
/// follow obeys, under the host's rule (`decide::follow_by_host`): approval where the target requires it,
/// or where the source held a pending request.
fn decide(
    tenant: &TenantId,
    follow: &ImportedFollow,
    pair: Option<PairRow>,
    blocked_back: bool,
    accounts: [Account; 2],
) -> Outcome {
    let pair = pair.unwrap_or_default();
    let state = PairState { status: pair.status, version: pair.version, blocked: pair.blocked, blocked_back };
    let approval = follow.requested || accounts[1].private;
    match follow_by_host(tenant, (follow.from, follow.to), state, [accounts[0].state, accounts[1].state], approval) {
        Ok(Some(RelStatus::Active)) => Outcome::Followed,
        Ok(Some(_)) => Outcome::Requested,
        Ok(None) => Outcome::Kept,
        Err(WriteError::Blocked) => Outcome::Blocked,
        Err(WriteError::AccountDeleted | WriteError::AccountSuspended) => Outcome::Inactive,
        // A self-follow is refused as the line is read; the host's rule refuses nothing else.
        Err(_) => Outcome::Kept,
    }
}

/// A batch ready to be written: its set-based statement rendered before a transaction is open (the import
/// renders the next batch while the one before it is written).
#[derive(Debug)]
pub struct Batch {
    tenant: TenantId,
    lines: Vec<ImportedFollow>,
    now_ms: i64,
    /// The statement writing the plain lines, if there are any.
    plain: Option<String>,
}

impl Batch {
    /// `lines` of `tenant` to import at `now_ms` into a `kind` database.
    pub fn new(kind: DatabaseKind, tenant: TenantId, lines: Vec<ImportedFollow>, now_ms: i64) -> Self {
        let plain = insert_plain(kind, &tenant, &plain_lines(&lines), now_ms);
        Self { tenant, lines, now_ms, plain }
    }

    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }
}

/// Imports `batch`: the outcome of each line, in order, and the rows written.
pub async fn follows(
    tx: &mut Transaction<'_, Any>,
    kind: DatabaseKind,
    batch: &Batch,
) -> Result<(Vec<Outcome>, Vec<WrittenFollow>), sqlx::Error> {
    let Batch { tenant, lines, now_ms, plain } = batch;
    let mut inserted = HashSet::new();
    if let Some(plain) = plain {
        for row in tx.fetch_all(plain.as_str()).await? {
            inserted.insert((row.try_get::<i64, _>(0)?, row.try_get::<i64, _>(1)?));
        }
    }
    let mut counts = CountChanges::default();
    let mut written = Vec::with_capacity(lines.len());
    let mut outcomes = vec![Outcome::Followed; lines.len()];
    let mut rest = Vec::new();
    for (line, follow) in lines.iter().enumerate() {
        let (from, to) = (follow.from.get(), follow.to.get());
        if inserted.contains(&(from, to)) {
            let row = WrittenFollow { from, to, status: RelStatus::Active, version: 1, created_at: follow.at_ms };
            written.push(row);
            counts.edge(from, to, RelStatus::None, RelStatus::Active);
        } else {
            rest.push(line);
        }
    }
    let others: Vec<ImportedFollow> = rest.iter().map(|&line| lines[line]).collect();
    let (decided, rows) = decide_each(tx, kind, tenant, &others, &mut counts).await?;
    for (&line, outcome) in rest.iter().zip(decided) {
        outcomes[line] = outcome;
    }
    write(tx, kind, tenant, &rows, *now_ms).await?;
    written.extend(rows);
    let counted = counts.statement(kind, tenant);
    if !counted.is_empty() {
        tx.execute(counted.as_str()).await?;
    }
    Ok((outcomes, written))
}

/// The lines the set-based statement may write: the pair met once in the batch (a pair met again is decided
/// line by line, each on what the one before left), and not a request.
fn plain_lines(batch: &[ImportedFollow]) -> Vec<&ImportedFollow> {
    let mut met: HashMap<(i64, i64), u32> = HashMap::with_capacity(batch.len());
    for follow in batch {
        *met.entry((follow.from.get(), follow.to.get())).or_default() += 1;
    }
    batch.iter().filter(|f| met[&(f.from.get(), f.to.get())] == 1 && !f.requested).collect()
}

/// The statement writing each of `plain` whose pair has no row, whose reverse pair carries no block and
/// whose accounts are both active and public as a new follow (at version 1), returning the pairs it wrote:
/// the rule table's answer for exactly those (`follow_by_host` on a pair never related, no block, both
/// accounts active, no approval) is `Active`. The pairs it skips are decided by the rule table. Under
/// MySQL's repeatable read the rows it reads (the reverse pairs, the accounts) stay locked, shared, until
/// commit, as a single follow's.
fn insert_plain(kind: DatabaseKind, tenant: &TenantId, plain: &[&ImportedFollow], now_ms: i64) -> Option<String> {
    if plain.is_empty() {
        return None;
    }
    let values: Vec<String> = plain.iter().map(|f| format!("({}, {}, {})", f.from, f.to, f.at_ms)).collect();
    let (insert, skip_existing) = kind.insert_new();
    Some(format!(
        "{insert} following (tenant_id, from_user_id, to_user_id, rel_status, version, created_at, updated_at, \
         hidden) WITH batch (from_user_id, to_user_id, created_at) AS (VALUES {}) SELECT '{tenant}', \
         batch.from_user_id, batch.to_user_id, {}, 1, batch.created_at, {now_ms}, 0 FROM batch WHERE NOT EXISTS \
         (SELECT 1 FROM following r WHERE r.tenant_id = '{tenant}' AND r.from_user_id = batch.to_user_id AND \
         r.to_user_id = batch.from_user_id AND r.blocked = 1) AND NOT EXISTS (SELECT 1 FROM account_settings s \
         WHERE s.tenant_id = '{tenant}' AND s.user_id IN (batch.from_user_id, batch.to_user_id) AND \
         (s.private <> 0 OR s.state <> {})){skip_existing} RETURNING from_user_id, to_user_id",
        values.join(", "),
        RelStatus::Active,
        AccountState::Active.stored(),
    ))
}

/// Decides `lines` one by one by the rule table, each on what the ones before it left, from their pairs
/// read under lock: each line's outcome and the rows to write (one per pair, at its last state), with the
/// follow counts they change added to `counts`.
async fn decide_each(
    tx: &mut Transaction<'_, Any>,
    kind: DatabaseKind,
    tenant: &TenantId,
    lines: &[ImportedFollow],
    counts: &mut CountChanges,
) -> Result<(Vec<Outcome>, Vec<WrittenFollow>), sqlx::Error> {
    if lines.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let accounts = read_accounts(tx, kind, tenant, lines).await?;
    let mut pairs = read_pairs(tx, kind, tenant, lines).await?;
    let mut outcomes = Vec::with_capacity(lines.len());
    let mut written: Vec<WrittenFollow> = Vec::new();
    // Where each pair's row is in `written`: a pair met again is decided on the state its earlier line left
    // (as two live follows would be, whatever the batches' bounds), and written once.
    let mut written_at: HashMap<(i64, i64), usize> = HashMap::new();
    for follow in lines {
        let (from, to) = (follow.from.get(), follow.to.get());
        let account = |user: i64| accounts.get(&user).copied().unwrap_or_default();
        let pair = pairs.get(&(from, to)).copied();
        let blocked_back = pairs.get(&(to, from)).is_some_and(|row| row.blocked);
        let outcome = decide(tenant, follow, pair, blocked_back, [account(from), account(to)]);
        if let Outcome::Followed | Outcome::Requested = outcome {
            let status = if outcome == Outcome::Followed { RelStatus::Active } else { RelStatus::Requested };
            let version = pair.map_or(0, |row| row.version) + 1;
            let row = WrittenFollow { from, to, status, version, created_at: follow.at_ms };
            match written_at.get(&(from, to)) {
                Some(&at) => written[at] = row,
                None => {
                    written_at.insert((from, to), written.len());
                    written.push(row);
                }
            }
            counts.edge(from, to, pair.map_or(RelStatus::None, |row| row.status), status);
            let blocked = pair.is_some_and(|row| row.blocked);
            pairs.insert((from, to), PairRow { status, version, blocked });
        }
        outcomes.push(outcome);
    }
    Ok((outcomes, written))
}

/// Both accounts of every follow, shared-locked like a single follow's (an account job changes the state
/// under its exclusive lock before it touches the account's edges).
async fn read_accounts(
    tx: &mut Transaction<'_, Any>,
    kind: DatabaseKind,
    tenant: &TenantId,
    batch: &[ImportedFollow],
) -> Result<HashMap<i64, Account>, sqlx::Error> {
    let mut users: Vec<i64> = batch.iter().flat_map(|f| [f.from.get(), f.to.get()]).collect();
    users.sort_unstable();
    users.dedup();
    let values: Vec<String> = users.iter().map(|user| format!("({user})")).collect();
    let sql = format!(
        "WITH batch (user_id) AS (VALUES {}) SELECT s.user_id, s.private, s.state FROM batch JOIN \
         account_settings s ON s.tenant_id = '{tenant}' AND s.user_id = batch.user_id{}",
        values.join(", "),
        kind.row_lock(true)
    );
    let rows = tx.fetch_all(sql.as_str()).await?;
    rows.iter()
        .map(|row| {
            let account =
                Account { private: row.try_get::<i64, _>(1)? != 0, state: AccountState::from_stored(row.try_get(2)?) };
            Ok((row.try_get(0)?, account))
        })
        .collect()
}

/// Every follow's pair, locked to be written, and its reverse pair, shared-locked (its block flag decides).
/// The batch's pairs are a table of values joined on the primary key: a lookup per pair, whatever the
/// pairs' shape (a range condition of thousands of pairs makes MariaDB's optimizer scan the tenant).
async fn read_pairs(
    tx: &mut Transaction<'_, Any>,
    kind: DatabaseKind,
    tenant: &TenantId,
    batch: &[ImportedFollow],
) -> Result<HashMap<(i64, i64), PairRow>, sqlx::Error> {
    let values = batch.iter().map(|f| format!("({}, {})", f.from, f.to)).collect::<Vec<_>>().join(", ");
    let select = |(from, to): (&str, &str), shared: bool| {
        format!(
            "WITH batch (from_user_id, to_user_id) AS (VALUES {}) SELECT f.from_user_id, f.to_user_id, \
             f.rel_status, f.version, f.blocked FROM batch JOIN following f ON f.tenant_id = '{tenant}' AND \
             f.from_user_id = batch.{from} AND f.to_user_id = batch.{to}{}",
            values,
            kind.row_lock(shared)
        )
    };
    // Pairs first, reverse pairs after: every writer locks a follow's own row before its reverse.
    let mut pairs = HashMap::with_capacity(batch.len() * 2);
    let forward = ("from_user_id", "to_user_id");
    let reverse = ("to_user_id", "from_user_id");
    for sql in [select(forward, false), select(reverse, true)] {
        for row in tx.fetch_all(sql.as_str()).await? {
            let pair = PairRow {
                status: RelStatus::from_stored(row.try_get(2)?)?,
                version: row.try_get(3)?,
                blocked: row.try_get::<i64, _>(4)? != 0,
            };
            pairs.insert((row.try_get(0)?, row.try_get(1)?), pair);
        }
    }
    Ok(pairs)
}

/// The rows of the batch that begin, in one statement: each at its new status and version; the pair's
/// `blocked` flag stays (clear: the decision checked), a stale `hidden` goes (both accounts are active).
async fn write(
    tx: &mut Transaction<'_, Any>,
    kind: DatabaseKind,
    tenant: &TenantId,
    written: &[WrittenFollow],
    now_ms: i64,
) -> Result<(), sqlx::Error> {
    if written.is_empty() {
        return Ok(());
    }
    let rows: Vec<String> = written
        .iter()
        .map(|w| {
            format!("('{tenant}', {}, {}, {}, {}, {}, {now_ms}, 0)", w.from, w.to, w.status, w.version, w.created_at)
        })
        .collect();
    let assignments = ["rel_status", "version", "created_at", "updated_at", "hidden"]
        .map(|c| format!("{c} = {}", kind.inserted(c)))
        .join(", ");
    let sql = format!(
        "INSERT INTO following (tenant_id, from_user_id, to_user_id, rel_status, version, created_at, updated_at, \
         hidden) VALUES {}{}{assignments}",
        rows.join(", "),
        kind.on_conflict_update(&["tenant_id", "from_user_id", "to_user_id"])
    );
    tx.execute(sql.as_str()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn follow(requested: bool) -> ImportedFollow {
        let user = |id| UserId::try_from(id).unwrap();
        ImportedFollow { from: user(1), to: user(2), at_ms: 5, requested }
    }

    fn acme() -> TenantId {
        "acme".parse().unwrap()
    }

    const PUBLIC: [Account; 2] = [Account { private: false, state: AccountState::Active }; 2];

    #[test]
    fn a_new_pair_follows_and_a_private_target_gets_a_request() {
        assert_eq!(decide(&acme(), &follow(false), None, false, PUBLIC), Outcome::Followed);
        assert_eq!(decide(&acme(), &follow(true), None, false, PUBLIC), Outcome::Requested);
        let private = [Account::default(), Account { private: true, state: AccountState::Active }];
        assert_eq!(decide(&acme(), &follow(false), None, false, private), Outcome::Requested);
    }

    #[test]
    fn an_edge_that_holds_is_kept_and_an_ended_one_begins_again() {
        let following = PairRow { status: RelStatus::Active, version: 3, blocked: false };
        assert_eq!(decide(&acme(), &follow(false), Some(following), false, PUBLIC), Outcome::Kept);
        let pending = PairRow { status: RelStatus::Requested, version: 3, blocked: false };
        assert_eq!(decide(&acme(), &follow(true), Some(pending), false, PUBLIC), Outcome::Kept);
        // As a single follow: a request the (now public) target no longer has to approve is the follow.
        assert_eq!(decide(&acme(), &follow(false), Some(pending), false, PUBLIC), Outcome::Followed);
        let ended = PairRow { status: RelStatus::None, version: 4, blocked: false };
        assert_eq!(decide(&acme(), &follow(false), Some(ended), false, PUBLIC), Outcome::Followed);
    }

    #[test]
    fn blocks_either_way_and_inactive_accounts_refuse() {
        let blocking = PairRow { status: RelStatus::None, version: 0, blocked: true };
        assert_eq!(decide(&acme(), &follow(false), Some(blocking), false, PUBLIC), Outcome::Blocked);
        assert_eq!(decide(&acme(), &follow(false), None, true, PUBLIC), Outcome::Blocked);
        let suspended = [Account::default(), Account { private: false, state: AccountState::Suspended }];
        assert_eq!(decide(&acme(), &follow(false), None, false, suspended), Outcome::Inactive);
    }
}
