//! Throwaway Redis servers for the test process — one, or a cluster — on free ports, nothing persisted
//! (DESIGN §11).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::watched::{scratch_dir, shared, WatchedServer};

/// A running Redis that lives as long as the test process.
pub struct Redis {
    server: WatchedServer,
}

static SHARED: OnceLock<Result<Redis, String>> = OnceLock::new();
static NEXT_DATABASE: AtomicU32 = AtomicU32::new(0);
/// Redis' default number of logical databases.
const DATABASES: u32 = 16;

impl Redis {
    /// The process-wide instance, started on first use.
    pub fn shared() -> anyhow::Result<&'static Redis> {
        shared(&SHARED, Redis::start, "throwaway Redis failed to start (apt-get install redis-server)")
    }

    fn start() -> anyhow::Result<Self> {
        Self::start_on(crate::free_port()?)
    }

    /// A server of the test's own, to stop (an outage) and start again on its port, empty.
    pub fn dedicated() -> anyhow::Result<Self> {
        Self::start()
    }

    /// A new, empty server on `port` (e.g. where a stopped one was).
    pub fn start_on(port: u16) -> anyhow::Result<Self> {
        let dir = scratch_dir("strand-redis-")?;
        let command = "redis-server --port \"$PORT\" --bind 127.0.0.1 --save '' --appendonly no --dir \"$DIR\" \
                       --pidfile \"$DIR/redis.pid\"";
        Ok(Redis { server: WatchedServer::start(&dir, port, command)? })
    }

    pub fn port(&self) -> u16 {
        self.server.port
    }

    /// The server's process id, for benchmarks that report its CPU time.
    pub fn pid(&self) -> anyhow::Result<u32> {
        Ok(std::fs::read_to_string(self.server.dir.join("redis.pid"))?.trim().parse()?)
    }

    /// Stops the server now; what it held is gone.
    pub fn stop(self) -> anyhow::Result<()> {
        self.server.stop()
    }

    /// A URL of one of the server's logical databases, different on each call (wrapping after 16), so
    /// concurrent tests rarely share keys; tests still use their own tenants or keys.
    pub fn url(&self) -> String {
        let db = NEXT_DATABASE.fetch_add(1, Ordering::Relaxed) % DATABASES;
        format!("redis://127.0.0.1:{}/{db}", self.server.port)
    }
}

/// A throwaway Redis Cluster: three masters with a replica each, on free ports (DESIGN §11).
pub struct RedisCluster {
    nodes: Vec<WatchedServer>,
}

static SHARED_CLUSTER: OnceLock<Result<RedisCluster, String>> = OnceLock::new();

impl RedisCluster {
    /// The process-wide cluster, started on first use.
    pub fn shared() -> anyhow::Result<&'static RedisCluster> {
        shared(&SHARED_CLUSTER, RedisCluster::start, "throwaway Redis Cluster failed to start")
    }

    /// A cluster of the test's own, to kill a master of.
    pub fn dedicated() -> anyhow::Result<Self> {
        Self::start()
    }

    fn start() -> anyhow::Result<Self> {
        let mut nodes = Vec::new();
        for _ in 0..6 {
            let dir = scratch_dir("strand-redis-cluster-")?;
            // The bus port is given explicitly: its default, port + 10000, may be out of range. Validity
            // factor 0: a replica takes over however recently it synced (else a young cluster's replica
            // refuses, "disconnected from master for longer than allowed").
            let command = format!(
                "redis-server --port \"$PORT\" --bind 127.0.0.1 --cluster-enabled yes --cluster-port {} \
                 --cluster-config-file \"$DIR/nodes.conf\" --cluster-node-timeout 2000 \
                 --cluster-replica-validity-factor 0 --save '' --appendonly no --dir \"$DIR\"",
                crate::free_port()?
            );
            nodes.push(WatchedServer::start(&dir, crate::free_port()?, &command)?);
        }
        let mut create = std::process::Command::new("redis-cli");
        create.env("PATH", crate::watched::server_path()).arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port));
        }
        let created = create.args(["--cluster-replicas", "1", "--cluster-yes"]).output()?;
        anyhow::ensure!(
            created.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_until_ok(Duration::from_secs(30))?;
        Ok(cluster)
    }

    /// The seeds, comma-separated, as `redis_url` names a cluster.
    pub fn url(&self) -> String {
        self.nodes.iter().map(|node| format!("redis://127.0.0.1:{}", node.port)).collect::<Vec<_>>().join(",")
    }

    /// `redis-cli -p PORT ARGS…`'s output.
    pub fn cli(&self, port: u16, args: &[&str]) -> anyhow::Result<String> {
        let output = std::process::Command::new("redis-cli")
            .env("PATH", crate::watched::server_path())
            .arg("-p")
            .arg(port.to_string())
            .args(args)
            .output()?;
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// The ports of the nodes that are masters now (and answer).
    pub fn masters(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .map(|node| node.port)
            .filter(|&port| self.cli(port, &["ROLE"]).is_ok_and(|role| role.starts_with("master")))
            .collect()
    }

    /// SIGKILLs the master on `port` (no shutdown, nothing handed over): its replica is promoted once the
    /// others see it fail (node timeout 2 s).
    pub fn kill(&self, port: u16) -> anyhow::Result<()> {
        let info = self.cli(port, &["INFO", "server"])?;
        let pid = info
            .lines()
            .find_map(|line| line.strip_prefix("process_id:"))
            .ok_or_else(|| anyhow::anyhow!("no process id from the node on {port}"))?;
        let killed = std::process::Command::new("kill").args(["-KILL", pid.trim()]).status()?;
        anyhow::ensure!(killed.success(), "kill -KILL {pid}");
        Ok(())
    }

    /// Waits until every live node says `cluster_state:ok` and three live masters serve the slots (after a
    /// master's death: its replica was promoted).
    pub fn wait_until_ok(&self, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let states: Vec<String> = self
                .nodes
                .iter()
                .filter_map(|node| self.cli(node.port, &["CLUSTER", "INFO"]).ok().filter(|info| !info.is_empty()))
                .collect();
            let ok = !states.is_empty() && states.iter().all(|info| info.contains("cluster_state:ok"));
            if ok && self.masters().len() == 3 {
                return Ok(());
            }
            anyhow::ensure!(Instant::now() < deadline, "the cluster is not ok: {states:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
