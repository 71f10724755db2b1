//! Projections: what the bus's events are turned into. `follower.rs` is the host's own, the `follower`
//! table.

pub mod follower;
