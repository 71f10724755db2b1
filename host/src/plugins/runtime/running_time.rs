//! Each tenant's share of the cores: how much running time its plugins may take, whatever their number.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::util::token_bucket::TokenBucket;

/// The running time a tenant's calls may take at once before its share applies: far more than any call
/// of a well-behaved plugin (microseconds), enough for a backfill page at full speed.
const BURST: Duration = Duration::from_millis(200);
/// Tenants remembered before those whose buckets are full again are forgotten (a full bucket is what a
/// tenant not seen starts with).
const REMEMBERED: usize = 64;
/// Of the machine's cores, the share one tenant's plugins may keep running unless configured otherwise.
pub const DEFAULT_TENANT_CPU_SHARE: f64 = 0.125;

/// Each tenant's plugins' running time, as a token bucket of seconds refilled at the tenant's share of the
/// cores. Instances and concurrency bound what a tenant holds; this bounds what it *uses*: a tenant whose
/// plugins spin (to their deadline, from every connection, in every kind) is paused at each epoch tick once
/// past its burst, so the host's own tasks — the relay, the workers, the other tenants' calls — always
/// find a core. A paused call keeps its wall-clock deadline: spinning ends as a timeout, as before.
pub(super) struct RunningTime {
    /// Seconds of running time per second, for one tenant.
    per_second: f64,
    tenants: Mutex<HashMap<String, TokenBucket>>,
}

impl RunningTime {
    /// `share` of the machine's cores per tenant (`plugin_tenant_cpu_share`), at least a hundredth of one.
    pub(super) fn new(share: f64) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get()) as f64;
        let share = if share.is_finite() { share } else { DEFAULT_TENANT_CPU_SHARE };
        Self { per_second: (share * cores).max(0.01), tenants: Mutex::default() }
    }

    /// Charges `ran` of running time to `tenant` at `now`; how long its call is to pause before running on
    /// (zero while the tenant is within its share).
    pub(super) fn charge(&self, tenant: &str, ran: Duration, now: Instant) -> Duration {
        let mut tenants = self.tenants.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let bucket = tenants.entry(tenant.to_owned()).or_insert_with(|| TokenBucket::new(BURST.as_secs_f64(), now));
        bucket.refill(now, BURST.as_secs_f64(), self.per_second);
        let left = bucket.spend(ran.as_secs_f64());
        let pause = Duration::from_secs_f64((-left).max(0.0) / self.per_second);
        if tenants.len() > REMEMBERED {
            let per_second = self.per_second;
            tenants.retain(|_, bucket| {
                let mut rested = *bucket;
                rested.refill(now, BURST.as_secs_f64(), per_second) < BURST.as_secs_f64()
            });
        }
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_past_its_burst_pauses_for_its_debt_at_its_share_and_others_do_not() {
        let running = RunningTime { per_second: 0.5, tenants: Mutex::default() };
        let start = Instant::now();
        assert_eq!(running.charge("evil", BURST, start), Duration::ZERO, "the burst runs at full speed");
        let pause = running.charge("evil", Duration::from_millis(10), start);
        assert_eq!(pause, Duration::from_millis(20), "10 ms over at half a core: 20 ms of pause");
        assert_eq!(running.charge("acme", Duration::from_millis(10), start), Duration::ZERO);
        let later = start + Duration::from_secs(1);
        assert_eq!(running.charge("evil", Duration::from_millis(10), later), Duration::ZERO, "refilled meanwhile");
        for tenant in 0..REMEMBERED * 2 {
            running.charge(&tenant.to_string(), Duration::ZERO, later);
        }
        let remembered = running.tenants.lock().unwrap().len();
        assert!(remembered <= REMEMBERED + 1, "the rested are forgotten: {remembered} remembered");
        assert!(running.tenants.lock().unwrap().contains_key("evil"), "a tenant not yet rested is kept");
    }
}
