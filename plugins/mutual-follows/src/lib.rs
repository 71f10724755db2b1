//! The bundled mutual follows ("friends"): `friends:{user}`, a sorted set of the users who follow `user`
//! and whom `user` follows back, scored by when that last changed; its size is the user's friend count.
//!
//! Two users' edges travel in two partitions (keyed by follower), so a friendship's start and end can
//! arrive in either order. Each event therefore counts its edge into the pair's `edges:{low}:{high}`
//! counter (0, 1 or 2 active edges: counters commute) and syncs both memberships to that counter with
//! `zset-member-while`: whichever event is applied last leaves the membership its final count implies.
//! `followed_back` says the same thing at commit time, for a router or a notification ("X followed you
//! back"); the set needs no ordering from it.

use strand_plugin_sdk::{export_projector, Effect, Key, Projector, RelationEvent};

/// The sorted set of a user's mutual follows.
pub const FRIENDS: &str = "friends";
/// The counter of a pair's active edges.
pub const EDGES: &str = "edges";

pub struct MutualFollows;

impl Projector for MutualFollows {
    fn project(event: &RelationEvent) -> Vec<Effect> {
        let (a, b) = (event.follower, event.followee);
        let edges = Key::new(EDGES, [a.min(b), a.max(b)]);
        let when = event.occurred_at_ms as f64;
        vec![
            Effect::counter_add(edges.clone(), event.delta()),
            Effect::zset_member_while(Key::new(FRIENDS, [a]), b, when, edges.clone(), 2),
            Effect::zset_member_while(Key::new(FRIENDS, [b]), a, when, edges, 2),
        ]
    }
}

export_projector!(MutualFollows);

#[cfg(test)]
mod tests {
    use super::*;
    use strand_plugin_sdk::Action;

    #[test]
    fn both_directions_count_into_one_pair_and_sync_both_memberships() {
        let there = MutualFollows::project(&RelationEvent::sample(Action::Follow, 7, 3, 10));
        let back = MutualFollows::project(&RelationEvent::sample(Action::Unfollow, 3, 7, 11));
        assert_eq!(there[0], Effect::counter_add(Key::new(EDGES, [3, 7]), 1));
        assert_eq!(back[0], Effect::counter_add(Key::new(EDGES, [3, 7]), -1));
        let edges = Key::new(EDGES, [3, 7]);
        assert_eq!(there[1], Effect::zset_member_while(Key::new(FRIENDS, [7]), 3, 10.0, edges.clone(), 2));
        assert_eq!(there[2], Effect::zset_member_while(Key::new(FRIENDS, [3]), 7, 10.0, edges, 2));
    }
}
