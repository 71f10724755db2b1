//! Counts followers like the bundled counter, but traps on any event whose follower is 666, and returns
//! output the host must refuse or contain for chosen followees (the rows of the hostile-output tests):
//! 900 an expiry longer than any clock, 901 a counter step of `i64::MAX`, 902 one key written as a
//! counter, a sorted set and a value at once, 903 a key of nine ids, 904 a NaN score; and for 905 a sorted
//! set `tied` whose every member has the same score (a read must still page it by cursor in bounded work);
//! for 906 it spins until its deadline (a projector timing out on every event of a followee); for 907 every
//! follower joins one uncapped sorted set, and for 908 every event writes a value of 1 KiB under a key of its
//! own (a projector filling its space past its quota); for 909 it counts followers gained (unfollows
//! ignored: a value the truth alone cannot give back).

use strand_plugin_sdk::{export_projector, Effect, Key, Projector, RelationEvent};

pub struct Hostile;

impl Projector for Hostile {
    fn project(event: &RelationEvent) -> Vec<Effect> {
        assert!(event.follower != 666, "hostile projector traps on purpose");
        let followers = || Key::new("followers", [event.followee]);
        let count = Effect::counter_add(followers(), event.delta());
        match event.followee {
            900 => vec![count, Effect::expire(followers(), u64::MAX)],
            901 => vec![count, Effect::counter_add(followers(), i64::MAX)],
            902 => vec![
                count,
                Effect::zset_add(followers(), event.follower, 1.0),
                Effect::value_set(followers(), "not a number"),
                Effect::counter_add(followers(), event.delta()),
            ],
            903 => vec![count, Effect::counter_add(Key::new("followers", [1; 9]), 1)],
            904 => vec![count, Effect::zset_add(followers(), event.follower, f64::NAN)],
            906 => {
                let mut spins = 0u64;
                loop {
                    spins = std::hint::black_box(spins.wrapping_add(1));
                }
            }
            907 if event.delta() > 0 => vec![count, Effect::zset_add(Key::new("fans", [907]), event.follower, 1.0)],
            908 => vec![count, Effect::value_set(Key::new("blob", [event.follower, event.version]), "x".repeat(1024))],
            // Followers gained: an unfollow lowers nothing (a value that depends on the events' history).
            909 if event.delta() < 0 => vec![],
            905 if event.delta() > 0 => vec![count, Effect::zset_add(Key::new("tied", [905]), event.follower, 1.0)],
            905 => vec![count, Effect::zset_remove(Key::new("tied", [905]), event.follower)],
            _ => vec![count],
        }
    }
}

export_projector!(Hostile);
