//! Projections: what the bus's events are turned into (`events.rs`: decoded and checked). `worker.rs` runs one projection from its
//! `source.rs` (a Kafka consumer group or an embedded-bus subscriber), committing only applied batches;
//! `follower.rs` is the host's own projection, the `follower` table; `effects.rs` applies projector
//! plugins' effects to Redis, exactly once in result.

pub mod effects;
mod events;
pub mod follower;
mod source;
mod worker;

pub use events::{relation_event, Unprojectable};
pub use source::{EventSource, Received, SourceError};
pub use worker::{Projection, Worker};
