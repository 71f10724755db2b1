//! A parked tenant's parked events tried again: in the background, one try per tenant at a time, so a tenant
//! whose projector spins on every try never holds up the live batches; whether it is drained (and goes
//! back to the live path) is decided between batches, so none of its live events slips past its parked ones.

use tokio::task::JoinHandle;

use super::{GivenUp, ParkReason, PluginProjection};
use crate::graph::TenantId;
use crate::plugins::RelationEvent;
use crate::projection::events::{relation_event, Unprojectable};
use crate::projection::parked::{ParkedEvent, MAX_ATTEMPTS};
use crate::projection::projector::PluginProjectionError;
use crate::util::parking::Retry;

/// How a try of a parked tenant's parked events ended (its failures of the database aside).
pub(super) enum Tried {
    /// The events tried were applied (or none were parked).
    Applied,
    /// They are tried again at `next`, but for those `given_up`, for the worker to dead-letter.
    Failed { next: Retry, given_up: Vec<GivenUp> },
}

impl PluginProjection {
    /// Whether a parked tenant's parked events are due to be tried again: between every two live batches while
    /// they drain, so a tenant with a long backlog (a celebrity's deletion) catches up at the pace of the live
    /// path, one parked batch per live batch, instead of one per sweep.
    /// Also when a retry running in the background has ended, to be taken in.
    pub fn retry_due(&self) -> bool {
        !self.due().is_empty() || self.lock().retries.values().any(JoinHandle::is_finished)
    }

    fn due(&self) -> Vec<(TenantId, Retry)> {
        let fence = self.lock();
        let building = |t: &TenantId| fence.builds.keys().any(|(b, _)| b == t);
        self.held.due(|t| !building(t) && !fence.retries.contains_key(t))
    }

    /// Starts, in the background, a try of each due parked tenant's oldest parked events, and takes in the
    /// tries that ended; returns the events tried too often (see [`PluginProjection::maintain`]). A held
    /// tenant's retry never holds up the live batches: a neighbour whose plugin spins to its budget on
    /// every try spins beside them. Whether a tenant is drained (and goes back to the live path) is decided
    /// here, between batches, so none of its live events slips past its parked ones.
    pub async fn retry_parked(&self) -> Result<Vec<GivenUp>, PluginProjectionError> {
        for (tenant, retry) in self.due() {
            let this = self.clone();
            let task = tokio::spawn({
                let tenant = tenant.clone();
                async move { this.try_parked(&tenant, retry).await }
            });
            self.lock().retries.insert(tenant, task);
        }
        let (mut given_up, mut failed) = (Vec::new(), None);
        for (tenant, tried) in self.reap_retries() {
            // Every ended try is taken in; the first failure is reported after.
            match self.retried(&tenant, tried).await {
                Ok(more) => given_up.extend(more),
                Err(error) => failed = failed.or(Some(error)),
            }
        }
        match failed {
            // What was given up meanwhile is dead-lettered at the next pass (still parked until then).
            Some(error) => Err(error),
            None => Ok(given_up),
        }
    }

    /// The background retries that ended, with how.
    fn reap_retries(&self) -> Vec<(TenantId, Result<Tried, PluginProjectionError>)> {
        let mut fence = self.lock();
        let ended: Vec<TenantId> =
            fence.retries.iter().filter(|(_, task)| task.is_finished()).map(|(t, _)| t.clone()).collect();
        let mut reaped = Vec::new();
        for tenant in ended {
            let Some(task) = fence.retries.remove(&tenant) else { continue };
            // A finished task's result is ready: no waiting under the lock.
            let tried = match futures::FutureExt::now_or_never(task) {
                Some(Ok(tried)) => tried,
                Some(Err(join)) => Err(PluginProjectionError::Stopped(join.to_string())),
                None => continue,
            };
            reaped.push((tenant, tried));
        }
        reaped
    }

    /// Takes in how `tenant`'s retry ended: drained, it is no longer held; else it is tried again later.
    async fn retried(
        &self,
        tenant: &TenantId,
        tried: Result<Tried, PluginProjectionError>,
    ) -> Result<Vec<GivenUp>, PluginProjectionError> {
        match tried {
            Ok(Tried::Applied) => {
                // Drained, the tenant goes back to the live path at once: held a sweep longer, each of its
                // later events would be parked behind nothing and wait that sweep (2 s a follow, measured).
                if self.parked.oldest(tenant.as_str()).await?.is_empty() {
                    self.held.drained(tenant);
                    tracing::info!(projector = %self.plugin(), %tenant, "every parked event of the tenant is applied");
                } else {
                    self.held.retry_now(tenant);
                }
                Ok(Vec::new())
            }
            Ok(Tried::Failed { next, given_up }) => {
                self.held.next_try(tenant.clone(), next);
                Ok(given_up)
            }
            Err(error) => {
                self.held.failed(tenant);
                Err(error)
            }
        }
    }

    /// Tries `tenant`'s oldest parked events once (in the background: see
    /// [`PluginProjection::retry_parked`]).
    async fn try_parked(&self, tenant: &TenantId, retry: Retry) -> Result<Tried, PluginProjectionError> {
        let parked = self.parked.oldest(tenant.as_str()).await?;
        if parked.is_empty() {
            return Ok(Tried::Applied);
        }
        let batch: Vec<RelationEvent> =
            parked.iter().map(|p| relation_event(&p.event)).collect::<Result<_, Unprojectable>>()?;
        // Tried alone, beside the live path: nothing to be outpaced by.
        let held = match self.reason_to_park(tenant, &batch, std::future::pending()).await? {
            None => {
                self.parked.remove(&parked.iter().map(|p| p.id).collect::<Vec<_>>()).await?;
                return Ok(Tried::Applied);
            }
            Some(held) => held,
        };
        // A poison event is the one to blame, a full space each event; slowness or a build, none (never
        // dead-lettered for them).
        let blamed: Vec<&ParkedEvent> = match &held {
            ParkReason::Poison(poison) | ParkReason::Refused(poison) => {
                parked.iter().filter(|p| p.event.event_id == poison.event_id).collect()
            }
            ParkReason::OverQuota { .. } => parked.iter().collect(),
            ParkReason::OverBudget(_) | ParkReason::Outpaced(_) | ParkReason::Building(_) => Vec::new(),
        };
        let failed = held.to_string();
        self.parked.failed(&blamed.iter().map(|p| p.id).collect::<Vec<_>>(), &failed).await?;
        let given_up: Vec<GivenUp> = blamed
            .into_iter()
            .filter(|p| matches!(held, ParkReason::Refused(_)) || p.attempts + 1 >= MAX_ATTEMPTS)
            .map(|p| GivenUp { event: p.event.clone(), payload: p.payload.clone(), reason: failed.clone(), id: p.id })
            .collect();
        // Slowness may be the machine's (its CPU taken by others), not the events': tried again after as long
        // as the try took (its tries run at most half the time); the rest are tried again soon
        // once the blamed events are given up (the next may well apply).
        let next = match held {
            ParkReason::OverBudget(_) | ParkReason::Outpaced(_) => retry.after(self.budget),
            _ if !given_up.is_empty() => retry.soon(),
            ParkReason::Poison(_) | ParkReason::Refused(_) | ParkReason::OverQuota { .. } | ParkReason::Building(_) => {
                retry.after_failure()
            }
        };
        let retry_in = next.wait();
        tracing::warn!(projector = %self.plugin(), %tenant, reason = %failed, ?retry_in, "parked events still cannot be applied");
        Ok(Tried::Failed { next, given_up })
    }
}
