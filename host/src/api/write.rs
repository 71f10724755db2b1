//! The write every relation route shares (v1 and seed): refuse acting on oneself, ask the rate limiter (every
//! write passes it), then commit — a follow under the tenant's relation
//! policy. Inside a traced request the rate limiter's check and the transaction are spans of its trace.

use tracing::Instrument;

use super::auth::Caller;
use super::problem::ApiError;
use super::AppState;
use crate::graph::{self, Act, RelationChange, RelationCommand, UserId};
use crate::ops::telemetry::{self, TARGET};
use crate::plugins::WriteKind;
use crate::ratelimit::{Verdict, WriteIntent};

/// Does `act` to `target` as `caller`.
pub async fn write_relation(
    state: &AppState,
    caller: &Caller,
    act: Act,
    target: UserId,
) -> Result<RelationChange, ApiError> {
    // The first rule before the limiter, so a refused self-follow costs the caller no token.
    RelationCommand::new(&caller.tenant, caller.user, act, target).refuse_oneself()?;
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

/// The write the rate limiter is told `act` is (a limiter before `strand:plugin@0.4.0` is asked it as a
/// follow or an unfollow: `WriteRequest::action`).
pub fn limited_as(act: Act) -> WriteKind {
    match act {
        Act::Follow => WriteKind::Follow,
        Act::Unfollow => WriteKind::Unfollow,
        Act::Authorize => WriteKind::Authorize,
        Act::Reject => WriteKind::Reject,
        Act::RemoveFollower => WriteKind::RemoveFollower,
        Act::Block => WriteKind::Block,
        Act::Unblock => WriteKind::Unblock,
        Act::Mute { .. } => WriteKind::Mute,
        // The host's own sweep ends it (never a caller's write, so never asked); named as the unmute it is.
        Act::Unmute | Act::ExpireMute => WriteKind::Unmute,
    }
}

/// Asks the tenant's rate limiter whether `caller` may do `write` to `target` now: every write passes it.
pub async fn rate_limit(state: &AppState, caller: &Caller, write: WriteKind, target: UserId) -> Result<(), ApiError> {
    let intent =
        WriteIntent { tenant: &caller.tenant, user: caller.user, write, target, pinned_version: caller.pinned_version };
    let checking = telemetry::inner_span(|| tracing::info_span!(target: TARGET, "ratelimit.check", ?write));
    match state.rate_limiting.check(&intent).instrument(checking).await {
        Verdict::Allowed => Ok(()),
        Verdict::Limited { retry_after, reason } => Err(ApiError::RateLimited { retry_after, reason }),
        Verdict::Unavailable => Err(ApiError::RateLimiterUnavailable),
    }
}
