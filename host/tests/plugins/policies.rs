//! The router's and projector's failure policies: fall back to the default route; retry, then report.

use std::sync::Arc;
use std::time::Duration;

use strand::db::Database;
use strand::outbox::OutboxRow;
use strand::plugins::{
    project_with_retries, route_or_default, sample_events_for, sample_outbox_events, PluginKind, PluginRegistry,
    PluginRuntime, PluginSlot, RetryPolicy, RolloutStage,
};
use strand_test_support::{test_plugin, Backend};

async fn registry() -> (PluginRegistry, strand_test_support::TestDatabase) {
    let database = Backend::Sqlite.fresh_database().await.unwrap();
    let db = Database::open(&database.url, 4).await.unwrap();
    let runtime = Arc::new(PluginRuntime::new(Default::default(), None).unwrap());
    (PluginRegistry::load(runtime, db).await.unwrap(), database)
}

#[tokio::test]
async fn a_router_fans_out_and_drops_and_a_failing_one_falls_back_to_the_default_route() {
    let (registry, _db) = registry().await;
    let acme = "acme".parse().unwrap();
    let slot = PluginSlot::new("acme".parse().unwrap(), PluginKind::Router, "default").unwrap();
    registry.deploy(slot, test_plugin("fanout-router")).await.unwrap();

    let mut events = sample_outbox_events(&acme);
    events[1].aggregate_id = "13:101".into();
    let routed = route_or_default(&registry, &acme, events.clone()).await.unwrap();
    assert!(routed.fell_back.is_none());
    assert_eq!(routed.router_versions, vec![1; events.len()]);
    let topics: Vec<Vec<&str>> =
        routed.destinations.iter().map(|d| d.iter().map(|d| d.topic.as_str()).collect()).collect();
    assert_eq!(topics[0], vec!["following", "audit"], "a follow fans out");
    assert!(topics[1].is_empty(), "user 13's event is dropped");

    events[2].aggregate_id = "666:103".into();
    let routed = route_or_default(&registry, &acme, events.clone()).await.unwrap();
    assert!(routed.fell_back.is_some(), "the tenant's router trapped");
    assert_eq!(routed.router_versions, vec![0; events.len()], "the bundled router took over");
    for (destinations, event) in routed.destinations.iter().zip(&events) {
        assert_eq!(destinations.len(), 1, "the default route drops nothing");
        assert_eq!((destinations[0].topic.as_str(), &destinations[0].key), ("following", &event.key));
    }
}

#[tokio::test]
async fn a_failing_projector_is_retried_then_reported_for_dead_lettering() {
    let (registry, _db) = registry().await;
    let tenant = "acme".parse().unwrap();
    let slot = PluginSlot::new("acme".parse().unwrap(), PluginKind::Projector, "hostile").unwrap();
    registry.deploy(slot, test_plugin("hostile-projector")).await.unwrap();
    let projector =
        registry.projectors(&tenant).into_iter().find(|p| p.name == "hostile").expect("the deployed projector");
    let policy = RetryPolicy { attempts: 3, first_backoff: Duration::from_millis(1) };

    let events = sample_events_for(&projector.prepared);
    let fine = project_with_retries(&registry, projector.clone(), Arc::new(events.clone()), policy).await.unwrap();
    assert_eq!(fine.len(), events.len());

    let mut poison = events;
    poison[3].follower = 666;
    let failed = project_with_retries(&registry, projector, Arc::new(poison), policy).await.unwrap_err();
    assert_eq!((failed.name.as_str(), failed.version, failed.attempts), ("hostile", 1, 3));
}

#[tokio::test]
async fn a_router_canary_routes_a_stable_share_of_the_message_keys() {
    let (registry, _db) = registry().await;
    let acme = "acme".parse().unwrap();
    let slot = PluginSlot::new("acme".parse().unwrap(), PluginKind::Router, "default").unwrap();
    registry.deploy(slot.clone(), test_plugin("fanout-router")).await.unwrap();
    let default = strand::plugins::BUNDLED.iter().find(|b| b.kind == PluginKind::Router).unwrap().wasm.to_vec();
    registry
        .deploy_with(slot.clone(), default, Default::default(), Some(RolloutStage::Canary(30)), Default::default())
        .await
        .unwrap();

    let template = sample_outbox_events(&acme).remove(0);
    let events: Vec<_> = (0..1000).map(|i| OutboxRow { key: format!("acme:{i}"), ..template.clone() }).collect();
    let routed = route_or_default(&registry, &acme, events.clone()).await.unwrap();
    let by_canary = routed.router_versions.iter().filter(|v| **v == 2).count();
    assert!((230..=370).contains(&by_canary), "about 30% of 1000 keys meet the canary: {by_canary}");
    assert!(routed.router_versions.iter().all(|v| *v == 1 || *v == 2));
    let again = route_or_default(&registry, &acme, events).await.unwrap();
    assert_eq!(routed.router_versions, again.router_versions, "one key always meets one version");
    registry.abort(slot).await.unwrap();
}
