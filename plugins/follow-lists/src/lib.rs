//! The bundled list caches: `following:{user}` and `followers:{user}` sorted sets, scored by follow time.
//! The host renders members fixed-width, so equal scores order by user id exactly as the database does.

use strand_plugin_sdk::contract::{FOLLOWERS, FOLLOWING};
use strand_plugin_sdk::{export_projector, Action, Effect, Key, Projector, RelationEvent};

pub struct FollowLists;

impl Projector for FollowLists {
    fn project(event: &RelationEvent) -> Vec<Effect> {
        let following = Key::new(FOLLOWING, [event.follower]);
        let followers = Key::new(FOLLOWERS, [event.followee]);
        match event.action {
            Action::Follow => {
                let at = event.occurred_at_ms as f64;
                vec![Effect::zset_add(following, event.followee, at), Effect::zset_add(followers, event.follower, at)]
            }
            Action::Unfollow => {
                vec![Effect::zset_remove(following, event.followee), Effect::zset_remove(followers, event.follower)]
            }
        }
    }
}

export_projector!(FollowLists);

#[cfg(test)]
mod tests {
    use super::*;

    fn event(action: Action) -> RelationEvent {
        RelationEvent::sample(action, 1, 2, 1_000)
    }

    #[test]
    fn a_follow_adds_to_both_lists_and_an_unfollow_removes_from_both() {
        let added = FollowLists::project(&event(Action::Follow));
        assert_eq!(
            added,
            vec![
                Effect::zset_add(Key::new("following", [1]), 2, 1_000.0),
                Effect::zset_add(Key::new("followers", [2]), 1, 1_000.0),
            ]
        );
        let removed = FollowLists::project(&event(Action::Unfollow));
        assert_eq!(
            removed,
            vec![
                Effect::zset_remove(Key::new("following", [1]), 2),
                Effect::zset_remove(Key::new("followers", [2]), 1)
            ]
        );
    }
}
