//! The tenant's router plugin decides topics and keys in both relay modes: one event to two topics,
//! another dropped (and still removed from the outbox).

use std::time::Duration;

use reqwest::Method;
use strand::config::RelayMode;
use strand_test_support::{test_plugin, wait_until, Backend, TestServer};

use super::bus;
use strand_test_support::outbox_rows;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_router_plugin_fans_out_to_two_topics_and_drops_another() {
    fan_out_and_drop(Backend::Sqlite, RelayMode::Poll).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_router_plugin_fans_out_to_two_topics_and_drops_another_from_the_binlog() {
    fan_out_and_drop(Backend::MariaDb, RelayMode::Binlog).await
}

async fn fan_out_and_drop(backend: Backend, mode: RelayMode) {
    let server = TestServer::start_with(backend, |c| {
        c.relay = mode;
        c.relay_idle_ms = 10;
    })
    .await;
    let path = "/admin/v1/tenants/acme/plugins/router/default";
    assert_eq!(server.admin().upload(Method::PUT, path, test_plugin("fanout-router")).await.status, 200);

    server.client("acme", 13).follow(1).await; // dropped by the router
    server.client("acme", 1).follow(2).await; // to `following` and `audit`
    wait_until("the follow reaches the audit topic", Duration::from_secs(30), || async {
        !bus(server.database(), "strand.tenant.acme.audit").await.is_empty()
    })
    .await;
    assert_eq!(outbox_rows(server.database()).await.unwrap(), 0, "the dropped event left the outbox too");
    let following = bus(server.database(), "strand.following").await;
    let audit = bus(server.database(), "strand.tenant.acme.audit").await;
    assert_eq!(following.len(), 1, "user 13's event was dropped: {following:?}");
    assert_eq!(following[0].message.payload, audit[0].message.payload);
    assert_eq!(audit[0].message.header("router-version"), Some("1"));
    assert_eq!(audit[0].message.header("routed-by"), Some("fanout"));
}
