//! A server process that cannot outlive the test process.
//!
//! The server runs under a small shell watchdog that holds a pipe from this process: when the test process
//! exits, however it exits, the pipe closes and the watchdog stops the server and deletes its directory.
//! So no throwaway server lingers and the machine's shared services are never touched.

use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// Where Debian keeps server binaries (not on a non-root user's PATH).
const SEARCH_PATH: &str = "/usr/sbin:/usr/bin:/usr/local/sbin:/usr/local/bin";

/// A running throwaway server: its port and directory.
pub struct WatchedServer {
    pub port: u16,
    pub dir: PathBuf,
    watchdog: Mutex<Child>,
}

/// The PATH server binaries are looked up in.
pub fn server_path() -> String {
    let home = std::env::var("HOME").unwrap_or_default();
    format!("{}:{SEARCH_PATH}:{home}/.cargo/bin", std::env::var("PATH").unwrap_or_default())
}

/// The process-wide server in `cell`, started by `start` on first use. A failed start is kept and reported,
/// after `failed`, to every test that asks (one start per process, however many tests share it).
pub fn shared<T>(
    cell: &'static OnceLock<Result<T, String>>,
    start: fn() -> anyhow::Result<T>,
    failed: &str,
) -> anyhow::Result<&'static T> {
    cell.get_or_init(|| start().map_err(|e| format!("{e:#}"))).as_ref().map_err(|e| anyhow::anyhow!("{failed}: {e}"))
}

/// A fresh directory that the watchdog, not this process, deletes.
pub fn scratch_dir(prefix: &str) -> anyhow::Result<PathBuf> {
    Ok(tempfile::Builder::new().prefix(prefix).tempdir()?.keep())
}

impl WatchedServer {
    /// Runs `command` (a shell command line; `$DIR` and `$PORT` are set) until the test process exits, and
    /// waits until it accepts TCP connections on `port`.
    pub fn start(dir: &Path, port: u16, command: &str) -> anyhow::Result<Self> {
        let script = format!(
            "{command} >\"$DIR/server.log\" 2>&1 &
            server=$!
            cat >/dev/null
            kill \"$server\"; wait \"$server\"; rm -rf \"$DIR\""
        );
        let watchdog = Command::new("sh")
            .env("PATH", server_path())
            .env("DIR", dir)
            .env("PORT", port.to_string())
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {command}"))?;
        let server = WatchedServer { port, dir: dir.to_owned(), watchdog: Mutex::new(watchdog) };
        server.wait_until_listening(Duration::from_secs(60))?;
        Ok(server)
    }

    /// Waits until the server accepts TCP connections (or fails with its log).
    pub fn wait_until_listening(&self, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            let exited = self.watchdog.lock().expect("watchdog lock").try_wait()?;
            if exited.is_some() || Instant::now() > deadline {
                bail!("the server did not start listening on {}: {}", self.port, self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// The server's output so far, for failure messages.
    pub fn log(&self) -> String {
        let mut log = String::new();
        match std::fs::File::open(self.dir.join("server.log")).and_then(|mut f| f.read_to_string(&mut log)) {
            Ok(_) => log,
            Err(e) => format!("(no server log: {e})"),
        }
    }

    /// Stops the server now (the watchdog kills it and deletes its directory) and waits until it is gone.
    pub fn stop(self) -> anyhow::Result<()> {
        let mut watchdog = self.watchdog.into_inner().expect("watchdog lock");
        drop(watchdog.stdin.take());
        watchdog.wait()?;
        Ok(())
    }
}
