//! Who may take an instance slot now: the pool's instances shared fairly between tenants.

use std::sync::Arc;
use std::time::Duration;

use super::super::error::PluginError;
use super::POOLED_INSTANCES;
use crate::ops::metrics::PLUGIN_POOL_EXHAUSTED;

/// Who may take an instance slot now: at most `share` calls of one tenant at a time, and at most
/// [`POOLED_INSTANCES`] in all; a call waits for both, within its deadline. So one tenant's plugins —
/// spinning to their deadline, say — hold at most their share (the tenant's further calls wait, then fail
/// as `busy` by its own failure policy), and another tenant's call always finds a slot, or fails as the
/// host's condition, never as a trap of its plugin. A burst of one tenant's quick calls just queues.
pub(super) struct Admission {
    pool: Arc<tokio::sync::Semaphore>,
    tenants: std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Semaphore>>>,
    share: u32,
}

/// A call's place in its tenant's share and in the pool, given back when dropped.
pub(super) struct Admitted {
    _tenant: tokio::sync::OwnedSemaphorePermit,
    _pool: tokio::sync::OwnedSemaphorePermit,
}

impl Admission {
    pub(super) fn new(share: u32) -> Self {
        Self {
            pool: Arc::new(tokio::sync::Semaphore::new(POOLED_INSTANCES as usize)),
            tenants: Default::default(),
            share: share.clamp(1, POOLED_INSTANCES),
        }
    }

    /// Waits, at most `wait`, for a place in `tenant`'s share and then in the pool.
    pub(super) async fn enter(&self, tenant: &str, wait: Duration) -> Result<Admitted, PluginError> {
        let deadline = tokio::time::Instant::now() + wait;
        let share = {
            let mut tenants = self.tenants.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let share = self.share as usize;
            tenants.entry(tenant.to_owned()).or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(share))).clone()
        };
        let busy = || PluginError::Busy { tenant: tenant.to_owned(), share: self.share };
        let own = match tokio::time::timeout_at(deadline, share.acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            _ => return Err(busy()),
        };
        match tokio::time::timeout_at(deadline, self.pool.clone().acquire_owned()).await {
            Ok(Ok(pool)) => Ok(Admitted { _tenant: own, _pool: pool }),
            _ => {
                metrics::counter!(PLUGIN_POOL_EXHAUSTED.name).increment(1);
                tracing::error!(tenant, "the plugin instance pool is exhausted; the call takes its failure policy");
                Err(PluginError::PoolExhausted(wait))
            }
        }
    }
}
