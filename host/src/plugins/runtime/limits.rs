//! What a call may use and what it cost: the limits a version runs with (asked for at deploy, within the
//! platform's maxima) and the cost the host measures.

use std::time::Duration;

use super::POOLED_INSTANCES;

/// What one call may use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PluginLimits {
    /// Wall-clock time for instantiation plus the call.
    pub deadline: Duration,
    /// Linear memory of the instance, in bytes.
    pub memory_bytes: usize,
    /// Fuel (roughly, wasm instructions) per call; `None` leaves only the deadline.
    pub fuel: Option<u64>,
}

impl Default for PluginLimits {
    fn default() -> Self {
        Self { deadline: Duration::from_millis(50), memory_bytes: 16 << 20, fuel: Some(50_000_000) }
    }
}

/// Concurrent calls one tenant may have in flight unless configured otherwise: a quarter of the pool.
pub const DEFAULT_TENANT_SHARE: u32 = POOLED_INSTANCES / 4;

/// A version's limits hold for a call of up to this many inputs; a bigger batch (a backfill page) gets
/// proportionally more time and fuel, within the platform maxima.
pub const INPUTS_PER_LIMIT: usize = 256;

/// Limits asked for at deploy time; each unset one is the configured default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, utoipa::IntoParams)]
pub struct RequestedLimits {
    /// Wall-clock limit of one call, in milliseconds.
    pub deadline_ms: Option<u64>,
    /// Linear-memory limit of one instance, in bytes.
    pub memory_bytes: Option<u64>,
    /// Fuel per call (about one unit per wasm instruction).
    pub fuel: Option<u64>,
}

/// A requested limit above the platform's maximum (or zero).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{limit} = {requested} is not allowed: it must be at least 1 and at most the platform maximum {maximum}")]
pub struct LimitRefused {
    /// `deadline_ms`, `memory_bytes` or `fuel`.
    pub limit: &'static str,
    pub requested: u64,
    pub maximum: u64,
}

/// What a call cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallCost {
    pub elapsed: Duration,
    /// Fuel consumed, when fuel is metered.
    pub fuel: Option<u64>,
}
