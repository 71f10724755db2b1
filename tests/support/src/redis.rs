//! A throwaway Redis server for the test process: free port, nothing persisted (DESIGN §11).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use crate::watched::{scratch_dir, WatchedServer};

/// A running Redis that lives as long as the test process.
pub struct Redis {
    server: WatchedServer,
}

static SHARED: OnceLock<Result<Redis, String>> = OnceLock::new();
static NEXT_DATABASE: AtomicU32 = AtomicU32::new(0);
/// Redis' default number of logical databases.
const DATABASES: u32 = 16;

impl Redis {
    /// The process-wide instance, started on first use.
    pub fn shared() -> anyhow::Result<&'static Redis> {
        SHARED
            .get_or_init(|| Redis::start().map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow::anyhow!("throwaway Redis failed to start (apt-get install redis-server): {e}"))
    }

    fn start() -> anyhow::Result<Self> {
        Self::start_on(crate::free_port()?)
    }

    /// A server of the test's own, to stop (an outage) and start again on its port, empty.
    pub fn dedicated() -> anyhow::Result<Self> {
        Self::start()
    }

    /// A new, empty server on `port` (e.g. where a stopped one was).
    pub fn start_on(port: u16) -> anyhow::Result<Self> {
        let dir = scratch_dir("strand-redis-")?;
        let command = "redis-server --port \"$PORT\" --bind 127.0.0.1 --save '' --appendonly no --dir \"$DIR\"";
        Ok(Redis { server: WatchedServer::start(&dir, port, command)? })
    }

    pub fn port(&self) -> u16 {
        self.server.port
    }

    /// Stops the server now; what it held is gone.
    pub fn stop(self) -> anyhow::Result<()> {
        self.server.stop()
    }

    /// A URL of one of the server's logical databases, different on each call (wrapping after 16), so
    /// concurrent tests rarely share keys; tests still use their own tenants or keys.
    pub fn url(&self) -> String {
        let db = NEXT_DATABASE.fetch_add(1, Ordering::Relaxed) % DATABASES;
        format!("redis://127.0.0.1:{}/{db}", self.server.port)
    }
}
