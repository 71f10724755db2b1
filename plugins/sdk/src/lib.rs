//! The Strand plugin SDK.
//!
//! A plugin is a plain Rust type implementing one of [`RateLimiter`], [`Router`] or [`Projector`] for a
//! single input; the matching `export_*!` macro turns it into the WASM component export for a whole batch.
//! Because the traits take and return ordinary values, a plugin's logic is unit-tested natively with
//! `cargo test`; `cargo build --target wasm32-wasip2 --release` builds the component the host loads.
//!
//! ```ignore
//! use strand_plugin_sdk::{export_projector, Effect, Key, Projector, RelationEvent};
//!
//! struct Followers;
//! impl Projector for Followers {
//!     fn project(event: &RelationEvent) -> Vec<Effect> {
//!         vec![Effect::counter_add(Key::new("followers", [event.followee]), event.delta())]
//!     }
//! }
//! export_projector!(Followers);
//! ```

mod helpers;

/// The names the host serves reads from (`follow-counts`, `follow-lists` and their keys).
pub use strand_contract as contract;

#[doc(hidden)]
pub mod bindings {
    //! Generated from `wit/`; the `types` interface is generated once and shared by the three worlds.
    pub mod rate_limiter {
        wit_bindgen::generate!({
            world: "rate-limiter",
            path: "../../wit",
            // Plugin authors compare effects and decisions in their native unit tests.
            additional_derives: [PartialEq],
            pub_export_macro: true,
            export_macro_name: "export_rate_limiter_world",
            default_bindings_module: "strand_plugin_sdk::bindings::rate_limiter",
        });
    }
    pub mod router {
        wit_bindgen::generate!({
            world: "router",
            path: "../../wit",
            with: { "strand:plugin/types@0.1.0": super::rate_limiter::strand::plugin::types },
            pub_export_macro: true,
            export_macro_name: "export_router_world",
            default_bindings_module: "strand_plugin_sdk::bindings::router",
        });
    }
    pub mod projector {
        wit_bindgen::generate!({
            world: "projector",
            path: "../../wit",
            with: { "strand:plugin/types@0.1.0": super::rate_limiter::strand::plugin::types },
            pub_export_macro: true,
            export_macro_name: "export_projector_world",
            default_bindings_module: "strand_plugin_sdk::bindings::projector",
        });
    }
}

pub use bindings::rate_limiter::strand::plugin::types::{
    Action, Bucket, CappedZsetAdd, Decision, Destination, Effect, GuardedZsetAdd, Key, OutboxEvent, RelationEvent,
    WriteRequest, ZsetEntry,
};

/// A rate-limit policy: which bucket a write request charges, or allow / deny outright.
pub trait RateLimiter {
    fn decide(request: &WriteRequest) -> Decision;
}

/// An event router: where an outbox event is published; an empty list drops it.
pub trait Router {
    fn route(event: &OutboxEvent) -> Vec<Destination>;
}

/// A projector: the effects of one relation event on the plugin's derived data.
pub trait Projector {
    fn project(event: &RelationEvent) -> Vec<Effect>;
}

/// Exports a [`RateLimiter`] as the component's `rate-limiter` world.
#[macro_export]
macro_rules! export_rate_limiter {
    ($policy:ty) => {
        struct __StrandRateLimiter;
        impl $crate::bindings::rate_limiter::Guest for __StrandRateLimiter {
            fn decide(requests: ::std::vec::Vec<$crate::WriteRequest>) -> ::std::vec::Vec<$crate::Decision> {
                requests.iter().map(<$policy as $crate::RateLimiter>::decide).collect()
            }
        }
        $crate::bindings::rate_limiter::export_rate_limiter_world!(__StrandRateLimiter);
    };
}

/// Exports a [`Router`] as the component's `router` world.
#[macro_export]
macro_rules! export_router {
    ($router:ty) => {
        struct __StrandRouter;
        impl $crate::bindings::router::Guest for __StrandRouter {
            fn route(
                events: ::std::vec::Vec<$crate::OutboxEvent>,
            ) -> ::std::vec::Vec<::std::vec::Vec<$crate::Destination>> {
                events.iter().map(<$router as $crate::Router>::route).collect()
            }
        }
        $crate::bindings::router::export_router_world!(__StrandRouter);
    };
}

/// Exports a [`Projector`] as the component's `projector` world.
#[macro_export]
macro_rules! export_projector {
    ($projector:ty) => {
        struct __StrandProjector;
        impl $crate::bindings::projector::Guest for __StrandProjector {
            fn project(
                events: ::std::vec::Vec<$crate::RelationEvent>,
            ) -> ::std::vec::Vec<::std::vec::Vec<$crate::Effect>> {
                events.iter().map(<$projector as $crate::Projector>::project).collect()
            }
        }
        $crate::bindings::projector::export_projector_world!(__StrandProjector);
    };
}
