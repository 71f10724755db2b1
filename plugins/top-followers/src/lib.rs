//! The bundled big-account cache: for accounts with at least [`THRESHOLD`] followers, `top:{user}` holds
//! the [`KEEP`] newest followers, so the first pages of a huge follower list never touch the database.
//! The plugin keeps its own `followers:{user}` count to know which accounts are big.

use strand_plugin_sdk::{export_projector, Action, Effect, Key, Projector, RelationEvent};

/// Follower count from which an account's newest followers are cached.
pub const THRESHOLD: i64 = 1_000;
/// How many of the newest followers are kept.
pub const KEEP: u32 = 200;

pub struct TopFollowers;

impl Projector for TopFollowers {
    fn project(event: &RelationEvent) -> Vec<Effect> {
        let count = Key::new("followers", [event.followee]);
        let top = Key::new("top", [event.followee]);
        match event.action {
            Action::Follow => vec![
                Effect::counter_add(count.clone(), 1),
                Effect::zset_add_capped_if(top, event.follower, event.occurred_at_ms as f64, KEEP, count, THRESHOLD),
            ],
            Action::Unfollow => vec![Effect::counter_add(count, -1), Effect::zset_remove(top, event.follower)],
        }
    }
}

export_projector!(TopFollowers);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_count_first_then_add_guarded_by_the_count() {
        let event = RelationEvent::sample(Action::Follow, 1, 2, 5);
        let effects = TopFollowers::project(&event);
        assert_eq!(effects[0], Effect::counter_add(Key::new("followers", [2]), 1));
        assert_eq!(
            effects[1],
            Effect::zset_add_capped_if(Key::new("top", [2]), 1, 5.0, KEEP, Key::new("followers", [2]), THRESHOLD)
        );
    }
}
