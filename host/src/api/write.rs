//! The write every relation route shares (v1 and seed): refuse acting on oneself, ask the rate limiter (every
//! write passes it), then commit — a follow under the tenant's relation
//! policy. Inside a traced request the rate limiter's check and the transaction are spans of its trace.

use axum::http::StatusCode;
use tracing::Instrument;

use super::auth::Caller;
use super::problem::ApiError;
use super::AppState;
use crate::graph::{self, Act, RelationChange, RelationCommand, UserId, WriteError};
use crate::ops::telemetry::{self, TARGET};
use crate::plugins::Action;
use crate::ratelimit::{Verdict, WriteIntent};

/// Does `act` to `target` as `caller`.
pub async fn write_relation(
    state: &AppState,
    caller: &Caller,
    act: Act,
    target: UserId,
) -> Result<RelationChange, ApiError> {
    // Checked before the rate limiter, so a refused self-follow costs the caller no token.
    if caller.user == target {
        return Err(WriteError::SelfRelation(act).into());
    }
    rate_limit(state, caller, limited_as(act), target).await?;
    let command = RelationCommand::new(&caller.tenant, caller.user, act, target);
    let committing = telemetry::inner_span(|| tracing::info_span!(target: TARGET, "graph.transaction", ?act));
    async {
        if act != Act::Follow {
            return Ok(graph::change(&state.db, command).await?);
        }
        let policy = state.relation_policies.for_follow(&caller.tenant, caller.user, caller.pinned_version);
        Ok(graph::change_under(&state.db, command, &policy).await?)
    }
    .instrument(committing)
    .await
}

/// What the rate limiter is told `act` is: the writes a limiter knows are follows and unfollows, so every
/// act that makes a relation begin (or changes it: a mute's new end) is asked as a follow, and every act
/// that ends one as an unfollow — the README's table; the bundled policy charges both.
pub fn limited_as(act: Act) -> Action {
    match act {
        Act::Follow | Act::Authorize | Act::Block | Act::Mute { .. } => Action::Follow,
        Act::Unfollow | Act::Reject | Act::RemoveFollower | Act::Unblock | Act::Unmute | Act::ExpireMute => {
            Action::Unfollow
        }
    }
}

/// Asks the tenant's rate limiter whether `caller` may do `action` to `target` now: every write passes it.
pub async fn rate_limit(state: &AppState, caller: &Caller, action: Action, target: UserId) -> Result<(), ApiError> {
    let intent = WriteIntent {
        tenant: &caller.tenant,
        user: caller.user,
        action,
        target,
        pinned_version: caller.pinned_version,
    };
    let checking = telemetry::inner_span(|| tracing::info_span!(target: TARGET, "ratelimit.check", ?action));
    match state.rate_limiting.check(&intent).instrument(checking).await {
        Verdict::Allowed => Ok(()),
        Verdict::Limited { retry_after, reason } => Err(ApiError::rate_limited(retry_after, reason)),
        Verdict::Unavailable => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "rate_limiter_unavailable",
            "rate limiting is failing and this tenant fails closed; retry later",
        )),
    }
}
