//! The WASI a plugin sees: nothing in it. No environment or arguments, no files (no preopened directory),
//! no sockets, standard output and error going nowhere, a clock stopped at the epoch and a random source
//! seeded with zero. Language runtimes — CPython in componentize-py, SpiderMonkey in componentize-js —
//! call WASI while they start; with this they start, and a plugin stays pure: the same input gives the
//! same output, on every node, every time.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder};

/// A fresh, empty WASI context for one call.
pub(super) fn empty() -> WasiCtx {
    WasiCtxBuilder::new()
        // Synchronous nothing (the default streams are asynchronous, and would need a runtime to block on).
        .stdin(std::io::empty())
        .stdout(std::io::empty())
        .stderr(std::io::empty())
        .wall_clock(Stopped)
        .monotonic_clock(Stopped)
        .secure_random(StdRng::seed_from_u64(0))
        .insecure_random(StdRng::seed_from_u64(0))
        .insecure_random_seed(0)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .build()
}

/// Time that does not pass: plugins get time from their inputs (`now-ms`, `occurred-at-ms`).
struct Stopped;

impl HostWallClock for Stopped {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for Stopped {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        0
    }
}
