//! An account with many followers deleted while its counterparts write, the API process running the job
//! SIGKILLed mid-way and started again: the job resumes on the new process, the truth ends with none of the
//! account's rows, and `strand reconcile` finds the follower table and the projectors' counts and lists
//! equal to the truth — nothing lost, nothing counted twice.

use std::time::Duration;

use futures::future::join_all;
use strand_test_support::{token, ADMIN_TOKEN, TEST_SECRET};

use super::{answering, port, Deployment};

const FOLLOWERS: i64 = 3000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_much_followed_account_survives_a_sigkill_of_its_node_under_a_storm() {
    let deployment = Deployment::new().await;
    let (api_port, relay_port, worker_port) = (port(), port(), port());
    let _relay = deployment.relay("relay", relay_port);
    let _worker = deployment.worker("worker", worker_port, Some("worker"));
    // Batches of 10: the job takes hundreds, so the kill lands in its middle even when the first look at its
    // progress comes late.
    let mut node = deployment.api_with("api", api_port, &[("account_job_batch", "10")]);
    answering(api_port, &node).await;
    let base = format!("http://127.0.0.1:{api_port}");
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();

    // The account 1 has FOLLOWERS followers; it follows the first 20 back.
    let follow = |from: i64, to: i64| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let bearer = token(TEST_SECRET, &from.to_string(), "life", 3600);
            let reply = http.put(format!("{base}/v1/me/following/{to}")).bearer_auth(bearer).send().await.unwrap();
            assert!(reply.status().is_success(), "{}", reply.status());
        }
    };
    let followers: Vec<i64> = (2..=FOLLOWERS + 1).collect();
    for chunk in followers.chunks(32) {
        join_all(chunk.iter().map(|f| follow(*f, 1))).await;
    }
    join_all((2..22).map(|f| follow(1, f))).await;

    let started = http
        .post(format!("{base}/admin/v1/tenants/life/accounts/1/jobs"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({"kind": "delete"}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 202);
    let job: serde_json::Value = started.json().await.unwrap();
    let job_url = format!("{base}/admin/v1/tenants/life/jobs/{}", job["id"]);

    // The storm: the counterparts follow and unfollow each other, and try to follow the deleted account
    // (refused; none unfollows it, so the job's count must come out exact).
    let storm = join_all((2..40_i64).map(|user| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let bearer = token(TEST_SECRET, &user.to_string(), "life", 3600);
            for i in 0..30_i64 {
                let target = if i % 10 == 0 { 1 } else { 2 + (user * 7 + i * 13) % 38 };
                if target == user {
                    continue;
                }
                let url = format!("{base}/v1/me/following/{target}");
                loop {
                    let unfollow = (i + user) % 3 == 0 && target != 1;
                    let request = if unfollow { http.delete(&url) } else { http.put(&url) };
                    match request.bearer_auth(&bearer).send().await {
                        Ok(reply) if reply.status().is_success() || reply.status() == 410 => break,
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
    }));
    let killer = async {
        // Killed as soon as the job has made progress, then started again on the same port.
        let progressed = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                if let Ok(reply) = http.get(&job_url).bearer_auth(ADMIN_TOKEN).send().await {
                    let job: serde_json::Value = reply.json().await.unwrap_or_default();
                    if job["done"].as_i64().unwrap_or(0) > 0 {
                        return job;
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the job makes progress");
        assert!(
            progressed["done"].as_i64().unwrap() < progressed["total"].as_i64().unwrap(),
            "killed mid-way: {progressed}"
        );
        node.kill_now();
        node = deployment.api_with("api", api_port, &[("account_job_batch", "10")]);
        answering(api_port, &node).await;
    };
    tokio::join!(storm, killer);

    let finished = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            if let Ok(reply) = http.get(&job_url).bearer_auth(ADMIN_TOKEN).send().await {
                let job: serde_json::Value = reply.json().await.unwrap_or_default();
                if job["state"] != "running" {
                    return job;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the job did not end after its node's restart:\n{}", deployment.logs(&["api"])));
    assert_eq!(finished["state"], "done", "{finished}");
    assert_eq!(finished["done"], finished["total"], "every edge counted once across the kill: {finished}");

    let rows = deployment.rows_of("life", 1).await;
    assert_eq!(rows, 0, "the truth holds none of the account's rows");
    match deployment.settled(Duration::from_secs(120)).await {
        Ok(report) => assert!(report.pairs_checked > 100, "{report}"),
        Err(state) => panic!("not settled: {state}\n{}", deployment.logs(&["api", "relay", "worker"])),
    }
}
