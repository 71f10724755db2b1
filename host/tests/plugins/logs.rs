//! What plugins log: named by the host (version, the input's id), kept per plugin within its rate, traps
//! included with their wasm backtrace, read through the admin API by the tenant's own credentials only.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};
use strand_test_support::{test_plugin, wait_until, ApiClient, Backend, TestServer};

use super::deploy;

async fn lines(admin: &ApiClient, tenant: &str, slot: &str) -> Vec<Value> {
    let reply = admin.get(&format!("/admin/v1/tenants/{tenant}/plugins/{slot}/logs?limit=500")).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    reply.body["entries"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plugins_lines_are_named_kept_within_its_rate_and_read_by_its_tenant_only() {
    let server = TestServer::start(Backend::Sqlite).await;
    assert_eq!(deploy(&server, "chatty", "rate-limiter", "default", test_plugin("deny-all")).await.status, 200);
    let started = Instant::now();
    for target in 2..=201 {
        assert_eq!(server.client("chatty", 1).put(&format!("/v1/me/following/{target}")).await.status, 429);
    }
    let admin = server.admin();
    wait_until("the first lines are kept", Duration::from_secs(30), || async {
        lines(&admin, "chatty", "rate-limiter/default").await.iter().any(|l| l["input"] == "1->2")
    })
    .await;
    let kept = lines(&admin, "chatty", "rate-limiter/default").await;
    let first = kept.iter().find(|l| l["input"] == "1->2").unwrap();
    assert_eq!((&first["level"], &first["version"]), (&json!("warn"), &json!(1)), "{first}");
    assert_eq!(first["message"], "<b>denied</b> 1 -> 2", "the plugin's text, as it wrote it: {first}");
    // 200 lines within a moment: the burst (100) and what refilled meanwhile (20 a second) — on a machine
    // slow enough to take 5 s for them, all of them.
    let allowed = 100 + (started.elapsed().as_secs_f64() * 20.0).ceil() as usize;
    assert!(kept.len() <= allowed, "{} lines kept, at most {allowed}", kept.len());

    // `strand plugin logs`: oldest first, the plugin's text escaped.
    let mut cli = tokio::process::Command::new(env!("CARGO_BIN_EXE_strand"));
    cli.args(["plugin", "logs", "--tenant", "chatty", "--kind", "rate-limiter", "--limit", "3", "--server"])
        .arg(server.url(""))
        .env("STRAND_ADMIN_TOKEN", strand_test_support::ADMIN_TOKEN)
        .env("STRAND_CONFIG", "/nonexistent/strand.toml");
    let output = tokio::time::timeout(Duration::from_secs(60), cli.output()).await.unwrap().unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{printed}{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(printed.lines().count(), 3, "{printed}");
    assert!(printed.lines().all(|l| l.contains(" v1 warn  [1->") && l.contains("<b>denied</b> 1 -> ")), "{printed}");

    // A tenant's key reads its own plugins' lines; another tenant's key does not.
    let key = |tenant: &'static str| {
        let admin = admin.clone();
        async move {
            let issued = admin
                .send_json(Method::POST, &format!("/admin/v1/tenants/{tenant}/keys"), &json!({"name": "ops"}))
                .await;
            assert_eq!(issued.status, 201, "{issued:?}");
            issued.body["secret"].as_str().unwrap().to_owned()
        }
    };
    let (own, other) = (key("chatty").await, key("quiet").await);
    let own = server.client_with_token(&own);
    let other = server.client_with_token(&other);
    assert!(!lines(&own, "chatty", "rate-limiter/default").await.is_empty());
    let refused = other.get("/admin/v1/tenants/chatty/plugins/rate-limiter/default/logs").await;
    assert_eq!(refused.status, 403, "{refused:?}");
    assert!(lines(&admin, "quiet", "rate-limiter/default").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_trap_is_logged_with_its_wasm_backtrace_after_what_the_plugin_said_before_it() {
    let server = TestServer::start(Backend::Sqlite).await;
    assert_eq!(deploy(&server, "trapped", "rate-limiter", "default", test_plugin("hostile-limiter")).await.status, 200);
    // Fails open by default: the write goes through, the trap is the plugin's author's to see.
    assert_eq!(server.client("trapped", 1).put("/v1/me/following/667").await.status, 200);
    let admin = server.admin();
    wait_until("the trap is kept", Duration::from_secs(30), || async {
        lines(&admin, "trapped", "rate-limiter/default").await.len() >= 2
    })
    .await;
    let kept = lines(&admin, "trapped", "rate-limiter/default").await;
    // Newest first: the host's line for the trap, then the plugin's own line before it.
    assert_eq!((&kept[1]["message"], &kept[1]["input"]), (&json!("about to trap"), &json!("1->667")));
    let trap = kept[0]["message"].as_str().unwrap();
    assert_eq!(kept[0]["level"], "error");
    assert!(trap.starts_with("trapped:") && trap.contains("wasm backtrace"), "{trap}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_kafka_the_lines_are_also_published_to_the_plugin_logs_topic_keyed_by_tenant() {
    let kafka = strand_test_support::Kafka::shared().unwrap();
    let prefix = kafka.unique_prefix();
    let server = TestServer::start_with(Backend::Sqlite, |c| {
        c.kafka_brokers = Some(kafka.brokers());
        c.topic_prefix = prefix.clone();
    })
    .await;
    assert_eq!(deploy(&server, "shipped", "rate-limiter", "default", test_plugin("deny-all")).await.status, 200);
    assert_eq!(server.client("shipped", 1).put("/v1/me/following/2").await.status, 429);
    let topic = format!("{prefix}plugin-logs");
    let received =
        tokio::task::spawn_blocking(move || kafka.read(&topic, 3, 1, Duration::from_secs(60))).await.unwrap();
    assert_eq!(received.len(), 1, "{received:?}");
    let line: Value = serde_json::from_str(&received[0].payload).unwrap();
    assert_eq!(received[0].key, "shipped");
    assert_eq!(
        (&line["tenant"], &line["kind"], &line["plugin"]),
        (&json!("shipped"), &json!("rate-limiter"), &json!("default"))
    );
    assert_eq!(
        (&line["level"], &line["input"], &line["message"]),
        (&json!("warn"), &json!("1->2"), &json!("<b>denied</b> 1 -> 2"))
    );
}
