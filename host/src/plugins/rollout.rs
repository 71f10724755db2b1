//! Staged rollout: a canary rate limiter or router takes a stable share of the traffic — by a hash of the
//! user (policies) or of the message key (routers), so one user or key always meets one version — and a
//! shadow projector takes every event into a space of its own. Either is rolled back by the host itself
//! when it fails clearly more often than the stable version.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::slot::PluginSlot;

/// Which share of `tenant`'s traffic `key` belongs to: 0..100, the same on every node and every run
/// (FNV-1a, not std's hasher, whose output may change between Rust releases).
pub fn traffic_share(tenant: &str, key: &str) -> u8 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in tenant.bytes().chain([b':']).chain(key.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % 100) as u8
}

/// When a canary is rolled back automatically.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RollbackPolicy {
    /// The canary's failure rate may exceed the stable version's by at most this (0.05 = 5 points).
    pub max_excess_failure_rate: f64,
    /// Fewer canary calls than this in a window decide nothing.
    pub min_calls: u64,
    /// Rates are compared over windows this long.
    pub window: Duration,
}

impl Default for RollbackPolicy {
    fn default() -> Self {
        Self { max_excess_failure_rate: 0.05, min_calls: 20, window: Duration::from_secs(60) }
    }
}

/// Calls and how many of them failed (trap, timeout, out of fuel, invalid output).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Tally {
    pub calls: u64,
    pub failures: u64,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.calls += other.calls;
        self.failures += other.failures;
    }

    fn rate(self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.failures as f64 / self.calls as f64
        }
    }
}

struct Window {
    started: Instant,
    canary_version: i64,
    stable: Tally,
    canary: Tally,
}

/// A running rollout's calls in the current window, as one process saw them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct RolloutRates {
    pub candidate_version: i64,
    pub candidate: Tally,
    pub stable: Tally,
    /// How long the window has run (it starts over every `rollout_window_ms`).
    pub window_ms: u64,
}

/// Why a canary or shadow should be rolled back.
#[derive(Debug, Clone, PartialEq)]
pub struct Unhealthy {
    pub canary_version: i64,
    pub canary_failure_rate: f64,
    pub stable_failure_rate: f64,
    pub canary_calls: u64,
}

impl std::fmt::Display for Unhealthy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "v{} failed {:.1}% of {} calls, the stable version {:.1}%",
            self.canary_version,
            self.canary_failure_rate * 100.0,
            self.canary_calls,
            self.stable_failure_rate * 100.0
        )
    }
}

/// The failure rates of running rollouts and their stable versions, per slot, in this process.
pub struct RolloutHealth {
    policy: RollbackPolicy,
    windows: Mutex<HashMap<PluginSlot, Window>>,
}

impl RolloutHealth {
    pub fn new(policy: RollbackPolicy) -> Self {
        Self { policy, windows: Mutex::new(HashMap::new()) }
    }

    /// Counts `tally` calls of `slot` during the rollout of `canary_version`, by the candidate or the stable
    /// version; says so once when the candidate should be rolled back.
    pub fn record(&self, slot: &PluginSlot, canary_version: i64, by_canary: bool, tally: Tally) -> Option<Unhealthy> {
        // Plain counters: a panic elsewhere cannot leave them torn.
        let mut windows = self.windows.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        let window = windows.entry(slot.clone()).or_insert_with(|| Window {
            started: now,
            canary_version,
            stable: Tally::default(),
            canary: Tally::default(),
        });
        if window.canary_version != canary_version || now.duration_since(window.started) >= self.policy.window {
            *window = Window { started: now, canary_version, stable: Tally::default(), canary: Tally::default() };
        }
        if by_canary { &mut window.canary } else { &mut window.stable }.add(tally);
        let (canary, stable) = (window.canary, window.stable);
        let unhealthy = by_canary
            && tally.failures > 0
            && canary.calls >= self.policy.min_calls
            && canary.rate() - stable.rate() > self.policy.max_excess_failure_rate;
        if !unhealthy {
            return None;
        }
        // Reported once: the window starts over (and the rollout is being aborted).
        windows.remove(slot);
        Some(Unhealthy {
            canary_version,
            canary_failure_rate: canary.rate(),
            stable_failure_rate: stable.rate(),
            canary_calls: canary.calls,
        })
    }

    /// `slot`'s current window, if its rollout has been called in this process.
    pub fn rates(&self, slot: &PluginSlot) -> Option<RolloutRates> {
        let windows = self.windows.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        windows.get(slot).map(|window| RolloutRates {
            candidate_version: window.canary_version,
            candidate: window.canary,
            stable: window.stable,
            window_ms: u64::try_from(window.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// Forgets `slot`'s rollout (promoted or aborted).
    pub fn forget(&self, slot: &PluginSlot) {
        self.windows.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_stable_and_even() {
        assert_eq!(traffic_share("acme", "42"), traffic_share("acme", "42"));
        let under_ten = (0..10_000).filter(|u| traffic_share("acme", &u.to_string()) < 10).count();
        assert!((900..=1100).contains(&under_ten), "{under_ten} of 10000 in a 10% share");
    }

    #[test]
    fn a_canary_failing_clearly_more_than_stable_is_reported_once() {
        let health =
            RolloutHealth::new(RollbackPolicy { max_excess_failure_rate: 0.02, min_calls: 50, ..Default::default() });
        let slot = PluginSlot::new("acme".parse().unwrap(), super::super::PluginKind::RateLimiter, "default").unwrap();
        let mut reports = 0;
        let call = |failed: bool| Tally { calls: 1, failures: u64::from(failed) };
        for n in 0..400 {
            assert!(health.record(&slot, 2, false, call(false)).is_none(), "the stable version never fails");
            if health.record(&slot, 2, true, call(n % 20 == 0)).is_some() {
                reports += 1;
            }
        }
        assert!(reports >= 1, "5% failures against 0% crosses a 2-point threshold");
        let calm = RolloutHealth::new(RollbackPolicy::default());
        let flagged = (0..400).filter(|n| calm.record(&slot, 2, true, call(n % 20 == 19)).is_some()).count();
        assert_eq!(flagged, 0, "5% does not exceed a 5-point threshold");
    }
}
