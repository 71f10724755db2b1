//! `strand plugin new` and `strand plugin wit`: a plugin project anywhere, with nothing but this binary and
//! the language's toolchain. The WIT package and the Rust SDK come with the binary (embedded at build time,
//! so they match the host that runs the plugin) and are written into the project, version-pinned: no path
//! into Strand's repository, no registry of ours.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use strand::plugins::PluginKind;

/// The plugin contract, as this binary's host implements it.
const WIT: &str = include_str!("../../../../wit/strand.wit");
const SDK_LIB: &str = include_str!("../../../../plugins/sdk/src/lib.rs");
const SDK_HELPERS: &str = include_str!("../../../../plugins/sdk/src/helpers.rs");
const SDK_LOG: &str = include_str!("../../../../plugins/sdk/src/log.rs");
const CONTRACT_LIB: &str = include_str!("../../../../plugins/contract/src/lib.rs");
/// A working example per kind: the bundled plugins themselves.
const RATE_LIMITER: &str = include_str!("../../../../plugins/default-rate-limit/src/lib.rs");
const ROUTER: &str = include_str!("../../../../plugins/default-router/src/lib.rs");
const PROJECTOR: &str = include_str!("../../../../plugins/follow-counts/src/lib.rs");
const RELATION_POLICY: &str = include_str!("../../../../plugins/following-cap/src/lib.rs");
/// The projector `--relations` starts from: one of blocks, mutes and requests, which follows alone never show.
const RELATION_PROJECTOR: &str = include_str!("../../../../plugins/relation-signals/src/lib.rs");
/// The JavaScript and Python examples, each a whole project.
const JS_RATE_LIMITER: [(&str, &str); 6] = [
    ("package.json", include_str!("../../../../plugins/js-rate-limit/package.json")),
    ("package-lock.json", include_str!("../../../../plugins/js-rate-limit/package-lock.json")),
    (".gitignore", include_str!("../../../../plugins/js-rate-limit/.gitignore")),
    ("src/policy.js", include_str!("../../../../plugins/js-rate-limit/src/policy.js")),
    ("src/rate-limiter.js", include_str!("../../../../plugins/js-rate-limit/src/rate-limiter.js")),
    ("test/policy.test.js", include_str!("../../../../plugins/js-rate-limit/test/policy.test.js")),
];
const PYTHON_PROJECTOR: [(&str, &str); 4] = [
    ("pyproject.toml", include_str!("../../../../plugins/py-follow-counts/pyproject.toml")),
    (".gitignore", include_str!("../../../../plugins/py-follow-counts/.gitignore")),
    ("app.py", include_str!("../../../../plugins/py-follow-counts/app.py")),
    ("test_app.py", include_str!("../../../../plugins/py-follow-counts/test_app.py")),
];

/// A plugin project's language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Js,
    Python,
}

/// The wit-bindgen the SDK was built and tested with.
const WIT_BINDGEN: &str = "=0.46.0";

/// Writes the WIT package into `dir` (`dir/strand.wit`); returns the file written.
pub fn write_wit(dir: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = dir.join("strand.wit");
    std::fs::write(&file, WIT).with_context(|| format!("writing {}", file.display()))?;
    Ok(file)
}

/// Creates the project `name` of `kind` in `lang` in `parent/name`, from a working example with its unit
/// test; with `relations`, a relation projector. Refuses to write into an existing directory.
pub fn new_project(
    parent: &Path,
    name: &str,
    kind: PluginKind,
    lang: Lang,
    relations: bool,
) -> anyhow::Result<PathBuf> {
    if relations && (kind, lang) != (PluginKind::Projector, Lang::Rust) {
        bail!(
            "--relations makes a relation projector: only with --kind projector and --lang rust, \
             not a {lang:?} {kind}"
        );
    }
    match (lang, kind) {
        (Lang::Rust, _) => new_rust_project(parent, name, kind, relations),
        (Lang::Js, PluginKind::RateLimiter) => new_example_project(parent, name, "js-rate-limit", &JS_RATE_LIMITER),
        (Lang::Python, PluginKind::Projector) => {
            new_example_project(parent, name, "py-follow-counts", &PYTHON_PROJECTOR)
        }
        (lang, kind) => bail!(
            "no {lang:?} example of a {kind} yet (JavaScript: rate-limiter, Python: projector); \
             `strand plugin wit` writes the contract to start from"
        ),
    }
}

/// The example project `example` as `parent/name`, renamed.
fn new_example_project(parent: &Path, name: &str, example: &str, files: &[(&str, &str)]) -> anyhow::Result<PathBuf> {
    let root = project_root(parent, name)?;
    let files = files.iter().map(|(path, text)| (*path, text.replace(example, name)));
    write_files(&root, files)?;
    Ok(root)
}

/// `parent/name`, if `name` is a plugin name and nothing is there yet.
fn project_root(parent: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid {
        bail!("{name:?} is not a plugin name: 1 to 64 of a-z, 0-9 and -, starting with a letter");
    }
    let root = parent.join(name);
    if root.exists() {
        bail!("{} exists already", root.display());
    }
    Ok(root)
}

/// Creates the Rust project `name` of `kind` in `parent/name`: a cdylib crate with a working example and
/// its unit test, and the SDK beside it in `strand-sdk/`.
fn new_rust_project(parent: &Path, name: &str, kind: PluginKind, relations: bool) -> anyhow::Result<PathBuf> {
    let root = project_root(parent, name)?;
    let example = match kind {
        PluginKind::RateLimiter => RATE_LIMITER,
        PluginKind::Router => ROUTER,
        PluginKind::Projector if relations => RELATION_PROJECTOR,
        PluginKind::Projector => PROJECTOR,
        PluginKind::RelationPolicy => RELATION_POLICY,
    };
    let files = [
        ("Cargo.toml", project_manifest(name)),
        ("src/lib.rs", example.to_owned()),
        (".gitignore", "/target\n".to_owned()),
        ("strand-sdk/Cargo.toml", sdk_manifest()),
        // In Strand's repository the WIT sits two levels up; here it is the SDK's own copy.
        ("strand-sdk/src/lib.rs", SDK_LIB.replace("path: \"../../wit/strand.wit\"", "path: \"wit/strand.wit\"")),
        ("strand-sdk/src/helpers.rs", SDK_HELPERS.to_owned()),
        ("strand-sdk/src/log.rs", SDK_LOG.to_owned()),
        ("strand-sdk/wit/strand.wit", WIT.to_owned()),
        ("strand-sdk/contract/Cargo.toml", contract_manifest()),
        ("strand-sdk/contract/src/lib.rs", CONTRACT_LIB.to_owned()),
    ];
    write_files(&root, files)?;
    Ok(root)
}

fn write_files<'a>(root: &Path, files: impl IntoIterator<Item = (&'a str, String)>) -> anyhow::Result<()> {
    for (path, text) in files {
        let path = root.join(path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn project_manifest(name: &str) -> String {
    format!(
        "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\npublish = false\n\n\
         [lib]\n# cdylib: the WASM component; rlib: native unit tests.\ncrate-type = [\"cdylib\", \"rlib\"]\n\n\
         [dependencies]\nstrand-plugin-sdk = {{ path = \"strand-sdk\" }}\n\n\
         # A project of its own, also when created inside another Cargo workspace.\n[workspace]\n"
    )
}

fn sdk_manifest() -> String {
    format!(
        "[package]\nname = \"strand-plugin-sdk\"\nversion = \"{}\"\nedition = \"2021\"\npublish = false\n\n\
         [dependencies]\nstrand-contract = {{ path = \"contract\" }}\nwit-bindgen = \"{WIT_BINDGEN}\"\n",
        env!("CARGO_PKG_VERSION")
    )
}

fn contract_manifest() -> String {
    "[package]\nname = \"strand-contract\"\nversion = \"0.1.0\"\nedition = \"2021\"\npublish = false\n".to_owned()
}
