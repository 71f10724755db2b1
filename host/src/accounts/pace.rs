//! How fast an account job works: as fast as it may while the live writes it shares the node and the
//! database with stay within [`ALLOWANCE`] times their latency without it. A fixed share cannot know the
//! load, so the runner measures it: additive increase while the live writes' p99 holds, multiplicative
//! decrease when it passes the allowance — TCP's AIMD, on delay rather than loss (as LEDBAT does). What the
//! live writes take without the job is the lowest p99 of the recent windows: when the job has backed off,
//! some window shows it.
//!
//! Few live writes (under [`MIN_SAMPLES`] a window) leave nobody to slow down: the job works at its most,
//! `account_job_share`. The signal is this node's own writes: with several API nodes behind a balancer,
//! one node's are a sample of all.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::ops::live_writes;
use crate::ops::metrics::ACCOUNT_JOB_SHARE;

/// The least share of time a job works (a share of 0 would never end it).
pub const MIN_SHARE: f64 = 0.01;
/// The share a runner starts at, before it has seen what its batches cost.
const START: f64 = 0.1;
/// How long the runner watches the live writes before it decides again.
const WINDOW: Duration = Duration::from_millis(500);
/// Fewer live writes than this in a window judge nothing: the job speeds up.
const MIN_SAMPLES: usize = 10;
/// The share added after a window whose p99 held.
const INCREASE: f64 = 0.05;
/// The factor on the share after a window whose p99 passed the allowance.
const DECREASE: f64 = 0.5;
/// How far the live writes' p99 may rise over its quiet value before the job slows (the promise is 2×;
/// the margin absorbs a window's noise).
pub const ALLOWANCE: f64 = 1.5;
/// Windows whose p99 the quiet value is the least of (30 s).
const REMEMBERED: usize = 60;

/// A runner's pace, kept across its jobs: the load it reacts to is its node's, whichever job runs.
#[derive(Debug)]
pub struct Pace {
    share: f64,
    most: f64,
    window: Instant,
    samples: Vec<Duration>,
    /// The p99s of the last [`REMEMBERED`] windows that had enough samples.
    p99s: VecDeque<Duration>,
}

impl Pace {
    /// A pace working at most `most` of the time (`account_job_share`, in (0, 1]).
    pub fn new(most: f64) -> Self {
        let most = most.clamp(MIN_SHARE, 1.0);
        Self { share: START.min(most), most, window: Instant::now(), samples: Vec::new(), p99s: VecDeque::new() }
    }

    /// After a batch that took `worked`: how long the job rests, so that it works its share of the time.
    pub fn rest_after(&mut self, worked: Duration) -> Duration {
        self.samples.extend(live_writes::take());
        if self.window.elapsed() >= WINDOW {
            let samples = std::mem::take(&mut self.samples);
            self.decide(samples);
            self.window = Instant::now();
            metrics::gauge!(ACCOUNT_JOB_SHARE.name).set(self.share);
        }
        worked.mul_f64(1.0 / self.share - 1.0)
    }

    /// Decides the share from one window's live write latencies.
    fn decide(&mut self, mut samples: Vec<Duration>) {
        if samples.len() < MIN_SAMPLES {
            self.share = (self.share + INCREASE).min(self.most);
            return;
        }
        samples.sort_unstable();
        let p99 = samples[(samples.len() * 99).div_ceil(100) - 1];
        if self.p99s.len() == REMEMBERED {
            self.p99s.pop_front();
        }
        self.p99s.push_back(p99);
        let quiet = self.p99s.iter().min().copied().unwrap_or(p99);
        self.share = if p99 > quiet.mul_f64(ALLOWANCE) {
            (self.share * DECREASE).max(MIN_SHARE)
        } else {
            (self.share + INCREASE).min(self.most)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(ms: u64) -> Vec<Duration> {
        vec![Duration::from_millis(ms); 50]
    }

    #[test]
    fn it_speeds_up_while_live_writes_hold_and_halves_when_they_slow() {
        let mut pace = Pace::new(1.0);
        for _ in 0..30 {
            pace.decide(window(10));
        }
        assert_eq!(pace.share, 1.0, "up to its most while the p99 holds");
        pace.decide(window(25));
        assert_eq!(pace.share, 0.5, "halved: 25 ms is past 1.5 × the quiet 10 ms");
        pace.decide(window(25));
        assert_eq!(pace.share, 0.25);
        pace.decide(window(12));
        assert!((pace.share - 0.30).abs() < 1e-9, "back up by steps: {}", pace.share);
    }

    #[test]
    fn without_live_writes_it_works_at_its_most_and_never_below_the_least() {
        let mut pace = Pace::new(0.6);
        for _ in 0..20 {
            pace.decide(Vec::new());
        }
        assert_eq!(pace.share, 0.6, "nobody to slow down for: its configured most");
        pace.decide(window(1));
        for _ in 0..20 {
            pace.decide(window(1000));
        }
        assert_eq!(pace.share, MIN_SHARE);
    }
}
