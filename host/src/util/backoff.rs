//! One exponential backoff for every retry loop that waits on another service or a failing plugin (as
//! Vector's `common/backoff.rs`; lock-conflict retries of a transaction wait a few milliseconds inline): the first wait, doubled
//! after each failure up to a ceiling, started over after a success.

use std::time::Duration;

/// The waits between tries of something that keeps failing.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    first: Duration,
    most: Duration,
    current: Duration,
}

impl Backoff {
    /// Waits `first`, then twice as long after each failure, never more than `most`.
    pub const fn new(first: Duration, most: Duration) -> Self {
        Self { first, most, current: first }
    }

    /// The wait before the next try; the one after it is twice as long (up to the ceiling).
    pub fn next_wait(&mut self) -> Duration {
        let wait = self.current;
        self.current = (self.current * 2).min(self.most);
        wait
    }

    /// The wait the next failure would get, without counting one.
    pub fn peek(&self) -> Duration {
        self.current
    }

    /// After a success (or a long healthy run): the next failure waits the first wait again.
    pub fn reset(&mut self) {
        self.current = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_ceiling_and_start_over_after_a_reset() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(500));
        let waits: Vec<u128> = (0..5).map(|_| backoff.next_wait().as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 500, 500]);
        backoff.reset();
        assert_eq!(backoff.next_wait(), Duration::from_millis(100));
    }
}
