//! Projections: what the bus's events are turned into (`supervisor.rs`: building workers, and starting
//! projectors deployed later after their backfill) (`events.rs`: decoded and checked). `worker.rs` runs one projection from its
//! `source.rs` (a Kafka consumer group or an embedded-bus subscriber), committing only applied batches;
//! `follower.rs` is the host's own projection, the `follower` table; `plugin.rs` runs a projector plugin
//! per tenant, and `effects.rs` applies its effects to Redis, exactly once in result; `backfill.rs` replays
//! the truth into a new projector's data; `reconcile.rs` compares the truth with everything derived,
//! and `rebuild.rs` derives a projection again from it. `cached_reads.rs` serves counts and lists from the
//! projections once they are complete.

mod backfill;
mod cached_reads;
pub mod effects;
mod events;
pub mod follower;
mod plugin;
pub mod progress;
mod rebuild;
mod reconcile;
mod source;
mod supervisor;
mod worker;

pub use backfill::{backfill, BackfillError};
pub use cached_reads::{mark_ready, CachedReads};
pub use events::{relation_event, Unprojectable};
pub use plugin::{PluginProjection, PluginProjectionError};
pub use rebuild::{rebuild_follower, rebuild_projector, RebuildError};
pub use reconcile::{reconcile, ReconcileError, Report};
pub use source::{EventSource, Received, SourceError};
pub use supervisor::{supervise_new_projectors, until, WorkerFactory};
pub use worker::{Projection, Worker};
