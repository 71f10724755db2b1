//! Host bindings generated from `wit/`: the current package (`strand:plugin@0.4.0`, `wit/strand.wit`) and
//! the ones before it (`wit/0.3.0/`, `wit/0.2.0/`, `wit/0.1.0/`), whose components keep running. Within
//! each package the `types` (and `log`) interfaces are generated once, with the rate-limiter world, and
//! shared by the other worlds, so an `Effect` is one Rust type everywhere. 0.4.0's `types` differ from
//! 0.3.0's and 0.2.0's (which are the same) only in the write request: their routers, projectors and
//! relation worlds use today's Rust types (the component model checks the types a world's functions use,
//! by structure) and need no conversion; their rate limiters have records of their own, converted in
//! `inputs.rs`, and their `log` imports are their own (`sandbox.rs` answers them as today's). 0.1.0's
//! records convert (`compat.rs`).

pub mod rate_limiter {
    wasmtime::component::bindgen!({
        world: "rate-limiter",
        path: "../wit/strand.wit",
        // Called on the async workers, on a fiber that yields at every epoch tick (`runtime.rs`).
        exports: { default: async },
        // `strand plugin test` reads inputs and prints outputs as JSON.
        additional_derives: [serde::Serialize, serde::Deserialize, PartialEq],
    });
}

pub mod router {
    wasmtime::component::bindgen!({
        world: "router",
        path: "../wit/strand.wit",
        exports: { default: async },
        with: {
            "strand:plugin/types": super::rate_limiter::strand::plugin::types,
            "strand:plugin/log": super::rate_limiter::strand::plugin::log,
        },
    });
}

pub mod projector {
    wasmtime::component::bindgen!({
        world: "projector",
        path: "../wit/strand.wit",
        exports: { default: async },
        with: {
            "strand:plugin/types": super::rate_limiter::strand::plugin::types,
            "strand:plugin/log": super::rate_limiter::strand::plugin::log,
        },
    });
}

pub mod relation_policy {
    wasmtime::component::bindgen!({
        world: "relation-policy",
        path: "../wit/strand.wit",
        exports: { default: async },
        with: {
            "strand:plugin/types": super::rate_limiter::strand::plugin::types,
            "strand:plugin/log": super::rate_limiter::strand::plugin::log,
        },
        additional_derives: [serde::Serialize, serde::Deserialize, PartialEq],
    });
}

pub mod relation_projector {
    wasmtime::component::bindgen!({
        world: "relation-projector",
        path: "../wit/strand.wit",
        exports: { default: async },
        with: {
            "strand:plugin/types": super::rate_limiter::strand::plugin::types,
            "strand:plugin/log": super::rate_limiter::strand::plugin::log,
            "strand:plugin/relations": super::relation_policy::strand::plugin::relations,
        },
    });
}

/// `strand:plugin@0.3.0`: today's worlds; a write request without the write's kind.
pub mod v0_3 {
    pub mod rate_limiter {
        wasmtime::component::bindgen!({
            world: "rate-limiter",
            path: "../wit/0.3.0/strand.wit",
            exports: { default: async },
        });
    }

    pub mod router {
        wasmtime::component::bindgen!({
            world: "router",
            path: "../wit/0.3.0/strand.wit",
            exports: { default: async },
            with: {
                "strand:plugin/types": crate::plugins::bindings::rate_limiter::strand::plugin::types,
                "strand:plugin/log": super::rate_limiter::strand::plugin::log,
            },
        });
    }

    pub mod projector {
        wasmtime::component::bindgen!({
            world: "projector",
            path: "../wit/0.3.0/strand.wit",
            exports: { default: async },
            with: {
                "strand:plugin/types": crate::plugins::bindings::rate_limiter::strand::plugin::types,
                "strand:plugin/log": super::rate_limiter::strand::plugin::log,
            },
        });
    }

    pub mod relation_policy {
        wasmtime::component::bindgen!({
            world: "relation-policy",
            path: "../wit/0.3.0/strand.wit",
            exports: { default: async },
            with: {
                "strand:plugin/types": crate::plugins::bindings::rate_limiter::strand::plugin::types,
                "strand:plugin/log": super::rate_limiter::strand::plugin::log,
                "strand:plugin/relations": crate::plugins::bindings::relation_policy::strand::plugin::relations,
            },
        });
    }

    pub mod relation_projector {
        wasmtime::component::bindgen!({
            world: "relation-projector",
            path: "../wit/0.3.0/strand.wit",
            exports: { default: async },
            with: {
                "strand:plugin/types": crate::plugins::bindings::rate_limiter::strand::plugin::types,
                "strand:plugin/log": super::rate_limiter::strand::plugin::log,
                "strand:plugin/relations": crate::plugins::bindings::relation_policy::strand::plugin::relations,
            },
        });
    }

    pub use rate_limiter::strand::plugin::log::{add_to_linker as add_log_to_linker, Host as LogHost};
    pub use rate_limiter::strand::plugin::types::{Action, Decision, Level, WriteRequest};
}

/// `strand:plugin@0.2.0`: the same worlds but the relation ones; a write request without the write's kind.
pub mod v0_2 {
    pub mod rate_limiter {
        wasmtime::component::bindgen!({
            world: "rate-limiter",
            path: "../wit/0.2.0/strand.wit",
            exports: { default: async },
        });
    }

    pub mod router {
        wasmtime::component::bindgen!({
            world: "router",
            path: "../wit/0.2.0/strand.wit",
            exports: { default: async },
            with: {
                "strand:plugin/types": crate::plugins::bindings::rate_limiter::strand::plugin::types,
                "strand:plugin/log": super::rate_limiter::strand::plugin::log,
            },
        });
    }

    pub mod projector {
        wasmtime::component::bindgen!({
            world: "projector",
            path: "../wit/0.2.0/strand.wit",
            exports: { default: async },
            with: {
                "strand:plugin/types": crate::plugins::bindings::rate_limiter::strand::plugin::types,
                "strand:plugin/log": super::rate_limiter::strand::plugin::log,
            },
        });
    }

    pub use rate_limiter::strand::plugin::log::{add_to_linker as add_log_to_linker, Host as LogHost};
    pub use rate_limiter::strand::plugin::types::{Action, Decision, Level, WriteRequest};
}

/// `strand:plugin@0.1.0`: worlds exporting bare functions, inputs carrying their tenant (and event id).
pub mod v0_1 {
    pub mod rate_limiter {
        wasmtime::component::bindgen!({
            world: "rate-limiter",
            path: "../wit/0.1.0/strand.wit",
            exports: { default: async },
        });
    }

    pub mod router {
        wasmtime::component::bindgen!({
            world: "router",
            path: "../wit/0.1.0/strand.wit",
            exports: { default: async },
            with: { "strand:plugin/types": super::rate_limiter::strand::plugin::types },
        });
    }

    pub mod projector {
        wasmtime::component::bindgen!({
            world: "projector",
            path: "../wit/0.1.0/strand.wit",
            exports: { default: async },
            with: { "strand:plugin/types": super::rate_limiter::strand::plugin::types },
        });
    }

    pub use rate_limiter::strand::plugin::types::*;
}

pub use rate_limiter::strand::plugin::log::add_to_linker as add_log_to_linker;
pub use rate_limiter::strand::plugin::log::Host as LogHost;
pub use rate_limiter::strand::plugin::types::{
    Action, Bucket, CappedZsetAdd, Decision, Destination, Effect, GuardedZsetAdd, Key, Level, WriteKind, ZsetEntry,
    ZsetMemberWhile,
};

pub use relation_policy::strand::plugin::relations::{Admission, Refusal, RelationKind};

/// The inputs as the 0.2.0 to 0.4.0 worlds receive them (the host's own carry more: see `inputs.rs`).
pub mod wire {
    pub use super::rate_limiter::strand::plugin::types::{OutboxEvent, RelationEvent, WriteRequest};
    pub use super::relation_policy::strand::plugin::relations::{FollowAttempt, RelationChange};
}
