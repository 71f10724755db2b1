//! The README's production recipe on one machine: two API nodes, two relays (one active, one standby) and
//! workers as dynamic members of the projections' consumer groups, against the same MariaDB, Redis and
//! broker. Writes go through either node; exactly one relay publishes; each projection's partitions are
//! split between the live workers — also when a worker joins mid-storm and another is SIGKILLed — and the
//! result is the truth.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::join_all;
use strand_test_support::{token, wait_until, StrandProcess, TEST_SECRET};

use super::{answering, port, Deployment};

/// The consumer groups of a deployment with the bundled projectors, each over 3 partitions.
const GROUPS: [&str; 4] = ["follower", "projector.follow-counts", "projector.follow-lists", "projector.top-followers"];

/// The value of the first sample of `metric` whose labels contain `labels`, read from `/metrics` on `port`.
async fn gauge(port: u16, metric: &str, labels: &str) -> Option<f64> {
    let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await.ok()?.text().await.ok()?;
    text.lines()
        .filter(|line| line.starts_with(metric) && line.contains(labels))
        .find_map(|line| line.rsplit(' ').next()?.parse().ok())
}

/// Whether every group's 3 partitions are held by the workers on `ports`, none twice, and each of those
/// workers holds some of every group (Kafka's range assignor splits each group between its members).
async fn split_between(ports: &[u16]) -> bool {
    for group in GROUPS {
        let label = format!("{group}\"");
        let mut held = Vec::new();
        for &p in ports {
            held.push(gauge(p, "strand_projection_partitions", &label).await.unwrap_or(0.0));
        }
        if held.iter().sum::<f64>() != 3.0 || held.iter().any(|&h| h < 1.0) {
            return false;
        }
    }
    true
}

/// The deployment's API nodes, relays and workers, started and answering.
struct ScaledOut {
    deployment: Deployment,
    api_ports: [u16; 2],
    relay_ports: [u16; 2],
    workers: Vec<(String, u16, StrandProcess)>,
    /// The API nodes and relays, kept running.
    _nodes: Vec<StrandProcess>,
}

impl ScaledOut {
    async fn start(workers: usize) -> Self {
        let deployment = Deployment::new().await;
        let (api_ports, relay_ports) = ([port(), port()], [port(), port()]);
        let mut others = Vec::new();
        for (i, &p) in api_ports.iter().enumerate() {
            others.push((p, deployment.api(&format!("api{i}"), p)));
        }
        for (i, &p) in relay_ports.iter().enumerate() {
            others.push((p, deployment.relay(&format!("relay{i}"), p)));
        }
        for (p, process) in &others {
            answering(*p, process).await;
        }
        let mut scaled = Self {
            deployment,
            api_ports,
            relay_ports,
            workers: Vec::new(),
            _nodes: others.into_iter().map(|(_, process)| process).collect(),
        };
        for _ in 0..workers {
            scaled.add_worker().await;
        }
        scaled
    }

    /// Starts one more worker, a dynamic member of every group (no `worker_id`).
    async fn add_worker(&mut self) {
        let (name, p) = (format!("worker{}", self.workers.len()), port());
        let process = self.deployment.worker(&name, p, None);
        answering(p, &process).await;
        self.workers.push((name, p, process));
    }

    fn logs(&self) -> String {
        let mut names = vec!["api0", "api1", "relay0", "relay1"];
        names.extend(self.workers.iter().map(|(name, _, _)| name.as_str()));
        self.deployment.logs(&names)
    }

    async fn assert_settled(&self) {
        match self.deployment.settled(Duration::from_secs(120)).await {
            Ok(report) => assert_eq!(report.pairs_checked, 90, "{report}"),
            Err(state) => panic!("not settled after 2 minutes: {state}\n{}", self.logs()),
        }
    }

    /// Waits until the partitions are split between the workers on `ports` (a rebalance may be settling).
    async fn assert_split_between(&self, ports: &[u16]) {
        let split = tokio::time::timeout(Duration::from_secs(60), async {
            while !split_between(ports).await {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        assert!(split.await.is_ok(), "partitions not split between the workers on {ports:?}:\n{}", self.logs());
    }
}

/// 10 users of tenant `scaled` follow and unfollow each other through alternating API nodes (four rounds);
/// `done` counts the acknowledged writes.
pub async fn storm(api_ports: [u16; 2], done: &AtomicUsize) {
    let http = reqwest::Client::new();
    let writes = (1..=10_i64).map(|user| {
        let http = http.clone();
        let bearer = token(TEST_SECRET, &user.to_string(), "scaled", 3600);
        async move {
            for round in 0..ROUNDS {
                for target in (1..=10_i64).filter(|t| *t != user) {
                    let node = api_ports[(user + target + round) as usize % 2];
                    let url = format!("http://127.0.0.1:{node}/v1/me/following/{target}");
                    let request = if (user + target + round) % 3 == 0 { http.delete(&url) } else { http.put(&url) };
                    let reply = request.bearer_auth(&bearer).send().await.unwrap();
                    assert_eq!(reply.status(), 200, "{}", reply.text().await.unwrap());
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    join_all(writes).await;
}

/// Rounds of the storm: each user writes once to each other user per round.
pub const ROUNDS: i64 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_api_nodes_one_active_relay_and_two_workers_splitting_partitions_project_the_truth() {
    let scaled = ScaledOut::start(2).await;
    storm(scaled.api_ports, &AtomicUsize::new(0)).await;
    scaled.assert_settled().await;

    let mut active = Vec::new();
    for &p in &scaled.relay_ports {
        active.push(gauge(p, "strand_relay_active", "").await);
    }
    let leaders = active.iter().filter(|a| **a == Some(1.0)).count();
    let standbys = active.iter().filter(|a| **a == Some(0.0)).count();
    assert_eq!((leaders, standbys), (1, 1), "relay_active per relay: {active:?}");
    let ports: Vec<u16> = scaled.workers.iter().map(|(_, p, _)| *p).collect();
    scaled.assert_split_between(&ports).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_joining_mid_storm_and_another_sigkilled_leave_the_partitions_split_and_the_truth_projected() {
    let mut scaled = ScaledOut::start(2).await;
    let done = AtomicUsize::new(0);
    let total = (10 * 9 * ROUNDS) as usize;
    let api_ports = scaled.api_ports;
    let churn = async {
        // A third worker joins a third of the way in: every group rebalances over three members.
        wait_until("a third of the storm acknowledged", Duration::from_secs(120), || {
            std::future::ready(done.load(Ordering::Relaxed) >= total / 3)
        })
        .await;
        scaled.add_worker().await;
        // Two thirds in, the first worker dies without leaving its groups: its partitions move to the others
        // once its session expires.
        wait_until("two thirds of the storm acknowledged", Duration::from_secs(120), || {
            std::future::ready(done.load(Ordering::Relaxed) >= 2 * total / 3)
        })
        .await;
        scaled.workers[0].2.kill_now();
    };
    tokio::join!(storm(api_ports, &done), churn);
    scaled.assert_settled().await;
    let survivors: Vec<u16> = scaled.workers[1..].iter().map(|(_, p, _)| *p).collect();
    scaled.assert_split_between(&survivors).await;
}
