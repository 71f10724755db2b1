//! How fast an account job works: as fast as it may while the live writes it shares the node and the
//! database with stay within their latency without it plus the delay it is allowed to add ([`added_delay`]:
//! half their quiet p99, and never less than [`SLACK`]). A fixed share cannot know the load, so the runner
//! measures it, on two levers:
//!
//! - **How long one batch takes.** A live write that meets a batch (its commit, its locks, the burst of
//!   events it sends down the pipeline) waits about as long as the batch runs, so beside live writes a batch
//!   is sized to take at most the allowed added delay — a write that waits behind a whole one still ends
//!   within it — from the edges per second the last batches managed (a batch of 500 took ~40 ms on the
//!   bench's box, and the live writes' p99 beside it was 5.5× their 19.5 ms; batches of 100 kept it at 0.9×).
//! - **How much of the time it works.** A gentle increase while the live writes' p99 holds, a halving when
//!   it passes the allowance — TCP's way, on delay rather than loss, as LEDBAT does; and as LEDBAT's target
//!   is an absolute queueing delay, so is the allowance's floor: what a client feels is the whole round trip,
//!   of which the server's few milliseconds are a part, so a rise from 3 to 5 ms of server time is no harm,
//!   while judged by a ratio alone it kept the bench's deletion at 1 % of the time (the clients' p99 1.2×).
//!
//! What the live writes take without the job is measured between jobs, from the node's live writes while
//! its runner is idle (the median of its last windows' p99s), and during a long job as BBR measures its
//! quiet round trip: every [`REPROBE`] while there are live writes, the job pauses, lets the pipeline drain
//! what it sent for [`DRAIN`] (its events still cross the relay and the workers), and takes the next
//! [`WINDOW`]'s p99 — believed at once when lower and at most [`QUIET_RISE`] times the last value when
//! higher, since the pause may still carry its events.
//!
//! Few live writes (under [`MIN_SAMPLES`] a window) judge nothing: the share rises gently. None at all in a
//! window leave nobody to slow down: the job works at its most, `account_job_share`, in batches of
//! [`ALONE_BATCHES`] times its own until the next live write. The signal is this node's own writes: with
//! several API nodes behind a balancer, one node's are a sample of all (a node serving none while others
//! do works flat out — give job nodes a share of the traffic, or a lower `account_job_share`).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::ops::live_writes;
use crate::ops::metrics::{ACCOUNT_JOB_QUIET, ACCOUNT_JOB_SHARE};

/// The least share of time a job works (a share of 0 would never end it).
pub const MIN_SHARE: f64 = 0.01;
/// The share a runner starts at, before it has seen what its batches cost.
const START: f64 = 0.1;
/// How long the runner watches the live writes before it decides again (and how long a quiet probe lasts):
/// long enough that a p99 is not one unlucky write (800 of them at 200 writes/s).
const WINDOW: Duration = Duration::from_secs(4);
/// How often the quiet p99 is measured again (the load changes).
const REPROBE: Duration = Duration::from_secs(60);
/// How long a quiet probe lets the pipeline carry what the job sent before it measures.
const DRAIN: Duration = Duration::from_secs(1);
/// How many idle windows' p99s the quiet one between jobs is the median of.
const IDLE_READINGS: usize = 5;
/// The most a probe during a job raises the quiet p99 by (its pause may still carry the job's events).
const QUIET_RISE: f64 = 1.25;
/// A batch's time while the quiet p99 is not known yet.
const FIRST_BATCH_TIME: Duration = Duration::from_millis(10);
/// The fewest edges of a batch: each has a fixed cost (the lease, the job's row, a commit).
const MIN_BATCH: u32 = 20;
/// Fewer live writes than this in a window judge nothing: the job speeds up gently.
const MIN_SAMPLES: usize = 20;
/// The factor on the share after a window whose p99 held, or had too few writes to judge (at least +1 %):
/// a gentle rise, so that a share that had to fall far does not jump back to where it hurt.
const INCREASE: f64 = 1.25;
/// The factor on the share after a window whose p99 passed the allowance.
const DECREASE: f64 = 0.5;
/// The longest rest after one batch: under the job's lease (`runner::LEASE`), which the next batch renews —
/// a slow batch at the least share would otherwise rest past it and lose the job to another node. A quiet
/// probe takes the rest's place ([`DRAIN`] and [`WINDOW`], 5 s).
const MOST_REST: Duration = Duration::from_secs(2);
/// How many times its configured batch a job takes while its node serves no live writes: nobody waits on its locks,
/// and each batch's fixed cost (statements, commit, binlog group) is spread over more edges (a 300 000-follower
/// deletion alone: 6 800 edges/s in batches of 500, 9 000 in batches of 2 000).
const ALONE_BATCHES: u32 = 4;
/// How far the live writes' p99 may rise over its quiet value before the job slows: under the promised 2×,
/// so that the swings of the pace around it stay within the promise. Not less: a 4 s window's p99 is a few
/// writes, and at 1.25 its noise alone kept the bench's deletion at 1 % of the time (200 edges/s).
pub const ALLOWANCE: f64 = 1.5;
/// The least delay the job may add to the live writes' p99, whatever their quiet p99: a few milliseconds of
/// server time, under what one network round trip varies by.
pub const SLACK: Duration = Duration::from_millis(5);

/// The delay a job may add to live writes whose quiet p99 is `quiet`: the allowance's, at least [`SLACK`].
pub fn added_delay(quiet: Duration) -> Duration {
    quiet.mul_f64(ALLOWANCE - 1.0).max(SLACK)
}

/// A runner's pace, kept across its jobs: the load it reacts to is its node's, whichever job runs.
#[derive(Debug)]
pub struct Pace {
    share: f64,
    most: f64,
    window: Instant,
    samples: Vec<Duration>,
    /// The last window's samples, while a job runs: a window is judged with the one before it.
    previous: Vec<Duration>,
    /// The live writes' p99 without a job, as last measured (none: too few writes then to judge by).
    quiet: Option<Duration>,
    /// When it was last measured (a job's pause, or a window between jobs).
    probed: Option<Instant>,
    /// Whether the last window had live writes enough to judge: only then is a pause worth its cost.
    watched: bool,
    /// Whether a job ran since the runner was last idle.
    working: bool,
    /// Whether a window has passed since the runner became idle (the first may carry the job's events).
    settled: bool,
    /// The p99s of the last idle windows.
    idle_readings: VecDeque<Duration>,
    /// Whether the last window saw no live write at all, nor has one come since: only then are batches
    /// larger (a job starting beside live writes does not hold their rows longer while it finds out, and the
    /// first live write brings the batch back at once).
    alone: bool,
    /// The edges per second the last batches changed (none before the first).
    speed: Option<f64>,
}

impl Pace {
    /// A pace working at most `most` of the time (`account_job_share`, in (0, 1]).
    pub fn new(most: f64) -> Self {
        // Configuration refuses a share outside (0, 1]; one built in code is held there (a NaN at the least).
        let most = if most > 0.0 { most.min(1.0) } else { MIN_SHARE }.max(MIN_SHARE);
        Self {
            share: START.min(most),
            most,
            window: Instant::now(),
            samples: Vec::new(),
            previous: Vec::new(),
            quiet: None,
            probed: None,
            watched: false,
            working: false,
            settled: true,
            idle_readings: VecDeque::new(),
            alone: false,
            speed: None,
        }
    }

    /// The edges of the next batch, `configured` the most beside live writes: larger while the node serves
    /// none (see `alone`), and beside them as many as take the delay it may add ([`added_delay`]) at the
    /// speed the last batches went.
    pub fn batch(&self, configured: u32) -> u32 {
        if self.alone {
            return configured.saturating_mul(ALONE_BATCHES);
        }
        let Some(speed) = self.speed else { return configured };
        let time = self.quiet.map_or(FIRST_BATCH_TIME, added_delay);
        let fits = (speed * time.as_secs_f64()) as u32;
        fits.clamp(MIN_BATCH.min(configured), configured)
    }

    /// After a batch that changed `edges` of the `asked` in `worked`: rests so that the job works its share of
    /// the time (at most [`MOST_REST`]), first pausing to measure the quiet p99 when that is due and the last
    /// window had live writes to measure.
    pub async fn rest_after(&mut self, edges: u64, asked: u32, worked: Duration) {
        if !self.working {
            // What the node's writes did between jobs is not what they do beside this one.
            self.restart_window();
            self.working = true;
        }
        // A batch that found fewer edges than it asked for (a step's last) says nothing of the speed.
        if edges >= u64::from(asked) && !worked.is_zero() {
            let speed = edges as f64 / worked.as_secs_f64();
            // Smoothed: one batch slowed by a lock wait does not shrink the next to nothing.
            self.speed = Some(self.speed.map_or(speed, |before| (before + speed) / 2.0));
        }
        if self.watched && self.probed.is_none_or(|at| at.elapsed() >= REPROBE) {
            // What came before the pause was measured beside the job, and so is the drain.
            tokio::time::sleep(DRAIN).await;
            self.restart_window();
            tokio::time::sleep(WINDOW).await;
            if let Some((probed, _)) = self.observe() {
                self.set_quiet(probed);
            }
            // The pause was the rest, and more.
            return;
        }
        if let Some((p99, empty)) = self.observe() {
            self.decide(p99, empty);
            metrics::gauge!(ACCOUNT_JOB_SHARE.name).set(self.share);
        }
        tokio::time::sleep(worked.mul_f64(1.0 / self.share - 1.0).min(MOST_REST)).await;
    }

    /// Between jobs: the node's live writes now are what they take without a job, so their windows give the
    /// quiet p99 the next job starts from — the median of the last [`IDLE_READINGS`], as one window's p99
    /// is a few writes and may be a lucky one (the window right after a job is left out: its events may
    /// still cross the pipeline) — and tell whether it starts alone.
    pub fn idle(&mut self) {
        if self.working {
            self.restart_window();
            (self.working, self.settled) = (false, false);
        }
        let Some((Some(p99), _)) = self.observe() else { return };
        if !std::mem::replace(&mut self.settled, true) {
            return;
        }
        if self.idle_readings.len() == IDLE_READINGS {
            self.idle_readings.pop_front();
        }
        self.idle_readings.push_back(p99);
        let mut sorted: Vec<Duration> = self.idle_readings.iter().copied().collect();
        sorted.sort_unstable();
        self.record_quiet(sorted[sorted.len() / 2]);
    }

    /// The live writes since the last look, added to the window; when the window is over, its p99 (`None`:
    /// too few to judge) and whether it had none at all.
    fn observe(&mut self) -> Option<(Option<Duration>, bool)> {
        let written = live_writes::take();
        self.alone &= written.is_empty();
        self.samples.extend(written);
        if self.window.elapsed() < WINDOW {
            return None;
        }
        let window = std::mem::take(&mut self.samples);
        let empty = window.is_empty();
        let p99 = p99(self.judged(window));
        (self.watched, self.alone) = (p99.is_some(), empty);
        self.window = Instant::now();
        Some((p99, empty))
    }

    /// What a window's p99 is read from: while a job runs, the window with the one before it (8 s, ~1 600
    /// writes at 200/s), as one window's p99 is a few writes, and one that read high by chance halved the
    /// pace (the bench's deletion kept 6 % of its time on average, its writes' p99 1.07× alone).
    fn judged(&mut self, window: Vec<Duration>) -> Vec<Duration> {
        if !self.working {
            return window;
        }
        let judged = [std::mem::take(&mut self.previous).as_slice(), window.as_slice()].concat();
        self.previous = window;
        judged
    }

    /// A new window from now, what came before it dropped.
    fn restart_window(&mut self) {
        live_writes::take();
        self.samples.clear();
        self.previous.clear();
        self.window = Instant::now();
    }

    /// Takes a probe's p99 as the quiet one: believed at once when lower, a quarter higher at a time when
    /// higher (the pause may still carry the job's events through the pipeline). Too few writes leave the
    /// last value standing.
    fn set_quiet(&mut self, measured: Option<Duration>) {
        if let Some(measured) = measured {
            self.record_quiet(believed(measured, self.quiet));
        }
    }

    fn record_quiet(&mut self, quiet: Duration) {
        self.quiet = Some(quiet);
        self.probed = Some(Instant::now());
        metrics::gauge!(ACCOUNT_JOB_QUIET.name).set(quiet.as_secs_f64());
    }

    /// Decides the share from one window's live write p99 (`None`: too few writes to judge, a gentle rise;
    /// `empty`: none at all — nobody to slow down, so at once its most: a gentle rise from the start would
    /// cost a job alone a third of its time).
    fn decide(&mut self, p99: Option<Duration>, empty: bool) {
        self.share = match (p99, self.quiet) {
            _ if empty => self.most,
            (Some(p99), Some(quiet)) if p99 > quiet + added_delay(quiet) => (self.share * DECREASE).max(MIN_SHARE),
            _ => (self.share * INCREASE).max(self.share + MIN_SHARE).min(self.most),
        };
    }
}

/// The quiet p99 after a window read `measured`: a reading above the last is believed a step at a time.
fn believed(measured: Duration, quiet: Option<Duration>) -> Duration {
    quiet.map_or(measured, |quiet| measured.min(quiet.mul_f64(QUIET_RISE)))
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

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    fn quiet_at(p99: u64) -> Pace {
        let mut pace = Pace::new(1.0);
        pace.quiet = Some(ms(p99));
        pace
    }

    fn window(p99: u64) -> Option<Duration> {
        Some(ms(p99))
    }

    #[test]
    fn it_speeds_up_while_live_writes_hold_and_halves_when_they_slow() {
        let mut pace = quiet_at(10);
        for _ in 0..30 {
            pace.decide(window(15), false);
        }
        assert_eq!(pace.share, 1.0, "up to its most while the p99 holds within 1.5 × the quiet one");
        let mut fast = quiet_at(3);
        fast.decide(window(8), false);
        assert!(fast.share > START, "3 to 8 ms: within the 5 ms a job may always add ({})", fast.share);
        fast.decide(window(9), false);
        assert!(fast.share < START, "past it: halved ({})", fast.share);
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
        pace.decide(p99(vec![ms(500); MIN_SAMPLES - 1]), false);
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
    fn beside_live_writes_a_batch_takes_the_delay_it_may_add_at_the_speed_batches_went() {
        let mut pace = Pace::new(1.0);
        assert_eq!(pace.batch(500), 500, "no speed known yet: the configured batch");
        pace.speed = Some(10_000.0);
        assert_eq!(pace.batch(500), 100, "10 ms at 10 000 edges/s before the quiet p99 is known");
        pace.quiet = Some(ms(40));
        assert_eq!(pace.batch(500), 200, "half of a 40 ms quiet p99");
        assert_eq!(pace.batch(150), 150, "never past the configured batch");
        pace.quiet = Some(ms(2));
        assert_eq!(pace.batch(500), 50, "5 ms, the least a job may add, of a 2 ms quiet p99");
        pace.speed = Some(100.0);
        assert_eq!(pace.batch(500), MIN_BATCH, "never under the least");
        pace.alone = true;
        assert_eq!(pace.batch(500), 2_000, "alone: four times the configured batch, whatever the speed");
    }

    #[test]
    fn a_window_raises_the_quiet_p99_a_quarter_at_a_time_and_lowers_it_at_once() {
        assert_eq!(believed(ms(44), Some(ms(20))), ms(25), "a pause still carrying the job's events reads high");
        assert_eq!(believed(ms(12), Some(ms(20))), ms(12));
        assert_eq!(believed(ms(30), None), ms(30), "the first reading, as it is");
        let mut pace = quiet_at(20);
        pace.set_quiet(None);
        assert_eq!(pace.quiet, Some(ms(20)), "too few writes in the window: the last value stands");
    }

    #[test]
    fn between_jobs_the_quiet_p99_is_the_median_of_the_idle_windows_but_the_first_after_a_job() {
        // The only test that records live writes: the process-wide buffer is this test's alone.
        let window = |pace: &mut Pace, p99: u64| {
            for _ in 0..50 {
                live_writes::record(ms(p99));
            }
            pace.window = Instant::now() - WINDOW;
            pace.idle();
        };
        let mut pace = Pace::new(1.0);
        pace.working = true;
        pace.idle();
        window(&mut pace, 90);
        assert_eq!(pace.quiet, None, "the window right after a job may still carry its events");
        window(&mut pace, 30);
        assert_eq!(pace.quiet, Some(ms(30)));
        window(&mut pace, 10);
        window(&mut pace, 20);
        assert_eq!(pace.quiet, Some(ms(20)), "the median of 30, 10 and 20");
        for lucky in [5, 5, 5] {
            window(&mut pace, lucky);
        }
        assert_eq!(pace.quiet, Some(ms(5)), "five readings kept: 10, 20, 5, 5, 5");
        assert!(!pace.alone, "windows with writes: not alone");
    }

    #[test]
    fn during_a_job_a_window_is_judged_with_the_one_before_it() {
        let mut pace = Pace::new(1.0);
        assert_eq!(pace.judged(vec![ms(1)]), vec![ms(1)], "between jobs, a window alone");
        pace.working = true;
        assert_eq!(pace.judged(vec![ms(1)]), vec![ms(1)]);
        assert_eq!(pace.judged(vec![ms(2), ms(3)]), vec![ms(1), ms(2), ms(3)]);
        assert_eq!(pace.judged(vec![ms(4)]), vec![ms(2), ms(3), ms(4)], "the one before, no older");
    }

    #[test]
    fn the_p99_is_the_value_that_ninety_nine_in_a_hundred_stay_within() {
        let samples: Vec<Duration> = (1..=200).map(ms).collect();
        assert_eq!(p99(samples), Some(ms(198)));
        assert_eq!(p99(vec![ms(1); MIN_SAMPLES - 1]), None);
    }
}
