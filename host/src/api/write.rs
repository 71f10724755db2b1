//! The write both surfaces share (v1 and seed): refuse self-follows, ask the rate limiter, then commit.

use axum::http::StatusCode;

use super::auth::Caller;
use super::problem::ApiError;
use super::AppState;
use crate::graph::{self, FollowChange, FollowCommand, UserId, WriteError};
use crate::outbox::EventType;
use crate::ratelimit::{Verdict, WriteIntent};
use crate::util::time::now_ms;

/// Follows or unfollows (`event`) `target` as `caller`.
pub async fn follow_or_unfollow(
    state: &AppState,
    caller: &Caller,
    target: UserId,
    event: EventType,
) -> Result<FollowChange, ApiError> {
    // Checked before the rate limiter, so a refused self-follow costs the caller no token.
    if caller.user == target {
        return Err(WriteError::SelfFollow.into());
    }
    let intent =
        WriteIntent { tenant: &caller.tenant, user: caller.user, event, target, pinned_version: caller.pinned_version };
    match state.rate_limiting.check(&intent).await {
        Verdict::Allowed => {}
        Verdict::Limited { retry_after, reason } => return Err(ApiError::rate_limited(retry_after, reason)),
        Verdict::Unavailable => {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "rate_limiter_unavailable",
                "rate limiting is failing and this tenant fails closed; retry later",
            ))
        }
    }
    let command = FollowCommand { tenant: &caller.tenant, from: caller.user, to: target, event, at_ms: now_ms() };
    Ok(graph::set_following(&state.db, command).await?)
}
