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
}

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

/// A page of entries of `tenant` (every tenant's when `None`), newest first, older than `before`.
pub async fn page(
    db: &Database,
    tenant: Option<&TenantId>,
    before: Option<i64>,
    limit: u32,
) -> Result<AuditPage, sqlx::Error> {
    let limit = limit.clamp(1, MAX_PAGE);
    let rows = sqlx::query(
        "SELECT id, at, actor, tenant_id, action, slot, version, sha256, outcome, detail FROM audit_log \
         WHERE (? IS NULL OR tenant_id = ?) AND id < ? ORDER BY id DESC LIMIT ?",
    )
    .bind(tenant.map(TenantId::as_str))
    .bind(tenant.map(TenantId::as_str))
    .bind(before.unwrap_or(i64::MAX))
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
    let more = entries.len() > limit as usize;
    entries.truncate(limit as usize);
    let next_before = if more { entries.last().map(|e| e.id) } else { None };
    Ok(AuditPage { entries, next_before })
}
