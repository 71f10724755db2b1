//! A throwaway MariaDB server for the test process: own data directory, free port, binlog on (DESIGN §11).
//!
//! The server runs under a small shell watchdog that holds a pipe from this process: when the test process
//! exits, however it exits, the pipe closes and the watchdog stops the server and deletes its data. So the
//! machine's shared MariaDB is never touched and no server outlives its tests.

use std::io::Read;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sqlx::{Connection, Executor, MySqlConnection};

/// Where Debian keeps the server binaries (not on a non-root user's PATH).
const SEARCH_PATH: &str = "/usr/sbin:/usr/bin:/usr/local/sbin:/usr/local/bin";

/// A running MariaDB that lives as long as the test process.
pub struct MariaDb {
    port: u16,
    dir: PathBuf,
    watchdog: Mutex<Child>,
}

static SHARED: OnceLock<Result<MariaDb, String>> = OnceLock::new();
static NEXT_DATABASE: AtomicU32 = AtomicU32::new(0);

impl MariaDb {
    /// The process-wide instance, started on first use.
    pub fn shared() -> anyhow::Result<&'static MariaDb> {
        SHARED
            .get_or_init(|| MariaDb::start().map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow::anyhow!("throwaway MariaDB failed to start: {e}"))
    }

    fn start() -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("strand-mariadb-").tempdir()?.keep();
        let port = crate::free_port()?;
        let path = format!("{}:{SEARCH_PATH}", std::env::var("PATH").unwrap_or_default());
        let install = Command::new("mariadb-install-db")
            .env("PATH", &path)
            .arg("--no-defaults")
            .arg(format!("--datadir={}/data", dir.display()))
            .arg("--auth-root-authentication-method=normal")
            .output()
            .context("running mariadb-install-db (apt-get install mariadb-server)")?;
        if !install.status.success() {
            bail!("mariadb-install-db failed: {}", String::from_utf8_lossy(&install.stderr));
        }
        let script = r#"
            mariadbd --no-defaults --datadir="$0/data" --port="$1" --socket="$0/sock" --bind-address=127.0.0.1 \
                --log-bin="$0/data/binlog" --binlog-format=ROW --binlog-row-image=FULL --binlog-row-metadata=FULL \
                --server-id=1 --user=root --innodb-flush-log-at-trx-commit=2 --max-connections=500 \
                >"$0/server.log" 2>&1 &
            server=$!
            cat >/dev/null
            kill "$server"; wait "$server"; rm -rf "$0"
        "#;
        let watchdog = Command::new("sh")
            .env("PATH", &path)
            .args(["-c", script])
            .arg(&dir)
            .arg(port.to_string())
            .stdin(Stdio::piped())
            .spawn()
            .context("starting mariadbd")?;
        let server = MariaDb { port, dir, watchdog: Mutex::new(watchdog) };
        server.wait_until_listening(Duration::from_secs(60))?;
        Ok(server)
    }

    fn wait_until_listening(&self, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            let exited = self.watchdog.lock().expect("watchdog lock").try_wait()?;
            if exited.is_some() || Instant::now() > deadline {
                bail!("mariadbd did not start listening on {}: {}", self.port, self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    fn log(&self) -> String {
        let mut log = String::new();
        match std::fs::File::open(self.dir.join("server.log")).and_then(|mut f| f.read_to_string(&mut log)) {
            Ok(_) => log,
            Err(e) => format!("(no server log: {e})"),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL for the server's root account on `database`.
    pub fn url(&self, database: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{database}", self.port)
    }

    /// Creates an empty database for one test and returns its URL.
    pub async fn create_database(&self) -> anyhow::Result<String> {
        let name = format!("strand_{}_{}", std::process::id(), NEXT_DATABASE.fetch_add(1, Ordering::Relaxed));
        let mut conn = MySqlConnection::connect(&self.url("mysql")).await.context("connecting to MariaDB")?;
        conn.execute(format!("CREATE DATABASE {name}").as_str()).await?;
        conn.close().await?;
        Ok(self.url(&name))
    }
}
