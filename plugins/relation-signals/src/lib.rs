//! Example relation projector (since `strand:plugin@0.3.0`, world `relation-projector`): what a projector of
//! follows cannot see.
//!
//! - `z.requests:{user}`: the follow requests waiting for `user`'s approval, requesters newest first
//!   (Mastodon's follow-request list; served with its `total`, the badge's count). A request ends when its
//!   requester withdraws it, its target rejects it, a block ends it, or its target authorizes it — the
//!   `follow` whose actor is the followee.
//! - `c.blocked_by:{user}`: how many accounts block `user`, a moderation signal.
//!
//! The list's adds and removals are the request edge's own, ordered by its version; the counter's adds
//! commute and each change applies once. Both are exact in any order of delivery.

use strand_plugin_sdk::{export_relation_projector, Effect, Key, RelationChange, RelationKind, RelationProjector};

/// Space of the pending-request list.
pub const REQUESTS: &str = "requests";
/// Space of the count of accounts blocking a user.
pub const BLOCKED_BY: &str = "blocked_by";

pub struct RelationSignals;

impl RelationProjector for RelationSignals {
    fn project(change: &RelationChange) -> Vec<Effect> {
        let requests = Key::new(REQUESTS, [change.to]);
        let request_ended = || vec![Effect::zset_remove(requests.clone(), change.from)];
        match change.kind {
            RelationKind::FollowRequested => {
                vec![Effect::zset_add(requests, change.from, change.occurred_at_ms as f64)]
            }
            RelationKind::FollowRequestWithdrawn | RelationKind::FollowRequestRejected => request_ended(),
            // The target authorized the request (a direct follow's actor is the follower).
            RelationKind::Follow if change.actor == change.to => request_ended(),
            RelationKind::Block => vec![Effect::counter_add(Key::new(BLOCKED_BY, [change.to]), 1)],
            RelationKind::Unblock => vec![Effect::counter_add(Key::new(BLOCKED_BY, [change.to]), -1)],
            RelationKind::Follow | RelationKind::Unfollow | RelationKind::Mute | RelationKind::Unmute => Vec::new(),
        }
    }
}

export_relation_projector!(RelationSignals);

#[cfg(test)]
mod tests {
    use super::*;

    /// The requesters of `user` after `changes` in order, as the sorted set ends up.
    fn requesters(changes: &[RelationChange], user: i64) -> Vec<i64> {
        let key = Key::new(REQUESTS, [user]);
        let mut members = Vec::new();
        for effect in changes.iter().flat_map(RelationSignals::project) {
            match effect {
                Effect::ZsetAdd(entry) if entry.key == key => members.push(entry.member),
                Effect::ZsetRemove((k, member)) if k == key => members.retain(|&m| m != member),
                _ => {}
            }
        }
        members
    }

    #[test]
    fn a_request_is_listed_until_it_is_answered_either_way() {
        let requested = RelationChange::sample(RelationKind::FollowRequested, 1, 2, 10);
        let authorized = RelationChange { actor: 2, ..RelationChange::sample(RelationKind::Follow, 1, 2, 20) };
        let followed = RelationChange::sample(RelationKind::Follow, 3, 2, 30);
        assert_eq!(requesters(&[requested], 2), [1]);
        assert_eq!(requesters(&[requested, authorized], 2), [0_i64; 0]);
        assert_eq!(requesters(&[requested, followed], 2), [1], "a direct follow answers no request");
        let rejected =
            RelationChange { actor: 2, ..RelationChange::sample(RelationKind::FollowRequestRejected, 1, 2, 40) };
        assert_eq!(requesters(&[requested, rejected], 2), [0_i64; 0]);
    }

    #[test]
    fn blocks_count_against_the_blocked() {
        let counted = |changes: &[RelationChange]| -> i64 {
            let key = Key::new(BLOCKED_BY, [2]);
            changes
                .iter()
                .flat_map(RelationSignals::project)
                .map(|effect| match effect {
                    Effect::CounterAdd((k, delta)) if k == key => delta,
                    _ => 0,
                })
                .sum()
        };
        let block = RelationChange::sample(RelationKind::Block, 1, 2, 10);
        let unblock = RelationChange::sample(RelationKind::Unblock, 1, 2, 20);
        assert_eq!(counted(&[block, RelationChange::sample(RelationKind::Block, 3, 2, 10)]), 2);
        assert_eq!(counted(&[block, unblock]), 0);
    }
}
