//! A tenant's policy plugin — its rate limiter or its relation policy — asked about one write: the one call
//! path both share. The version is chosen (a running canary's share of the users, a pinned test version for
//! tenants that allow it), the call observed (its logs and metrics), its outcome counted for the canary's
//! automatic rollback, and the input sampled for `strand plugin test --replay`. A failure is logged once here,
//! and the tenant's failure mode for that policy (its setting) says what the caller does.

use std::future::Future;
use std::sync::Arc;

use super::observed::observed;
use super::registry::{ActivePlugin, Chosen, PluginRegistry};
use super::runtime::{Called, PluginRuntime};
use super::{OnePerTenant, PluginError};
use crate::graph::{TenantId, UserId};
use crate::ops::sample::{InputSample, Sampled};
use crate::tenancy::settings::{FailureMode, TenantConfig, TenantSettings};

/// One kind of tenant policy, with the inputs it samples (`S`).
pub struct PolicyPlugin<S> {
    registry: Arc<PluginRegistry>,
    tenants: Arc<TenantSettings>,
    kind: OnePerTenant,
    /// The tenant setting that says what this policy's failure does.
    failure_mode: fn(&TenantConfig) -> FailureMode,
    sample: InputSample<S>,
}

impl<S: Sampled> PolicyPlugin<S> {
    pub fn new(
        registry: Arc<PluginRegistry>,
        tenants: Arc<TenantSettings>,
        kind: OnePerTenant,
        failure_mode: fn(&TenantConfig) -> FailureMode,
    ) -> Self {
        Self { registry, tenants, kind, failure_mode, sample: InputSample::default() }
    }

    /// The inputs this node samples for replay; its writer runs as a task of the server.
    pub fn sample(&self) -> &InputSample<S> {
        &self.sample
    }

    /// Whether `tenant` deployed a version of its own (or runs a candidate).
    pub fn has_own(&self, tenant: &TenantId) -> bool {
        self.registry.has_own(tenant, self.kind)
    }

    /// The version that decides `user`'s write: a running canary's share of the users, always the same ones;
    /// `pinned`, a version the request asks for (test traffic), only for tenants that allow it.
    pub fn choose(&self, tenant: &TenantId, user: UserId, pinned: Option<i64>) -> Chosen {
        let pinned = pinned.filter(|_| self.tenants.get(tenant).allow_pinned_versions);
        self.registry.choose(tenant, self.kind, &user.to_string(), pinned)
    }

    /// Asks `chosen` about one input through `call` (the typed call of this kind), observed and counted for
    /// the canary's automatic rollback.
    pub async fn ask<'a, T, Fut>(
        &'a self,
        tenant: &TenantId,
        chosen: &'a Chosen,
        call: impl FnOnce(&'a PluginRuntime, &'a ActivePlugin) -> Fut,
    ) -> Result<T, PluginError>
    where
        Fut: Future<Output = Called<Vec<T>>>,
    {
        let plugin = &chosen.plugin;
        let answered = observed(self.registry.logs(), tenant.as_str(), plugin, call(self.registry.runtime(), plugin))
            .await
            .and_then(|answers| {
                answers.into_iter().next().ok_or_else(|| PluginError::InvalidOutput("no answer for the input".into()))
            });
        self.registry.record_outcome(tenant, self.kind, chosen, answered.as_ref().err()).await;
        answered
    }

    /// Keeps `tenant`'s `input` for replay if its sampling rate allows.
    pub fn offer(&self, tenant: &TenantId, input: impl FnOnce() -> S) {
        self.sample.offer(tenant.as_str(), input);
    }

    /// What `tenant` chose to happen when this policy cannot decide, `error` saying why (logged here).
    pub fn on_failure(&self, tenant: &TenantId, error: &(dyn std::error::Error + 'static)) -> FailureMode {
        let mode = (self.failure_mode)(&self.tenants.get(tenant));
        let error = crate::ops::observability::causes(error);
        let policy = self.kind.kind();
        tracing::error!(%tenant, %policy, ?mode, %error, "a tenant policy failed; applying the tenant's failure mode");
        mode
    }
}
