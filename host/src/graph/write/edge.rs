//! An edge of the graph as the write transaction reads and writes it: one row of `following`, `blocks` or
//! `mutes`, named by its table and pair, and the SQL that reads it under a lock or writes its new state.
//!
//! The statements are rendered with literal values (integers, and a tenant id that was checked to hold only
//! `[A-Za-z0-9._-]` when it was parsed), so several run in one round trip over the text protocol; nothing a
//! caller sent is ever parsed as SQL.

use crate::db::DatabaseKind;
use crate::graph::{TenantId, UserId};
use crate::outbox::Relation;

/// An edge's `rel_status`: stored as an integer (0, 1, 2) in every edge table, shown in SQL as that integer
/// (its `Display`), so statements and the rules compare the same three states by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RelStatus {
    /// The edge does not hold (also a pair never related).
    #[default]
    None,
    /// The edge holds: a follow, a block, a mute.
    Active,
    /// A pending follow request (`following` only).
    Requested,
}

/// The states under plain names, for SQL written with `format!` (which captures plain names only, e.g.
/// `rel_status = {ACTIVE}`).
pub const NONE: RelStatus = RelStatus::None;
pub const ACTIVE: RelStatus = RelStatus::Active;
pub const REQUESTED: RelStatus = RelStatus::Requested;

impl RelStatus {
    /// The column's value.
    pub const fn stored(self) -> i64 {
        match self {
            Self::None => 0,
            Self::Active => 1,
            Self::Requested => 2,
        }
    }

    /// The state a column holds; another value is a row this code did not write (a decode error).
    pub fn from_stored(value: i64) -> Result<Self, sqlx::Error> {
        [Self::None, Self::Active, Self::Requested]
            .into_iter()
            .find(|status| status.stored() == value)
            .ok_or_else(|| sqlx::Error::Decode(format!("rel_status {value} is none of 0, 1, 2").into()))
    }
}

impl std::fmt::Display for RelStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.stored())
    }
}

/// One directed edge: `from` follows, blocks or mutes `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    pub relation: Relation,
    pub from: UserId,
    pub to: UserId,
}

impl Edge {
    pub fn follow(from: UserId, to: UserId) -> Self {
        Self { relation: Relation::Follow, from, to }
    }
    pub fn block(from: UserId, to: UserId) -> Self {
        Self { relation: Relation::Block, from, to }
    }
    pub fn mute(from: UserId, to: UserId) -> Self {
        Self { relation: Relation::Mute, from, to }
    }

    fn table(self) -> &'static str {
        table(self.relation)
    }

    fn key(self, tenant: &TenantId) -> String {
        format!("tenant_id = '{tenant}' AND from_user_id = {} AND to_user_id = {}", self.from, self.to)
    }
}

/// The table holding `relation`'s edges.
pub fn table(relation: Relation) -> &'static str {
    match relation {
        Relation::Follow => "following",
        Relation::Block => "blocks",
        Relation::Mute => "mutes",
    }
}

/// A `following` row a batch wrote (an import's), for the caller's projection of it in the same transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrittenFollow {
    pub from: i64,
    pub to: i64,
    pub status: RelStatus,
    pub version: i64,
    pub created_at: i64,
}

/// An edge's row as the transaction found it (`RelStatus::None` at version 0 when there is no row).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EdgeRow {
    pub status: RelStatus,
    pub version: i64,
    /// When it last began (a follow's time orders lists; a request's, the requests).
    pub created_at: i64,
    /// A mute's end (epoch ms); `None`: never.
    pub expires_at: Option<i64>,
    /// A mute's notifications flag.
    pub notifications: bool,
    /// A follow edge's `blocked` flag: whether `from` blocks `to`. Kept by the pair's blocks and unblocks
    /// beside the follow's own state (no version, no event: the block's own edge has those), so a follow
    /// learns of a block either way from the two follow rows it reads anyway.
    pub blocked: bool,
    /// A follow edge's `hidden`: what a suspension of either user ended (`RelStatus::Active` a follow, `RelStatus::Requested` a
    /// request; `RelStatus::None` nothing), which a restore brings back unless an ending act cleared it meanwhile.
    pub hidden: RelStatus,
}

impl EdgeRow {
    /// Whether the edge holds at `now_ms` (a mute past its end does not).
    pub fn holds(&self, now_ms: i64) -> bool {
        self.status == RelStatus::Active && self.expires_at.is_none_or(|end| end > now_ms)
    }
}

/// How a read takes the edge's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lock {
    /// Exclusive, creating the row first (at `RelStatus::None`, version 0) when missing: concurrent writers of the edge
    /// then queue on its lock instead of deadlocking on a shared-to-exclusive upgrade of a gap lock.
    Create,
    /// Exclusive: the transaction may change it if it exists.
    Exclusive,
    /// Shared, held to commit: the decision depends on it, so nobody may change it meanwhile.
    Shared,
}

/// The statement creating `edge`'s row (at `RelStatus::None`, version 0) when a read takes it with [`Lock::Create`]
/// and it is missing; `None` for other reads, and on SQLite (its one writer needs no row to lock).
pub fn create(kind: DatabaseKind, tenant: &TenantId, edge: Edge, lock: Lock) -> Option<String> {
    (lock == Lock::Create && kind.has_row_locks())
        .then(|| format!("{};", insert(kind, tenant, edge, &EdgeRow::default(), 0, "rel_status = rel_status")))
}

/// The `SELECT` reading `edge` (as result row `label`) under `lock` (`None`: a plain read, outside a
/// transaction), run after its [`create`] as a part of one [`DatabaseKind::union_all`]; every part returns
/// the same eight columns: label, status, version, created_at, expires_at, notifications, blocked, hidden.
pub fn read(kind: DatabaseKind, tenant: &TenantId, label: usize, edge: Edge, lock: Option<Lock>) -> String {
    let (table, key) = (edge.table(), edge.key(tenant));
    let own_columns = match edge.relation {
        Relation::Follow => "NULL, 0, blocked, hidden",
        Relation::Block => "NULL, 0, 0, 0",
        Relation::Mute => "expires_at, notifications, 0, 0",
    };
    let lock_clause = lock.map_or("", |lock| kind.row_lock(lock == Lock::Shared));
    format!("SELECT {label}, rel_status, version, created_at, {own_columns} FROM {table} WHERE {key}{lock_clause}")
}

/// The `SELECT` reading both users' privacy and account state (as result rows `label`, in the edges' eight
/// columns: privacy as the status, state as the version, the user as created_at), shared-locked: an account
/// job changes the state under its exclusive lock before it touches the account's edges, so a relation
/// beginning either commits before the job reads the edges or sees the new state. `locked`: inside the
/// transaction (else a plain read).
pub fn read_accounts(kind: DatabaseKind, tenant: &TenantId, label: usize, users: [UserId; 2], locked: bool) -> String {
    format!(
        "SELECT {label}, private, state, user_id, NULL, 0, 0, 0 FROM account_settings WHERE tenant_id = '{tenant}' \
         AND user_id IN ({}, {}){}",
        users[0],
        users[1],
        if locked { kind.row_lock(true) } else { "" }
    )
}

/// The statement clearing the follow edge `edge`'s `hidden` flag (an ending act met it: a restore must not
/// bring the edge back), under the lock the act's transaction holds on it.
pub fn clear_hidden(tenant: &TenantId, edge: Edge) -> String {
    format!("UPDATE following SET hidden = {NONE} WHERE {};", edge.key(tenant))
}

/// The statement setting the follow edge `edge`'s `blocked` flag, creating its row (never followed: at
/// `RelStatus::None`, version 0) when missing — under the lock the block's transaction holds on it.
pub fn set_blocked(kind: DatabaseKind, tenant: &TenantId, edge: Edge, blocked: bool, now_ms: i64) -> String {
    let blocked = i64::from(blocked);
    format!(
        "INSERT INTO following (tenant_id, from_user_id, to_user_id, rel_status, version, created_at, updated_at, \
         blocked) VALUES ('{tenant}', {}, {}, {NONE}, 0, {now_ms}, {now_ms}, {blocked}){}blocked = {blocked};",
        edge.from,
        edge.to,
        kind.on_conflict_update(&["tenant_id", "from_user_id", "to_user_id"])
    )
}

/// The statement that gives `edge` the state `row` at `now_ms`, creating it if missing.
pub fn write(kind: DatabaseKind, tenant: &TenantId, edge: Edge, row: &EdgeRow, now_ms: i64) -> String {
    let mut assignments =
        ["rel_status", "version", "created_at", "updated_at"].map(|c| format!("{c} = {}", kind.inserted(c))).join(", ");
    if edge.relation == Relation::Mute {
        assignments.push_str(&format!(
            ", expires_at = {}, notifications = {}",
            kind.inserted("expires_at"),
            kind.inserted("notifications")
        ));
    }
    format!("{};", insert(kind, tenant, edge, row, now_ms, &assignments))
}

fn insert(kind: DatabaseKind, tenant: &TenantId, edge: Edge, row: &EdgeRow, now_ms: i64, assignments: &str) -> String {
    let (mut columns, mut values) = (
        "tenant_id, from_user_id, to_user_id, rel_status, version, created_at, updated_at".to_owned(),
        format!(
            "'{tenant}', {}, {}, {}, {}, {}, {now_ms}",
            edge.from, edge.to, row.status, row.version, row.created_at
        ),
    );
    if edge.relation == Relation::Mute {
        columns.push_str(", expires_at, notifications");
        let expires = row.expires_at.map_or_else(|| "NULL".to_owned(), |end| end.to_string());
        values.push_str(&format!(", {expires}, {}", i64::from(row.notifications)));
    }
    let key = ["tenant_id", "from_user_id", "to_user_id"];
    format!("INSERT INTO {} ({columns}) VALUES ({values}){}{assignments}", edge.table(), kind.on_conflict_update(&key))
}
