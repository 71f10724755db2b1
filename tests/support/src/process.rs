//! A `strand` command run as a child process, so a test can kill it outright (SIGKILL, as a crash or an
//! OOM kill would) and start it again.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Where every test's plugins are compiled once per machine (in-process servers and child processes alike).
pub fn plugin_cache_dir() -> PathBuf {
    std::env::temp_dir().join("strand-test-plugin-cache")
}

/// A `strand` command being configured: on `database_url`, with the shared plugin cache, plus the test's
/// own settings (`set("redis_url", …)` becomes `STRAND_REDIS_URL`).
#[derive(Debug, Clone)]
pub struct StrandCommand {
    binary: PathBuf,
    env: Vec<(String, String)>,
}

impl StrandCommand {
    /// `binary` is the test crate's `env!("CARGO_BIN_EXE_strand")`.
    pub fn new(binary: &str, database_url: &str) -> Self {
        let env = vec![
            ("STRAND_DATABASE_URL".to_owned(), database_url.to_owned()),
            ("STRAND_PLUGIN_CACHE_DIR".to_owned(), plugin_cache_dir().display().to_string()),
        ];
        Self { binary: PathBuf::from(binary), env }
    }

    /// Sets the configuration key `key` (as in `config.toml`) through its `STRAND_` variable.
    pub fn set(mut self, key: &str, value: impl ToString) -> Self {
        self.env.push((format!("STRAND_{}", key.to_ascii_uppercase()), value.to_string()));
        self
    }

    /// The same settings for another `strand` binary (another release's, in an upgrade test).
    pub fn with_binary(mut self, binary: &Path) -> Self {
        self.binary = binary.to_owned();
        self
    }

    /// The `STRAND_*` variables set so far, in order (a later one wins), e.g. to hand to a container.
    pub fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// Runs `strand args…`, its output going to `log`.
    pub fn spawn(&self, args: &[&str], log: PathBuf) -> anyhow::Result<StrandProcess> {
        let env: Vec<(&str, String)> = self.env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        StrandProcess::spawn(&self.binary, args, &env, log)
    }
}

/// A running `strand` process; killed when dropped.
pub struct StrandProcess {
    child: Child,
    log: PathBuf,
}

impl StrandProcess {
    /// Runs `binary args…` with `env` (e.g. `STRAND_…` settings) added, its output going to `log`.
    pub fn spawn(binary: &Path, args: &[&str], env: &[(&str, String)], log: PathBuf) -> anyhow::Result<Self> {
        let output = std::fs::OpenOptions::new().create(true).append(true).open(&log)?;
        let mut command = Command::new(binary);
        // The harness's own knobs (`STRAND_BENCH_WRITES`, `STRAND_TEST_WATCHDOG_SECS` …) are not settings of
        // the server, which refuses an unknown `STRAND_*` key.
        for (key, _) in std::env::vars_os() {
            if key.to_str().is_some_and(|key| key.starts_with("STRAND_BENCH_") || key.starts_with("STRAND_TEST_")) {
                command.env_remove(key);
            }
        }
        let child = command
            .args(args)
            // A default the test's own `STRAND_LOG` overrides.
            .env("STRAND_LOG", "info")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output)
            .spawn()?;
        Ok(Self { child, log })
    }

    /// Waits (up to `limit`) for the process to end, and asserts it succeeded; its log.
    pub async fn finished(mut self, limit: std::time::Duration) -> String {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.exited() {
                assert!(status.success(), "{status}:\n{}", self.log());
                return self.log();
            }
            assert!(std::time::Instant::now() < deadline, "still running after {limit:?}:\n{}", self.log());
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL: no shutdown hook runs, nothing in flight is finished.
    pub fn kill(mut self) {
        self.kill_now();
    }

    /// SIGKILL, keeping the handle (its log stays readable); returns once the process is gone.
    pub fn kill_now(&mut self) {
        // Already exited is fine; the wait reaps it either way.
        let _already_exited = self.child.kill();
        let _status = self.child.wait();
    }

    /// SIGTERM: the process shuts down gracefully (wait for it with [`Self::exited`]).
    pub fn terminate(&mut self) -> anyhow::Result<()> {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status()?;
        anyhow::ensure!(status.success(), "kill -TERM failed: {status}");
        Ok(())
    }

    /// The process id (for `/proc` readings such as its resident memory).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// What the process printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether the process has exited, and how.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for StrandProcess {
    fn drop(&mut self) {
        self.kill_now();
    }
}
