//! The latencies of the live writes this process served lately (its public API's writes, timed as their
//! callers see them), for background work that paces itself on what it costs them: an account job slows
//! down when they grow (`accounts::pace`). Process-wide, like the metrics: every route records, any job
//! reads.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// The most latencies kept between two reads (the newest): a reader that stopped reading costs a bounded
/// buffer.
const KEPT: usize = 4096;

static RECENT: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Records a live write that took `took`.
pub fn record(took: Duration) {
    let micros = u32::try_from(took.as_micros()).unwrap_or(u32::MAX);
    let mut recent = RECENT.lock().unwrap_or_else(PoisonError::into_inner);
    if recent.len() == KEPT {
        // Nobody read them for a while: the older half is stale.
        recent.drain(..KEPT / 2);
    }
    recent.push(micros);
}

/// The latencies recorded since the last call, taken: one reader paces on them (the node's runner of
/// account jobs runs one job at a time).
pub fn take() -> Vec<Duration> {
    let taken = std::mem::take(&mut *RECENT.lock().unwrap_or_else(PoisonError::into_inner));
    taken.into_iter().map(|micros| Duration::from_micros(u64::from(micros))).collect()
}

/// Whether `method` on `route` is a live write a user waits for (the public API's, not an operator's).
pub fn is_live_write(method: &str, route: &str) -> bool {
    route.starts_with("/v1/") && matches!(method, "PUT" | "POST" | "DELETE" | "PATCH")
}
