//! In-process token buckets for the embedded default (one process, so one clock and one map suffice).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::plugins::{Bucket, MAX_BUCKET_REFILL};

/// Above this many buckets, those that have refilled completely are forgotten (a new one starts full,
/// so forgetting a full bucket changes nothing) and the map does not grow without bound.
const SWEEP_ABOVE: usize = 10_000;

struct BucketState {
    tokens: f64,
    at: Instant,
    /// When the bucket will be full again if nothing takes from it.
    full_at: Instant,
}

#[derive(Default)]
pub struct LocalBuckets {
    buckets: Mutex<HashMap<String, BucketState>>,
}

impl LocalBuckets {
    /// `None` when the tokens were taken, else how long until enough have refilled.
    pub(super) fn take(&self, key: &str, bucket: &Bucket) -> Option<Duration> {
        let now = Instant::now();
        let capacity = f64::from(bucket.capacity);
        let refill = bucket.refill_per_second;
        // The map holds plain numbers, consistent at every step: a panic elsewhere cannot leave it torn.
        let mut buckets = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() >= SWEEP_ABOVE && !buckets.contains_key(key) {
            buckets.retain(|_, state| state.full_at > now);
        }
        let state = buckets.entry(key.to_owned()).or_insert(BucketState { tokens: capacity, at: now, full_at: now });
        let mut tokens = (state.tokens + now.duration_since(state.at).as_secs_f64() * refill).min(capacity);
        let cost = f64::from(bucket.cost);
        let verdict = if tokens >= cost {
            tokens -= cost;
            None
        } else {
            Some(wait((cost - tokens) / refill))
        };
        *state = BucketState { tokens, at: now, full_at: now + wait((capacity - tokens) / refill) };
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

    #[test]
    fn a_full_bucket_grants_its_capacity_then_says_when_to_retry() {
        let buckets = LocalBuckets::default();
        let bucket = Bucket { key: "k".into(), capacity: 3, refill_per_second: 0.5, cost: 1 };
        let granted = (0..5).filter(|_| buckets.take("k", &bucket).is_none()).count();
        assert_eq!(granted, 3);
        let retry = buckets.take("k", &bucket).expect("empty");
        assert!(retry > Duration::from_millis(1900) && retry <= Duration::from_secs(2), "{retry:?}");
    }

    #[test]
    fn sweeping_forgets_only_buckets_that_have_refilled() {
        let buckets = LocalBuckets::default();
        let slow = Bucket { key: "slow".into(), capacity: 1, refill_per_second: 0.0001, cost: 1 };
        assert!(buckets.take("slow", &slow).is_none());
        let fast = Bucket { key: "fast".into(), capacity: 1, refill_per_second: 1e9, cost: 1 };
        for i in 0..SWEEP_ABOVE {
            assert!(buckets.take(&format!("fast-{i}"), &fast).is_none());
        }
        assert!(buckets.take("one-more", &fast).is_none(), "this insert sweeps");
        assert!(buckets.take("slow", &slow).is_some(), "the empty slow bucket was kept, not reset to full");
        assert!(buckets.buckets.lock().unwrap().len() < SWEEP_ABOVE, "refilled buckets were forgotten");
    }
}
