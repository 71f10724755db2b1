//! One handle for a single Redis or a Redis Cluster, so the cache and the token buckets are written once.
//!
//! `redis_url` names one server (`redis://HOST:PORT`) or, comma-separated, several seeds of a cluster
//! (`redis://a:7000,redis://b:7000`): the client discovers the rest and follows slot moves and failovers.
//! Both connect lazily again after an outage and fail each call within about a second meanwhile, so callers
//! fall back (reads to the database, rate limits to the tenant's failure mode) instead of holding requests.

use std::time::Duration;

use futures::StreamExt;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{AsyncCommands, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value};

/// How long connecting to Redis may take before a call fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a Redis call may take.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Keys asked for per `SCAN` step.
const SCAN_COUNT: usize = 1000;

/// A connection to one Redis or to a cluster; cheap to clone (clones share the connection).
#[derive(Clone)]
pub enum RedisConnection {
    Single(ConnectionManager),
    /// Boxed: it is several times the size of the single connection's handle.
    Cluster(Box<ClusterConnection>),
}

impl RedisConnection {
    /// Connects to `url`: one server, or a cluster when it lists several comma-separated seeds.
    /// Refused when the server is older than Redis 6.2, whose `ZMSCORE` the cache's script needs: at start,
    /// not as a failing batch later.
    pub async fn connect(url: &str) -> Result<Self, RedisError> {
        let connection = Self::open(url).await?;
        let info = redis::cmd("INFO").arg("server").clone();
        let info: String = match &connection {
            Self::Single(single) => info.query_async(&mut single.clone()).await?,
            Self::Cluster(cluster) => {
                let any = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
                redis::from_redis_value(ClusterConnection::clone(cluster).route_command(info, any).await?)?
            }
        };
        let version = info.lines().find_map(|line| line.strip_prefix("redis_version:")).unwrap_or("").trim();
        let mut parts = version.split('.').map(|part| part.parse::<u32>().unwrap_or(0));
        if (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) < (6, 2) {
            let detail = format!("the server at {url} is {version:?}");
            return Err(RedisError::from((ErrorKind::InvalidClientConfig, "Redis 6.2 or later is needed", detail)));
        }
        Ok(connection)
    }

    async fn open(url: &str) -> Result<Self, RedisError> {
        let seeds: Vec<&str> = url.split(',').map(str::trim).filter(|seed| !seed.is_empty()).collect();
        if let [single] = seeds[..] {
            let config = ConnectionManagerConfig::new()
                .set_number_of_retries(1)
                .set_min_delay(Duration::from_millis(50))
                .set_connection_timeout(Some(CONNECT_TIMEOUT))
                .set_response_timeout(Some(RESPONSE_TIMEOUT));
            return Ok(Self::Single(ConnectionManager::new_with_config(redis::Client::open(single)?, config).await?));
        }
        let client = ClusterClient::builder(seeds)
            .connection_timeout(CONNECT_TIMEOUT)
            .response_timeout(RESPONSE_TIMEOUT)
            // A failover takes the cluster node timeout and an election: retries ride it out.
            .retries(4)
            .build()?;
        Ok(Self::Cluster(Box::new(client.get_async_connection().await?)))
    }

    /// Whether keys of different hash slots may live on different servers (a script must not mix them).
    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// Every key matching the glob `pattern`, by `SCAN` (which never blocks a server for long) — on a
    /// cluster, on each master.
    pub async fn scan(&self, pattern: &str) -> Result<Vec<String>, RedisError> {
        match self {
            Self::Single(connection) => {
                let mut scanning = connection.clone();
                let found: Vec<Result<String, RedisError>> =
                    scanning.scan_match::<_, String>(pattern).await?.collect().await;
                found.into_iter().collect()
            }
            Self::Cluster(connection) => {
                let mut connection = ClusterConnection::clone(connection);
                let mut keys = Vec::new();
                for slot in a_slot_per_master(&mut connection).await? {
                    let node = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
                        slot,
                        SlotAddr::Master,
                    )));
                    let mut cursor = 0_u64;
                    loop {
                        let mut scan = redis::cmd("SCAN");
                        scan.arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(SCAN_COUNT);
                        let reply = connection.route_command(scan, node.clone()).await?;
                        let (next, found): (u64, Vec<String>) = redis::from_redis_value(reply)?;
                        keys.extend(found);
                        if next == 0 {
                            break;
                        }
                        cursor = next;
                    }
                }
                Ok(keys)
            }
        }
    }
}

/// One slot of each master, as `CLUSTER NODES` lists them: routing by slot reaches every master (and
/// connects to it if need be).
async fn a_slot_per_master(connection: &mut ClusterConnection) -> Result<Vec<u16>, RedisError> {
    let nodes = redis::cmd("CLUSTER").arg("NODES").clone();
    let reply = connection.route_command(nodes, RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary));
    let nodes: String = redis::from_redis_value(reply.await?)?;
    Ok(nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let is_live_master = fields.get(2)?.split(',').any(|flag| flag == "master") && !fields[2].contains("fail");
            // Fields 9 on: the slot ranges it serves (`0-5460`, `5461`, or `[…]` while a slot migrates).
            let first_slot = fields.get(8..)?.iter().find_map(|range| range.split('-').next()?.parse().ok())?;
            is_live_master.then_some(first_slot)
        })
        .collect())
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(connection) => connection.req_packed_command(cmd),
            Self::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(connection) => connection.req_packed_commands(pipeline, offset, count),
            Self::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(connection) => connection.get_db(),
            Self::Cluster(connection) => connection.get_db(),
        }
    }
}
