//! The audit log: every change made through the admin API — deploys, rollbacks, removals, settings, tenant
//! keys, JWT keys — with who made it (the admin or a tenant key), the tenant, slot, version and component hash, and
//! how it ended. Refused attempts are recorded too: a log of only what worked hides who tried what.

use serde::{Deserialize, Serialize};
use sqlx::Row;
use utoipa::{IntoParams, ToSchema};

use crate::db::Database;
use crate::graph::TenantId;
use crate::util::time::{now_ms, rfc3339_millis};

/// Longest `detail` kept (the column's size); longer text is cut at a character boundary.
const MAX_DETAIL: usize = 1000;
/// Most entries one page holds.
pub const MAX_PAGE: u32 = 500;

crate::str_enum! {
    /// What was done, as stored and serialised.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum AuditAction("audit action") {
        Deploy = "deploy",
        Rollback = "rollback",
        Remove = "remove",
        SetSettings = "set_settings",
        CreateKey = "create_key",
        RevokeKey = "revoke_key",
        SetJwtKey = "set_jwt_key",
        RemoveJwtKey = "remove_jwt_key",
        Promote = "promote",
        Abort = "abort",
        /// The host aborted a canary or shadow that failed clearly more often than its stable version.
        AutomaticRollback = "automatic_rollback",
        /// An account job started (its kind and account in the detail).
        StartAccountJob = "start_account_job",
        /// A graph imported into the tenant.
        Import = "import",
    }
}

crate::str_enum! {
    /// How it ended, as stored and serialised.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum AuditOutcome("audit outcome") {
        Ok = "ok",
        /// Refused: bad input, a failed conformance run, nothing to roll back to.
        Refused = "refused",
    }
}

/// One change: what [`record`] appends, and what each entry of a page holds.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditRecord {
    /// `admin`, `key:NAME` for a tenant key, or `host` for the host's own (automatic rollbacks).
    pub actor: String,
    pub tenant: String,
    pub action: AuditAction,
    /// `kind/name` for plugin changes.
    pub slot: Option<String>,
    pub version: Option<i64>,
    pub sha256: Option<String>,
    pub outcome: AuditOutcome,
    pub detail: String,
}

/// One entry, as the admin API pages it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditEntry {
    pub id: i64,
    pub at: String,
    #[serde(flatten)]
    pub record: AuditRecord,
}

/// A page of the log, newest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    /// Pass as `before` for the next (older) page; `null` at the end.
    pub next_before: Option<i64>,
}

/// Which entries to page.
#[derive(Debug, Deserialize, IntoParams)]
pub struct AuditQuery {
    /// Only this tenant's (a tenant key always sees only its own).
    pub tenant: Option<String>,
    /// Entries older than this id.
    pub before: Option<i64>,
    /// At most this many (default 50, at most 500).
    pub limit: Option<u32>,
    /// Only this actor's (`admin`, `key:NAME`, `host`).
    pub actor: Option<String>,
    /// Only this action's (`deploy`, `rollback`, `automatic_rollback`…).
    pub action: Option<String>,
    /// Only entries at or after this time (RFC 3339).
    pub since: Option<String>,
    /// Only entries before this time (RFC 3339).
    pub until: Option<String>,
}

/// Which entries a page keeps besides the tenant's, as [`AuditQuery`] gives them, read.
#[derive(Debug, Default, Clone)]
pub struct AuditFilter {
    pub actor: Option<String>,
    pub action: Option<AuditAction>,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
}

/// Why a filter cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum AuditFilterError {
    #[error("{0}")]
    Action(#[from] crate::util::str_enum::UnknownName),
    #[error("`{0}` is not an RFC 3339 time (e.g. 2026-12-07T10:00:00Z)")]
    Time(String),
}

impl AuditQuery {
    /// The filters it asks for, read.
    pub fn filter(&self) -> Result<AuditFilter, AuditFilterError> {
        let time = |text: &Option<String>| {
            text.as_deref()
                .map(|t| {
                    chrono::DateTime::parse_from_rfc3339(t)
                        .map(|at| at.timestamp_millis())
                        .map_err(|_| AuditFilterError::Time(t.to_owned()))
                })
                .transpose()
        };
        Ok(AuditFilter {
            actor: self.actor.clone().filter(|a| !a.is_empty()),
            action: self.action.as_deref().filter(|a| !a.is_empty()).map(str::parse).transpose()?,
            since_ms: time(&self.since)?,
            until_ms: time(&self.until)?,
        })
    }
}

/// Most entries one page looks at to find its filtered ones: a filter that matches little returns a short
/// page (and where to go on) rather than reading the whole log.
const SCANNED: u32 = 5_000;

/// Appends `record` to the log.
pub async fn record(db: &Database, record: AuditRecord) -> Result<(), sqlx::Error> {
    let mut detail = record.detail;
    if detail.len() > MAX_DETAIL {
        let cut = (0..=MAX_DETAIL).rev().find(|&i| detail.is_char_boundary(i)).unwrap_or(0);
        detail.truncate(cut);
    }
    sqlx::query(
        "INSERT INTO audit_log (at, actor, tenant_id, action, slot, version, sha256, outcome, detail) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(now_ms())
    .bind(record.actor)
    .bind(record.tenant)
    .bind(record.action.as_str())
    .bind(record.slot)
    .bind(record.version)
    .bind(record.sha256)
    .bind(record.outcome.as_str())
    .bind(detail)
    .execute(db.writer())
    .await?;
    Ok(())
}

/// A page of entries of `tenant` (every tenant's when `None`) that `filter` keeps, newest first, older than
/// `before`. At most the [`SCANNED`] entries older than `before` are looked at (found by the index alone):
/// a page of a filter that matches few of them may hold fewer than `limit` entries and still say where the
/// next begins.
pub async fn page(
    db: &Database,
    tenant: Option<&TenantId>,
    filter: &AuditFilter,
    before: Option<i64>,
    limit: u32,
) -> Result<AuditPage, sqlx::Error> {
    let limit = limit.clamp(1, MAX_PAGE);
    let before = before.unwrap_or(i64::MAX);
    // Separate statements with and without the tenant, so the tenant's index serves its pages.
    let of_tenant = if tenant.is_some() { "tenant_id = ? AND " } else { "" };
    let floor_sql = format!("SELECT id FROM audit_log WHERE {of_tenant}id < ? ORDER BY id DESC LIMIT 1 OFFSET ?");
    let mut floor = sqlx::query_scalar::<_, i64>(&floor_sql);
    if let Some(tenant) = tenant {
        floor = floor.bind(tenant.as_str());
    }
    // The oldest entry this page may look at; `None`: every older one is within the bound.
    let floor = floor.bind(before).bind(i64::from(SCANNED - 1)).fetch_optional(db.reader()).await?;
    let sql = format!(
        "SELECT id, at, actor, tenant_id, action, slot, version, sha256, outcome, detail FROM audit_log \
         WHERE {of_tenant}id < ? AND id >= ? AND (? IS NULL OR actor = ?) AND (? IS NULL OR action = ?) \
         AND (? IS NULL OR at >= ?) AND (? IS NULL OR at < ?) ORDER BY id DESC LIMIT ?"
    );
    let mut query = sqlx::query(&sql);
    if let Some(tenant) = tenant {
        query = query.bind(tenant.as_str());
    }
    let action = filter.action.map(AuditAction::as_str);
    let rows = query
        .bind(before)
        .bind(floor.unwrap_or(0))
        .bind(filter.actor.as_deref())
        .bind(filter.actor.as_deref())
        .bind(action)
        .bind(action)
        .bind(filter.since_ms)
        .bind(filter.since_ms)
        .bind(filter.until_ms)
        .bind(filter.until_ms)
        .bind(i64::from(limit) + 1)
        .fetch_all(db.reader())
        .await?;
    let mut entries = rows
        .iter()
        .map(|row| {
            let text = |i: usize| row.try_get::<String, _>(i);
            Ok(AuditEntry {
                id: row.try_get(0)?,
                at: rfc3339_millis(row.try_get(1)?),
                record: AuditRecord {
                    actor: text(2)?,
                    tenant: text(3)?,
                    action: text(4)?.parse()?,
                    slot: row.try_get(5)?,
                    version: row.try_get(6)?,
                    sha256: row.try_get(7)?,
                    outcome: text(8)?.parse()?,
                    detail: text(9)?,
                },
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    let next_before = if entries.len() > limit as usize {
        entries.truncate(limit as usize);
        entries.last().map(|e| e.id)
    } else {
        // Short: everything down to the floor was looked at; older entries are the next page's.
        floor
    };
    Ok(AuditPage { entries, next_before })
}
