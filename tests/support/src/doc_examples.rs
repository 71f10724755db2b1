//! The docs' shell examples, run as a reader would run them: every ```sh block of a page, in order, in one
//! bash session (so `ALICE=$(strand token …)` and `cd` carry on), with the `strand` under test first on the
//! `PATH`. Each command must succeed; a `# …` comment right below a command is what it must print (`…`
//! stands for anything; an HTTP status first, as in `# 422 {…}`, is the status `curl` must get, else a 2xx;
//! a note in parentheses after two spaces is prose). So a quickstart cannot drift from the product.
//!
//! What a page cannot say literally is substituted: the reader's `localhost:8080` becomes the test's port,
//! and the `Examples` name the services' placeholders' real addresses. `cargo install` lines are skipped (the
//! binary under test stands for the installed one); a command ending in `&` runs in the background, its
//! output in `background.log`, and is killed at the end. A read (`curl` without `-X`) is asked again until
//! it shows what the page says, for a few seconds: counts and lists served from projections follow a write
//! within moments.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// How a page's examples are run.
pub struct Examples<'a> {
    /// The page, for messages.
    pub page: &'a str,
    /// The `strand` under test (`env!("CARGO_BIN_EXE_strand")`).
    pub strand: &'a Path,
    /// Its markdown.
    pub markdown: &'a str,
    /// Text of the page replaced in every command (placeholders → this test's services).
    pub substitutions: Vec<(String, String)>,
    /// Environment of the session besides `PATH` and `STRAND_LISTEN` (e.g. a unique topic prefix).
    pub env: Vec<(String, String)>,
}

/// One command of a page and what it must print.
#[derive(Debug)]
struct Step {
    command: String,
    expected: Option<String>,
}

/// The commands of every ```sh block of `markdown`, with their expectations.
fn steps(markdown: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        if line.trim() != "```sh" {
            continue;
        }
        let block: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
        let mut index = 0;
        let mut after_command = false;
        while index < block.len() {
            let line = block[index];
            index += 1;
            if line.trim().is_empty() {
                after_command = false;
            } else if let Some(comment) = line.trim_start().strip_prefix('#') {
                let last = steps.last_mut().filter(|_| after_command);
                if let Some(step) = last {
                    let text = comment.trim();
                    step.expected = Some(step.expected.take().map_or(text.to_owned(), |before| before + text));
                }
            } else {
                let mut command = line.to_owned();
                while command.ends_with('\\') {
                    let Some(next) = block.get(index) else { break };
                    index += 1;
                    command.push('\n');
                    command.push_str(next);
                }
                steps.push(Step { command, expected: None });
                after_command = true;
            }
        }
    }
    steps
}

/// Whether `actual` is `pattern`, `…` in it standing for anything.
fn matches(pattern: &str, actual: &str) -> bool {
    let pieces: Vec<&str> = pattern.split('…').collect();
    let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
    if pieces.len() == 1 {
        return actual == pattern;
    }
    if !actual.starts_with(first) || !actual[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &actual[first.len()..actual.len() - last.len()];
    for piece in &pieces[1..pieces.len() - 1] {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

/// `expected` without a prose note (`  (idempotent: …)`), split into an HTTP status, if it starts with one,
/// and the output.
fn expectation(expected: &str) -> (Option<u16>, String) {
    let expected = match expected.find("  (") {
        Some(at) if expected.ends_with(')') => expected[..at].trim_end(),
        _ => expected,
    };
    match expected.split_once(' ') {
        Some((status, rest)) if status.len() == 3 && status.parse::<u16>().is_ok() => {
            (status.parse().ok(), rest.to_owned())
        }
        _ => (None, expected.to_owned()),
    }
}

const MARK: &str = "@@strand-step ";
const STATUS: &str = "@@strand-status ";
/// The longest a command may take (a plugin's first build compiles its dependencies).
const STEP_LIMIT: Duration = Duration::from_secs(600);
/// How long a read (a `curl` without `-X`) may take to show what the page says: counts and lists served
/// from projections follow a write within moments, not at once.
const READ_SETTLES: Duration = Duration::from_secs(15);

/// The reader's session: one bash, fed a command at a time.
struct Session {
    bash: Child,
    input: ChildStdin,
    lines: Receiver<String>,
}

impl Session {
    /// Runs `command`; its exit status and what it printed.
    fn run(&mut self, command: &str) -> Option<(String, String)> {
        writeln!(self.input, "{command}\nprintf '\\n{MARK}%s\\n' \"$?\"").ok()?;
        let mut printed = String::new();
        loop {
            let line = self.lines.recv_timeout(STEP_LIMIT).ok()?;
            if let Some(code) = line.strip_prefix(MARK) {
                return Some((code.to_owned(), printed));
            }
            printed.push_str(&line);
            printed.push('\n');
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = writeln!(self.input, "kill $(jobs -p) 2>/dev/null; wait; exit");
        let _ = self.bash.wait();
    }
}

impl Examples<'_> {
    /// Runs the page's examples in `dir` against a server the page starts on `port`; panics naming the first
    /// command that fails or prints something else than the page says.
    pub fn run(&self, dir: &Path, port: u16) {
        let steps = steps(self.markdown);
        assert!(!steps.is_empty(), "{} has no ```sh examples", self.page);
        let mut session = self.session(dir, port);
        session.run("set -o pipefail").expect("bash answers");
        let context = || {
            let log = |name| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
            format!("\n--- stderr:\n{}\n--- background.log:\n{}", log("stderr.log"), log("background.log"))
        };
        for step in &steps {
            let mut command = step.command.replace("localhost:8080", &format!("127.0.0.1:{port}"));
            for (from, to) in &self.substitutions {
                command = command.replace(from, to);
            }
            let read = command.starts_with("curl ") && !command.contains(" -X ");
            if command.starts_with("cargo install") {
                continue;
            } else if let Some(background) = command.strip_suffix('&') {
                command = format!("{background} >>background.log 2>&1 &");
            } else if let Some(rest) = command.strip_prefix("curl ") {
                command = format!("curl -sS -w '\\n{STATUS}%{{http_code}}\\n' {rest}");
            }
            let settles = Instant::now() + if read { READ_SETTLES } else { Duration::ZERO };
            loop {
                let Some((code, printed)) = session.run(&command) else {
                    panic!("{}: `{}` did not finish{}", self.page, step.command, context())
                };
                assert_eq!(code, "0", "{}: `{}` failed:\n{printed}{}", self.page, step.command, context());
                let Some(expected) = &step.expected else { break };
                match self.check(step, expected, &printed) {
                    Ok(()) => break,
                    Err(_) if Instant::now() < settles => std::thread::sleep(Duration::from_millis(100)),
                    Err(mismatch) => panic!("{mismatch}{}", context()),
                }
            }
        }
    }

    fn session(&self, dir: &Path, port: u16) -> Session {
        let path = format!("{}:{}", self.strand.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
        let mut bash = Command::new("bash");
        bash.current_dir(dir).env("PATH", path).stdin(Stdio::piped()).stdout(Stdio::piped());
        bash.stderr(std::fs::File::create(dir.join("stderr.log")).unwrap());
        for (key, _) in std::env::vars_os() {
            if key.to_str().is_some_and(|key| key.starts_with("STRAND_")) {
                bash.env_remove(key);
            }
        }
        bash.env("STRAND_LISTEN", format!("127.0.0.1:{port}")).envs(self.env.iter().cloned());
        let mut bash = bash.spawn().unwrap();
        let (input, output) = (bash.stdin.take().unwrap(), bash.stdout.take().unwrap());
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(output).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Session { bash, input, lines }
    }

    /// Whether `printed` is what the page says `step` prints; else why not.
    fn check(&self, step: &Step, expected: &str, printed: &str) -> Result<(), String> {
        let (status, pattern) = expectation(expected);
        let (output, got) = match printed.rsplit_once(STATUS) {
            Some((body, code)) => (body.trim(), code.trim().parse::<u16>().ok()),
            None => (printed.trim(), None),
        };
        let (page, command) = (self.page, &step.command);
        if let Some(got) = got {
            let wanted = status.map_or((200..300).contains(&got), |status| status == got);
            if !wanted {
                return Err(format!("{page}: `{command}` answered {got}, the page says {expected}: {output}"));
            }
        }
        if matches(&pattern, output) || output.lines().any(|line| matches(&pattern, line.trim())) {
            Ok(())
        } else {
            Err(format!("{page}: `{command}` printed\n{output}\nwhere the page says\n{pattern}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_reads_as_commands_with_what_they_print() {
        let page =
            "text\n```sh\nA=$(x)\ncurl -X PUT \\\n  y\n# 422 {\"a\":1,…}\n#   {\"b\"}\n\n# prose\nz\n# z's\n```\n";
        let steps = steps(page);
        assert_eq!(steps.len(), 3, "{steps:?}");
        assert_eq!(steps[0].expected, None);
        assert_eq!(steps[1].command, "curl -X PUT \\\n  y");
        assert_eq!(steps[1].expected.as_deref(), Some("422 {\"a\":1,…}{\"b\"}"));
        assert_eq!(steps[2].expected.as_deref(), Some("z's"), "a comment below a command is its output");
        assert_eq!(expectation("{\"x\":1}   (idempotent: nothing)"), (None, "{\"x\":1}".to_owned()));
        assert!(matches("{\"a\":1,…}", "{\"a\":1,\"b\":2}"));
        assert!(matches("a…c…e", "abcde") && !matches("a…c…e", "abde") && !matches("ab", "abc"));
    }
}
