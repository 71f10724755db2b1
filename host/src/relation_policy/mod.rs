//! A tenant's relation policy, asked per follow (allow, require approval, refuse): the tenant's own plugin
//! when it deployed one — a canary's share of followers by the candidate, outcomes counted for the automatic
//! rollback, logs kept — else the host's own rule ([`PrivateNeedsApproval`], the bundled default's), which
//! costs a follow no plugin call. Blocks are enforced before either is asked.
//!
//! A plugin that cannot decide (a trap, a deadline, output the host refuses, counts that cannot be read)
//! takes the tenant's failure mode, the rate limiter's: failing open, the host's rule decides; failing
//! closed, the follow is refused as unavailable (503).

mod sample;

use std::sync::Arc;

use crate::db::Database;
use crate::graph::{Admit, FollowContext, FollowPolicy, PrivateNeedsApproval, TenantId, UserId, WriteError};
use crate::plugins::{observed, Admission, Chosen, FollowAttempt, PluginError, PluginRegistry, Singleton};
use crate::projection::CachedReads;
use crate::tenancy::settings::{FailureMode, TenantSettings};

pub use self::sample::{recent_attempts, AttemptSample, SampledAttempt};

/// Every tenant's relation policy.
pub struct RelationPolicies {
    registry: Arc<PluginRegistry>,
    tenants: Arc<TenantSettings>,
    reads: Arc<CachedReads>,
    db: Database,
    sample: AttemptSample,
}

/// The policy one follow runs under.
pub enum TenantPolicy<'a> {
    /// The host's rule: the tenant deployed no policy of its own.
    Host,
    /// The tenant's plugin version chosen for this follower, with the counts its rules may use.
    Plugin { policies: &'a RelationPolicies, tenant: &'a TenantId, chosen: Chosen, counts: Result<Counts, String> },
}

/// The follow counts a policy is given (from the follow-counts projection, moments old; the database when
/// it is being built).
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    follower_followings: i64,
    follower_followers: i64,
    target_followers: i64,
}

impl RelationPolicies {
    pub fn new(
        registry: Arc<PluginRegistry>,
        tenants: Arc<TenantSettings>,
        reads: Arc<CachedReads>,
        db: Database,
    ) -> Self {
        Self { registry, tenants, reads, db, sample: AttemptSample::default() }
    }

    /// The decided attempts this node samples for replay; its writer runs as a task of the server.
    pub fn sample(&self) -> &AttemptSample {
        &self.sample
    }

    /// The policy `follower`'s follow of `target` in `tenant` runs under; `pinned`: a candidate version the
    /// request asks for (test traffic), honoured for tenants that allow it. Counts are read here, before the
    /// follow's transaction takes its locks.
    pub async fn for_follow<'a>(
        &'a self,
        tenant: &'a TenantId,
        follower: UserId,
        target: UserId,
        pinned: Option<i64>,
    ) -> TenantPolicy<'a> {
        if !self.registry.has_own(tenant, Singleton::RelationPolicy) {
            return TenantPolicy::Host;
        }
        let pinned = pinned.filter(|_| self.tenants.get(tenant).allow_pinned_versions);
        let chosen = self.registry.choose(tenant, Singleton::RelationPolicy, &follower.to_string(), pinned);
        let counts = match self.reads.counts(&self.db, tenant, &[follower, target]).await {
            Ok(counts) if counts.len() == 2 => Ok(Counts {
                follower_followings: counts[0].followings,
                follower_followers: counts[0].followers,
                target_followers: counts[1].followers,
            }),
            Ok(_) => Err("the counts came back incomplete".to_owned()),
            Err(e) => Err(format!("the counts could not be read: {e}")),
        };
        TenantPolicy::Plugin { policies: self, tenant, chosen, counts }
    }

    async fn ask(
        &self,
        tenant: &TenantId,
        chosen: &Chosen,
        counts: &Result<Counts, String>,
        follow: FollowContext,
    ) -> Result<Admit, WriteError> {
        let decided = match counts {
            Ok(counts) => {
                let attempt = FollowAttempt {
                    tenant: tenant.to_string(),
                    follower: follow.follower.get(),
                    target: follow.target.get(),
                    followed_back: follow.followed_back,
                    target_private: follow.target_private,
                    follower_followings: counts.follower_followings,
                    follower_followers: counts.follower_followers,
                    target_followers: counts.target_followers,
                    now_ms: crate::util::time::now_ms(),
                };
                let plugin = &chosen.plugin;
                let call =
                    self.registry.runtime().admit(&plugin.prepared, plugin.limits, std::slice::from_ref(&attempt));
                let decided =
                    observed(self.registry.logs(), tenant.as_str(), plugin, call).await.map(|mut a| a.remove(0));
                self.registry.record_outcome(tenant, Singleton::RelationPolicy, chosen, decided.as_ref().err()).await;
                let answer = match &decided {
                    Ok(Admission::Allow) => "allow",
                    Ok(Admission::RequireApproval) => "require_approval",
                    Ok(Admission::Refuse(_)) => "refuse",
                    Err(_) => "failed",
                };
                self.sample.offer(tenant.as_str(), || SampledAttempt { attempt, answer });
                decided
            }
            Err(detail) => Err(PluginError::host("reading the follow counts", detail.clone())),
        };
        match decided {
            Ok(Admission::Allow) => Ok(Admit::Allow),
            Ok(Admission::RequireApproval) => Ok(Admit::RequireApproval),
            Ok(Admission::Refuse(refusal)) => Ok(Admit::Refuse { code: refusal.code, reason: refusal.reason }),
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
    async fn admit(&self, follow: FollowContext) -> Result<Admit, WriteError> {
        match self {
            TenantPolicy::Host => Ok(PrivateNeedsApproval::admit_now(follow)),
            TenantPolicy::Plugin { policies, tenant, chosen, counts } => {
                policies.ask(tenant, chosen, counts, follow).await
            }
        }
    }
}
