//! Who may take an instance slot now: the pool's instances shared fairly between tenants, and the cores
//! too.

use std::sync::Arc;
use std::time::Duration;

use super::super::error::PluginError;
use super::super::PluginKind;
use super::POOLED_INSTANCES;
use crate::ops::metrics::PLUGIN_POOL_EXHAUSTED;

/// Who may take an instance slot now: at most `share` calls of one tenant at a time, and at most
/// [`POOLED_INSTANCES`] in all; a call waits for both, within its deadline. So one tenant's plugins —
/// spinning to their deadline, say — hold at most their share (the tenant's further calls wait, then fail
/// as `busy` by its own failure policy), and another tenant's call always finds a slot, or fails as the
/// host's condition, never as a trap of its plugin. A burst of one tenant's quick calls just queues.
///
/// Instances bound memory, not CPU: a share of spinning calls would still take every core, and the other
/// tenants' requests (and the database beside them) would wait for a core. So of one tenant's plugins of
/// one kind at most half the cores' worth run at once ([`Admission::running`]); the rest of its share
/// queues for them within its deadline. Per kind, so a tenant's own projector batches never hold up its
/// writes' policy calls.
pub(super) struct Admission {
    pool: Arc<tokio::sync::Semaphore>,
    tenants: std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Semaphore>>>,
    running: std::sync::Mutex<std::collections::HashMap<(String, PluginKind), Arc<tokio::sync::Semaphore>>>,
    share: u32,
}

/// A call's place in its tenant's share, on the cores and in the pool, given back when dropped.
pub(super) struct Admitted {
    _tenant: tokio::sync::OwnedSemaphorePermit,
    _running: tokio::sync::OwnedSemaphorePermit,
    _pool: tokio::sync::OwnedSemaphorePermit,
}

impl Admission {
    pub(super) fn new(share: u32) -> Self {
        Self {
            pool: Arc::new(tokio::sync::Semaphore::new(POOLED_INSTANCES as usize)),
            tenants: Default::default(),
            running: Default::default(),
            share: share.clamp(1, POOLED_INSTANCES),
        }
    }

    /// How many calls of one tenant's plugins of one kind run at once: half the cores, at least one.
    fn running() -> usize {
        std::thread::available_parallelism().map_or(1, |cores| cores.get() / 2).max(1)
    }

    /// Waits, at most `wait`, for a place in `tenant`'s share, on the cores for its `kind`, then in the pool.
    pub(super) async fn enter(&self, tenant: &str, kind: PluginKind, wait: Duration) -> Result<Admitted, PluginError> {
        let deadline = tokio::time::Instant::now() + wait;
        let share = {
            let mut tenants = self.tenants.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let share = self.share as usize;
            tenants.entry(tenant.to_owned()).or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(share))).clone()
        };
        let busy = || PluginError::Busy { tenant: tenant.to_owned(), share: self.share };
        let running = {
            let mut running = self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let cores = Self::running();
            running
                .entry((tenant.to_owned(), kind))
                .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(cores)))
                .clone()
        };
        let own = match tokio::time::timeout_at(deadline, share.acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            _ => return Err(busy()),
        };
        let on_cores = match tokio::time::timeout_at(deadline, running.acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            _ => return Err(busy()),
        };
        match tokio::time::timeout_at(deadline, self.pool.clone().acquire_owned()).await {
            Ok(Ok(pool)) => Ok(Admitted { _tenant: own, _running: on_cores, _pool: pool }),
            _ => {
                metrics::counter!(PLUGIN_POOL_EXHAUSTED.name).increment(1);
                tracing::error!(tenant, "the plugin instance pool is exhausted; the call takes its failure policy");
                Err(PluginError::PoolExhausted(wait))
            }
        }
    }
}
