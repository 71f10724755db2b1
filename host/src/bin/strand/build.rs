//! `strand plugin build [DIR]`: the component of the plugin project in DIR, by its language's toolchain —
//! Rust (`Cargo.toml`: cargo for wasm32-wasip2), JavaScript (`package.json`: componentize-js) or Python
//! (`pyproject.toml`: componentize-py) — against the WIT this binary runs (written into `DIR/wit/` first).
//! Prints the path of each component built.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use strand::plugins::PluginKind;

/// Builds the project in `dir`, whichever language it is written in.
pub fn build(dir: &Path) -> anyhow::Result<()> {
    if dir.join("Cargo.toml").exists() {
        build_rust(dir)
    } else if dir.join("package.json").exists() {
        let wasm = build_js(dir)?;
        println!("{}", wasm.display());
        Ok(())
    } else if dir.join("pyproject.toml").exists() {
        let wasm = build_python(dir)?;
        println!("{}", wasm.display());
        Ok(())
    } else {
        bail!("{}: no Cargo.toml, package.json or pyproject.toml to build", dir.display())
    }
}

fn build_rust(dir: &Path) -> anyhow::Result<()> {
    let status = Command::new("rustup").args(["target", "add", "wasm32-wasip2"]).stdout(Stdio::null()).status();
    if !status.is_ok_and(|s| s.success()) {
        eprintln!("warning: could not run `rustup target add wasm32-wasip2`; trying the build anyway");
    }
    let output = Command::new("cargo")
        .current_dir(dir)
        .args(["build", "--release", "--target", "wasm32-wasip2", "--message-format=json-render-diagnostics"])
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo")?;
    if !output.status.success() {
        bail!("the plugin did not build");
    }
    let mut built = 0;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if message["reason"] != "compiler-artifact" {
            continue;
        }
        for file in message["filenames"].as_array().into_iter().flatten().filter_map(|f| f.as_str()) {
            if file.ends_with(".wasm") {
                println!("{file}");
                built += 1;
            }
        }
    }
    if built == 0 {
        bail!("cargo built no .wasm: is the crate a cdylib (`crate-type = [\"cdylib\"]`)?");
    }
    Ok(())
}

/// `package.json`'s `strand` section names the world and the module: `{"kind": "rate-limiter", "main":
/// "src/rate-limiter.js"}`; its dependencies bring componentize-js (installed here when missing).
fn build_js(dir: &Path) -> anyhow::Result<PathBuf> {
    let manifest: serde_json::Value = serde_json::from_str(&read(&dir.join("package.json"))?)
        .with_context(|| format!("{}/package.json is not JSON", dir.display()))?;
    let section = &manifest["strand"];
    let kind = kind(section["kind"].as_str(), "package.json's strand.kind")?;
    let main = section["main"].as_str().context("package.json has no strand.main (the module to build)")?;
    if !dir.join("node_modules/@bytecodealliance/componentize-js").exists() {
        let install = if dir.join("package-lock.json").exists() { "ci" } else { "install" };
        run(Command::new("npm").current_dir(dir).args([install, "--no-audit", "--no-fund"]), "npm")?;
    }
    super::scaffold::write_wit(&dir.join("wit"))?;
    let out = output(dir)?;
    // Neither HTTP nor fetch: the host links an empty WASI and no wasi:http.
    run(
        Command::new("npx").current_dir(dir).args(["--no-install", "componentize-js", main, "--wit", "wit"]).args([
            "--world-name",
            kind.as_str(),
            "--disable",
            "http",
            "fetch-event",
            "-o",
            "dist/plugin.wasm",
        ]),
        "componentize-js",
    )?;
    Ok(out)
}

/// `pyproject.toml`'s `[tool.strand]` names the world and the module: `kind = "projector"`, `module =
/// "app"`; componentize-py must be on the PATH (`pip install componentize-py`).
fn build_python(dir: &Path) -> anyhow::Result<PathBuf> {
    let manifest: toml::Table = read(&dir.join("pyproject.toml"))?
        .parse()
        .with_context(|| format!("{}/pyproject.toml is not TOML", dir.display()))?;
    let section = manifest.get("tool").and_then(|t| t.get("strand"));
    let field = |name: &str| section.and_then(|s| s.get(name)).and_then(toml::Value::as_str);
    let kind = kind(field("kind"), "pyproject.toml's [tool.strand] kind")?;
    let module = field("module").context("pyproject.toml has no [tool.strand] module (the module to build)")?;
    super::scaffold::write_wit(&dir.join("wit"))?;
    let out = output(dir)?;
    run(
        Command::new("componentize-py").current_dir(dir).args(["-d", "wit/strand.wit", "-w", kind.as_str()]).args([
            "componentize",
            module,
            "-o",
            "dist/plugin.wasm",
        ]),
        "componentize-py",
    )?;
    Ok(out)
}

fn kind(named: Option<&str>, what: &str) -> anyhow::Result<PluginKind> {
    named.with_context(|| format!("{what} is missing"))?.parse().map_err(|e| anyhow::anyhow!("{what}: {e}"))
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// `dir/dist/plugin.wasm`, its directory created.
fn output(dir: &Path) -> anyhow::Result<PathBuf> {
    let dist = dir.join("dist");
    std::fs::create_dir_all(&dist).with_context(|| format!("creating {}", dist.display()))?;
    Ok(std::path::absolute(dist.join("plugin.wasm"))?)
}

fn run(command: &mut Command, tool: &str) -> anyhow::Result<()> {
    let status =
        command.stdout(Stdio::inherit()).status().with_context(|| format!("running {tool} (is it installed?)"))?;
    if !status.success() {
        bail!("{tool} failed ({status})");
    }
    Ok(())
}
