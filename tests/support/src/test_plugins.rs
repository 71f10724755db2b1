//! The test-only plugins of `tests/plugins/`, built as WASM components once per test process.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{bail, Context};

const TEST_PLUGINS: [&str; 7] = [
    "deny-all",
    "hostile-limiter",
    "broken-limiter",
    "fanout-router",
    "hostile-projector",
    "big-limiter",
    "trapping-relation-policy",
];

static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// The component bytes of test plugin `name` (a crate under `tests/plugins/`).
pub fn test_plugin(name: &str) -> Vec<u8> {
    let dir = BUILT.get_or_init(|| build().map_err(|e| format!("{e:#}"))).as_ref().expect("test plugins build");
    let file = dir.join(format!("{}.wasm", name.replace('-', "_")));
    std::fs::read(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()))
}

fn build() -> anyhow::Result<PathBuf> {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target_dir = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or(workspace.join("target"));
    let target_dir = target_dir.join("test-plugins");
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo.current_dir(&workspace).args(["build", "--release", "--locked", "--target", "wasm32-wasip2", "--target-dir"]);
    cargo.arg(&target_dir);
    for plugin in TEST_PLUGINS {
        cargo.args(["-p", plugin]);
    }
    for var in ["RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_TARGET", "RUSTC_WORKSPACE_WRAPPER"] {
        cargo.env_remove(var);
    }
    let output = cargo.output().context("running cargo to build the test plugins")?;
    if !output.status.success() {
        bail!("building the test plugins failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(target_dir.join("wasm32-wasip2/release"))
}
