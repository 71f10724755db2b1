//! Rate limiting of writes: the tenant's policy plugin decides which bucket a request charges; the host
//! charges it atomically — one Lua script on Redis (Redis `TIME` as the clock, so every API node agrees),
//! or an in-process bucket on the embedded default.
//!
//! A failing policy or bucket store never fails silently: it is logged and the tenant's [`FailureMode`]
//! decides (open: the write goes through; closed: 503).

mod local;
mod redis;
mod sample;

pub use self::redis::RedisBuckets;
pub use local::LocalBuckets;
pub use sample::{recent_requests, RequestSample, SampledRequest};

use std::sync::Arc;
use std::time::Duration;

use crate::graph::{TenantId, UserId};
use crate::ops::metrics::RATE_LIMIT_DECISIONS;
use crate::plugins::{
    Bucket, Decision, OnePerTenant, PluginError, PluginRegistry, PolicyPlugin, WriteKind, WriteRequest,
};
use crate::tenancy::settings::{FailureMode, TenantSettings};

/// A write the rate limiter decides on: who asks to do what to whom.
#[derive(Debug, Clone, Copy)]
pub struct WriteIntent<'a> {
    pub tenant: &'a TenantId,
    pub user: UserId,
    pub write: WriteKind,
    pub target: UserId,
    /// The policy version the request asks to run (test traffic for a candidate), honoured only for tenants
    /// that allow it.
    pub pinned_version: Option<i64>,
}

/// The answer for one write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// Over the limit: 429, with `Retry-After` when the bucket says when a token will be there.
    Limited {
        retry_after: Option<Duration>,
        reason: String,
    },
    /// The policy or bucket store failed and the tenant fails closed: 503.
    Unavailable,
}

impl Verdict {
    /// As metrics and the request sample name it.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Allowed => "allowed",
            Verdict::Limited { .. } => "limited",
            Verdict::Unavailable => "unavailable",
        }
    }
}

/// Where token buckets live: one enum over the two stores, so every operation is written for both (see
/// `ARCHITECTURE.md`, "Two backends").
pub enum TokenBuckets {
    Local(LocalBuckets),
    Redis(RedisBuckets),
}

/// Why rate limiting could not decide; the tenant's [`FailureMode`] then does.
#[derive(Debug, thiserror::Error)]
pub enum RateLimitFailure {
    #[error("the rate-limit policy failed")]
    Policy(#[source] PluginError),
    #[error("the token bucket store failed")]
    Buckets(#[source] ::redis::RedisError),
}

impl TokenBuckets {
    /// Redis at `redis_url`, shared by every API node; without one, this process's memory.
    pub async fn connect(redis_url: Option<&str>) -> Result<Self, ::redis::RedisError> {
        Ok(match redis_url {
            Some(url) => Self::on(Some(crate::cache::RedisConnection::connect(url).await?)),
            None => Self::on(None),
        })
    }

    /// On `redis` (the process's one handle, shared with the cache), else in this process's memory.
    pub fn on(redis: Option<crate::cache::RedisConnection>) -> Self {
        match redis {
            Some(connection) => Self::Redis(RedisBuckets::new(connection)),
            None => Self::Local(LocalBuckets::default()),
        }
    }

    /// Takes `bucket.cost` tokens from `tenant`'s bucket `bucket.key`; `Ok(None)` when granted, else when to
    /// retry.
    pub async fn take(&self, tenant: &TenantId, bucket: &Bucket) -> Result<Option<Duration>, RateLimitFailure> {
        crate::db::held::forbid_wait("the token buckets");
        match self {
            TokenBuckets::Local(local) => Ok(local.take(tenant, bucket)),
            TokenBuckets::Redis(redis) => redis.take(tenant, bucket).await.map_err(RateLimitFailure::Buckets),
        }
    }
}

/// The policy call plus the bucket charge, per write.
pub struct RateLimiting {
    policy: PolicyPlugin<SampledRequest>,
    buckets: TokenBuckets,
}

impl RateLimiting {
    pub fn new(registry: Arc<PluginRegistry>, tenants: Arc<TenantSettings>, buckets: TokenBuckets) -> Self {
        let policy = PolicyPlugin::new(registry, tenants, OnePerTenant::RateLimiter, |c| c.rate_limit_failure);
        Self { policy, buckets }
    }

    /// The decided requests this node samples for replay; its writer runs as a task of the server.
    pub fn sample(&self) -> &RequestSample {
        self.policy.sample()
    }

    /// Decides whether `intent` may be carried out now; counted in `strand_rate_limit_decisions_total` by
    /// tenant and decision; sampled for replay.
    pub async fn check(&self, intent: &WriteIntent<'_>) -> Verdict {
        let tenant = intent.tenant;
        let request = WriteRequest {
            tenant: tenant.to_string(),
            user: intent.user.get(),
            write: intent.write,
            target: intent.target.get(),
            now_ms: crate::util::time::now_ms(),
        };
        let verdict = self.verdict(intent, &request).await;
        self.policy.offer(tenant, || SampledRequest { request: request.clone(), verdict: verdict.name() });
        let labels = [("tenant", tenant.to_string()), ("decision", verdict.name().to_owned())];
        metrics::counter!(RATE_LIMIT_DECISIONS.name, &labels).increment(1);
        verdict
    }

    async fn verdict(&self, intent: &WriteIntent<'_>, request: &WriteRequest) -> Verdict {
        let tenant = intent.tenant;
        let chosen = self.policy.choose(tenant, intent.user, intent.pinned_version);
        let requests = std::slice::from_ref(request);
        let decided = self
            .policy
            .ask(tenant, &chosen, |runtime, plugin| runtime.decide(&plugin.prepared, plugin.limits, requests))
            .await;
        let decision = match decided {
            Ok(decision) => decision,
            Err(e) => return self.on_failure(tenant, &RateLimitFailure::Policy(e)),
        };
        match decision {
            Decision::Allow => Verdict::Allowed,
            Decision::Deny(reason) => Verdict::Limited { retry_after: None, reason },
            Decision::Charge(bucket) => match self.buckets.take(tenant, &bucket).await {
                Ok(None) => Verdict::Allowed,
                Ok(Some(retry_after)) => Verdict::Limited {
                    retry_after: Some(retry_after),
                    reason: format!("rate limit {} exceeded", bucket.key),
                },
                Err(e) => self.on_failure(tenant, &e),
            },
        }
    }

    fn on_failure(&self, tenant: &TenantId, failure: &RateLimitFailure) -> Verdict {
        match self.policy.on_failure(tenant, failure) {
            FailureMode::Open => Verdict::Allowed,
            FailureMode::Closed => Verdict::Unavailable,
        }
    }
}
