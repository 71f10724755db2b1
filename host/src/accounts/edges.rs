//! The writes an account job makes: every edge of one account on one side, a batch at a time, each change
//! with its outbox row exactly as a single write would make it (version + 1, its event), inside a transaction
//! the caller owns (it also moves the job's progress there, so a batch and its count commit together).
//!
//! A batch locks the rows it changes (and, shared, the reverse rows its events' `followed_back` reads) and
//! nothing else: the account's other edges stay free for their own writers meanwhile. Rows a batch changed
//! leave the range its next batch reads, so no cursor is needed and a stopped job resumes where it was.

use sqlx::{Any, Executor, Row, Transaction};

use crate::db::{Database, DatabaseKind};
use crate::graph::edge::{table, RelStatus, ACTIVE, NONE, REQUESTED};
use crate::graph::{follow_by_host, AccountState, CountChanges, PairState, TenantId, UserId};
use crate::outbox::{self, ChangeEvent, Changed, EventType, Relation};

use super::rules::{self, Side};

impl Side {
    /// (the column holding the account, the column holding the counterpart).
    pub(super) fn columns(self) -> (&'static str, &'static str) {
        match self {
            Side::Incoming => ("to_user_id", "from_user_id"),
            Side::Outgoing => ("from_user_id", "to_user_id"),
        }
    }

    /// `following` read through this side's index: the account's edges only, whatever the planner estimates.
    fn following(self, kind: DatabaseKind) -> String {
        kind.by_index(
            "following",
            match self {
                Side::Incoming => "following_by_followee",
                Side::Outgoing => "following_by_follower",
            },
        )
    }

    /// The edge between `account` and `counterpart` on this side.
    pub(super) fn edge(self, account: i64, counterpart: i64) -> (i64, i64) {
        match self {
            Side::Incoming => (counterpart, account),
            Side::Outgoing => (account, counterpart),
        }
    }
}

/// What a batch does to the follows and pending requests it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowAction {
    /// Ends them (an erasure).
    End,
    /// Ends them and keeps what they were in `hidden` (a suspension).
    Hide,
    /// Brings back the ones hidden and still hidden (a restore).
    Restore,
}

/// One batch's scope: `tenant`'s `account`, at most `limit` edges, changed at `at_ms`.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    pub kind: DatabaseKind,
    pub tenant: &'a TenantId,
    pub account: UserId,
    pub limit: u32,
    pub at_ms: i64,
}

impl Scope<'_> {
    fn lock(&self, shared: bool) -> &'static str {
        self.kind.row_lock(shared)
    }
}

/// How many follows and requests of the account on `side` an `action` has left to change (read outside any
/// transaction: a job's size, for its progress).
pub async fn follows_left(
    db: &Database,
    scope: &Scope<'_>,
    side: Side,
    action: FollowAction,
) -> Result<i64, sqlx::Error> {
    let (mine, _) = side.columns();
    let sql = format!(
        "SELECT COUNT(*) FROM {} WHERE tenant_id = ? AND {mine} = ? AND {}",
        side.following(scope.kind),
        condition(action, side)
    );
    sqlx::query_scalar(&sql).bind(scope.tenant.as_str()).bind(scope.account.get()).fetch_one(db.reader()).await
}

/// The follows and requests on `side` an `action` has left: a restore's are the hidden ones whose other end
/// is active (an edge between two suspended accounts comes back with the second one's restore).
fn condition(action: FollowAction, side: Side) -> String {
    let (_, theirs) = side.columns();
    match action {
        FollowAction::End | FollowAction::Hide => format!("rel_status IN ({ACTIVE}, {REQUESTED})"),
        FollowAction::Restore => format!(
            "rel_status = {NONE} AND hidden > {NONE} AND NOT EXISTS (SELECT 1 FROM account_settings s WHERE \
             s.tenant_id = following.tenant_id AND s.user_id = following.{theirs} AND s.state <> {})",
            AccountState::Active.stored()
        ),
    }
}

/// One batch of `action` on the account's follows and requests on `side`; returns how many changed (0: none
/// are left).
pub async fn follows(
    tx: &mut Transaction<'_, Any>,
    scope: &Scope<'_>,
    side: Side,
    action: FollowAction,
) -> Result<u64, sqlx::Error> {
    let (mine, theirs) = side.columns();
    let (tenant, account) = (scope.tenant.as_str(), scope.account.get());
    let sql = format!(
        "SELECT {theirs}, rel_status, version, created_at, hidden FROM {} WHERE tenant_id = ? AND {mine} = ? \
         AND {} LIMIT ?{}",
        side.following(scope.kind),
        condition(action, side),
        scope.lock(false)
    );
    let rows = sqlx::query(&sql).bind(tenant).bind(account).bind(i64::from(scope.limit)).fetch_all(&mut **tx).await?;
    if rows.is_empty() {
        return Ok(0);
    }
    let counterparts: Vec<i64> = rows.iter().map(|r| r.try_get(0)).collect::<Result<_, _>>()?;
    // Whether each counterpart's reverse edge is a follow: the events' `followed_back`.
    let followed_back = reverse_follows(tx, scope, side, &counterparts).await?;
    // A restore brings an edge back only while its other end is active, read under a shared lock: a
    // suspension or deletion of it starting meanwhile either waits for this batch (and then ends what it
    // restored) or is seen here.
    let inactive = match action {
        FollowAction::Restore => inactive_accounts(tx, scope, &counterparts).await?,
        FollowAction::End | FollowAction::Hide => Vec::new(),
    };
    let mut written = Vec::with_capacity(rows.len());
    let mut events = Vec::with_capacity(rows.len());
    let mut counts = CountChanges::default();
    for row in &rows {
        let counterpart: i64 = row.try_get(0)?;
        let (status, version, created_at, hidden) = (
            RelStatus::from_stored(row.try_get(1)?)?,
            row.try_get::<i64, _>(2)?,
            row.try_get::<i64, _>(3)?,
            RelStatus::from_stored(row.try_get(4)?)?,
        );
        let (new_status, new_hidden) = match action {
            FollowAction::End => (RelStatus::None, RelStatus::None),
            FollowAction::Hide => (RelStatus::None, status),
            FollowAction::Restore => {
                // Suspended or deleted: the same to a restore.
                let state =
                    if inactive.contains(&counterpart) { AccountState::Suspended } else { AccountState::Active };
                match rules::restored(hidden, state) {
                    Some(restored) => (restored, RelStatus::None),
                    None => continue,
                }
            }
        };
        let was = if action == FollowAction::Restore { RelStatus::None } else { status };
        let event_type = rules::event_of(was, new_status, side);
        let (from, to) = side.edge(account, counterpart);
        counts.edge(from, to, status, new_status);
        written.push(format!(
            "('{tenant}', {from}, {to}, {new_status}, {}, {created_at}, {}, {new_hidden})",
            version + 1,
            scope.at_ms
        ));
        let (version, at_ms, actor) = (version + 1, scope.at_ms, account);
        let followed_back = followed_back.contains(&counterpart);
        events.push(ChangeEvent::new(Changed { tenant, event_type, from, to, version, at_ms, followed_back, actor }));
    }
    if !written.is_empty() {
        write_follows(tx, scope, &written, action == FollowAction::End, &events, &counts).await?;
    }
    Ok(rows.len() as u64)
}

/// Writes a batch's follow rows — `(tenant, from, to, rel_status, version, created_at, updated_at, hidden)`
/// literals —, their events and the follow counts they change, in one round trip. An ended follow keeps its
/// start (lists and a restore keep its time); one that begins takes the row's `created_at`. A deletion's
/// (`erasing`) are written as the erase step leaves a row, with no start and no time, sparing that step a
/// second pass over every edge — but for a row with a block's flag, which that step clears once the block
/// has ended with its event.
async fn write_follows(
    tx: &mut Transaction<'_, Any>,
    scope: &Scope<'_>,
    rows: &[String],
    erasing: bool,
    events: &[ChangeEvent],
    counts: &CountChanges,
) -> Result<(), sqlx::Error> {
    let kind = scope.kind;
    let (start, time) = (kind.inserted("created_at"), kind.inserted("updated_at"));
    let times = match erasing {
        true => format!(
            "created_at = CASE WHEN blocked = 0 THEN 0 ELSE created_at END, \
             updated_at = CASE WHEN blocked = 0 THEN 0 ELSE {time} END"
        ),
        false => format!(
            "created_at = CASE WHEN {} = {NONE} THEN created_at ELSE {start} END, updated_at = {time}",
            kind.inserted("rel_status")
        ),
    };
    let assignments = ["rel_status", "version", "hidden"].map(|c| format!("{c} = {}", kind.inserted(c))).join(", ");
    let mut statements = format!(
        "INSERT INTO following (tenant_id, from_user_id, to_user_id, rel_status, version, created_at, updated_at, \
         hidden) VALUES {}{}{times}, {assignments};",
        rows.join(", "),
        kind.on_conflict_update(&["tenant_id", "from_user_id", "to_user_id"])
    );
    statements.push_str(&counts.statement(kind, scope.tenant));
    statements.push_str(&outbox::insert(kind, &events.iter().collect::<Vec<_>>(), scope.at_ms));
    tx.execute(statements.as_str()).await?;
    Ok(())
}

/// Which of `counterparts` have a follow of the reverse edge (shared-locked: the events say it).
async fn reverse_follows(
    tx: &mut Transaction<'_, Any>,
    scope: &Scope<'_>,
    side: Side,
    counterparts: &[i64],
) -> Result<Vec<i64>, sqlx::Error> {
    let (mine, theirs) = side.columns();
    let list = ids(counterparts);
    // The reverse of an edge on `side` has the account in the other column.
    let sql = format!(
        "SELECT {mine} FROM following WHERE tenant_id = ? AND {theirs} = ? AND {mine} IN ({list}) AND rel_status = \
         {ACTIVE}{}",
        scope.lock(true)
    );
    sqlx::query_scalar(&sql).bind(scope.tenant.as_str()).bind(scope.account.get()).fetch_all(&mut **tx).await
}

/// Which of `users` are suspended or deleted, their account rows shared-locked.
async fn inactive_accounts(
    tx: &mut Transaction<'_, Any>,
    scope: &Scope<'_>,
    users: &[i64],
) -> Result<Vec<i64>, sqlx::Error> {
    let sql = format!(
        "SELECT user_id FROM account_settings WHERE tenant_id = ? AND user_id IN ({}) AND state <> {}{}",
        ids(users),
        AccountState::Active.stored(),
        scope.lock(true)
    );
    sqlx::query_scalar(&sql).bind(scope.tenant.as_str()).fetch_all(&mut **tx).await
}

fn ids(values: &[i64]) -> String {
    values.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
}

/// How many blocks or mutes (`relation`) of the account on `side` hold.
pub async fn relations_left(
    db: &Database,
    scope: &Scope<'_>,
    relation: Relation,
    side: Side,
) -> Result<i64, sqlx::Error> {
    let (mine, _) = side.columns();
    let sql = format!(
        "SELECT COUNT(*) FROM {} WHERE tenant_id = ? AND {mine} = ? AND rel_status = {ACTIVE}",
        table(relation)
    );
    sqlx::query_scalar(&sql).bind(scope.tenant.as_str()).bind(scope.account.get()).fetch_one(db.reader()).await
}

/// One batch ending the blocks or mutes (`relation`) of the account on `side`, each with its `unblock` or
/// `unmute`; returns how many ended. A block's flag on its follow row goes with the row when it is erased.
pub async fn end_relations(
    tx: &mut Transaction<'_, Any>,
    scope: &Scope<'_>,
    relation: Relation,
    side: Side,
) -> Result<u64, sqlx::Error> {
    let (mine, theirs) = side.columns();
    let (tenant, account) = (scope.tenant.as_str(), scope.account.get());
    let table = table(relation);
    let sql = format!(
        "SELECT {theirs}, version FROM {table} WHERE tenant_id = ? AND {mine} = ? AND rel_status = {ACTIVE} \
         LIMIT ?{}",
        scope.lock(false)
    );
    let rows = sqlx::query(&sql).bind(tenant).bind(account).bind(i64::from(scope.limit)).fetch_all(&mut **tx).await?;
    if rows.is_empty() {
        return Ok(0);
    }
    let event_type = if relation == Relation::Block { EventType::Unblock } else { EventType::Unmute };
    let mut events = Vec::with_capacity(rows.len());
    let mut statements = String::new();
    for row in &rows {
        let (counterpart, version): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
        let (from, to) = side.edge(account, counterpart);
        statements.push_str(&format!(
            "UPDATE {table} SET rel_status = {NONE}, version = {}, updated_at = {} WHERE tenant_id = '{tenant}' AND \
             from_user_id = {from} AND to_user_id = {to};",
            version + 1,
            scope.at_ms
        ));
        let (version, at_ms, followed_back, actor) = (version + 1, scope.at_ms, false, account);
        events.push(ChangeEvent::new(Changed { tenant, event_type, from, to, version, at_ms, followed_back, actor }));
    }
    statements.push_str(&outbox::insert(scope.kind, &events.iter().collect::<Vec<_>>(), scope.at_ms));
    tx.execute(statements.as_str()).await?;
    Ok(rows.len() as u64)
}

/// One batch erasing what the account's rows say (every relation both ways — run after every relation ended
/// with its event); returns how many rows were erased. Each row keeps only its pair's ids and last version, at
/// status 0 — what every projection keeps of an ended pair too: a projection built again from the truth while
/// the deletion's events are still on their way then finds each pair's version and skips them (a row deleted
/// outright would leave no floor, and the events would count again in the new space).
pub async fn erase(tx: &mut Transaction<'_, Any>, scope: &Scope<'_>) -> Result<u64, sqlx::Error> {
    let (tenant, account) = (scope.tenant.as_str(), scope.account.get());
    for relation in [Relation::Follow, Relation::Block, Relation::Mute] {
        for side in [Side::Incoming, Side::Outgoing] {
            let (mine, theirs) = side.columns();
            let table = table(relation);
            // An erased row has no time left, so the rows a batch erased leave the range the next one reads (an
            // index range on `following`'s side indexes). Rows a lock created and nothing wrote have none either.
            let from = if relation == Relation::Follow { side.following(scope.kind) } else { table.to_owned() };
            let sql = format!(
                "SELECT {theirs} FROM {from} WHERE tenant_id = ? AND {mine} = ? AND rel_status = {NONE} AND \
                 created_at > 0 LIMIT ?"
            );
            let counterparts: Vec<i64> = sqlx::query_scalar(&sql)
                .bind(tenant)
                .bind(account)
                .bind(i64::from(scope.limit))
                .fetch_all(&mut **tx)
                .await?;
            if !counterparts.is_empty() {
                let own = match relation {
                    Relation::Follow => ", hidden = 0, blocked = 0",
                    Relation::Block => "",
                    Relation::Mute => ", expires_at = NULL, notifications = 0",
                };
                let sql = format!(
                    "UPDATE {table} SET rel_status = {NONE}, created_at = 0, updated_at = 0{own} WHERE tenant_id = ? \
                     AND {mine} = ? AND {theirs} IN ({})",
                    ids(&counterparts)
                );
                sqlx::query(&sql).bind(tenant).bind(account).execute(&mut **tx).await?;
                return Ok(counterparts.len() as u64);
            }
        }
    }
    Ok(0)
}

/// How many of the account's follows on `side` a move has left.
pub async fn moves_left(db: &Database, scope: &Scope<'_>, side: Side) -> Result<i64, sqlx::Error> {
    let (mine, _) = side.columns();
    let sql = format!(
        "SELECT COUNT(*) FROM {} WHERE tenant_id = ? AND {mine} = ? AND rel_status = {ACTIVE}",
        side.following(scope.kind)
    );
    sqlx::query_scalar(&sql).bind(scope.tenant.as_str()).bind(scope.account.get()).fetch_one(db.reader()).await
}

/// One batch of a move of the account's follows on `side` to `destination`: each follow `X → account`
/// (incoming) becomes `X → destination`, or `account → Y` (outgoing) becomes `destination → Y` — a follow,
/// a request where the new target is private, nothing where a block holds either way or the counterpart is not
/// active — and the old follow ends; each change with its event. Returns how many follows were moved off.
pub async fn move_follows(
    tx: &mut Transaction<'_, Any>,
    scope: &Scope<'_>,
    side: Side,
    destination: UserId,
) -> Result<u64, sqlx::Error> {
    let (mine, theirs) = side.columns();
    let (tenant, account_id, kind) = (scope.tenant.as_str(), scope.account.get(), scope.kind);
    let sql = format!(
        "SELECT {theirs}, version FROM {} WHERE tenant_id = ? AND {mine} = ? AND rel_status = {ACTIVE} \
         LIMIT ?{}",
        side.following(kind),
        scope.lock(false)
    );
    let old = sqlx::query(&sql).bind(tenant).bind(account_id).bind(i64::from(scope.limit)).fetch_all(&mut **tx).await?;
    if old.is_empty() {
        return Ok(0);
    }
    let counterparts: Vec<i64> = old.iter().map(|r| r.try_get(0)).collect::<Result<_, _>>()?;
    let list = ids(&counterparts);
    let dest = destination.get();
    // The new edges' rows, created (at RelStatus::None, version 0) when missing so they are locked like a follow's.
    if kind.has_row_locks() {
        let rows: Vec<String> = counterparts
            .iter()
            .map(|c| {
                let (from, to) = side.edge(dest, *c);
                format!("('{tenant}', {from}, {to}, {NONE}, 0, {at}, {at})", at = scope.at_ms)
            })
            .collect();
        let create = format!(
            "INSERT INTO following (tenant_id, from_user_id, to_user_id, rel_status, version, created_at, updated_at) \
             VALUES {}{}rel_status = rel_status",
            rows.join(", "),
            kind.on_conflict_update(&["tenant_id", "from_user_id", "to_user_id"])
        );
        tx.execute(create.as_str()).await?;
    }
    let new_edges = format!(
        "SELECT {theirs}, rel_status, version, blocked FROM following WHERE tenant_id = ? AND {mine} = ? AND {theirs} \
         IN ({list}){}",
        scope.lock(false)
    );
    let new_rows = pair_rows(sqlx::query(&new_edges).bind(tenant).bind(dest).fetch_all(&mut **tx).await?)?;
    // The destination's reverse edges: a block by the other end, and whether it follows back.
    let reverse = format!(
        "SELECT {mine}, rel_status, version, blocked FROM following WHERE tenant_id = ? AND {theirs} = ? AND {mine} \
         IN ({list}){}",
        scope.lock(true)
    );
    let reverse_rows = pair_rows(sqlx::query(&reverse).bind(tenant).bind(dest).fetch_all(&mut **tx).await?)?;
    let old_followed_back = reverse_follows(tx, scope, side, &counterparts).await?;
    // Every account's state and privacy that decides: the counterparts' and the destination's.
    let accounts = format!(
        "SELECT user_id, private, state FROM account_settings WHERE tenant_id = ? AND user_id IN ({list}, {dest}){}",
        scope.lock(true)
    );
    let mut account_of = std::collections::HashMap::new();
    for row in sqlx::query(&accounts).bind(tenant).fetch_all(&mut **tx).await? {
        let state = AccountState::from_stored(row.try_get(2)?);
        account_of.insert(row.try_get::<i64, _>(0)?, (row.try_get::<i64, _>(1)? == 1, state));
    }
    let account = |user: i64| account_of.get(&user).copied().unwrap_or((false, AccountState::Active));
    let (dest_private, dest_state) = account(dest);
    let (mut written, mut events, mut counts) = (Vec::new(), Vec::new(), CountChanges::default());
    let at = scope.at_ms;
    for row in &old {
        let (counterpart, version): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
        let new = new_rows.get(&counterpart).copied().unwrap_or_default();
        let reverse = reverse_rows.get(&counterpart).copied().unwrap_or_default();
        let (from, to) = side.edge(dest, counterpart);
        // The new edge as a follow of its own, by the one rule table (a block either way, an inactive end, a
        // follow that holds, a request still to be approved: no change).
        let state_of = |user: i64| if user == dest { dest_state } else { account(user).1 };
        let target_private = if to == dest { dest_private } else { account(to).0 };
        let pair =
            PairState { status: new.status, version: new.version, blocked: new.blocked, blocked_back: reverse.blocked };
        // An id the truth holds is positive; one that is not is a corrupt row, the batch's error.
        let user = |id: i64| UserId::try_from(id).map_err(|e| sqlx::Error::Decode(Box::new(e)));
        let states = [state_of(from), state_of(to)];
        // Refused (a block, an inactive end, the destination itself): no new edge; the old one still ends.
        let decided = follow_by_host(scope.tenant, (user(from)?, user(to)?), pair, states, target_private);
        if let Ok(Some(status)) = decided {
            let event_type = if status == RelStatus::Active { EventType::Follow } else { EventType::FollowRequested };
            written.push(format!("('{tenant}', {from}, {to}, {status}, {}, {at}, {at}, 0)", new.version + 1));
            counts.edge(from, to, new.status, status);
            let back = reverse.status == RelStatus::Active;
            let (version, at_ms, followed_back, actor) = (new.version + 1, at, back, account_id);
            events.push(ChangeEvent::new(Changed {
                tenant,
                event_type,
                from,
                to,
                version,
                at_ms,
                followed_back,
                actor,
            }));
        }
        let (old_from, old_to) = side.edge(account_id, counterpart);
        written.push(format!("('{tenant}', {old_from}, {old_to}, {NONE}, {}, {at}, {at}, 0)", version + 1));
        counts.edge(old_from, old_to, RelStatus::Active, RelStatus::None);
        let (event_type, from, to, version) = (EventType::Unfollow, old_from, old_to, version + 1);
        let (at_ms, followed_back, actor) = (at, old_followed_back.contains(&counterpart), account_id);
        events.push(ChangeEvent::new(Changed { tenant, event_type, from, to, version, at_ms, followed_back, actor }));
    }
    write_follows(tx, scope, &written, false, &events, &counts).await?;
    Ok(old.len() as u64)
}

/// A follow row of a pair as a move reads it.
#[derive(Debug, Clone, Copy, Default)]
struct PairRow {
    status: RelStatus,
    version: i64,
    blocked: bool,
}

/// Rows of (counterpart, rel_status, version, blocked) by counterpart.
fn pair_rows(rows: Vec<sqlx::any::AnyRow>) -> Result<std::collections::HashMap<i64, PairRow>, sqlx::Error> {
    rows.iter()
        .map(|row| {
            let pair = PairRow {
                status: RelStatus::from_stored(row.try_get(1)?)?,
                version: row.try_get(2)?,
                blocked: row.try_get::<i64, _>(3)? == 1,
            };
            Ok((row.try_get::<i64, _>(0)?, pair))
        })
        .collect()
}
