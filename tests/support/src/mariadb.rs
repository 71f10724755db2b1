//! A throwaway MariaDB server for the test process: own data directory, free port, binlog on (DESIGN §11).

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use anyhow::{bail, Context};
use sqlx::{Connection, Executor, MySqlConnection};

use crate::watched::{scratch_dir, server_path, WatchedServer};

/// A running MariaDB that lives as long as the test process.
pub struct MariaDb {
    server: WatchedServer,
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

    /// A server of the test's own, for what would disturb other tests (purging the binlog).
    pub fn dedicated() -> anyhow::Result<Self> {
        Self::start()
    }

    fn start() -> anyhow::Result<Self> {
        let dir = scratch_dir("strand-mariadb-")?;
        // A temporary directory of its own: bootstraps running at once in other test processes were seen
        // removing each other's temporary tables in a shared /tmp.
        std::fs::create_dir_all(dir.join("tmp"))?;
        let install = Command::new("mariadb-install-db")
            .env("PATH", server_path())
            .arg("--no-defaults")
            .arg(format!("--datadir={}/data", dir.display()))
            .arg(format!("--tmpdir={}/tmp", dir.display()))
            .arg("--auth-root-authentication-method=normal")
            .output()
            .context("running mariadb-install-db (apt-get install mariadb-server)")?;
        if !install.status.success() {
            bail!("mariadb-install-db failed: {}", String::from_utf8_lossy(&install.stderr));
        }
        let command = "mariadbd --no-defaults --datadir=\"$DIR/data\" --tmpdir=\"$DIR/tmp\" --port=\"$PORT\" --socket=\"$DIR/sock\" \
            --bind-address=127.0.0.1 --log-bin=\"$DIR/data/binlog\" --binlog-format=ROW --binlog-row-image=FULL \
            --binlog-row-metadata=FULL --server-id=1 --user=root --innodb-flush-log-at-trx-commit=2 \
            --max-connections=500";
        Ok(MariaDb { server: WatchedServer::start(&dir, crate::free_port()?, command)? })
    }

    pub fn port(&self) -> u16 {
        self.server.port
    }

    /// A URL for the server's root account on `database`.
    pub fn url(&self, database: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{database}", self.server.port)
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
