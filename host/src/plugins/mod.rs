//! WebAssembly plugins: the rate-limit policy, the event router, projectors and the relation policy, per
//! tenant, hot-swapped.
//!
//! `runtime` owns the engine and the sandbox, `inputs` what a call hands a plugin, `calls` the typed calls
//! (every WIT version, `compat` converting 0.1.0's records) and output checks, `logs` what plugins say,
//! `conformance` the sample run every upload must pass, `registry` the deployed versions (database) and the
//! atomic swap.

mod bindings;
mod calls;
mod compat;
mod conformance;
mod error;
mod fallback;
mod inputs;
pub mod logs;
mod observed;
mod policy;
mod readable;
mod registry;
pub mod rollout;
mod runtime;
mod slot;
mod wasi;

pub use bindings::{
    Action, Admission, Bucket, CappedZsetAdd, Decision, Destination, Effect, GuardedZsetAdd, Key, Level, Refusal,
    RelationKind, WriteKind, ZsetEntry, ZsetMemberWhile,
};
pub use calls::{MAX_BUCKET_REFILL, MAX_COUNTER_STEP, MAX_DESTINATIONS, MAX_EFFECTS, MAX_TTL};
pub use conformance::{
    sample_attempts, sample_events, sample_events_for, sample_outbox_events, sample_requests, sample_tenant,
};
pub use error::PluginError;
pub use fallback::{project_with_retries, route_by_default, route_or_default, ProjectionFailed, RetryPolicy, Routed};
pub use inputs::{write_kind_name, FollowAttempt, Input, RelationEvent, WriteRequest, WRITE_KINDS};
pub use logs::{LogLine, LogSource, PluginLogs, MAX_LINES_PER_CALL, MAX_LINE_BYTES};
pub use observed::{count_invalid_output, observed};
pub use policy::PolicyPlugin;
pub use readable::{parse_declarations, Declared, Readable, Shape, MAX_READABLE};
pub use registry::{
    ActivePlugin, Candidate, Chosen, PluginRegistry, PluginVersion, RegistryError, RolloutStage, VersionLimits,
    VersionState, DEFAULT_COMPILE_BUDGET, DEFAULT_MAX_PROJECTORS,
};
pub use rollout::{RolloutRates, Tally};
pub use runtime::{
    CallCost, Called, LimitRefused, PluginLimits, PluginRuntime, PreparedPlugin, RequestedLimits,
    DEFAULT_TENANT_CPU_SHARE, DEFAULT_TENANT_SHARE, INPUTS_PER_LIMIT,
};
pub use slot::{PluginSlot, SlotError, SINGLETON_NAME};

crate::str_enum! {
    /// The four things a plugin can be, one WIT world each; named as the world in `wit/`, also in URLs,
    /// the CLI and the `plugins` table.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum PluginKind("plugin kind") {
        RateLimiter = "rate-limiter",
        Router = "router",
        Projector = "projector",
        RelationPolicy = "relation-policy",
    }
}

impl PluginKind {
    /// Rate limiters, routers and relation policies: one per tenant. Projectors: as many as the tenant deploys, each named.
    pub fn is_singleton(self) -> bool {
        self != PluginKind::Projector
    }
}

/// The kinds a tenant always has exactly one of: its deployed version, else the bundled one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnePerTenant {
    RateLimiter,
    Router,
    RelationPolicy,
}

impl OnePerTenant {
    pub fn kind(self) -> PluginKind {
        match self {
            OnePerTenant::RateLimiter => PluginKind::RateLimiter,
            OnePerTenant::Router => PluginKind::Router,
            OnePerTenant::RelationPolicy => PluginKind::RelationPolicy,
        }
    }
}

/// A plugin that ships inside the `strand` binary, used by every tenant that has not deployed its own.
pub struct BundledPlugin {
    pub kind: PluginKind,
    pub name: &'static str,
    pub wasm: &'static [u8],
    /// The spaces the API serves through `/v1/projections` (a projector's).
    pub readable: &'static [(Shape, &'static str)],
}

/// The bundled plugins, built from `plugins/` for `wasm32-wasip2` by `host/build.rs`.
pub const BUNDLED: [BundledPlugin; 6] = [
    BundledPlugin {
        kind: PluginKind::RateLimiter,
        name: slot::SINGLETON_NAME,
        wasm: include_bytes!(concat!(env!("OUT_DIR"), "/default_rate_limit.wasm")),
        readable: &[],
    },
    BundledPlugin {
        kind: PluginKind::Router,
        name: slot::SINGLETON_NAME,
        wasm: include_bytes!(concat!(env!("OUT_DIR"), "/default_router.wasm")),
        readable: &[],
    },
    BundledPlugin {
        kind: PluginKind::Projector,
        name: strand_contract::FOLLOW_LISTS,
        wasm: include_bytes!(concat!(env!("OUT_DIR"), "/follow_lists.wasm")),
        readable: &[(Shape::SortedSet, strand_contract::FOLLOWING), (Shape::SortedSet, strand_contract::FOLLOWERS)],
    },
    BundledPlugin {
        kind: PluginKind::Projector,
        name: strand_contract::FOLLOW_COUNTS,
        wasm: include_bytes!(concat!(env!("OUT_DIR"), "/follow_counts.wasm")),
        readable: &[(Shape::Counter, strand_contract::FOLLOWINGS), (Shape::Counter, strand_contract::FOLLOWERS)],
    },
    BundledPlugin {
        kind: PluginKind::Projector,
        name: "top-followers",
        wasm: include_bytes!(concat!(env!("OUT_DIR"), "/top_followers.wasm")),
        readable: &[(Shape::SortedSet, "top")],
    },
    BundledPlugin {
        kind: PluginKind::RelationPolicy,
        name: slot::SINGLETON_NAME,
        wasm: include_bytes!(concat!(env!("OUT_DIR"), "/default_relation_policy.wasm")),
        readable: &[],
    },
];

/// Example plugins built with the bundled ones but run by no tenant until it deploys one (with the
/// `readable` declaration shown). The tests deploy them through the admin API; for a deployment
/// `cargo build --release --target wasm32-wasip2 -p mutual-follows` builds the same component.
pub const EXAMPLES: [BundledPlugin; 3] = [
    BundledPlugin {
        kind: PluginKind::Projector,
        name: "mutual-follows",
        wasm: include_bytes!(concat!(env!("OUT_DIR"), "/mutual_follows.wasm")),
        readable: &[(Shape::SortedSet, "friends")],
    },
    BundledPlugin {
        kind: PluginKind::RelationPolicy,
        name: "following-cap",
        wasm: include_bytes!(concat!(env!("OUT_DIR"), "/following_cap.wasm")),
        readable: &[],
    },
    BundledPlugin {
        kind: PluginKind::Projector,
        name: "relation-signals",
        wasm: include_bytes!(concat!(env!("OUT_DIR"), "/relation_signals.wasm")),
        readable: &[(Shape::SortedSet, "requests"), (Shape::Counter, "blocked_by")],
    },
];
