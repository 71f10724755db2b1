//! Components built against `strand:plugin@0.1.0` (before the host spoke 0.2.0) keep running: deployed
//! through the admin API they decide, route and project like the same plugins built against 0.2.0.

use std::time::Duration;

use strand::plugins::{sample_events, PluginKind, PluginRuntime, BUNDLED};
use strand_test_support::{wait_until, Backend, TestServer};

use super::deploy;

const OLD_RATE_LIMIT: &[u8] = include_bytes!("../fixtures/wit-0.1.0/default_rate_limit.wasm");
const OLD_ROUTER: &[u8] = include_bytes!("../fixtures/wit-0.1.0/default_router.wasm");
const OLD_FOLLOW_COUNTS: &[u8] = include_bytes!("../fixtures/wit-0.1.0/follow_counts.wasm");

#[tokio::test]
async fn a_0_1_0_projector_projects_what_its_0_2_0_build_does() {
    let runtime = PluginRuntime::new(Default::default(), None).unwrap();
    let current = BUNDLED.iter().find(|b| b.name == "follow-counts").unwrap().wasm;
    let [old, new] = [OLD_FOLLOW_COUNTS, current].map(|wasm| runtime.prepare(PluginKind::Projector, wasm).unwrap());
    assert_eq!((old.wit_version(), new.wit_version()), ("0.1.0", "0.2.0"));
    let events = sample_events();
    let old = runtime.project(&old, runtime.limits(), &events).await.result.unwrap().0;
    let new = runtime.project(&new, runtime.limits(), &events).await.result.unwrap().0;
    assert_eq!(old, new);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn plugins_built_against_0_1_0_deploy_and_run_on_this_host() {
    let server = TestServer::start_pipeline(Backend::Sqlite, None).await;
    for (kind, name, wasm) in [("rate-limiter", "default", OLD_RATE_LIMIT), ("router", "default", OLD_ROUTER)] {
        let reply = deploy(&server, "legacy", kind, name, wasm.to_vec()).await;
        assert_eq!(reply.status, 200, "{kind}: {reply:?}");
    }
    let path = "/admin/v1/tenants/legacy/plugins/projector/old-counts?readable=counter:followers";
    let reply = server.admin().upload(reqwest::Method::PUT, path, OLD_FOLLOW_COUNTS.to_vec()).await;
    assert_eq!(reply.status, 200, "{reply:?}");

    for user in 1..=5 {
        let followed = server.client("legacy", user).put("/v1/me/following/9").await;
        assert_eq!(followed.status, 200, "the 0.1.0 rate limiter lets follows through: {followed:?}");
    }
    let reader = server.client("legacy", 1);
    wait_until("the 0.1.0 router's events reach the 0.1.0 projector", Duration::from_secs(60), || async {
        reader.get("/v1/projections/old-counts/followers/9").await.body["value"] == 5
    })
    .await;
}
