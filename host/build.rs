//! Builds the bundled plugins in `plugins/` as WASM components and leaves them in `OUT_DIR`, where
//! `src/plugins/mod.rs` embeds them: `cargo run -- serve` on a fresh machine needs no separate step.
//! Installs the `wasm32-wasip2` target through rustup when it is missing.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";
const BUNDLED: [&str; 9] = [
    "default-rate-limit",
    "default-router",
    "follow-lists",
    "follow-counts",
    "top-followers",
    "mutual-follows",
    "default-relation-policy",
    "following-cap",
    "relation-signals",
];

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let workspace = manifest_dir.parent().expect("host/ sits in the workspace");
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("set by cargo"));
    for watched in ["plugins", "wit", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", workspace.join(watched).display());
    }
    ensure_target();

    let target_dir = out_dir.join("plugins-target");
    let mut cargo = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo
        .current_dir(workspace)
        .args(["build", "--release", "--locked", "--target", TARGET, "--target-dir"])
        .arg(&target_dir);
    for plugin in BUNDLED {
        cargo.args(["-p", plugin]);
    }
    // The outer build's flags and wrappers are for the host, not for the wasm guests.
    for var in
        ["RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_TARGET", "RUSTC_WORKSPACE_WRAPPER", "CARGO_TARGET_DIR"]
    {
        cargo.env_remove(var);
    }
    run(&mut cargo, "building the bundled plugins");
    for plugin in BUNDLED {
        let file = format!("{}.wasm", plugin.replace('-', "_"));
        let built = target_dir.join(TARGET).join("release").join(&file);
        copy(&built, &out_dir.join(&file));
    }
}

fn ensure_target() {
    let installed = Command::new("rustup").args(["target", "list", "--installed"]).output();
    match installed {
        Ok(out) if String::from_utf8_lossy(&out.stdout).lines().any(|l| l.trim() == TARGET) => {}
        Ok(_) => run(Command::new("rustup").args(["target", "add", TARGET]), "installing the wasm32-wasip2 target"),
        // Without rustup the toolchain must already have the target; the build below says so if not.
        Err(e) => println!("cargo:warning=rustup not found ({e}); assuming the {TARGET} target is installed"),
    }
}

fn run(command: &mut Command, what: &str) {
    let status = command.status().unwrap_or_else(|e| panic!("{what}: cannot run {command:?}: {e}"));
    assert!(status.success(), "{what} failed ({status}): {command:?}");
}

fn copy(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap_or_else(|e| panic!("copying {} to {}: {e}", from.display(), to.display()));
}
