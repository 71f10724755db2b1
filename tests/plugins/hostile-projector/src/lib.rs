//! Counts followers like the bundled counter, but traps on any event whose follower is 666.

use strand_plugin_sdk::{export_projector, Effect, Key, Projector, RelationEvent};

struct Hostile;

impl Projector for Hostile {
    fn project(event: &RelationEvent) -> Vec<Effect> {
        assert!(event.follower != 666, "hostile projector traps on purpose");
        vec![Effect::counter_add(Key::new("followers", [event.followee]), event.delta())]
    }
}

export_projector!(Hostile);
