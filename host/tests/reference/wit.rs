//! `docs/reference/wit.md`: the plugin contract's packages — each world with what it imports and exports
//! and its doc comment, read from `wit/` — and which packages this release runs (every one its bindings
//! are generated from: `plugins/bindings.rs`), with the current package's text in full.

use crate::{check, repository, GENERATED};

/// The `package` line of a WIT file and its worlds: (name, doc, the lines inside).
fn package_and_worlds(wit: &str) -> (String, Vec<(String, String, Vec<String>)>) {
    let package = wit.lines().find_map(|line| line.strip_prefix("package ")).unwrap().trim_end_matches(';');
    let (mut worlds, mut doc) = (Vec::new(), Vec::new());
    let mut lines = wit.lines();
    while let Some(line) = lines.next() {
        if let Some(text) = line.strip_prefix("///") {
            doc.push(text.trim());
        } else if let Some(name) = line.strip_prefix("world ") {
            let body = lines.by_ref().take_while(|l| *l != "}").map(|l| l.trim().trim_end_matches(';').to_owned());
            worlds.push((name.trim_end_matches(" {").to_owned(), doc.join(" "), body.collect()));
            doc.clear();
        } else {
            doc.clear();
        }
    }
    (package.to_owned(), worlds)
}

#[test]
fn the_wit_reference_is_every_package_this_release_runs() {
    let bindings = std::fs::read_to_string(repository().join("host/src/plugins/bindings.rs")).unwrap();
    let mut files = vec!["wit/strand.wit".to_owned()];
    let mut older: Vec<String> = std::fs::read_dir(repository().join("wit"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "strand.wit")
        .collect();
    older.sort_by(|a, b| b.cmp(a));
    files.extend(older.iter().map(|version| format!("wit/{version}/strand.wit")));

    let mut page = format!("# The plugin contract (WIT)\n\n{GENERATED}");
    page.push_str(&format!(
        "This release (`strand` {}) runs components built against every package below: a release never drops \
         a package a plugin was built against (each older package's bundled plugins, built by its release, are \
         run by the suite: `host/tests/fixtures/wit-*`). `strand plugin wit DIR` writes the current one; \
         `strand plugin new` starts a project on it. Deploy a relation projector as a `projector`.\n\n",
        env!("CARGO_PKG_VERSION")
    ));
    let mut current = String::new();
    for file in &files {
        let wit = std::fs::read_to_string(repository().join(file)).unwrap();
        let binding_path = format!("\"../{file}\"");
        assert!(bindings.contains(&binding_path), "the host generates no bindings of {file}");
        let (package, worlds) = package_and_worlds(&wit);
        page.push_str(&format!("## `{package}` (`{file}`)\n\n| world | imports / exports | what it is for |\n"));
        page.push_str("|---|---|---|\n");
        for (name, doc, body) in worlds {
            page.push_str(&format!("| `{name}` | {} | {} |\n", body.join(", "), doc.replace('|', "\\|")));
        }
        page.push('\n');
        if current.is_empty() {
            current = wit;
        }
    }
    page.push_str(&format!("## The current package in full\n\n```wit\n{}```\n", current));
    check("wit.md", &page);
}
