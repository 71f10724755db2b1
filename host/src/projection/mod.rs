//! Projections: what the bus's events are turned into. `worker.rs` runs one projection from its
//! `source.rs` (a Kafka consumer group or an embedded-bus subscriber), committing only applied batches;
//! `follower.rs` is the host's own projection, the `follower` table.

pub mod follower;
mod source;
mod worker;

pub use source::{EventSource, Received, SourceError};
pub use worker::{Projection, Worker};
