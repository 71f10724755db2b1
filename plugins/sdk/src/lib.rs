//! The Strand plugin SDK.
//!
//! A plugin is a plain Rust type implementing one of [`RateLimiter`], [`Router`], [`Projector`],
//! [`RelationProjector`] or [`RelationPolicy`] for a single input; the matching `export_*!` macro turns it into the WASM component export for a whole batch.
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
pub mod log;

/// The names the host serves reads from (`follow-counts`, `follow-lists` and their keys).
pub use strand_contract as contract;

#[doc(hidden)]
pub mod bindings {
    //! Generated from `wit/`; the `types` and `log` interfaces are generated once and shared by the worlds.
    pub mod rate_limiter {
        wit_bindgen::generate!({
            world: "rate-limiter",
            path: "../../wit/strand.wit",
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
            path: "../../wit/strand.wit",
            with: {
                "strand:plugin/types@0.4.0": super::rate_limiter::strand::plugin::types,
                "strand:plugin/log@0.4.0": super::rate_limiter::strand::plugin::log,
            },
            pub_export_macro: true,
            export_macro_name: "export_router_world",
            default_bindings_module: "strand_plugin_sdk::bindings::router",
        });
    }
    pub mod projector {
        wit_bindgen::generate!({
            world: "projector",
            path: "../../wit/strand.wit",
            with: {
                "strand:plugin/types@0.4.0": super::rate_limiter::strand::plugin::types,
                "strand:plugin/log@0.4.0": super::rate_limiter::strand::plugin::log,
            },
            pub_export_macro: true,
            export_macro_name: "export_projector_world",
            default_bindings_module: "strand_plugin_sdk::bindings::projector",
        });
    }
    pub mod relation_projector {
        wit_bindgen::generate!({
            world: "relation-projector",
            path: "../../wit/strand.wit",
            with: {
                "strand:plugin/types@0.4.0": super::rate_limiter::strand::plugin::types,
                "strand:plugin/log@0.4.0": super::rate_limiter::strand::plugin::log,
                "strand:plugin/relations@0.4.0": super::relation_policy::strand::plugin::relations,
            },
            pub_export_macro: true,
            export_macro_name: "export_relation_projector_world",
            default_bindings_module: "strand_plugin_sdk::bindings::relation_projector",
        });
    }
    pub mod relation_policy {
        wit_bindgen::generate!({
            world: "relation-policy",
            path: "../../wit/strand.wit",
            with: {
                "strand:plugin/types@0.4.0": super::rate_limiter::strand::plugin::types,
                "strand:plugin/log@0.4.0": super::rate_limiter::strand::plugin::log,
            },
            additional_derives: [PartialEq],
            pub_export_macro: true,
            export_macro_name: "export_relation_policy_world",
            default_bindings_module: "strand_plugin_sdk::bindings::relation_policy",
        });
    }
}

pub use bindings::rate_limiter::strand::plugin::types::{
    Action, Bucket, CappedZsetAdd, Decision, Destination, Effect, GuardedZsetAdd, Key, Level, OutboxEvent,
    RelationEvent, WriteKind, WriteRequest, ZsetEntry, ZsetMemberWhile,
};

pub use bindings::relation_policy::strand::plugin::relations::{
    Admission, FollowAttempt, Refusal, RelationChange, RelationKind,
};

/// A relation policy: whether a follow begins, waits for the target's approval, or is refused (blocks are
/// the host's, before the policy is asked).
pub trait RelationPolicy {
    fn admit(attempt: &FollowAttempt) -> Admission;
}

/// A rate-limit policy: which bucket a write request charges, or allow / deny outright.
pub trait RateLimiter {
    fn decide(request: &WriteRequest) -> Decision;
}

/// An event router: where an outbox event is published; an empty list drops the event.
pub trait Router {
    fn route(event: &OutboxEvent) -> Vec<Destination>;
}

/// A projector: the effects of one relation event on the plugin's derived data.
pub trait Projector {
    fn project(event: &RelationEvent) -> Vec<Effect>;
}

/// A relation projector: the effects of any relation change (blocks, mutes, requests, follows, with who
/// acted) on the plugin's derived data. Deployed and read as a projector.
pub trait RelationProjector {
    fn project(change: &RelationChange) -> Vec<Effect>;
}

/// Calls `decide` for each input in turn, with [`log`] lines naming the input being handled.
#[doc(hidden)]
pub fn each<I, O>(inputs: Vec<I>, decide: impl Fn(&I) -> O) -> Vec<O> {
    inputs.iter().enumerate().map(|(index, input)| log::about(index as u32, || decide(input))).collect()
}

/// Exports a [`RateLimiter`] as the component's `rate-limiter` world.
#[macro_export]
macro_rules! export_rate_limiter {
    ($policy:ty) => {
        // Only the component exports the world: a native build (unit tests, a cdylib) exports nothing.
        #[cfg(target_arch = "wasm32")]
        struct __StrandRateLimiter;
        #[cfg(target_arch = "wasm32")]
        impl $crate::bindings::rate_limiter::exports::strand::plugin::policy::Guest for __StrandRateLimiter {
            fn decide(
                _tenant: ::std::string::String,
                requests: ::std::vec::Vec<$crate::WriteRequest>,
            ) -> ::std::vec::Vec<$crate::Decision> {
                $crate::each(requests, <$policy as $crate::RateLimiter>::decide)
            }
        }
        #[cfg(target_arch = "wasm32")]
        $crate::bindings::rate_limiter::export_rate_limiter_world!(__StrandRateLimiter);
    };
}

/// Exports a [`Router`] as the component's `router` world.
#[macro_export]
macro_rules! export_router {
    ($router:ty) => {
        // Only the component exports the world: a native build (unit tests, a cdylib) exports nothing.
        #[cfg(target_arch = "wasm32")]
        struct __StrandRouter;
        #[cfg(target_arch = "wasm32")]
        impl $crate::bindings::router::exports::strand::plugin::routing::Guest for __StrandRouter {
            fn route(
                _tenant: ::std::string::String,
                events: ::std::vec::Vec<$crate::OutboxEvent>,
            ) -> ::std::vec::Vec<::std::vec::Vec<$crate::Destination>> {
                $crate::each(events, <$router as $crate::Router>::route)
            }
        }
        #[cfg(target_arch = "wasm32")]
        $crate::bindings::router::export_router_world!(__StrandRouter);
    };
}

/// Exports a [`Projector`] as the component's `projector` world.
#[macro_export]
macro_rules! export_projector {
    ($projector:ty) => {
        // Only the component exports the world: a native build (unit tests, a cdylib) exports nothing.
        #[cfg(target_arch = "wasm32")]
        struct __StrandProjector;
        #[cfg(target_arch = "wasm32")]
        impl $crate::bindings::projector::exports::strand::plugin::projection::Guest for __StrandProjector {
            fn project(
                _tenant: ::std::string::String,
                events: ::std::vec::Vec<$crate::RelationEvent>,
            ) -> ::std::vec::Vec<::std::vec::Vec<$crate::Effect>> {
                $crate::each(events, <$projector as $crate::Projector>::project)
            }
        }
        #[cfg(target_arch = "wasm32")]
        $crate::bindings::projector::export_projector_world!(__StrandProjector);
    };
}

/// Exports a [`RelationProjector`] as the component's `relation-projector` world.
#[macro_export]
macro_rules! export_relation_projector {
    ($projector:ty) => {
        // Only the component exports the world: a native build (unit tests, a cdylib) exports nothing.
        #[cfg(target_arch = "wasm32")]
        struct __StrandRelationProjector;
        #[cfg(target_arch = "wasm32")]
        impl $crate::bindings::relation_projector::exports::strand::plugin::relation_projection::Guest
            for __StrandRelationProjector
        {
            fn project_changes(
                _tenant: ::std::string::String,
                changes: ::std::vec::Vec<$crate::RelationChange>,
            ) -> ::std::vec::Vec<::std::vec::Vec<$crate::Effect>> {
                $crate::each(changes, <$projector as $crate::RelationProjector>::project)
            }
        }
        #[cfg(target_arch = "wasm32")]
        $crate::bindings::relation_projector::export_relation_projector_world!(__StrandRelationProjector);
    };
}

/// Exports a [`RelationPolicy`] as the component's `relation-policy` world.
#[macro_export]
macro_rules! export_relation_policy {
    ($policy:ty) => {
        // Only the component exports the world: a native build (unit tests, a cdylib) exports nothing.
        #[cfg(target_arch = "wasm32")]
        struct __StrandRelationPolicy;
        #[cfg(target_arch = "wasm32")]
        impl $crate::bindings::relation_policy::exports::strand::plugin::admission_policy::Guest
            for __StrandRelationPolicy
        {
            fn admit(
                _tenant: ::std::string::String,
                attempts: ::std::vec::Vec<$crate::FollowAttempt>,
            ) -> ::std::vec::Vec<$crate::Admission> {
                $crate::each(attempts, <$policy as $crate::RelationPolicy>::admit)
            }
        }
        #[cfg(target_arch = "wasm32")]
        $crate::bindings::relation_policy::export_relation_policy_world!(__StrandRelationPolicy);
    };
}
