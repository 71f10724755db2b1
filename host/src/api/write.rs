//! The write every relation route shares (v1 and seed): refuse acting on oneself, ask the rate limiter (for
//! follows and unfollows, the writes its policy knows), then commit — a follow under the tenant's relation
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
    let limited_as = match act {
        Act::Follow => Some(Action::Follow),
        Act::Unfollow => Some(Action::Unfollow),
        _ => None,
    };
    if let Some(action) = limited_as {
        let intent = WriteIntent {
            tenant: &caller.tenant,
            user: caller.user,
            action,
            target,
            pinned_version: caller.pinned_version,
        };
        let checking = telemetry::inner_span(|| tracing::info_span!(target: TARGET, "ratelimit.check", ?action));
        match state.rate_limiting.check(&intent).instrument(checking).await {
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
    }
    let command = RelationCommand::new(&caller.tenant, caller.user, act, target);
    let committing = telemetry::inner_span(|| tracing::info_span!(target: TARGET, "graph.transaction", ?act));
    async {
        if act != Act::Follow {
            return Ok(graph::change(&state.db, command).await?);
        }
        let policy =
            state.relation_policies.for_follow(&caller.tenant, caller.user, target, caller.pinned_version).await;
        Ok(graph::change_under(&state.db, command, &policy).await?)
    }
    .instrument(committing)
    .await
}
