//! The references in `docs/reference/` are generated from the code, and this test fails when a checked-in
//! file differs from what the code gives now, so they cannot drift: the CLI (clap's help of every command),
//! the metrics (`ops/metrics.rs`), the error codes and their statuses (`api/problem.rs`; the HTTP guide's
//! table of meanings is checked against them), the HTTP API (the OpenAPI document the server serves), the
//! configuration (`configuration.rs`), the messages on the bus (`messages.rs`) and the WIT packages (`wit.rs`).
//! `UPDATE_REFERENCE=1 cargo test -p strand --test reference` writes them.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use strand_test_support::{Backend, TestServer};

mod configuration;
mod messages;
mod source_docs;
mod wit;

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Compares `generated` with `docs/reference/{name}`, or writes it there with `UPDATE_REFERENCE` set.
fn check(name: &str, generated: &str) {
    let path = repository().join("docs/reference").join(name);
    if std::env::var_os("UPDATE_REFERENCE").is_some() {
        std::fs::write(&path, generated).unwrap();
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "docs/reference/{name} is not what the code gives: run `UPDATE_REFERENCE=1 cargo test -p strand --test \
         reference` and commit it\n--- generated:\n{generated}"
    );
}

const GENERATED: &str = "<!-- Generated from the code by host/tests/reference; edit the code, not this file. -->\n\n";

/// `strand args… --help`, as any user sees it (no `STRAND_*` setting of the test's shown as a value).
fn help(args: &[&str]) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_strand"));
    command.args(args).arg("--help").env("COLUMNS", "110");
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(|key| key.starts_with("STRAND_")) {
            command.env_remove(key);
        }
    }
    let output = command.output().unwrap();
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

/// The subcommands a help text lists (its `Commands:` section), `help` left out.
fn subcommands(help: &str) -> Vec<String> {
    let Some((_, listed)) = help.split_once("Commands:\n") else { return Vec::new() };
    listed
        .lines()
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_cli_reference_is_claps_help_of_every_command() {
    let mut page = format!("# `strand` command line\n\n{GENERATED}");
    let mut pending = vec![Vec::<String>::new()];
    while let Some(args) = pending.pop() {
        let args_ref: Vec<&str> = args.iter().map(String::as_str).collect();
        let text = help(&args_ref);
        let title = if args.is_empty() { "strand".to_owned() } else { format!("strand {}", args.join(" ")) };
        page.push_str(&format!("## `{title}`\n\n```text\n{}\n```\n\n", text.trim_end()));
        for sub in subcommands(&text).into_iter().rev() {
            let mut next = args.clone();
            next.push(sub);
            pending.push(next);
        }
    }
    check("cli.md", &page);
}

#[test]
fn the_metrics_reference_is_the_catalogue() {
    let mut page = format!("# Metrics\n\n{GENERATED}Every metric `/metrics` exports, with its `# HELP` text.\n\n");
    page.push_str("| metric | kind | what it measures |\n|---|---|---|\n");
    for metric in strand::ops::metrics::ALL {
        let kind = format!("{:?}", metric.kind).to_lowercase();
        page.push_str(&format!("| `{}` | {kind} | {} |\n", metric.name, metric.help.replace('|', "\\|")));
    }
    check("metrics.md", &page);
}

/// Every code `api/problem.rs` can answer: the string literals of `ApiError::code` and the functions it
/// delegates to.
fn problem_codes() -> BTreeSet<String> {
    let source = std::fs::read_to_string(repository().join("host/src/api/problem.rs")).unwrap();
    let section = |from: &str, to: &str| {
        let start = source.find(from).unwrap_or_else(|| panic!("{from} in problem.rs"));
        let end = start + source[start..].find(to).unwrap_or_else(|| panic!("{to} after {from}"));
        source[start..end].to_owned()
    };
    let code = section("pub fn code(&self)", "pub fn status(&self)") + &section("fn write_code(", "impl IntoResponse");
    let mut codes: BTreeSet<String> = code
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|literal| !literal.is_empty() && literal.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        .map(str::to_owned)
        .collect();
    codes.insert("policy.{code}".to_owned());
    codes
}

#[test]
fn the_error_reference_is_every_code_with_its_status_and_the_readme_explains_each() {
    let codes = problem_codes();
    let mut page = format!("# Error codes\n\n{GENERATED}");
    page.push_str("Every error is `application/problem+json` with one of these `code`s (what each means: the\n");
    page.push_str(
        "[HTTP guide's table](../guides/http-api.md#errors), checked against this list).\n\n| status | code |\n|---|---|\n",
    );
    let mut by_status: Vec<(u16, &String)> =
        codes.iter().map(|code| (strand::api::status_of(code).as_u16(), code)).collect();
    by_status.sort();
    for (status, code) in &by_status {
        page.push_str(&format!("| {status} | `{code}` |\n"));
    }
    check("errors.md", &page);

    let guide = std::fs::read_to_string(repository().join("docs/guides/http-api.md")).unwrap();
    let mut documented = BTreeSet::new();
    for line in guide.lines().filter(|line| line.starts_with("| 4") || line.starts_with("| 5")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let status: u16 = cells[1].parse().unwrap_or_else(|_| panic!("a status: {line}"));
        for code in cells[2].split('`').skip(1).step_by(2) {
            assert_eq!(strand::api::status_of(code).as_u16(), status, "the HTTP guide's status of {code}: {line}");
            documented.insert(code.to_owned());
        }
    }
    let undocumented: Vec<_> = codes.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&codes).collect();
    assert!(undocumented.is_empty(), "codes the HTTP guide's error table does not explain: {undocumented:?}");
    assert!(unknown.is_empty(), "codes the HTTP guide explains that the code never answers: {unknown:?}");
}

#[tokio::test]
async fn the_http_reference_is_the_openapi_document() {
    let server = TestServer::start(Backend::Sqlite).await;
    let document = server.admin().get("/openapi.json").await.body;
    let mut page = format!("# HTTP API\n\n{GENERATED}");
    page.push_str("The OpenAPI document is served at `GET /openapi.json`; this is its index. `bearer`: a user's JWT; ");
    page.push_str("`admin`: the admin token or a tenant key.\n\n| method | path | what it does | credential |\n|---|---|---|---|\n");
    let paths = document["paths"].as_object().unwrap();
    let mut rows = Vec::new();
    for (path, operations) in paths {
        for (method, operation) in operations.as_object().unwrap() {
            let text = operation["summary"].as_str().or(operation["description"].as_str()).unwrap_or("");
            let first = text.split(". ").next().unwrap_or("").lines().collect::<Vec<_>>().join(" ");
            let credential = operation["security"]
                .as_array()
                .and_then(|s| s.first())
                .and_then(Value::as_object)
                .and_then(|s| s.keys().next().cloned())
                .unwrap_or_else(|| "—".to_owned());
            let row = format!(
                "| {} | `{path}` | {} | {credential} |\n",
                method.to_uppercase(),
                first.trim_end_matches('.').replace('|', "\\|")
            );
            rows.push((path.clone(), method.clone(), row));
        }
    }
    rows.sort();
    page.extend(rows.into_iter().map(|(_, _, row)| row));
    check("http-api.md", &page);
}

/// An example `--input` file per kind (`strand plugin test --kind K --input FILE`): the conformance samples
/// the host itself runs a new version on, each accepted by the command with the bundled plugin of the kind.
#[test]
fn the_plugin_input_examples_are_the_conformance_samples_and_the_cli_takes_them() {
    use strand::plugins::{
        sample_attempts, sample_events, sample_outbox_events, sample_requests, sample_tenant, PluginKind, BUNDLED,
    };
    let examples = [
        (PluginKind::RateLimiter, serde_json::to_string_pretty(&sample_requests()).unwrap()),
        (PluginKind::Router, serde_json::to_string_pretty(&sample_outbox_events(&sample_tenant())).unwrap()),
        // What a projector of follows receives (a relation projector takes every kind of the samples).
        (PluginKind::Projector, {
            let follows: Vec<_> = sample_events().into_iter().filter(|event| event.action().is_some()).collect();
            serde_json::to_string_pretty(&follows).unwrap()
        }),
        (PluginKind::RelationPolicy, serde_json::to_string_pretty(&sample_attempts()).unwrap()),
    ];
    let files = tempfile::tempdir().unwrap();
    for (kind, example) in examples {
        let name = format!("plugin-input-{kind}.json");
        check(&name, &format!("{example}\n"));
        let bundled = BUNDLED.iter().find(|p| p.kind == kind).expect("a bundled plugin of each kind");
        let wasm = files.path().join(format!("{kind}.wasm"));
        std::fs::write(&wasm, bundled.wasm).unwrap();
        let input = repository().join("docs/reference").join(&name);
        let output = Command::new(env!("CARGO_BIN_EXE_strand"))
            .args(["plugin", "test", "--kind", kind.as_str(), "--input"])
            .arg(&input)
            .arg(&wasm)
            .env("STRAND_CONFIG", "/nonexistent/strand.toml")
            .output()
            .unwrap();
        assert!(output.status.success(), "{name}: {}", String::from_utf8_lossy(&output.stderr));
    }
}

#[test]
fn every_shipped_alert_has_a_runbook() {
    let rules = std::fs::read_to_string(repository().join("ops/prometheus/strand-alerts.yml")).unwrap();
    let runbooks = std::fs::read_to_string(repository().join("docs/operations/runbooks.md")).unwrap();
    let alerts: Vec<&str> =
        rules.lines().filter_map(|line| line.trim().strip_prefix("- alert: ")).map(str::trim).collect();
    assert!(alerts.len() >= 6, "{alerts:?}");
    for alert in alerts {
        assert!(
            runbooks.contains(&format!("\n## {alert}\n")),
            "docs/operations/runbooks.md has no section for {alert}"
        );
    }
}
