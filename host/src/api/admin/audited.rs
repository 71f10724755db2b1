//! The audit decorator: every admin change runs through [`audited`], which records who changed what and
//! how it ended.

use super::*;
use crate::api::problem::ApiError;
use crate::api::AppState;
use crate::graph::TenantId;
use crate::plugins::{PluginSlot, PluginVersion};
use crate::tenancy::audit::{self, AuditAction, AuditOutcome, AuditRecord};

/// A change about to be recorded in the audit log.
pub(super) struct Change {
    pub(super) action: AuditAction,
    pub(super) slot: Option<String>,
    pub(super) version: Option<i64>,
    pub(super) sha256: Option<String>,
    pub(super) detail: String,
}

impl Change {
    pub(super) fn of(action: AuditAction) -> Self {
        Self { action, slot: None, version: None, sha256: None, detail: String::new() }
    }

    pub(super) fn plugin(action: AuditAction, slot: &PluginSlot) -> Self {
        Self { slot: Some(format!("{}/{}", slot.kind, slot.name)), ..Self::of(action) }
    }

    pub(super) fn version(self, version: &PluginVersion) -> Self {
        Self { version: Some(version.version), sha256: Some(version.sha256.clone()), ..self }
    }
}

/// Records `change` of `tenant` by `operator` with how `result` ended, then passes `result` on. A change
/// that cannot be recorded answers the database's error: nothing happens unaudited without saying so.
pub(super) async fn audited<T>(
    state: &AppState,
    operator: &Operator,
    tenant: &TenantId,
    change: Change,
    result: Result<T, ApiError>,
) -> Result<T, ApiError> {
    let (outcome, detail) = match &result {
        Ok(_) => (AuditOutcome::Ok, change.detail),
        Err(error) => (AuditOutcome::Refused, format!("{}: {}", error.code(), error.detail())),
    };
    let record = AuditRecord {
        actor: operator.actor(),
        tenant: tenant.to_string(),
        action: change.action,
        slot: change.slot,
        version: change.version,
        sha256: change.sha256,
        outcome,
        detail,
    };
    audit::record(&state.db, record).await?;
    result
}
