//! Every statement the registry runs on the `plugins` table: the versions that serve, a stored version's
//! component and limits, the next version stored, a slot's versions retired, activated or removed.

use sqlx::Row;

use super::version::{PluginVersion, RolloutStage, VersionLimits, VersionState};
use crate::db::Database;
use crate::graph::TenantId;
use crate::plugins::runtime::{PluginLimits, PluginRuntime};
use crate::plugins::{PluginSlot, Readable};
use crate::util::time::rfc3339_millis;

/// How often a deploy that lost the race for its version number to another node tries again.
pub(super) const DEPLOY_ATTEMPTS: u32 = 5;

/// A version the table says serves its slot: the active one, or a running canary or shadow (`staged`).
pub(super) struct Serving {
    pub(super) slot: PluginSlot,
    pub(super) version: i64,
    pub(super) staged: Option<RolloutStage>,
}

/// A stored version's component and what it runs with.
pub(super) struct StoredComponent {
    pub(super) wasm: Vec<u8>,
    pub(super) limits: PluginLimits,
    pub(super) readable: Vec<Readable>,
    pub(super) history: bool,
}

/// What a deploy stores beside the component.
pub(super) struct StoredRow<'a> {
    pub(super) state: VersionState,
    pub(super) canary: Option<u8>,
    pub(super) listed: VersionLimits,
    pub(super) sha256: &'a str,
    pub(super) created_at: i64,
    /// The readable spaces, as JSON.
    pub(super) readable: &'a str,
    pub(super) history: bool,
}

/// Which of a slot's versions [`retire`] sets inactive.
#[derive(Clone, Copy)]
pub(super) enum Retired {
    /// The active one and a canary or shadow.
    All,
    /// A canary or shadow, if one runs.
    Candidate,
}

/// The versions that serve: each slot's active one and its running canary or shadow.
pub(super) async fn serving(db: &Database) -> Result<Vec<Serving>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT tenant_id, kind, name, version, state, canary_percent FROM plugins WHERE state IN (?, ?, ?)",
    )
    .bind(VersionState::Active.as_str())
    .bind(VersionState::Canary.as_str())
    .bind(VersionState::Shadow.as_str())
    .fetch_all(db.reader())
    .await?;
    let mut stored = Vec::with_capacity(rows.len());
    for row in rows {
        let (tenant, kind, name): (String, String, String) = (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
        let (version, state, percent): (i64, String, Option<i64>) = (row.try_get(3)?, row.try_get(4)?, row.try_get(5)?);
        let staged = match state.parse()? {
            VersionState::Canary => Some(RolloutStage::Canary(percent.and_then(|p| u8::try_from(p).ok()).unwrap_or(0))),
            VersionState::Shadow => Some(RolloutStage::Shadow),
            VersionState::Active | VersionState::Inactive => None,
        };
        let (Ok(tenant), Ok(kind)) = (tenant.parse(), kind.parse()) else {
            tracing::error!(%tenant, %kind, version, "ignoring an unreadable plugins row");
            continue;
        };
        stored.push(Serving { slot: PluginSlot { tenant, kind, name }, version, staged });
    }
    Ok(stored)
}

/// `slot`'s stored `version`, if it is kept.
pub(super) async fn component(
    db: &Database,
    runtime: &PluginRuntime,
    slot: &PluginSlot,
    version: i64,
) -> Result<Option<StoredComponent>, sqlx::Error> {
    let row = sqlx::query(
        "SELECT wasm, deadline_ms, memory_bytes, fuel, readable, history FROM plugins \
         WHERE tenant_id = ? AND kind = ? AND name = ? AND version = ?",
    )
    .bind(slot.tenant.as_str())
    .bind(slot.kind.as_str())
    .bind(&slot.name)
    .bind(version)
    .fetch_optional(db.reader())
    .await?;
    row.map(|row| {
        Ok(StoredComponent {
            wasm: row.try_get(0)?,
            limits: stored_limits(runtime, &row, 1)?,
            readable: stored_readable(&row, 4)?,
            history: row.try_get::<i64, _>(5)? != 0,
        })
    })
    .transpose()
}

/// How many other names of `slot`'s kind its tenant has deployed.
pub(super) async fn other_names(db: &Database, slot: &PluginSlot) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT COUNT(DISTINCT name) FROM plugins WHERE tenant_id = ? AND kind = ? AND name <> ?")
        .bind(slot.tenant.as_str())
        .bind(slot.kind.as_str())
        .bind(&slot.name)
        .fetch_one(db.reader())
        .await
}

/// Stores `wasm` as the slot's next version in one transaction (retiring what `staged` replaces); its
/// number. Another node storing at once may take the same number: a unique violation.
pub(super) async fn insert_next(
    db: &Database,
    slot: &PluginSlot,
    staged: Option<RolloutStage>,
    row: &StoredRow<'_>,
    wasm: &[u8],
) -> Result<i64, sqlx::Error> {
    let mut tx = db.writer().begin().await?;
    let version: i64 = sqlx::query_scalar(
        "SELECT COALESCE(MAX(version), 0) + 1 FROM plugins WHERE tenant_id = ? AND kind = ? AND name = ?",
    )
    .bind(slot.tenant.as_str())
    .bind(slot.kind.as_str())
    .bind(&slot.name)
    .fetch_one(&mut *tx)
    .await?;
    retire(&mut tx, slot, if staged.is_some() { Retired::Candidate } else { Retired::All }).await?;
    sqlx::query(
        "INSERT INTO plugins (tenant_id, kind, name, version, sha256, wasm, state, created_at, deadline_ms, \
         memory_bytes, fuel, canary_percent, readable, history) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(slot.tenant.as_str())
    .bind(slot.kind.as_str())
    .bind(&slot.name)
    .bind(version)
    .bind(row.sha256)
    .bind(wasm)
    .bind(row.state.as_str())
    .bind(row.created_at)
    .bind(i64::try_from(row.listed.deadline_ms).unwrap_or(i64::MAX))
    .bind(i64::try_from(row.listed.memory_bytes).unwrap_or(i64::MAX))
    .bind(row.listed.fuel.map(|fuel| i64::try_from(fuel).unwrap_or(i64::MAX)))
    .bind(row.canary.map(i64::from))
    .bind(row.readable)
    .bind(i64::from(row.history))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(version)
}

/// Makes `version` the slot's only serving version (a rollback, or a promoted canary or shadow).
pub(super) async fn activate(db: &Database, slot: &PluginSlot, version: i64) -> Result<(), sqlx::Error> {
    let mut tx = db.writer().begin().await?;
    retire(&mut tx, slot, Retired::All).await?;
    sqlx::query(
        "UPDATE plugins SET state = ?, canary_percent = NULL \
         WHERE tenant_id = ? AND kind = ? AND name = ? AND version = ?",
    )
    .bind(VersionState::Active.as_str())
    .bind(slot.tenant.as_str())
    .bind(slot.kind.as_str())
    .bind(&slot.name)
    .bind(version)
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// Sets the slot's canary or shadow inactive.
pub(super) async fn retire_candidate(db: &Database, slot: &PluginSlot) -> Result<(), sqlx::Error> {
    let mut tx = db.writer().begin().await?;
    retire(&mut tx, slot, Retired::Candidate).await?;
    tx.commit().await
}

/// Deletes every version of the slot; how many there were.
pub(super) async fn delete(db: &Database, slot: &PluginSlot) -> Result<u64, sqlx::Error> {
    let deleted = sqlx::query("DELETE FROM plugins WHERE tenant_id = ? AND kind = ? AND name = ?")
        .bind(slot.tenant.as_str())
        .bind(slot.kind.as_str())
        .bind(&slot.name)
        .execute(db.writer())
        .await?;
    Ok(deleted.rows_affected())
}

/// Every stored version of the tenant's plugins, as listed.
pub(super) async fn versions(
    db: &Database,
    runtime: &PluginRuntime,
    tenant: &TenantId,
) -> Result<Vec<PluginVersion>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT kind, name, version, sha256, LENGTH(wasm), state, created_at, deadline_ms, memory_bytes, fuel, \
         canary_percent, readable, history FROM plugins WHERE tenant_id = ? ORDER BY kind, name, version",
    )
    .bind(tenant.as_str())
    .fetch_all(db.reader())
    .await?;
    rows.iter()
        .map(|row| {
            Ok(PluginVersion {
                tenant: tenant.to_string(),
                kind: row.try_get::<String, _>(0)?.parse()?,
                name: row.try_get(1)?,
                version: row.try_get(2)?,
                sha256: row.try_get(3)?,
                size_bytes: row.try_get(4)?,
                state: row.try_get::<String, _>(5)?.parse()?,
                created_at: rfc3339_millis(row.try_get(6)?),
                limits: stored_limits(runtime, row, 7)?.into(),
                canary_percent: row.try_get::<Option<i64>, _>(10)?.and_then(|p| u8::try_from(p).ok()),
                readable: stored_readable(row, 11)?,
                history: row.try_get::<i64, _>(12)? != 0,
            })
        })
        .collect()
}

async fn retire(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    slot: &PluginSlot,
    which: Retired,
) -> Result<(), sqlx::Error> {
    let only = match which {
        Retired::All => "",
        Retired::Candidate => " AND state IN (?, ?)",
    };
    let update = format!(
        "UPDATE plugins SET state = ?, canary_percent = NULL WHERE tenant_id = ? AND kind = ? AND name = ?{only}"
    );
    let mut query = sqlx::query(&update)
        .bind(VersionState::Inactive.as_str())
        .bind(slot.tenant.as_str())
        .bind(slot.kind.as_str())
        .bind(&slot.name);
    if let Retired::Candidate = which {
        query = query.bind(VersionState::Canary.as_str()).bind(VersionState::Shadow.as_str());
    }
    query.execute(&mut **tx).await?;
    Ok(())
}

/// The limits stored with a version in `row`'s columns `first..first + 3` (deadline, memory, fuel); a
/// version deployed before limits were stored has none and runs with the defaults.
fn stored_limits(runtime: &PluginRuntime, row: &sqlx::any::AnyRow, first: usize) -> Result<PluginLimits, sqlx::Error> {
    let deadline: Option<i64> = row.try_get(first)?;
    let memory: Option<i64> = row.try_get(first + 1)?;
    let fuel: Option<i64> = row.try_get(first + 2)?;
    let defaults = runtime.limits();
    Ok(match (deadline, memory) {
        (Some(deadline), Some(memory)) => PluginLimits {
            deadline: std::time::Duration::from_millis(deadline.max(1) as u64),
            memory_bytes: usize::try_from(memory).unwrap_or(defaults.memory_bytes),
            fuel: fuel.and_then(|fuel| u64::try_from(fuel).ok()),
        },
        _ => defaults,
    })
}

/// The readable spaces stored with a version in `row`'s column `at`.
fn stored_readable(row: &sqlx::any::AnyRow, at: usize) -> Result<Vec<Readable>, sqlx::Error> {
    serde_json::from_str(&row.try_get::<String, _>(at)?).map_err(|e| sqlx::Error::Decode(e.into()))
}

/// Deletes every slot's inactive versions but its newest `keep`; how many went.
pub(super) async fn prune_inactive(db: &Database, keep: u32) -> Result<u64, sqlx::Error> {
    let slots: Vec<(String, String, String)> =
        sqlx::query_as("SELECT DISTINCT tenant_id, kind, name FROM plugins").fetch_all(db.reader()).await?;
    let inactive = VersionState::Inactive.as_str();
    let mut deleted = 0;
    for (tenant, kind, name) in slots {
        // The newest kept inactive version; every older inactive one goes.
        let oldest_kept: Option<i64> = sqlx::query_scalar(
            "SELECT version FROM plugins WHERE tenant_id = ? AND kind = ? AND name = ? AND state = ? \
             ORDER BY version DESC LIMIT 1 OFFSET ?",
        )
        .bind(&tenant)
        .bind(&kind)
        .bind(&name)
        .bind(inactive)
        .bind(i64::from(keep.max(1)) - 1)
        .fetch_optional(db.reader())
        .await?;
        let Some(oldest_kept) = oldest_kept else { continue };
        deleted += sqlx::query(
            "DELETE FROM plugins WHERE tenant_id = ? AND kind = ? AND name = ? AND state = ? AND version < ?",
        )
        .bind(&tenant)
        .bind(&kind)
        .bind(&name)
        .bind(inactive)
        .bind(oldest_kept)
        .execute(db.writer())
        .await?
        .rows_affected();
    }
    Ok(deleted)
}
