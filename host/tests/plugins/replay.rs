//! `strand plugin test --replay`: a candidate beside the active version on the tenant's recent real
//! changes (a rate limiter: its sampled requests, refused ones too; a relation policy: its sampled follow
//! attempts), printing the inputs where they differ and what both cost.

use std::time::Duration;

use serde_json::Value;
use strand_test_support::{test_plugin, Backend, TestServer};

use super::{bundled, deploy};

/// Runs `strand plugin test --replay …` against the server's database; the printed differences, then the
/// summary.
async fn replay(server: &TestServer, args: &[&str], candidate: &[u8]) -> (Vec<Value>, Value) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), candidate).unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_strand"));
    command
        .args(["plugin", "test", "--replay", "--tenant", "replayed"])
        .args(args)
        .arg(file.path())
        .env("STRAND_CONFIG", "/nonexistent/strand.toml")
        .env("STRAND_DATABASE_URL", &server.config.database_url);
    let output = tokio::time::timeout(Duration::from_secs(120), command.output()).await.unwrap().unwrap();
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{printed}{}", String::from_utf8_lossy(&output.stderr));
    let mut values: Vec<Value> = serde_json::Deserializer::from_str(&printed).into_iter().map(Result::unwrap).collect();
    let summary = values.pop().expect("a summary");
    (values, summary)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_candidate_is_replayed_beside_the_active_version_on_the_tenants_recent_changes() {
    let server = TestServer::start(Backend::Sqlite).await;
    for user in 1..=6 {
        server.client("replayed", user).follow(9).await;
    }
    server.client("replayed", 2).unfollow(9).await;
    let counts = bundled("projector", "follow-counts");
    assert_eq!(deploy(&server, "replayed", "projector", "counts", counts).await.status, 200);

    // The same projector built against WIT 0.1.0 projects the tenant's real changes identically.
    let old = include_bytes!("../fixtures/wit-0.1.0/follow_counts.wasm");
    let (different, summary) = replay(&server, &["--kind", "projector", "--name", "counts"], old).await;
    assert_eq!((summary["inputs"].as_u64(), summary["different"].as_u64()), (Some(6), Some(0)), "{summary}");
    assert!(different.is_empty(), "{different:?}");
    assert_eq!(summary["active"]["version"], 1);
    assert!(summary["candidate"]["fuel"].as_u64().is_some_and(|f| f > 0), "{summary}");

    // A policy denying everything, beside the bundled one: every recent request would have been refused.
    wait_for_samples(&server, "write_request_samples", 7).await;
    let (different, summary) =
        replay(&server, &["--kind", "rate-limiter", "--last", "4"], &test_plugin("deny-all")).await;
    assert_eq!((summary["inputs"].as_u64(), summary["different"].as_u64()), (Some(4), Some(4)), "{summary}");
    assert_eq!(summary["answered"], serde_json::json!({"allowed": 4}), "{summary}");
    assert_eq!(summary["active"]["version"], 0, "the bundled policy is what runs now");
    let first = &different[0];
    assert_eq!(first["candidate"], serde_json::json!({"Deny": "deny-all test policy: follow"}), "{first}");
    assert_eq!(first["input"]["target"], 9, "{first}");

    // Requests the active policy refused never reached the truth, yet they are replayed: the bundled policy
    // as the candidate would have charged a bucket for each.
    let deny_all = test_plugin("deny-all");
    assert_eq!(deploy(&server, "replayed", "rate-limiter", "default", deny_all.clone()).await.status, 200);
    for target in [11, 12] {
        assert_eq!(server.client("replayed", 3).put(&format!("/v1/me/following/{target}")).await.status, 429);
    }
    wait_for_samples(&server, "write_request_samples", 9).await;
    let bundled_policy = bundled("rate-limiter", "default");
    let (different, summary) = replay(&server, &["--kind", "rate-limiter", "--last", "2"], &bundled_policy).await;
    assert_eq!(summary["answered"], serde_json::json!({"limited": 2}), "{summary}");
    assert_eq!(summary["different"], 2, "{summary}");
    assert_eq!(different.iter().map(|d| d["input"]["target"].clone()).collect::<Vec<_>>(), [11, 12]);
    assert!(different[0]["candidate"].get("Charge").is_some(), "{different:?}");

    // The same policy as the active one: no difference.
    let (different, summary) = replay(&server, &["--kind", "rate-limiter"], &deny_all).await;
    assert_eq!((summary["inputs"].as_u64(), summary["different"].as_u64()), (Some(9), Some(0)), "{summary}");
    assert!(different.is_empty(), "{different:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relation_policy_is_replayed_on_the_follow_attempts_its_tenant_made() {
    let server = TestServer::start(Backend::Sqlite).await;
    let cap = strand::plugins::EXAMPLES.iter().find(|e| e.name == "following-cap").unwrap();
    assert_eq!(deploy(&server, "replayed", "relation-policy", "default", cap.wasm.to_vec()).await.status, 200);
    let private = serde_json::json!({"private": true});
    let made_private = server.client("replayed", 3).send_json(reqwest::Method::PUT, "/v1/me/settings", &private).await;
    assert_eq!(made_private.status, 200, "{made_private:?}");
    for (follower, target) in [(1, 2), (1, 3), (4, 5)] {
        assert_eq!(server.client("replayed", follower).put(&format!("/v1/me/following/{target}")).await.status, 200);
    }
    wait_for_samples(&server, "follow_attempt_samples", 3).await;

    // A candidate that allows every follow: only the follow of the private account is answered otherwise.
    let allows_all = test_plugin("trapping-relation-policy");
    let (different, summary) = replay(&server, &["--kind", "relation-policy"], &allows_all).await;
    assert_eq!((summary["inputs"].as_u64(), summary["different"].as_u64()), (Some(3), Some(1)), "{summary}");
    assert_eq!(summary["answered"], serde_json::json!({"allow": 2, "require_approval": 1}), "{summary}");
    let changed = &different[0];
    assert_eq!((changed["input"]["follower"].as_i64(), changed["input"]["target"].as_i64()), (Some(1), Some(3)));
    assert_eq!((changed["active"].clone(), changed["candidate"].clone()), ("RequireApproval".into(), "Allow".into()));
}

/// Waits until the server's sampler has written `inputs` of the tenant's inputs into `table`.
async fn wait_for_samples(server: &TestServer, table: &str, inputs: i64) {
    let sql = format!("SELECT COUNT(*) FROM {table} WHERE tenant_id = 'replayed'");
    strand_test_support::wait_until("the inputs are sampled", Duration::from_secs(20), || async {
        let sampled: i64 = sqlx::query_scalar(&sql).fetch_one(server.database().reader()).await.unwrap();
        sampled >= inputs
    })
    .await;
}
