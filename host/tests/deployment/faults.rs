//! The fault suite: a follow/unfollow storm over HTTP while the API, relay and worker processes are killed
//! with SIGKILL at random and restarted. At the end the outbox is empty and `strand reconcile` finds no
//! difference: no acknowledged write and no event lost, none counted twice. Size: `FAULT_SUITE_OPERATIONS`
//! per writer (default 30, the size CI runs) and `FAULT_SUITE_KILLS` (default 8) — not `STRAND_*`, which the processes
//! would take for settings.

use std::time::Duration;

use futures::future::join_all;
use strand_test_support::{token, StrandProcess, ADMIN_TOKEN, TEST_SECRET};

use super::{answering, port, Deployment};

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_storm_with_api_relay_and_workers_killed_at_random_loses_and_double_counts_nothing() {
    let (operations, kills) = (setting("FAULT_SUITE_OPERATIONS", 30) as i64, setting("FAULT_SUITE_KILLS", 8));
    let mut random = strand_test_support::Random::seeded("STRAND_TEST_FAULT_SEED");
    let mut below = move |n: u64| random.below(n);
    let deployment = Deployment::new().await;
    let (api_port, relay_port, worker_port) = (port(), port(), port());
    let start = |role: usize| match role {
        0 => deployment.api("api", api_port),
        1 => deployment.relay("relay", relay_port),
        // Restarted with the same id, as a StatefulSet pod would be (static membership: it takes its
        // partitions back at once; dynamic members are churned in scale_out.rs).
        _ => deployment.worker("worker", worker_port, Some("worker")),
    };
    let mut processes: Vec<StrandProcess> = (0..3).map(start).collect();
    answering(api_port, &processes[0]).await;
    let base = format!("http://127.0.0.1:{api_port}");
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();

    // 20 users of one tenant follow and unfollow each other; a request cut by a kill is retried.
    let writers = (1..=20_i64).map(|user| {
        let (http, base) = (http.clone(), base.clone());
        let bearer = token(TEST_SECRET, &user.to_string(), "faults", 3600);
        async move {
            for i in 0..operations {
                let target = 1 + (user * 7 + i * 13) % 20;
                if target == user {
                    continue;
                }
                let url = format!("{base}/v1/me/following/{target}");
                loop {
                    let request = if (i + user) % 3 == 0 { http.delete(&url) } else { http.put(&url) };
                    match request.bearer_auth(&bearer).send().await {
                        Ok(reply) if reply.status().is_success() || reply.status() == 429 => break,
                        Ok(reply) => {
                            assert!(reply.status().as_u16() < 500 || reply.status() == 503, "{}", reply.status())
                        }
                        // The API process is down: try again once it is back.
                        Err(_) => {}
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    });
    let storm = join_all(writers);
    let killer = async {
        for _ in 0..kills {
            // A random moment (not synchronisation), a random process.
            tokio::time::sleep(Duration::from_millis(200 + below(800))).await;
            let victim = below(3) as usize;
            // Killed first: the new process takes over its port, as a restarted one would.
            processes[victim].kill_now();
            processes[victim] = start(victim);
        }
        processes
    };
    let (_, processes) = tokio::join!(storm, killer);

    match deployment.settled(Duration::from_secs(120)).await {
        Ok(report) => {
            println!("{kills} kills; {report}");
            assert!(report.pairs_checked > 100, "a storm worth the name: {report}");
        }
        Err(state) => panic!("not settled after 2 minutes: {state}\n{}", deployment.logs(&["api", "relay", "worker"])),
    }
    // The admin API's view from the broker agrees: nothing left to publish, every group committed the end.
    let lag = async {
        loop {
            let reply = http.get(format!("{base}/admin/v1/lag")).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
            let lag: serde_json::Value = reply.json().await.unwrap();
            let consumers = lag["consumers"].as_array().cloned().unwrap_or_default();
            let behind: i64 = consumers.iter().map(|c| c["behind"].as_i64().unwrap()).sum();
            if lag["relay"]["outbox_rows"] == 0 && consumers.len() == 4 && behind == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    assert!(tokio::time::timeout(Duration::from_secs(30), lag).await.is_ok(), "the admin API never showed zero lag");
    drop(processes);
}
