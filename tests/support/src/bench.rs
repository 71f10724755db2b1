//! Throughput and latency of concurrent operations, for the benchmarks: printed, never asserted.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures::future::join_all;

/// Operations done, how long they took together, and each one's latency (sorted).
pub struct Measurement {
    pub count: usize,
    pub elapsed: Duration,
    pub latencies: Vec<Duration>,
}

impl Measurement {
    pub fn per_second(&self) -> f64 {
        self.count as f64 / self.elapsed.as_secs_f64()
    }

    pub fn quantile(&self, q: f64) -> Duration {
        self.latencies[((self.latencies.len() - 1) as f64 * q) as usize]
    }

    /// This and `other` as one measurement: their operations, their times added, their latencies together
    /// (phases run in turns and summed, so neither gains from running first or last).
    pub fn and(mut self, other: Measurement) -> Measurement {
        self.count += other.count;
        self.elapsed += other.elapsed;
        self.latencies.extend(other.latencies);
        self.latencies.sort();
        self
    }

    /// One line: `label`, operations per second (as `unit`/s), p50 and p99.
    pub fn print(&self, label: &str, unit: &str) {
        println!(
            "{label:<40} {:>8.0} {unit}/s   p50 {:>8.2?}   p99 {:>8.2?}",
            self.per_second(),
            self.quantile(0.50),
            self.quantile(0.99)
        );
    }
}

/// Runs `concurrency` workers, worker `w` issuing `operation(w, i)` for `i` in `0..per_worker`, one after
/// another.
pub async fn measure<F, Fut>(concurrency: usize, per_worker: usize, operation: F) -> Measurement
where
    F: Fn(usize, usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let started = Instant::now();
    let workers = (0..concurrency).map(|worker| {
        let operations: Vec<_> = (0..per_worker).map(|i| operation(worker, i)).collect();
        tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(operations.len());
            for op in operations {
                let start = Instant::now();
                op.await;
                latencies.push(start.elapsed());
            }
            latencies
        })
    });
    let mut latencies: Vec<Duration> =
        join_all(workers).await.into_iter().flat_map(|r| r.expect("a bench worker")).collect();
    let elapsed = started.elapsed();
    latencies.sort();
    Measurement { count: latencies.len(), elapsed, latencies }
}

/// The environment variable `name` as a number, or `default`.
pub fn setting(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// CPU time process `pid` has used so far (user + system), for benchmarks' cost per operation.
pub fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command's closing parenthesis; utime and stime are the 14th and 15th of the line.
    let fields: Vec<&str> = stat.rsplit_once(')').context("a /proc stat line")?.1.split_whitespace().collect();
    let field = |index: usize| {
        fields.get(index).context("a short /proc stat line")?.parse::<u64>().map_err(anyhow::Error::from)
    };
    let ticks = field(11)? + field(12)?;
    // Linux reports them in USER_HZ, 100 on every architecture Strand runs on.
    Ok(Duration::from_millis(ticks * 10))
}

/// Pins every thread of process `pid` (and the threads it starts later) to the CPUs `cpus` (`taskset`'s
/// list, e.g. `"0"` or `"1-3"`): so a benchmark can give the database and the node under test cores of their
/// own, as production does, instead of one pool of shared cores.
pub fn pin(pid: u32, cpus: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("taskset")
        .args(["--all-tasks", "--cpu-list", "--pid", cpus, &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .context("running taskset (util-linux)")?;
    anyhow::ensure!(status.success(), "taskset could not pin {pid} to CPUs {cpus}: {status}");
    Ok(())
}
