//! The cache in Redis — one server or a cluster: the cache's scripts run by `EVALSHA` (one call per batch,
//! per shard on a cluster), its reads as plain commands.

use ::redis::Value;

use super::script::CacheScript;
use super::{CacheError, Quota, RedisConnection, Space};

/// Projector data in one Redis or a Redis Cluster.
#[derive(Clone)]
pub struct RedisCache {
    connection: RedisConnection,
    /// Held to every deployed version's space: its usage is read before each batch (a space passes its
    /// key and byte quota by at most one batch of each worker writing it at that moment).
    quota: Quota,
}

impl RedisCache {
    /// Connects to `url`: one Redis, or several comma-separated seeds of a cluster.
    pub async fn connect(url: &str) -> Result<Self, CacheError> {
        Ok(Self::new(RedisConnection::connect(url).await?))
    }

    /// The cache on an open handle (the process's one, shared with the token buckets).
    pub fn new(connection: RedisConnection) -> Self {
        Self { connection, quota: Quota::default() }
    }

    /// This cache holding deployed projectors' spaces to `quota`.
    pub fn with_quota(mut self, quota: Quota) -> Self {
        self.quota = quota;
        self
    }

    pub(super) fn quota(&self) -> Quota {
        self.quota
    }

    /// Whether keys live on several servers: then a batch is one script call per shard.
    pub(super) fn is_cluster(&self) -> bool {
        self.connection.is_cluster()
    }

    /// Runs `script` (by its hash, loading it once per server), routed by its first key on a cluster.
    pub(super) async fn eval<'a>(
        &self,
        script: &CacheScript,
        keys: &[String],
        args: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Value, CacheError> {
        let mut invocation = script.redis.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        for arg in args {
            invocation.arg(arg);
        }
        Ok(invocation.invoke_async(&mut self.connection.clone()).await?)
    }

    pub(super) async fn query(&self, command: &::redis::Cmd) -> Result<Value, CacheError> {
        Ok(command.query_async(&mut self.connection.clone()).await?)
    }

    /// Every key of `space`, on every server (`SCAN`).
    pub(super) async fn space_keys(&self, space: Space<'_>) -> Result<Vec<String>, CacheError> {
        Ok(self.connection.scan(&space.pattern()).await?)
    }
}
