//! The one in-process token bucket: the embedded default's rate limits (`ratelimit/local.rs`) and the
//! bounds on what the host records of tenants' activity (`ops/bounded.rs`) both refill and take by it. (The
//! Redis buckets are a Lua script with Redis's clock: the same arithmetic, where many nodes share a bucket.)

use std::time::Instant;

/// Tokens held at an instant; refilled lazily, when next taken from.
#[derive(Debug, Clone, Copy)]
pub struct TokenBucket {
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A bucket holding `tokens` at `now` (a new one starts full).
    pub fn new(tokens: f64, now: Instant) -> Self {
        Self { tokens, at: now }
    }

    /// The tokens held at `now`: those at the last take plus `per_second` since, at most `capacity`.
    pub fn refill(&mut self, now: Instant, capacity: f64, per_second: f64) -> f64 {
        self.tokens = (self.tokens + now.saturating_duration_since(self.at).as_secs_f64() * per_second).min(capacity);
        self.at = now;
        self.tokens
    }

    /// Takes `cost` tokens if held (after [`TokenBucket::refill`]); else how many are missing.
    pub fn take(&mut self, cost: f64) -> Result<(), f64> {
        if self.tokens >= cost {
            self.tokens -= cost;
            Ok(())
        } else {
            Err(cost - self.tokens)
        }
    }

    /// Takes `cost` whether held or not (a debt to be refilled first); the tokens left, below zero in debt.
    pub fn spend(&mut self, cost: f64) -> f64 {
        self.tokens -= cost;
        self.tokens
    }

    /// Takes as many whole tokens as held, up to `wanted`; how many.
    pub fn take_up_to(&mut self, wanted: usize) -> usize {
        let taken = (self.tokens.max(0.0) as usize).min(wanted);
        self.tokens -= taken as f64;
        taken
    }

    /// The tokens held at the last refill or take.
    pub fn tokens(&self) -> f64 {
        self.tokens
    }

    /// When it was last refilled or taken from.
    pub fn at(&self) -> Instant {
        self.at
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn refills_at_its_rate_up_to_its_capacity_and_takes_what_it_holds() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(2.0, start);
        assert_eq!(bucket.take(2.0), Ok(()));
        assert_eq!(bucket.take(1.0), Err(1.0));
        assert_eq!(bucket.refill(start + Duration::from_millis(500), 2.0, 2.0), 1.0);
        assert_eq!(bucket.refill(start + Duration::from_secs(60), 2.0, 2.0), 2.0, "capped");
        assert_eq!(bucket.take_up_to(5), 2);
        assert_eq!(bucket.take_up_to(5), 0);
    }
}
