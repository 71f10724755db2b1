//! A running canary's or shadow's calls counted against its stable version's, and the rollout rolled back
//! by the host when the candidate fails clearly more often — recorded in the audit log, logged and counted.

use super::{Chosen, PluginRegistry};
use crate::graph::TenantId;
use crate::ops::metrics::ROLLOUT_AUTOMATIC_ROLLBACKS;
use crate::plugins::error::PluginError;
use crate::plugins::rollout::{RolloutRates, Tally};
use crate::plugins::slot::{PluginSlot, SINGLETON_NAME};
use crate::plugins::OnePerTenant;
use crate::tenancy::audit::{self, AuditAction, AuditOutcome, AuditRecord};

impl PluginRegistry {
    /// Counts how a call chosen by [`PluginRegistry::choose`] ended (see [`PluginRegistry::record_calls`]).
    /// A failure that is not the plugin's doing ([`PluginError::is_the_plugins`]) is not counted at all.
    pub async fn record_outcome(
        &self,
        tenant: &TenantId,
        kind: OnePerTenant,
        chosen: &Chosen,
        error: Option<&PluginError>,
    ) {
        let Some(canary_version) = chosen.rollout else { return };
        if error.is_some_and(|e| !e.is_the_plugins()) {
            return;
        }
        let failed = error.is_some();
        let slot = PluginSlot { tenant: tenant.clone(), kind: kind.kind(), name: SINGLETON_NAME.to_owned() };
        self.record_calls(&slot, canary_version, chosen.by_canary, Tally { calls: 1, failures: u64::from(failed) })
            .await;
    }

    /// Counts `tally` calls of `slot` during the rollout of `candidate_version`, by the candidate or by the
    /// stable version. A candidate failing clearly more often than its stable version is aborted here,
    /// recorded in the audit log, logged and counted; returns whether that happened.
    pub async fn record_calls(
        &self,
        slot: &PluginSlot,
        candidate_version: i64,
        by_candidate: bool,
        tally: Tally,
    ) -> bool {
        let Some(unhealthy) = self.health.record(slot, candidate_version, by_candidate, tally) else { return false };
        let (tenant, kind) = (&slot.tenant, slot.kind);
        tracing::error!(%tenant, %kind, name = %slot.name, %unhealthy, "rolling the rollout back automatically");
        metrics::counter!(ROLLOUT_AUTOMATIC_ROLLBACKS.name, "tenant" => tenant.to_string(), "kind" => kind.to_string())
            .increment(1);
        let aborted = self.abort(slot.clone()).await;
        let outcome = if aborted.is_ok() { AuditOutcome::Ok } else { AuditOutcome::Refused };
        let detail = match &aborted {
            Ok(()) => unhealthy.to_string(),
            Err(e) => format!("{unhealthy}; the abort failed: {e}"),
        };
        let record = AuditRecord {
            actor: "host".to_owned(),
            tenant: tenant.to_string(),
            action: AuditAction::AutomaticRollback,
            slot: Some(format!("{kind}/{}", slot.name)),
            version: Some(candidate_version),
            sha256: None,
            outcome,
            detail,
        };
        if let Err(error) = audit::record(&self.db, record).await {
            tracing::error!(%tenant, %error, "cannot record an automatic rollback in the audit log");
        }
        aborted.is_ok()
    }

    /// The failure rates of `slot`'s running rollout as this process has seen them in the current window.
    pub fn rollout_rates(&self, slot: &PluginSlot) -> Option<RolloutRates> {
        self.health.rates(slot)
    }
}
