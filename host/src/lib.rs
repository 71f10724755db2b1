//! Strand: the follow graph of a social product as a service.
//!
//! The flow follows `DESIGN.md` §2 and `ARCHITECTURE.md`: [`api`] authenticates and validates requests,
//! [`ratelimit`] asks the tenant's policy plugin and charges its token bucket, [`graph`] commits the truth
//! (the `following` row and its outbox event in one transaction) and serves reads from it, [`plugins`] runs
//! the tenants' WebAssembly plugins, [`relay`] publishes the outbox to the bus, [`projection`] turns the
//! bus's events into derived data in the [`cache`], [`app`] wires them into the `strand` commands.

/// jemalloc, as Vector and TiKV run: glibc's allocator showed as a tenth of the API node's CPU on the write
/// path (many small, short-lived allocations across threads). Set here, so every binary linking Strand
/// (the `strand` command, its tests and benchmarks) runs on it.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

pub mod accounts;
pub mod api;
pub mod app;
pub mod bus;
pub mod cache;
pub mod config;
pub mod db;
pub mod graph;
pub mod ops;
pub mod outbox;
pub mod plugins;
pub mod projection;
pub mod ratelimit;
pub mod relation_policy;
pub mod relay;
pub mod tenancy;
pub mod transfer;
pub mod upkeep;
pub mod util;
