//! Projections: what the bus's events (`events.rs`: decoded and checked) are turned into.
//!
//! - `supervisor.rs` knows which projections a deployment has, builds their workers and starts those of
//!   projectors deployed later; `worker.rs` runs one projection from its `source.rs` (a Kafka consumer
//!   group or an embedded-bus subscriber), committing only applied batches.
//! - `follower.rs` is the host's own projection, the `follower` table.
//! - A projector plugin, in layers: `projector.rs` calls a tenant's versions and applies their effects to
//!   the cache (`crate::cache`), exactly once in result; `backfill.rs` reads the truth as snapshot events;
//!   `build.rs` builds a tenant's space from them when it is stale (a projector that declares history: from
//!   the bus's log, `history.rs`); `plugin.rs` is the live projection over both.
//! - `reconcile.rs` compares the truth with everything derived, `rebuild.rs` derives a projection again
//!   from it, `spaces.rs` drops the spaces of versions no longer live and compares a shadow's with the
//!   active one's, `progress.rs` records builds for the admin API, `kept.rs` keeps the in-process cache's
//!   spaces across restarts.
//! - The read side: `cached_reads.rs` serves counts and lists from the projections once they are complete.

mod backfill;
mod build;
mod cached_reads;
mod events;
pub mod follower;
mod history;
pub mod kept;
mod parked;
mod plugin;
pub mod progress;
mod projector;
mod rebuild;
mod reconcile;
mod source;
pub mod spaces;
mod supervisor;
mod worker;

pub use backfill::recent_changes;
pub use build::{build_again, Rebuild};
pub use cached_reads::CachedReads;
pub use events::{relation_event, Unprojectable};
pub use history::{cannot_replay, RetainedLog};
pub use plugin::{PluginProjection, DEFAULT_TENANT_BUDGET};
pub use projector::PluginProjectionError;
pub use rebuild::{rebuild_follower, rebuild_projector, RebuildError};
pub use reconcile::{reconcile, ReconcileError, Report};
pub use source::{EventSource, Received, SourceError};
pub use supervisor::{Projections, WorkerFactory};
pub use worker::{Projection, Worker};
