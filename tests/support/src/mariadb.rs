//! A throwaway MariaDB server for the test process: own data directory, free port, binlog on (DESIGN §11).

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use anyhow::{bail, Context};
use sqlx::{Connection, Executor, MySqlConnection, Row};

use crate::watched::{scratch_dir, server_path, shared, WatchedServer};

/// A running MariaDB that lives as long as the test process.
pub struct MariaDb {
    server: WatchedServer,
}

static SHARED: OnceLock<Result<MariaDb, String>> = OnceLock::new();
static NEXT_DATABASE: AtomicU32 = AtomicU32::new(0);

impl MariaDb {
    /// The process-wide instance, started on first use.
    pub fn shared() -> anyhow::Result<&'static MariaDb> {
        shared(&SHARED, MariaDb::start, "throwaway MariaDB failed to start")
    }

    /// A server of the test's own, for what would disturb other tests (purging the binlog).
    pub fn dedicated() -> anyhow::Result<Self> {
        Self::start()
    }

    fn start() -> anyhow::Result<Self> {
        let dir = install()?;
        Ok(MariaDb { server: WatchedServer::start(&dir, crate::free_port()?, &mariadbd(1))? })
    }

    /// A server of the test's own replicating `primary` by GTID from its first transaction (server id 2,
    /// writing what it applies to its own binlog, as a replica that may be promoted does).
    pub async fn replica_of(primary: &MariaDb) -> anyhow::Result<Self> {
        let dir = install()?;
        let replica = MariaDb { server: WatchedServer::start(&dir, crate::free_port()?, &mariadbd(2))? };
        let mut conn = MySqlConnection::connect(&replica.url("mysql")).await.context("connecting to the replica")?;
        let source = format!(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, MASTER_USER = 'root', \
             MASTER_CONNECT_RETRY = 1, MASTER_USE_GTID = slave_pos",
            primary.port()
        );
        conn.execute(source.as_str()).await?;
        conn.execute("START SLAVE").await?;
        conn.close().await?;
        Ok(replica)
    }

    /// Makes this replica a primary, as a failover does: once it has applied everything it received from
    /// its (gone) primary, it stops replicating and forgets the source.
    pub async fn promote(&self) -> anyhow::Result<()> {
        let mut conn = MySqlConnection::connect(&self.url("mysql")).await.context("connecting to the replica")?;
        conn.execute("STOP SLAVE IO_THREAD").await?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let status = sqlx::query("SHOW SLAVE STATUS").fetch_one(&mut conn).await?;
            let read: u64 = status.try_get("Read_Master_Log_Pos")?;
            let executed: u64 = status.try_get("Exec_Master_Log_Pos")?;
            let (reading, executing): (String, String) =
                (status.try_get("Master_Log_File")?, status.try_get("Relay_Master_Log_File")?);
            if read == executed && reading == executing {
                break;
            }
            anyhow::ensure!(std::time::Instant::now() < deadline, "the replica never applied what it received");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        conn.execute("STOP SLAVE").await?;
        conn.execute("RESET SLAVE ALL").await?;
        conn.close().await?;
        Ok(())
    }

    /// Kills the server as a crash would (SIGKILL), for good.
    pub fn kill(&self) -> anyhow::Result<()> {
        kill_mariadbd(&self.server)
    }

    /// A server of the test's own that can go down ([`Self::go_down`]) and come back with its data
    /// ([`Self::come_back`]): an outage, not a new server.
    pub fn restartable() -> anyhow::Result<Self> {
        let dir = install()?;
        let mariadbd = mariadbd(1);
        // While `$DIR/down` exists the server stays down; the watchdog's TERM stops the loop and the server.
        let command = format!(
            "sh -c 'trap \"kill \\$child 2>/dev/null; wait \\$child; exit\" TERM
            while :; do
              if [ -e \"$DIR/down\" ]; then sleep 0.05; continue; fi
              {mariadbd} & child=$!
              wait $child
            done'"
        );
        Ok(MariaDb { server: WatchedServer::start(&dir, crate::free_port()?, &command)? })
    }

    /// Stops the server (as a crash would) and keeps it down until [`Self::come_back`].
    pub fn go_down(&self) -> anyhow::Result<()> {
        std::fs::write(self.server.dir.join("down"), b"")?;
        kill_mariadbd(&self.server)
    }

    /// Starts the server again on its data; returns once it accepts connections.
    pub fn come_back(&self) -> anyhow::Result<()> {
        std::fs::remove_file(self.server.dir.join("down"))?;
        self.server.wait_until_listening(std::time::Duration::from_secs(60))
    }

    /// The server's output so far, for failure messages.
    pub fn log(&self) -> String {
        self.server.log()
    }

    /// CPU time the server has used so far (user + system), for benchmarks' database cost per operation.
    pub fn cpu_time(&self) -> anyhow::Result<std::time::Duration> {
        crate::bench::cpu_time(self.pid()?)
    }

    /// The `mariadbd` process's id (to pin it to a core, or read its CPU time).
    pub fn pid(&self) -> anyhow::Result<u32> {
        Ok(mariadbd_pid(&self.server)?.parse()?)
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

/// `mariadbd` on `$DIR/data` and `$PORT`, with the binlog as production has it, and packets big enough for
/// a plugin upload of tens of MiB (stored in the database), as the README asks of production.
fn mariadbd(server_id: u32) -> String {
    format!(
        "mariadbd --no-defaults --datadir=\"$DIR/data\" --tmpdir=\"$DIR/tmp\" --port=\"$PORT\" \
         --socket=\"$DIR/sock\" --bind-address=127.0.0.1 --log-bin=\"$DIR/data/binlog\" --binlog-format=ROW \
         --binlog-row-image=FULL --binlog-row-metadata=FULL --server-id={server_id} --log-slave-updates \
         --user=root --innodb-flush-log-at-trx-commit=2 --max-connections=500 --max-allowed-packet=256M"
    )
}

/// The pid of the `mariadbd` of `server`, from its pid file.
fn mariadbd_pid(server: &WatchedServer) -> anyhow::Result<String> {
    for entry in std::fs::read_dir(server.dir.join("data"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "pid") {
            return Ok(std::fs::read_to_string(&path)?.trim().to_owned());
        }
    }
    bail!("no pid file in {}", server.dir.display())
}

/// SIGKILLs the `mariadbd` of `server` (by its pid file) and waits until its port is closed.
fn kill_mariadbd(server: &WatchedServer) -> anyhow::Result<()> {
    Command::new("kill").args(["-KILL", &mariadbd_pid(server)?]).status()?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", server.port)).is_ok() {
        anyhow::ensure!(std::time::Instant::now() < deadline, "MariaDB did not go down");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

/// A new data directory, bootstrapped.
fn install() -> anyhow::Result<std::path::PathBuf> {
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
    Ok(dir)
}
