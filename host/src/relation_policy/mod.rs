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
//! takes the tenant's `relation_policy_failure` mode: failing open, the host's rule decides; failing
//! closed, the follow is refused as unavailable (503). The call path is the rate limiter's
//! (`plugins::PolicyPlugin`).

mod sample;

use std::sync::Arc;

use crate::graph::{FollowContext, FollowDecision, FollowPolicy, PrivateNeedsApproval, TenantId, UserId, WriteError};
use crate::plugins::{Admission, Chosen, FollowAttempt, OnePerTenant, PluginRegistry, PolicyPlugin};
use crate::tenancy::settings::{FailureMode, TenantConfig, TenantSettings};

pub use self::sample::{recent_attempts, AttemptSample, SampledAttempt};

/// Every tenant's relation policy.
pub struct RelationPolicies {
    policy: PolicyPlugin<SampledAttempt>,
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
        let policy =
            PolicyPlugin::new(registry, tenants, OnePerTenant::RelationPolicy, TenantConfig::relation_policy_failure);
        Self { policy }
    }

    /// The decided attempts this node samples for replay; its writer runs as a task of the server.
    pub fn sample(&self) -> &AttemptSample {
        self.policy.sample()
    }

    /// The policy `follower`'s follow in `tenant` runs under; `pinned`: a candidate version the request
    /// asks for (test traffic), honoured for tenants that allow it.
    pub fn for_follow<'a>(&'a self, tenant: &'a TenantId, follower: UserId, pinned: Option<i64>) -> TenantPolicy<'a> {
        if !self.policy.has_own(tenant) {
            return TenantPolicy::Host;
        }
        TenantPolicy::Plugin { policies: self, tenant, chosen: self.policy.choose(tenant, follower, pinned) }
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
        let attempts = std::slice::from_ref(&attempt);
        let decided = self
            .policy
            .ask(tenant, chosen, |runtime, plugin| runtime.admit(&plugin.prepared, plugin.limits, attempts))
            .await;
        let answer = match &decided {
            Ok(Admission::Allow) => "allow",
            Ok(Admission::RequireApproval) => "require_approval",
            Ok(Admission::Refuse(_)) => "refuse",
            Err(_) => "failed",
        };
        self.policy.offer(tenant, || SampledAttempt { attempt, answer });
        match decided {
            Ok(Admission::Allow) => Ok(FollowDecision::Allow),
            Ok(Admission::RequireApproval) => Ok(FollowDecision::RequireApproval),
            Ok(Admission::Refuse(refusal)) => Ok(FollowDecision::Refuse { code: refusal.code, reason: refusal.reason }),
            Err(e) => match self.policy.on_failure(tenant, &e) {
                FailureMode::Open => Ok(PrivateNeedsApproval::admit_now(follow)),
                FailureMode::Closed => Err(WriteError::PolicyUnavailable),
            },
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
