//! What the registry reads from and writes to the `plugins` table beside its queries: the row a deploy
//! stores, retiring a slot's versions, and a version's stored limits and readable spaces.

use sqlx::Row;

use super::version::{VersionLimits, VersionState};
use crate::plugins::runtime::{PluginLimits, PluginRuntime};
use crate::plugins::{PluginSlot, Readable};

/// How often a deploy that lost the race for its version number to another node tries again.
pub(super) const DEPLOY_ATTEMPTS: u32 = 5;

/// What a deploy stores beside the component.
pub(super) struct StoredRow<'a> {
    pub(super) state: VersionState,
    pub(super) canary: Option<u8>,
    pub(super) listed: VersionLimits,
    pub(super) sha256: &'a str,
    pub(super) created_at: i64,
    /// The readable spaces, as JSON.
    pub(super) readable: &'a str,
}

/// Which of a slot's versions [`retire`] sets inactive.
#[derive(Clone, Copy)]
pub(super) enum Retired {
    /// The active one and a canary or shadow.
    All,
    /// A canary or shadow, if one runs.
    Candidate,
}

pub(super) async fn retire(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    slot: &PluginSlot,
    which: Retired,
) -> Result<(), sqlx::Error> {
    let only = match which {
        Retired::All => "",
        Retired::Candidate => " AND state IN ('canary', 'shadow')",
    };
    let update = format!(
        "UPDATE plugins SET state = 'inactive', canary_percent = NULL WHERE tenant_id = ? AND kind = ? AND name = ?{only}"
    );
    sqlx::query(&update)
        .bind(slot.tenant.as_str())
        .bind(slot.kind.as_str())
        .bind(&slot.name)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// The limits stored with a version in `row`'s columns `first..first + 3` (deadline, memory, fuel); a
/// version deployed before limits were stored has none and runs with the defaults.
pub(super) fn stored_limits(
    runtime: &PluginRuntime,
    row: &sqlx::any::AnyRow,
    first: usize,
) -> Result<PluginLimits, sqlx::Error> {
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
pub(super) fn stored_readable(row: &sqlx::any::AnyRow, at: usize) -> Result<Vec<Readable>, sqlx::Error> {
    serde_json::from_str(&row.try_get::<String, _>(at)?).map_err(|e| sqlx::Error::Decode(e.into()))
}
