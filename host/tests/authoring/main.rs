//! A plugin written anywhere: `strand plugin new` → `cargo test` (native) → `strand plugin build` →
//! `strand plugin test` → deploy, in a directory outside the repository, with nothing but the `strand`
//! binary and the language's toolchain (Rust; Node.js with componentize-js; componentize-py);
//! `strand plugin wit` hands out the contract. A test binary of its own:
//! its compiles load every core, which would starve the tight plugin deadlines of tests running beside it.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use reqwest::Method;
use strand_test_support::{free_port, Backend, Examples, TestServer};

/// Runs `program args` in `dir`, building into `target`; its output, which must be a success.
fn run(program: &str, args: &[&str], dir: &Path, target: &Path) -> Output {
    let output = Command::new(program).args(args).current_dir(dir).env("CARGO_TARGET_DIR", target).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{program} {args:?} failed:\n{stdout}\n{stderr}");
    output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_projector_project_made_outside_the_repository_tests_builds_and_deploys() {
    let (strand, place) = (env!("CARGO_BIN_EXE_strand"), tempfile::tempdir().unwrap());
    let target = place.path().join("target");
    run(strand, &["plugin", "new", "--kind", "projector", "my-counter"], place.path(), &target);
    let project = place.path().join("my-counter");
    let again = Command::new(strand)
        .args(["plugin", "new", "--kind", "projector", "my-counter"])
        .current_dir(place.path())
        .output()
        .unwrap();
    assert!(!again.status.success(), "an existing project is kept");

    let tested = run("cargo", &["test"], &project, &target);
    let tested = String::from_utf8_lossy(&tested.stdout);
    assert!(tested.contains("test result: ok. 1 passed"), "the example's unit test runs natively: {tested}");
    let built = run(strand, &["plugin", "build"], &project, &target);
    let wasm = String::from_utf8_lossy(&built.stdout).lines().last().unwrap().to_owned();
    assert!(wasm.ends_with("my_counter.wasm"), "{wasm}");
    let checked = run(strand, &["plugin", "test", "--kind", "projector", &wasm], &project, &target);
    assert!(String::from_utf8_lossy(&checked.stdout).contains("CounterAdd"), "its effects are printed");

    let server = TestServer::start(Backend::Sqlite).await;
    let path = "/admin/v1/tenants/acme/plugins/projector/my-counter?readable=counter:followers";
    let deployed = server.admin().upload(Method::PUT, path, std::fs::read(&wasm).unwrap()).await;
    assert_eq!(deployed.status, 200, "{deployed:?}");

    let wit = run(strand, &["plugin", "wit", "contract"], place.path(), &target);
    let written = String::from_utf8_lossy(&wit.stdout).trim().to_owned();
    assert_eq!(std::fs::read_to_string(place.path().join(written)).unwrap(), include_str!("../../../wit/strand.wit"));
}

/// `strand plugin new --lang LANG --kind KIND NAME` in `place`, then `strand plugin build` and `strand plugin
/// test` of it; the component.
fn new_and_build(lang: &str, kind: &str, name: &str, place: &Path) -> Vec<u8> {
    let (strand, target) = (env!("CARGO_BIN_EXE_strand"), place.join("target"));
    run(strand, &["plugin", "new", "--lang", lang, "--kind", kind, name], place, &target);
    let built = run(strand, &["plugin", "build", name], place, &target);
    let wasm = String::from_utf8_lossy(&built.stdout).lines().last().unwrap().to_owned();
    assert!(wasm.ends_with("dist/plugin.wasm"), "{wasm}");
    let checked = run(strand, &["plugin", "test", "--kind", kind, &wasm], place, &target);
    assert!(String::from_utf8_lossy(&checked.stdout).contains("\"output\""), "its output is printed");
    std::fs::read(wasm).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_javascript_rate_limiter_and_a_python_projector_made_anywhere_build_deploy_and_run_like_rust_ones() {
    let place = tempfile::tempdir().unwrap();
    let limiter = new_and_build("js", "rate-limiter", "my-limiter", place.path());
    let projector = new_and_build("python", "projector", "my-counts", place.path());
    let server = TestServer::start_pipeline(Backend::Sqlite, None).await;
    let admin = server.admin();
    // Through the same conformance run and limits as any upload.
    let deployed = admin.upload(Method::PUT, "/admin/v1/tenants/poly/plugins/rate-limiter/default", limiter).await;
    assert_eq!(deployed.status, 200, "{deployed:?}");
    let path = "/admin/v1/tenants/poly/plugins/projector/py-counts?readable=counter:followers";
    let deployed = admin.upload(Method::PUT, path, projector).await;
    assert_eq!(deployed.status, 200, "{deployed:?}");

    // The JavaScript policy's bucket: 100 follows of user 1 go through, then it is empty.
    let alice = server.client("poly", 1);
    let mut statuses = Vec::new();
    for target in 2..=111 {
        statuses.push(alice.put(&format!("/v1/me/following/{target}")).await.status);
    }
    let allowed = statuses.iter().filter(|s| **s == 200).count();
    assert!((100..110).contains(&allowed) && statuses.contains(&429), "{allowed} of 110 allowed: {statuses:?}");
    // The Python projector counts them.
    for follower in 2..=4 {
        assert_eq!(server.client("poly", follower).put("/v1/me/following/50").await.status, 200);
    }
    strand_test_support::wait_until("the Python projector's counter", Duration::from_secs(60), || async {
        alice.get("/v1/projections/py-counts/followers/50").await.body["value"] == 4
    })
    .await;
}

#[test]
fn a_relation_projector_is_made_only_as_a_rust_projector() {
    let (strand, place) = (env!("CARGO_BIN_EXE_strand"), tempfile::tempdir().unwrap());
    let refused = Command::new(strand)
        .args(["plugin", "new", "--kind", "router", "--relations", "my-router"])
        .current_dir(place.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("only with --kind projector"), "{stderr}");
    assert!(!place.path().join("my-router").exists(), "nothing is written");
}

/// The plugin author's quickstart, as a reader runs it: a relation policy and a relation projector (`plugin
/// new --relations`) made, tested, built, deployed and met through the API.
#[test]
fn the_plugin_author_quickstart_runs() {
    let page = "docs/quickstart/plugin-author.md";
    let markdown = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(page)).unwrap();
    let place = tempfile::tempdir().unwrap();
    let target = place.path().join("target").display().to_string();
    let strand = Path::new(env!("CARGO_BIN_EXE_strand"));
    let examples = Examples {
        page,
        strand,
        markdown: &markdown,
        substitutions: Vec::new(),
        env: vec![("CARGO_TARGET_DIR".to_owned(), target)],
    };
    examples.run(place.path(), free_port().unwrap());
}
