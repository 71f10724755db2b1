//! A plugin written anywhere: `strand plugin new` → `cargo test` (native) → `strand plugin build` →
//! `strand plugin test` → deploy, in a directory outside the repository, with nothing but the `strand`
//! binary and the Rust toolchain; `strand plugin wit` hands out the contract. A test binary of its own:
//! its compiles load every core, which would starve the tight plugin deadlines of tests running beside it.

use std::path::Path;
use std::process::{Command, Output};

use reqwest::Method;
use strand_test_support::{Backend, TestServer};

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
