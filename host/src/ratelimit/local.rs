//! In-process token buckets for the embedded default (one process, so one clock and one map suffice).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::plugins::Bucket;

/// Buckets at rest longer than this are full again and forgotten, so the map does not grow without bound.
const SWEEP_EVERY: usize = 10_000;

#[derive(Default)]
pub struct LocalBuckets {
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl LocalBuckets {
    /// `None` when the tokens were taken, else how long until enough have refilled.
    pub fn take(&self, key: &str, bucket: &Bucket) -> Option<Duration> {
        let now = Instant::now();
        let capacity = f64::from(bucket.capacity);
        let mut buckets = self.buckets.lock().expect("bucket lock poisoned only by a panic");
        if buckets.len() >= SWEEP_EVERY && !buckets.contains_key(key) {
            // A bucket idle for capacity/refill seconds is full: forgetting it changes nothing.
            buckets.retain(|_, (_, at)| now.duration_since(*at).as_secs_f64() < 3600.0);
        }
        let (tokens, at) = buckets.entry(key.to_owned()).or_insert((capacity, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * bucket.refill_per_second).min(capacity);
        *at = now;
        let cost = f64::from(bucket.cost);
        if *tokens >= cost {
            *tokens -= cost;
            None
        } else {
            Some(Duration::from_secs_f64((cost - *tokens) / bucket.refill_per_second))
        }
    }
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
}
