//! Host bindings generated from `wit/`. The `types` interface is generated once (with the rate-limiter
//! world) and shared by the other two, so a `RelationEvent` or `Effect` is one Rust type everywhere.

pub mod rate_limiter {
    wasmtime::component::bindgen!({
        world: "rate-limiter",
        path: "../wit",
        // `strand plugin test` reads inputs and prints outputs as JSON.
        additional_derives: [serde::Serialize, serde::Deserialize],
    });
}

pub mod router {
    wasmtime::component::bindgen!({
        world: "router",
        path: "../wit",
        with: { "strand:plugin/types": super::rate_limiter::strand::plugin::types },
    });
}

pub mod projector {
    wasmtime::component::bindgen!({
        world: "projector",
        path: "../wit",
        with: { "strand:plugin/types": super::rate_limiter::strand::plugin::types },
    });
}

pub use rate_limiter::strand::plugin::types::{
    Action, Bucket, CappedZsetAdd, Decision, Destination, Effect, GuardedZsetAdd, Key, OutboxEvent, RelationEvent,
    WriteRequest, ZsetEntry,
};
