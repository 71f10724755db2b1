//! Strand: the follow graph of a social product as a service.
//!
//! The flow follows `DESIGN.md` §2 and `ARCHITECTURE.md`: [`api`] authenticates and validates requests,
//! [`ratelimit`] asks the tenant's policy plugin and charges its token bucket, [`graph`] commits the truth
//! (the `following` row and its outbox event in one transaction) and serves reads from it, [`plugins`] runs
//! the tenants' WebAssembly plugins, [`startup`] wires them into a server.

pub mod api;
pub mod bus;
pub mod config;
pub mod graph;
pub mod plugins;
pub mod projection;
pub mod ratelimit;
pub mod relay;
pub mod startup;
pub mod tenants;
