//! A tenant's relation policy, asked per follow (allow, require approval, refuse): the tenant's own plugin
//! when it deployed one — a canary's share of followers by the candidate, outcomes counted for the automatic
//! rollback, logs kept — else the host's own rule ([`PrivateNeedsApproval`], the bundled default's), which
//! costs a follow no plugin call. Blocks are enforced before either is asked.
//!
//! The plugin is asked before the follow's transaction opens, on the truth as it is then — the pair, the
//! target's privacy, both users' exact counts (`follow_counts`) —, and its answer counts only if the
//! transaction finds the same under its locks (`graph::change_under`): a cap holds exactly, and no plugin
//! runs while a connection is held.
//!
//! A plugin that cannot decide (a trap, a deadline, output the host refuses)
//! takes the tenant's failure mode, the rate limiter's: failing open, the host's rule decides; failing
//! closed, the follow is refused as unavailable (503).

mod sample;

use std::sync::Arc;

use crate::graph::{FollowContext, FollowDecision, FollowPolicy, PrivateNeedsApproval, TenantId, UserId, WriteError};
use crate::plugins::{observed, Admission, Chosen, FollowAttempt, OnePerTenant, PluginRegistry};
use crate::tenancy::settings::{FailureMode, TenantSettings};

pub use self::sample::{recent_attempts, AttemptSample, SampledAttempt};

/// Every tenant's relation policy.
pub struct RelationPolicies {
    registry: Arc<PluginRegistry>,
    tenants: Arc<TenantSettings>,
    sample: AttemptSample,
}

/// The policy one follow runs under.
pub enum TenantPolicy<'a> {
    /// The host's rule: the tenant deployed no policy of its own.
    Host,
    /// The tenant's plugin version chosen for this follower.
    Plugin { policies: &'a RelationPolicies, tenant: &'a TenantId, chosen: Chosen },
}

impl RelationPolicies {
    pub fn new(registry: Arc<PluginRegistry>, tenants: Arc<TenantSettings>) -> Self {
        Self { registry, tenants, sample: AttemptSample::default() }
    }

    /// The decided attempts this node samples for replay; its writer runs as a task of the server.
    pub fn sample(&self) -> &AttemptSample {
        &self.sample
    }

    /// The policy `follower`'s follow in `tenant` runs under; `pinned`: a candidate version the request
    /// asks for (test traffic), honoured for tenants that allow it.
    pub fn for_follow<'a>(&'a self, tenant: &'a TenantId, follower: UserId, pinned: Option<i64>) -> TenantPolicy<'a> {
        if !self.registry.has_own(tenant, OnePerTenant::RelationPolicy) {
            return TenantPolicy::Host;
        }
        let pinned = pinned.filter(|_| self.tenants.get(tenant).allow_pinned_versions);
        let chosen = self.registry.choose(tenant, OnePerTenant::RelationPolicy, &follower.to_string(), pinned);
        TenantPolicy::Plugin { policies: self, tenant, chosen }
    }

    /// Asks the chosen plugin about `follow` (its counts exact, read from the truth); never called while a
    /// database connection is held (`graph::change_under`).
    async fn ask(
        &self,
        tenant: &TenantId,
        chosen: &Chosen,
        follow: FollowContext,
    ) -> Result<FollowDecision, WriteError> {
        let attempt = FollowAttempt {
            tenant: tenant.to_string(),
            follower: follow.follower.get(),
            target: follow.target.get(),
            followed_back: follow.followed_back,
            target_private: follow.target_private,
            follower_followings: follow.follower_followings,
            follower_followers: follow.follower_followers,
            target_followers: follow.target_followers,
            now_ms: crate::util::time::now_ms(),
        };
        let plugin = &chosen.plugin;
        let call = self.registry.runtime().admit(&plugin.prepared, plugin.limits, std::slice::from_ref(&attempt));
        let decided = observed(self.registry.logs(), tenant.as_str(), plugin, call).await.map(|mut a| a.remove(0));
        self.registry.record_outcome(tenant, OnePerTenant::RelationPolicy, chosen, decided.as_ref().err()).await;
        let answer = match &decided {
            Ok(Admission::Allow) => "allow",
            Ok(Admission::RequireApproval) => "require_approval",
            Ok(Admission::Refuse(_)) => "refuse",
            Err(_) => "failed",
        };
        self.sample.offer(tenant.as_str(), || SampledAttempt { attempt, answer });
        match decided {
            Ok(Admission::Allow) => Ok(FollowDecision::Allow),
            Ok(Admission::RequireApproval) => Ok(FollowDecision::RequireApproval),
            Ok(Admission::Refuse(refusal)) => Ok(FollowDecision::Refuse { code: refusal.code, reason: refusal.reason }),
            Err(e) => {
                let mode = self.tenants.get(tenant).rate_limit_failure;
                let error = crate::ops::observability::causes(&e);
                tracing::error!(%tenant, ?mode, %error, "the relation policy failed; applying the tenant's failure mode");
                match mode {
                    FailureMode::Open => Ok(PrivateNeedsApproval::admit_now(follow)),
                    FailureMode::Closed => Err(WriteError::PolicyUnavailable),
                }
            }
        }
    }
}

impl FollowPolicy for TenantPolicy<'_> {
    fn rule(&self) -> Option<fn(FollowContext) -> FollowDecision> {
        match self {
            TenantPolicy::Host => Some(PrivateNeedsApproval::admit_now),
            TenantPolicy::Plugin { .. } => None,
        }
    }

    async fn admit(&self, follow: FollowContext) -> Result<FollowDecision, WriteError> {
        match self {
            TenantPolicy::Host => Ok(PrivateNeedsApproval::admit_now(follow)),
            TenantPolicy::Plugin { policies, tenant, chosen } => policies.ask(tenant, chosen, follow).await,
        }
    }
}
