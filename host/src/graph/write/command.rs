//! What a relation write asks, what it did, or why it did not: the same for every database.

use serde::Serialize;

use super::edge::{Edge, Lock};
use crate::graph::ids::{TenantId, UserId};
use crate::util::time::now_ms;

/// What the actor does to the subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// Follow (or request to, when the subject's approval is required).
    Follow,
    /// Stop following, or withdraw a pending request.
    Unfollow,
    /// Accept the subject's pending request: their follow begins.
    Authorize,
    /// Turn the subject's pending request down.
    Reject,
    /// End the subject's follow of the actor (a soft block).
    RemoveFollower,
    /// Block: ends every follow and request between the two, and refuses new ones while it holds.
    Block,
    Unblock,
    /// Mute until `expires_at_ms` (or for good), with or without notifications.
    Mute {
        expires_at_ms: Option<i64>,
        notifications: bool,
    },
    Unmute,
    /// The host ends a mute whose time ran out (and only such a mute), with its `unmute` event: projections
    /// need no clock.
    ExpireMute,
}

impl Act {
    /// What it is called in messages ("a user cannot block themselves").
    pub fn verb(self) -> &'static str {
        match self {
            Act::Follow => "follow",
            Act::Unfollow => "unfollow",
            Act::Authorize => "authorize a follow request of",
            Act::Reject => "reject a follow request of",
            Act::RemoveFollower => "remove as a follower",
            Act::Block => "block",
            Act::Unblock => "unblock",
            Act::Mute { .. } => "mute",
            Act::Unmute | Act::ExpireMute => "unmute",
        }
    }
}

/// One relation write by `actor` about `subject`, as the write path carries it from the API to the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelationCommand<'a> {
    pub tenant: &'a TenantId,
    pub actor: UserId,
    pub subject: UserId,
    pub act: Act,
    /// When it happens (epoch ms): the time the edges record and lists are ordered by.
    pub at_ms: i64,
}

impl<'a> RelationCommand<'a> {
    /// `actor` does `act` to `subject`, now.
    pub fn new(tenant: &'a TenantId, actor: UserId, act: Act, subject: UserId) -> Self {
        Self { tenant, actor, subject, act, at_ms: now_ms() }
    }

    /// The first rule, checked before anything is read: no relation with oneself. The API checks it before
    /// the rate limiter too, so a refused self-follow costs the caller no token.
    pub fn refuse_oneself(&self) -> Result<(), WriteError> {
        match self.actor == self.subject {
            true => Err(WriteError::SelfRelation(self.act)),
            false => Ok(()),
        }
    }

    /// `from` follows `to`, now.
    pub fn follow(tenant: &'a TenantId, from: UserId, to: UserId) -> Self {
        Self::new(tenant, from, Act::Follow, to)
    }

    /// `from` stops following `to`, now.
    pub fn unfollow(tenant: &'a TenantId, from: UserId, to: UserId) -> Self {
        Self::new(tenant, from, Act::Unfollow, to)
    }

    /// The edges the decision depends on, each with how it is locked, in the order they are locked (of two
    /// pairs the actor's first; a block creates its `blocks` row before it locks the two follow rows, an
    /// unblock locks its follow row before the block — ARCHITECTURE.md, "Lock order").
    pub(super) fn reads(&self) -> Vec<(Edge, Lock)> {
        let (a, s) = (self.actor, self.subject);
        match self.act {
            // A block either way is a flag on these two rows (`EdgeRow::blocked`).
            Act::Follow => vec![(Edge::follow(a, s), Lock::Create), (Edge::follow(s, a), Lock::Shared)],
            Act::Unfollow => vec![(Edge::follow(a, s), Lock::Exclusive), (Edge::follow(s, a), Lock::Shared)],
            Act::Authorize | Act::Reject | Act::RemoveFollower => {
                vec![(Edge::follow(a, s), Lock::Shared), (Edge::follow(s, a), Lock::Exclusive)]
            }
            Act::Block => vec![
                (Edge::follow(a, s), Lock::Exclusive),
                (Edge::follow(s, a), Lock::Exclusive),
                (Edge::block(a, s), Lock::Create),
            ],
            // The follow edge too: its `blocked` flag goes with the block.
            Act::Unblock => vec![(Edge::follow(a, s), Lock::Exclusive), (Edge::block(a, s), Lock::Exclusive)],
            Act::Mute { .. } => vec![(Edge::mute(a, s), Lock::Create)],
            Act::Unmute | Act::ExpireMute => vec![(Edge::mute(a, s), Lock::Exclusive)],
        }
    }

    /// Whether the decision needs both accounts' settings and state: every act that makes a relation begin
    /// (a deleted account gets none, a suspended one no follow) — a follow also asks whether the subject is
    /// private. Acts that only end relations work on any account.
    pub(super) fn reads_accounts(&self) -> bool {
        matches!(self.act, Act::Follow | Act::Authorize | Act::Block | Act::Mute { .. })
    }
}

/// What a follow's relation policy decides (blocks are the host's, before it is asked).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum FollowDecision {
    /// The follow begins.
    #[default]
    Allow,
    /// The follow is a pending request until the target authorizes it.
    RequireApproval,
    /// Refused: the policy's code and reason reach the client.
    Refuse { code: String, reason: String },
}

/// A follow as the truth holds it, for its relation policy: everything a policy decides on. A plugin's
/// answer is used only while the follow's transaction finds exactly this under its locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowContext {
    pub follower: UserId,
    pub target: UserId,
    /// Whether the target follows the follower.
    pub followed_back: bool,
    /// Whether the target's account is private.
    pub target_private: bool,
    /// The follower's followings and followers and the target's followers, exact (`follow_counts`): only
    /// what a policy is given, so a change of anything else never makes it be asked again.
    pub follower_followings: i64,
    pub follower_followers: i64,
    pub target_followers: i64,
}

/// Decides whether a follow begins, waits for approval or is refused, only when the follow would change the
/// pair. The host's own rule is pure and decided inside the follow's transaction; a plugin is asked before
/// the transaction opens, holding nothing (`db::held`), and its answer is used only if the transaction finds
/// the same [`FollowContext`] under its locks — else it is asked again.
pub trait FollowPolicy: Sync {
    /// `Some`: the host's rule, decided inside the transaction; `None`: ask [`FollowPolicy::admit`] first.
    fn rule(&self) -> Option<fn(FollowContext) -> FollowDecision>;
    fn admit(
        &self,
        follow: FollowContext,
    ) -> impl std::future::Future<Output = Result<FollowDecision, WriteError>> + Send;
}

/// Mastodon's rule, the host's own (and the bundled `default-relation-policy`'s): a private account's follows
/// wait for its approval, every other follow begins.
#[derive(Debug, Clone, Copy, Default)]
pub struct PrivateNeedsApproval;

impl PrivateNeedsApproval {
    pub fn admit_now(follow: FollowContext) -> FollowDecision {
        if follow.target_private {
            FollowDecision::RequireApproval
        } else {
            FollowDecision::Allow
        }
    }
}

impl FollowPolicy for PrivateNeedsApproval {
    fn rule(&self) -> Option<fn(FollowContext) -> FollowDecision> {
        Some(Self::admit_now)
    }

    async fn admit(&self, follow: FollowContext) -> Result<FollowDecision, WriteError> {
        Ok(Self::admit_now(follow))
    }
}

/// What a relation write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RelationChange {
    /// Whether the call changed anything (and so wrote events): calls are idempotent.
    pub changed: bool,
    /// Whether the actor follows the subject afterwards.
    pub following: bool,
    /// Whether a follow request of the actor's to the subject is pending afterwards.
    pub requested: bool,
    /// The version of the actor's follow pair with the subject afterwards (0: never related).
    pub version: i64,
}

/// Why a write was refused or failed. Nothing is half-written in any case: the transaction rolls back.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("a user cannot {} themselves", .0.verb())]
    SelfRelation(Act),
    /// A block holds between the two, in either direction (which one is not said: a blocked user must not
    /// learn it from an error).
    #[error("a block between these users refuses this follow")]
    Blocked,
    /// The tenant's relation policy refused the follow: `code` is the policy's own.
    #[error("{reason}")]
    Refused { code: String, reason: String },
    /// The tenant's relation policy could not decide and the tenant fails closed.
    #[error("the relation policy is failing and this tenant fails closed; retry later")]
    PolicyUnavailable,
    /// One of the two accounts is deleted (or being deleted): no relation with it begins again.
    #[error("one of these accounts is deleted")]
    AccountDeleted,
    /// One of the two accounts is suspended: no follow or request with it begins until it is restored.
    #[error("one of these accounts is suspended")]
    AccountSuspended,
    /// What a follow's relation policy decided on kept changing under it (a celebrity's followers, say):
    /// nothing was written; the client may retry.
    #[error("the follow's state kept changing while its relation policy decided; retry")]
    Contended,
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
}
