//! Components built against `strand:plugin@0.1.0`, `0.2.0` and `0.3.0` (before the host spoke 0.4.0) keep
//! running: deployed through the admin API they decide, route, admit and project like the same plugins
//! built today; a limiter before 0.4.0 is asked each write as a follow or an unfollow.

use std::time::Duration;

use strand::plugins::{
    sample_attempts, sample_events, sample_requests, Action, Decision, PluginKind, PluginRuntime, RelationKind,
    BUNDLED, EXAMPLES, WRITE_KINDS,
};
use strand_test_support::{wait_until, Backend, TestServer};

use super::deploy;

const OLD_RATE_LIMIT: &[u8] = include_bytes!("../fixtures/wit-0.1.0/default_rate_limit.wasm");
const OLD_ROUTER: &[u8] = include_bytes!("../fixtures/wit-0.1.0/default_router.wasm");
const OLD_FOLLOW_COUNTS: &[u8] = include_bytes!("../fixtures/wit-0.1.0/follow_counts.wasm");
const V0_2_RATE_LIMIT: &[u8] = include_bytes!("../fixtures/wit-0.2.0/default_rate_limit.wasm");
const V0_2_ROUTER: &[u8] = include_bytes!("../fixtures/wit-0.2.0/default_router.wasm");
const V0_2_FOLLOW_COUNTS: &[u8] = include_bytes!("../fixtures/wit-0.2.0/follow_counts.wasm");
const V0_3_RATE_LIMIT: &[u8] = include_bytes!("../fixtures/wit-0.3.0/default_rate_limit.wasm");
const V0_3_ROUTER: &[u8] = include_bytes!("../fixtures/wit-0.3.0/default_router.wasm");
const V0_3_FOLLOW_COUNTS: &[u8] = include_bytes!("../fixtures/wit-0.3.0/follow_counts.wasm");
const V0_3_RELATION_POLICY: &[u8] = include_bytes!("../fixtures/wit-0.3.0/default_relation_policy.wasm");
const V0_3_RELATION_SIGNALS: &[u8] = include_bytes!("../fixtures/wit-0.3.0/relation_signals.wasm");

#[tokio::test]
async fn older_projectors_project_what_their_0_4_0_build_does() {
    let runtime = PluginRuntime::new(Default::default(), None).unwrap();
    let current = BUNDLED.iter().find(|b| b.name == "follow-counts").unwrap().wasm;
    let [v0_1, v0_2, v0_3, new] = [OLD_FOLLOW_COUNTS, V0_2_FOLLOW_COUNTS, V0_3_FOLLOW_COUNTS, current]
        .map(|wasm| runtime.prepare(PluginKind::Projector, wasm).unwrap());
    let versions = [&v0_1, &v0_2, &v0_3, &new].map(|plugin| plugin.wit_version());
    assert_eq!(versions, ["0.1.0", "0.2.0", "0.3.0", "0.4.0"]);
    let events: Vec<_> = sample_events().into_iter().filter(|e| e.action().is_some()).collect();
    let project = async |plugin| runtime.project(&plugin, runtime.limits(), &events).await.result.unwrap().0;
    let new = project(new).await;
    assert_eq!(project(v0_1).await, new);
    assert_eq!(project(v0_2).await, new);
    assert_eq!(project(v0_3).await, new);

    let signals = EXAMPLES.iter().find(|e| e.name == "relation-signals").unwrap().wasm;
    let [old, new] = [V0_3_RELATION_SIGNALS, signals].map(|wasm| runtime.prepare(PluginKind::Projector, wasm).unwrap());
    assert!(old.receives_every_kind() && old.wit_version() == "0.3.0");
    let every_kind = sample_events();
    let project = async |plugin| runtime.project(&plugin, runtime.limits(), &every_kind).await.result.unwrap().0;
    assert_eq!(project(old).await, project(new).await, "a 0.3.0 relation projector");
}

/// Every write's kind reaches a 0.4.0 limiter as itself, and a 0.3.0 limiter (the bundled one, as 0.3.0
/// built it) as the follow or unfollow it is asked as: both charge the same buckets.
#[tokio::test]
async fn a_limiter_before_0_4_0_is_asked_each_write_as_a_follow_or_an_unfollow() {
    let runtime = PluginRuntime::new(Default::default(), None).unwrap();
    let current = BUNDLED.iter().find(|b| b.kind == PluginKind::RateLimiter).unwrap().wasm;
    let [old, new] = [V0_3_RATE_LIMIT, current].map(|wasm| runtime.prepare(PluginKind::RateLimiter, wasm).unwrap());
    assert_eq!((old.wit_version(), new.wit_version()), ("0.3.0", "0.4.0"));
    let requests = sample_requests();
    assert_eq!(requests.len(), WRITE_KINDS.len(), "every kind of write is sampled");
    let decide = async |plugin| runtime.decide(&plugin, runtime.limits(), &requests).await.result.unwrap().0;
    let decisions = decide(new).await;
    assert_eq!(decide(old).await, decisions);
    let buckets: Vec<String> = decisions
        .iter()
        .map(|decision| match decision {
            Decision::Charge(bucket) => bucket.key.split(':').next().unwrap_or_default().to_owned(),
            other => panic!("the bundled policy charges every write: {other:?}"),
        })
        .collect();
    let asked_as: Vec<String> =
        requests.iter().map(|r| if r.action() == Action::Follow { "follow" } else { "unfollow" }.to_owned()).collect();
    assert_eq!(buckets, asked_as, "block, mute, authorize and settings charge the follow bucket; the rest unfollow");
    assert_eq!(asked_as.iter().filter(|a| *a == "follow").count(), 5);
}

#[tokio::test]
async fn a_0_3_0_relation_policy_admits_what_its_0_4_0_build_does() {
    let runtime = PluginRuntime::new(Default::default(), None).unwrap();
    let current = BUNDLED.iter().find(|b| b.kind == PluginKind::RelationPolicy).unwrap().wasm;
    let [old, new] =
        [V0_3_RELATION_POLICY, current].map(|wasm| runtime.prepare(PluginKind::RelationPolicy, wasm).unwrap());
    assert_eq!((old.wit_version(), new.wit_version()), ("0.3.0", "0.4.0"));
    let attempts = sample_attempts();
    let admit = async |plugin| runtime.admit(&plugin, runtime.limits(), &attempts).await.result.unwrap().0;
    assert_eq!(admit(old).await, admit(new).await);
}

#[tokio::test]
async fn a_relation_projector_receives_every_kind_and_a_projector_of_follows_none_but_follows() {
    let runtime = PluginRuntime::new(Default::default(), None).unwrap();
    let signals = EXAMPLES.iter().find(|e| e.name == "relation-signals").unwrap().wasm;
    let signals = runtime.prepare(PluginKind::Projector, signals).unwrap();
    assert!(signals.receives_every_kind() && signals.wit_version() == "0.4.0");
    let events = sample_events();
    let effects = runtime.project(&signals, runtime.limits(), &events).await.result.unwrap().0;
    let kinds_with_effects: Vec<RelationKind> =
        events.iter().zip(&effects).filter(|(_, effects)| !effects.is_empty()).map(|(e, _)| e.kind).collect();
    assert_eq!(
        kinds_with_effects,
        [
            RelationKind::FollowRequested,
            RelationKind::FollowRequestWithdrawn,
            RelationKind::FollowRequestRejected,
            RelationKind::Block,
            RelationKind::Unblock
        ]
    );

    let counts = BUNDLED.iter().find(|b| b.name == "follow-counts").unwrap().wasm;
    let counts = runtime.prepare(PluginKind::Projector, counts).unwrap();
    let refused = runtime.project(&counts, runtime.limits(), &events).await.result.unwrap_err();
    let cause = std::error::Error::source(&refused).map(ToString::to_string).unwrap_or_default();
    assert!(cause.contains("follows only"), "{refused}: {cause}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn plugins_built_against_0_1_0_deploy_and_run_on_this_host() {
    older_plugins_deploy_and_run("legacy", [OLD_RATE_LIMIT, OLD_ROUTER, OLD_FOLLOW_COUNTS]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn plugins_built_against_0_2_0_deploy_and_run_on_this_host() {
    older_plugins_deploy_and_run("previous", [V0_2_RATE_LIMIT, V0_2_ROUTER, V0_2_FOLLOW_COUNTS]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn plugins_built_against_0_3_0_deploy_and_run_on_this_host() {
    older_plugins_deploy_and_run("last", [V0_3_RATE_LIMIT, V0_3_ROUTER, V0_3_FOLLOW_COUNTS]).await;
}

/// Deploys a rate limiter, a router and a follow-counts projector of an older package for `tenant`: follows
/// pass the limiter, and their events reach the projector through the router.
async fn older_plugins_deploy_and_run(tenant: &str, [limiter, router, counts]: [&[u8]; 3]) {
    let server = TestServer::start_pipeline(Backend::Sqlite, None).await;
    for (kind, name, wasm) in [("rate-limiter", "default", limiter), ("router", "default", router)] {
        let reply = deploy(&server, tenant, kind, name, wasm.to_vec()).await;
        assert_eq!(reply.status, 200, "{kind}: {reply:?}");
    }
    let path = format!("/admin/v1/tenants/{tenant}/plugins/projector/old-counts?readable=counter:followers");
    let reply = server.admin().upload(reqwest::Method::PUT, &path, counts.to_vec()).await;
    assert_eq!(reply.status, 200, "{reply:?}");

    for user in 1..=5 {
        let followed = server.client(tenant, user).put("/v1/me/following/9").await;
        assert_eq!(followed.status, 200, "the older rate limiter lets follows through: {followed:?}");
    }
    let reader = server.client(tenant, 1);
    wait_until("the older router's events reach the older projector", Duration::from_secs(60), || async {
        reader.get("/v1/projections/old-counts/followers/9").await.body["value"] == 5
    })
    .await;
}
