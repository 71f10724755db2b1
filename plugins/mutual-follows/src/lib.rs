//! The bundled mutual follows ("friends"): `friends:{user}`, a sorted set of the users who follow `user`
//! and whom `user` follows back, scored by when that last changed; its size is the user's friend count.
//!
//! Two users' edges travel in two partitions (keyed by follower), so a friendship's start and end can
//! arrive in either order. Each event therefore counts its edge into the pair's counter of active edges (0,
//! 1 or 2: counters commute) and syncs both memberships to it with `zset-member-while`: whichever event is
//! applied last leaves the membership its final count implies. A guard shares its set's first id, so the
//! pair's count is kept twice, once beside each user's set: `edges:{a}:{b}` and `edges:{b}:{a}`.
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
        let when = event.occurred_at_ms as f64;
        [(a, b), (b, a)]
            .into_iter()
            .flat_map(|(user, other)| {
                let edges = Key::new(EDGES, [user, other]);
                [
                    Effect::counter_add(edges.clone(), event.delta()),
                    Effect::zset_member_while(Key::new(FRIENDS, [user]), other, when, edges, 2),
                ]
            })
            .collect()
    }
}

export_projector!(MutualFollows);

#[cfg(test)]
mod tests {
    use super::*;
    use strand_plugin_sdk::Action;

    #[test]
    fn both_directions_count_into_the_pair_beside_each_user_and_sync_both_memberships() {
        let there = MutualFollows::project(&RelationEvent::sample(Action::Follow, 7, 3, 10));
        let back = MutualFollows::project(&RelationEvent::sample(Action::Unfollow, 3, 7, 11));
        assert_eq!(there[0], Effect::counter_add(Key::new(EDGES, [7, 3]), 1));
        assert_eq!(there[2], Effect::counter_add(Key::new(EDGES, [3, 7]), 1));
        assert_eq!(back[0], Effect::counter_add(Key::new(EDGES, [3, 7]), -1));
        assert_eq!(back[2], Effect::counter_add(Key::new(EDGES, [7, 3]), -1));
        let (mine, theirs) = (Key::new(EDGES, [7, 3]), Key::new(EDGES, [3, 7]));
        assert_eq!(there[1], Effect::zset_member_while(Key::new(FRIENDS, [7]), 3, 10.0, mine, 2));
        assert_eq!(there[3], Effect::zset_member_while(Key::new(FRIENDS, [3]), 7, 10.0, theirs, 2));
    }
}
