//! In-process token buckets for the embedded default (one process, so one clock and one map suffice).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::graph::TenantId;
use crate::plugins::{Bucket, MAX_BUCKET_REFILL};
use crate::util::token_bucket::TokenBucket;

/// A tenant's map is swept once it holds this many buckets, and then again each time it has doubled.
const SWEEP_ABOVE: usize = 10_000;

/// The most buckets one tenant keeps. A policy that names a new key per request (and refills slowly, so
/// its buckets never count as full) fills its own tenant's map to this; the least recently charged half is
/// then forgotten — those buckets start full again, a looser limit for that tenant only.
const MAX_BUCKETS_PER_TENANT: usize = 100_000;

struct BucketState {
    bucket: TokenBucket,
    /// When the bucket will be full again if nothing takes from it.
    full_at: Instant,
}

/// One tenant's buckets: sweeping them costs the tenant's writes alone, amortised O(1) per new key.
struct TenantBuckets {
    buckets: HashMap<String, BucketState>,
    /// The size at which the next sweep runs.
    sweep_at: usize,
}

impl Default for TenantBuckets {
    fn default() -> Self {
        Self { buckets: HashMap::new(), sweep_at: SWEEP_ABOVE }
    }
}

impl TenantBuckets {
    /// Forgets the buckets that have refilled completely (a new one starts full, so that changes nothing),
    /// then, above the cap, the least recently charged half; the next sweep waits until the map doubled.
    fn sweep(&mut self, now: Instant) {
        self.buckets.retain(|_, state| state.full_at > now);
        if self.buckets.len() >= MAX_BUCKETS_PER_TENANT {
            let mut charged: Vec<Instant> = self.buckets.values().map(|state| state.bucket.at()).collect();
            let middle = charged.len() / 2;
            let (_, median, _) = charged.select_nth_unstable(middle);
            let median = *median;
            self.buckets.retain(|_, state| state.bucket.at() > median);
        }
        self.sweep_at = (self.buckets.len() * 2).clamp(SWEEP_ABOVE, MAX_BUCKETS_PER_TENANT);
    }
}

#[derive(Default)]
pub struct LocalBuckets {
    tenants: Mutex<HashMap<TenantId, TenantBuckets>>,
}

impl LocalBuckets {
    /// `None` when the tokens were taken, else how long until enough have refilled.
    pub(super) fn take(&self, tenant: &TenantId, bucket: &Bucket) -> Option<Duration> {
        let now = Instant::now();
        let capacity = f64::from(bucket.capacity);
        let refill = bucket.refill_per_second;
        // The map holds plain numbers, consistent at every step: a panic elsewhere cannot leave it torn.
        let mut tenants = self.tenants.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let own = match tenants.get_mut(tenant) {
            Some(own) => own,
            None => tenants.entry(tenant.clone()).or_default(),
        };
        if own.buckets.len() >= own.sweep_at && !own.buckets.contains_key(&bucket.key) {
            own.sweep(now);
        }
        let state = own
            .buckets
            .entry(bucket.key.clone())
            .or_insert(BucketState { bucket: TokenBucket::new(capacity, now), full_at: now });
        state.bucket.refill(now, capacity, refill);
        let verdict = state.bucket.take(f64::from(bucket.cost)).err().map(|missing| wait(missing / refill));
        state.full_at = now + wait((capacity - state.bucket.tokens()) / refill);
        verdict
    }
}

/// `seconds` as a wait, never longer than [`MAX_BUCKET_REFILL`] (policy output is checked against it, so
/// only a bucket that was never checked gets here: it must still not panic while the lock is held).
fn wait(seconds: f64) -> Duration {
    Duration::try_from_secs_f64(seconds).map_or(MAX_BUCKET_REFILL, |wait| wait.min(MAX_BUCKET_REFILL))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> TenantId {
        name.parse().unwrap()
    }

    fn bucket(key: &str, capacity: u32, refill_per_second: f64) -> Bucket {
        Bucket { key: key.into(), capacity, refill_per_second, cost: 1 }
    }

    #[test]
    fn a_full_bucket_grants_its_capacity_then_says_when_to_retry() {
        let buckets = LocalBuckets::default();
        let bucket = bucket("k", 3, 0.5);
        let granted = (0..5).filter(|_| buckets.take(&tenant("acme"), &bucket).is_none()).count();
        assert_eq!(granted, 3);
        let retry = buckets.take(&tenant("acme"), &bucket).expect("empty");
        assert!(retry > Duration::from_millis(1900) && retry <= Duration::from_secs(2), "{retry:?}");
        assert!(buckets.take(&tenant("globex"), &bucket).is_none(), "another tenant's bucket of the same key");
    }

    #[test]
    fn sweeping_forgets_only_buckets_that_have_refilled() {
        let buckets = LocalBuckets::default();
        let acme = tenant("acme");
        let slow = bucket("slow", 1, 0.0001);
        assert!(buckets.take(&acme, &slow).is_none());
        for i in 0..SWEEP_ABOVE {
            assert!(buckets.take(&acme, &bucket(&format!("fast-{i}"), 1, 1e9)).is_none());
        }
        assert!(buckets.take(&acme, &bucket("one-more", 1, 1e9)).is_none(), "this insert sweeps");
        assert!(buckets.take(&acme, &slow).is_some(), "the empty slow bucket was kept, not reset to full");
        let tenants = buckets.tenants.lock().unwrap();
        assert!(tenants[&acme].buckets.len() < SWEEP_ABOVE, "refilled buckets were forgotten");
    }

    /// A policy naming a new slow-refilling key per request: its tenant's map stays bounded, sweeps are
    /// amortised (not one per write), and another tenant's empty bucket is never forgotten.
    #[test]
    fn a_tenant_flooding_new_keys_is_capped_alone() {
        let buckets = LocalBuckets::default();
        let (evil, acme) = (tenant("evil"), tenant("acme"));
        let drained = bucket("user-1", 1, 0.0001);
        assert!(buckets.take(&acme, &drained).is_none());
        let (mut sweeps, mut previous) = (0, 0);
        for i in 0..3 * MAX_BUCKETS_PER_TENANT {
            assert!(buckets.take(&evil, &bucket(&format!("k{i}"), 1, 0.0001)).is_none());
            let tenants = buckets.tenants.lock().unwrap();
            let held = tenants[&evil].buckets.len();
            assert!(held <= MAX_BUCKETS_PER_TENANT, "capped: {held}");
            sweeps += usize::from(held < previous);
            previous = held;
            assert_eq!(tenants[&acme].buckets.len(), 1, "acme's map is not swept by evil's keys");
        }
        assert!(sweeps < 20, "sweeps are amortised: {sweeps}");
        assert!(buckets.take(&acme, &drained).is_some(), "acme's empty bucket is still empty");
    }
}
