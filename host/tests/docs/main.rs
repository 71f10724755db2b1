//! The docs hold: every example of the README and of the app developer's and platform team's quickstarts
//! runs as a reader would run it (`strand_test_support::Examples`: the binary under test on the `PATH`, each
//! command's printed answer checked), the platform team's on a real MariaDB with its binlog, Redis and a
//! Kafka-protocol broker; and every link between the pages leads to a file of the repository and a heading
//! of it (a relative link never to a checkout beside it, which a reader of the repository does not have). The plugin author's quickstart compiles plugins, so it runs in the `authoring` suite.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use strand_test_support::{free_port, unique_server_id, Examples, Kafka, MariaDb, Redis};

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap()
}

/// Runs the examples of `page` (a path in the repository) in a fresh directory.
fn run_examples(page: &str, substitutions: Vec<(String, String)>, env: Vec<(String, String)>) {
    let markdown = std::fs::read_to_string(repository().join(page)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let strand = Path::new(env!("CARGO_BIN_EXE_strand"));
    Examples { page, strand, markdown: &markdown, substitutions, env }.run(dir.path(), free_port().unwrap());
}

#[test]
fn the_readme_quick_start_runs() {
    run_examples("README.md", Vec::new(), Vec::new());
}

#[test]
fn the_app_developer_quickstart_runs() {
    run_examples("docs/quickstart/app-developer.md", Vec::new(), Vec::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_platform_team_quickstart_runs_on_mariadb_redis_and_kafka() {
    let database = MariaDb::shared().unwrap().create_database().await.unwrap();
    let (redis, kafka) = (Redis::shared().unwrap(), Kafka::shared().unwrap());
    let substitutions = vec![
        ("mysql://strand:secret@db.example:3306/strand".to_owned(), database),
        ("redis://cache.example:6379".to_owned(), redis.url()),
        ("kafka.example:9092".to_owned(), kafka.brokers()),
    ];
    // What one page cannot know: the broker and the database server are shared by the suite's tests.
    let env = vec![
        ("STRAND_TOPIC_PREFIX".to_owned(), kafka.unique_prefix()),
        ("STRAND_RELAY_SERVER_ID".to_owned(), unique_server_id().to_string()),
    ];
    tokio::task::spawn_blocking(move || run_examples("docs/quickstart/platform-team.md", substitutions, env))
        .await
        .unwrap();
}

/// The markdown pages a reader of the repository meets.
fn pages() -> Vec<PathBuf> {
    let root = repository();
    let mut pages: Vec<PathBuf> =
        ["README.md", "ARCHITECTURE.md", "CHANGELOG.md", "plugins/README.md"].iter().map(|p| root.join(p)).collect();
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages
}

/// A page's lines outside its code blocks.
fn prose(markdown: &str) -> impl Iterator<Item = &str> {
    let mut in_code = false;
    markdown.lines().filter(move |line| {
        in_code ^= line.starts_with("```");
        !in_code && !line.starts_with("```")
    })
}

/// GitHub's anchors of a page's headings.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let headings = prose(markdown).filter(|line| line.starts_with('#'));
    let heading = |line: &str| line.trim_start_matches('#').trim().to_lowercase();
    headings
        .map(|line| {
            heading(line)
                .chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

/// The targets of a page's markdown links (`](target)`), outside code blocks.
fn links(markdown: &str) -> Vec<String> {
    let pieces = prose(markdown).flat_map(|line| line.split("](").skip(1));
    pieces.filter_map(|piece| piece.find(')').map(|end| piece[..end].to_owned())).collect()
}

#[test]
fn every_link_between_the_pages_leads_to_a_file_and_a_heading_of_the_repository() {
    let root = repository();
    let mut broken = Vec::new();
    let mut linked = BTreeSet::new();
    for page in pages() {
        let markdown = std::fs::read_to_string(&page).unwrap();
        for target in links(&markdown) {
            if target.starts_with("https://") || target.starts_with("http://localhost") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() { page.clone() } else { page.parent().unwrap().join(path) };
            let Ok(file) = file.canonicalize() else {
                broken.push(format!("{}: {target} is no file", page.display()));
                continue;
            };
            if !file.starts_with(&root) {
                broken.push(format!("{}: {target} leaves the repository", page.display()));
                continue;
            }
            if !anchor.is_empty() && !anchors(&std::fs::read_to_string(&file).unwrap()).contains(anchor) {
                broken.push(format!("{}: {target} names no heading", page.display()));
            }
            linked.insert(file);
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    let unreachable: Vec<_> =
        pages().into_iter().filter(|p| !linked.contains(p) && !p.ends_with("README.md")).collect();
    assert!(unreachable.is_empty(), "pages no other page links to: {unreachable:?}");
}
