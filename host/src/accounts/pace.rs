//! How fast an account job works: as fast as it may while the live writes it shares the node and the
//! database with stay within [`ALLOWANCE`] times their latency without it. A fixed share cannot know the
//! load, so the runner measures it: a gentle increase while the live writes' p99 holds, a halving when it
//! passes the allowance — TCP's way, on delay rather than loss (as LEDBAT does). What the
//! live writes take without the job is measured as BBR measures its quiet round trip: every [`REPROBE`]
//! while there are live writes, the job pauses for one [`WINDOW`] and takes that window's p99 as the quiet
//! one.
//!
//! Few live writes (under [`MIN_SAMPLES`] a window) judge nothing: the share rises gently. None at all in a
//! window leave nobody to slow down: the job works at its most, `account_job_share`, in batches of
//! [`ALONE_BATCHES`] times its own until the next live write. The signal is this node's own writes: with
//! several API nodes behind a balancer, one node's are a sample of all (a node serving none while others
//! do works flat out — give job nodes a share of the traffic, or a lower `account_job_share`).

use std::time::{Duration, Instant};

use crate::ops::live_writes;
use crate::ops::metrics::ACCOUNT_JOB_SHARE;

/// The least share of time a job works (a share of 0 would never end it).
pub const MIN_SHARE: f64 = 0.01;
/// The share a runner starts at, before it has seen what its batches cost.
const START: f64 = 0.1;
/// How long the runner watches the live writes before it decides again (and how long a quiet probe lasts).
const WINDOW: Duration = Duration::from_secs(2);
/// How often the quiet p99 is measured again (the load changes).
const REPROBE: Duration = Duration::from_secs(30);
/// Fewer live writes than this in a window judge nothing: the job speeds up gently.
const MIN_SAMPLES: usize = 20;
/// The factor on the share after a window whose p99 held, or had too few writes to judge (at least +1 %):
/// a gentle rise, so that a share that had to fall far does not jump back to where it hurt.
const INCREASE: f64 = 1.25;
/// The factor on the share after a window whose p99 passed the allowance.
const DECREASE: f64 = 0.5;
/// The longest rest after one batch: under the job's lease (`runner::LEASE`), which the next batch renews —
/// a slow batch at the least share would otherwise rest past it and lose the job to another node.
const MOST_REST: Duration = Duration::from_secs(2);
/// How many times its configured batch a job takes while its node serves no live writes: nobody waits on its locks,
/// and each batch's fixed cost (statements, commit, binlog group) is spread over more edges (a 300 000-follower
/// deletion alone: 6 800 edges/s in batches of 500, 9 000 in batches of 2 000).
const ALONE_BATCHES: u32 = 4;
/// How far the live writes' p99 may rise over its quiet value before the job slows: under the promised 2×,
/// so that the swings of the pace around it stay within the promise.
pub const ALLOWANCE: f64 = 1.5;

/// A runner's pace, kept across its jobs: the load it reacts to is its node's, whichever job runs.
#[derive(Debug)]
pub struct Pace {
    share: f64,
    most: f64,
    window: Instant,
    samples: Vec<Duration>,
    /// The live writes' p99 while the job last paused (none: too few writes then to judge by).
    quiet: Option<Duration>,
    /// When the job last paused to measure it.
    probed: Option<Instant>,
    /// Whether the last window had live writes enough to judge: only then is a pause worth its cost.
    watched: bool,
    /// Whether the last window saw no live write at all, nor has one come since: only then are batches
    /// larger (a job starting beside live writes does not hold their rows longer while it finds out, and the
    /// first live write brings the batch back at once).
    alone: bool,
}

impl Pace {
    /// A pace working at most `most` of the time (`account_job_share`, in (0, 1]).
    pub fn new(most: f64) -> Self {
        // Configuration refuses a share outside (0, 1]; one built in code is held there (a NaN at the least).
        let most = if most > 0.0 { most.min(1.0) } else { MIN_SHARE }.max(MIN_SHARE);
        let (window, samples) = (Instant::now(), Vec::new());
        Self { share: START.min(most), most, window, samples, quiet: None, probed: None, watched: false, alone: false }
    }

    /// The edges of the next batch, `configured` the batch beside live writes: larger while the node serves
    /// none (see `alone`).
    pub fn batch(&self, configured: u32) -> u32 {
        if self.alone {
            configured.saturating_mul(ALONE_BATCHES)
        } else {
            configured
        }
    }

    /// After a batch that took `worked`: rests so that the job works its share of the time (at most
    /// [`MOST_REST`]), first pausing a window to measure the quiet p99 when that is due and there are live
    /// writes to measure.
    pub async fn rest_after(&mut self, worked: Duration) {
        if self.watched && self.probed.is_none_or(|at| at.elapsed() >= REPROBE) {
            // What came before the pause was measured beside the job.
            live_writes::take();
            tokio::time::sleep(WINDOW).await;
            self.quiet = p99(live_writes::take());
            self.probed = Some(Instant::now());
            self.window = Instant::now();
            self.samples.clear();
        }
        let written = live_writes::take();
        self.alone &= written.is_empty();
        self.samples.extend(written);
        if self.window.elapsed() >= WINDOW {
            let empty = self.samples.is_empty();
            let p99 = p99(std::mem::take(&mut self.samples));
            (self.watched, self.alone) = (p99.is_some(), empty);
            self.decide(p99, empty);
            self.window = Instant::now();
            metrics::gauge!(ACCOUNT_JOB_SHARE.name).set(self.share);
        }
        tokio::time::sleep(worked.mul_f64(1.0 / self.share - 1.0).min(MOST_REST)).await;
    }

    /// Decides the share from one window's live write p99 (`None`: too few writes to judge, a gentle rise;
    /// `empty`: none at all — nobody to slow down, so at once its most: a gentle rise from the start would
    /// cost a job alone a third of its time).
    fn decide(&mut self, p99: Option<Duration>, empty: bool) {
        self.share = match (p99, self.quiet) {
            _ if empty => self.most,
            (Some(p99), Some(quiet)) if p99 > quiet.mul_f64(ALLOWANCE) => (self.share * DECREASE).max(MIN_SHARE),
            _ => (self.share * INCREASE).max(self.share + MIN_SHARE).min(self.most),
        };
    }
}

/// The p99 of `samples`, when there are enough to judge by.
fn p99(mut samples: Vec<Duration>) -> Option<Duration> {
    if samples.len() < MIN_SAMPLES {
        return None;
    }
    samples.sort_unstable();
    Some(samples[(samples.len() * 99).div_ceil(100) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quiet_at(ms: u64) -> Pace {
        let mut pace = Pace::new(1.0);
        pace.quiet = Some(Duration::from_millis(ms));
        pace
    }

    fn window(ms: u64) -> Option<Duration> {
        p99(vec![Duration::from_millis(ms); 50])
    }

    #[test]
    fn it_speeds_up_while_live_writes_hold_and_halves_when_they_slow() {
        let mut pace = quiet_at(10);
        for _ in 0..30 {
            pace.decide(window(15), false);
        }
        assert_eq!(pace.share, 1.0, "up to its most while the p99 holds within 1.5 × the quiet one");
        pace.decide(window(16), false);
        assert_eq!(pace.share, 0.5, "halved: 16 ms is past 1.5 × the quiet 10 ms");
        pace.decide(window(25), false);
        assert_eq!(pace.share, 0.25);
        pace.decide(window(12), false);
        assert!((pace.share - 0.3125).abs() < 1e-9, "back up by a quarter: {}", pace.share);
    }

    #[test]
    fn without_live_writes_it_works_at_its_most_and_never_below_the_least() {
        let mut pace = Pace::new(0.6);
        assert_eq!(pace.batch(500), 500, "the configured batch until a window saw no live writes");
        pace.decide(p99(vec![Duration::from_millis(500); MIN_SAMPLES - 1]), false);
        assert!((pace.share - 0.125).abs() < 1e-9, "a few writes, too few to judge: a gentle rise ({})", pace.share);
        pace.decide(None, true);
        assert_eq!(pace.share, 0.6, "none at all: at once its configured most");
        pace.alone = true;
        assert_eq!(pace.batch(500), 2_000, "larger batches while nobody writes");
        let mut pace = quiet_at(1);
        for _ in 0..20 {
            pace.decide(window(1000), false);
        }
        assert_eq!(pace.share, MIN_SHARE);
    }

    #[test]
    fn the_p99_is_the_value_that_ninety_nine_in_a_hundred_stay_within() {
        let samples: Vec<Duration> = (1..=200).map(Duration::from_millis).collect();
        assert_eq!(p99(samples), Some(Duration::from_millis(198)));
        assert_eq!(p99(vec![Duration::from_millis(1); MIN_SAMPLES - 1]), None);
    }
}
