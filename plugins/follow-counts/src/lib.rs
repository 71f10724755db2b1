//! The bundled counters: `followings:{user}` and `followers:{user}`.

use strand_plugin_sdk::contract::{FOLLOWERS, FOLLOWINGS};
use strand_plugin_sdk::{export_projector, Effect, Key, Projector, RelationEvent};

pub struct FollowCounts;

impl Projector for FollowCounts {
    fn project(event: &RelationEvent) -> Vec<Effect> {
        vec![
            Effect::counter_add(Key::new(FOLLOWINGS, [event.follower]), event.delta()),
            Effect::counter_add(Key::new(FOLLOWERS, [event.followee]), event.delta()),
        ]
    }
}

export_projector!(FollowCounts);

#[cfg(test)]
mod tests {
    use super::*;
    use strand_plugin_sdk::Action;

    #[test]
    fn an_unfollow_takes_back_what_a_follow_added() {
        let mut event = RelationEvent::sample(Action::Follow, 1, 2, 0);
        assert_eq!(FollowCounts::project(&event)[1], Effect::counter_add(Key::new("followers", [2]), 1));
        event.action = Action::Unfollow;
        assert_eq!(FollowCounts::project(&event)[0], Effect::counter_add(Key::new("followings", [1]), -1));
    }
}
