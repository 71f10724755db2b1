//! The README's production recipe on one machine: two API nodes, two relays (one active, one standby) and
//! two workers against the same MariaDB, Redis and broker. Writes go through either node; exactly one relay
//! publishes; each projection's partitions are split between the workers; the result is the truth.

use std::time::Duration;

use futures::future::join_all;
use strand_test_support::{token, StrandProcess, TEST_SECRET};

use super::{answering, port, Deployment};

/// The value of the first sample of `metric` whose labels contain `labels`, read from `/metrics` on `port`.
async fn gauge(port: u16, metric: &str, labels: &str) -> Option<f64> {
    let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await.ok()?.text().await.ok()?;
    text.lines()
        .filter(|line| line.starts_with(metric) && line.contains(labels))
        .find_map(|line| line.rsplit(' ').next()?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "tansu's group coordinator sometimes leaves a two-member group without assignments after a \
            rebalance (revoked, never reassigned); passes in most runs: `cargo test -p strand --test deployment \
            scale_out -- --ignored`"]
async fn two_api_nodes_one_active_relay_and_two_workers_splitting_partitions_project_the_truth() {
    let deployment = Deployment::new().await;
    let (api_ports, relay_ports, worker_ports) = ([port(), port()], [port(), port()], [port(), port()]);
    let mut processes: Vec<StrandProcess> = Vec::new();
    for (i, &p) in api_ports.iter().enumerate() {
        processes.push(deployment.api(&format!("api{i}"), p));
    }
    for (i, &p) in relay_ports.iter().enumerate() {
        processes.push(deployment.relay(&format!("relay{i}"), p));
    }
    for (i, &p) in worker_ports.iter().enumerate() {
        let name = format!("worker{i}");
        processes.push(deployment.worker(&name, p, Some(&name)));
    }
    let all_ports: Vec<u16> = api_ports.iter().chain(&relay_ports).chain(&worker_ports).copied().collect();
    for (process, &p) in processes.iter().zip(&all_ports) {
        answering(p, process).await;
    }
    let names = ["api0", "api1", "relay0", "relay1", "worker0", "worker1"];

    // 10 users write through alternating nodes.
    let http = reqwest::Client::new();
    let writes = (1..=10_i64).map(|user| {
        let http = http.clone();
        let bearer = token(TEST_SECRET, &user.to_string(), "scaled", 3600);
        async move {
            for target in (1..=10_i64).filter(|t| *t != user) {
                let node = api_ports[(user + target) as usize % 2];
                let url = format!("http://127.0.0.1:{node}/v1/me/following/{target}");
                let reply = http.put(&url).bearer_auth(&bearer).send().await.unwrap();
                assert_eq!(reply.status(), 200, "{}", reply.text().await.unwrap());
            }
        }
    });
    join_all(writes).await;
    match deployment.settled(Duration::from_secs(120)).await {
        Ok(report) => assert_eq!(report.pairs_checked, 90, "{report}"),
        Err(state) => panic!("not settled after 2 minutes: {state}\n{}", deployment.logs(&names)),
    }

    let mut active = Vec::new();
    for &p in &relay_ports {
        active.push(gauge(p, "strand_relay_active", "").await);
    }
    let leaders = active.iter().filter(|a| **a == Some(1.0)).count();
    let standbys = active.iter().filter(|a| **a == Some(0.0)).count();
    assert_eq!((leaders, standbys), (1, 1), "relay_active per relay: {active:?}");

    // Every group's 3 partitions are held, none twice, and both workers hold some (read until true: a
    // rebalance may still be settling). Not "each group split": tansu's coordinator does not rebalance a
    // formed group when a static member joins it, so a group may stay with its first member (Kafka would
    // split each group).
    let split = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let mut held = Vec::new();
            for projection in
                ["follower", "projector.follow-counts", "projector.follow-lists", "projector.top-followers"]
            {
                let group = format!("{projection}\"");
                let mut per_worker = Vec::new();
                for &p in &worker_ports {
                    per_worker.push(gauge(p, "strand_projection_partitions", &group).await.unwrap_or(0.0));
                }
                held.push(per_worker);
            }
            let per_worker = |w: usize| held.iter().map(|group| group[w]).sum::<f64>();
            if held.iter().all(|group| group.iter().sum::<f64>() == 3.0) && per_worker(0) >= 1.0 && per_worker(1) >= 1.0
            {
                return held;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    assert!(split.await.is_ok(), "partitions not split between the workers:\n{}", deployment.logs(&names));
    drop(processes);
}
