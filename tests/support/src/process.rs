//! A `strand` command run as a child process, so a test can kill it outright (SIGKILL, as a crash or an
//! OOM kill would) and start it again.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A running `strand` process; killed when dropped.
pub struct StrandProcess {
    child: Child,
    log: PathBuf,
}

impl StrandProcess {
    /// Runs `binary args…` with `env` (e.g. `STRAND_…` settings) added, its output going to `log`.
    pub fn spawn(binary: &Path, args: &[&str], env: &[(&str, String)], log: PathBuf) -> anyhow::Result<Self> {
        let output = std::fs::OpenOptions::new().create(true).append(true).open(&log)?;
        let child = Command::new(binary)
            .args(args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("STRAND_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output)
            .spawn()?;
        Ok(Self { child, log })
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
