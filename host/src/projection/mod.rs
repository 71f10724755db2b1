//! Projections: what the bus's events (`events.rs`: decoded and checked) are turned into. `supervisor.rs`
//! builds the workers and starts those of projectors deployed later; `worker.rs` runs one projection from its
//! `source.rs` (a Kafka consumer group or an embedded-bus subscriber), committing only applied batches;
//! `follower.rs` is the host's own projection, the `follower` table; `plugin.rs` runs a projector plugin
//! per tenant and applies its effects to the cache (`crate::cache`), exactly once in result; `build.rs`
//! builds a tenant's space from the truth when it is stale, and `backfill.rs` replays the truth into it;
//! `reconcile.rs` compares the truth with everything derived, and `rebuild.rs` derives a projection again
//! from it. `cached_reads.rs` serves counts and lists from the projections once they are complete.
//! `spaces.rs` drops the spaces of versions no longer live and compares a shadow's with the active one's.

mod backfill;
mod build;
mod cached_reads;
mod events;
pub mod follower;
mod plugin;
pub mod progress;
mod rebuild;
mod reconcile;
mod source;
pub mod spaces;
mod supervisor;
mod worker;

pub use build::{build, build_stale, Rebuild};
pub use cached_reads::CachedReads;
pub use events::{relation_event, Unprojectable};
pub use plugin::{PluginProjection, PluginProjectionError};
pub use rebuild::{rebuild_follower, rebuild_projector, RebuildError};
pub use reconcile::{reconcile, ReconcileError, Report};
pub use source::{EventSource, Received, SourceError};
pub use supervisor::{supervise_new_projectors, supervise_worker, WorkerFactory};
pub use worker::{Projection, Worker};
