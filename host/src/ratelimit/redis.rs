//! Token buckets in Redis: one Lua script reads, refills and charges a bucket atomically, with Redis `TIME`
//! as the clock, so any number of API nodes share one exact limit.

use std::time::Duration;

use redis::Script;

use crate::cache::RedisConnection;
use crate::graph::TenantId;
use crate::plugins::Bucket;

/// KEYS[1] bucket; ARGV capacity, refill per second, cost. Returns {granted 0|1, retry-after µs}.
const TAKE: &str = r#"
local capacity = tonumber(ARGV[1])
local refill = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or capacity
local at = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - at) * refill / 1000000)
local granted, retry = 0, 0
if tokens >= cost then
  tokens = tokens - cost
  granted = 1
else
  retry = math.ceil((cost - tokens) / refill * 1000000)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(capacity / refill) + 1)
return {granted, retry}
"#;

pub struct RedisBuckets {
    connection: RedisConnection,
    script: Script,
}

impl RedisBuckets {
    pub async fn connect(url: &str) -> Result<Self, redis::RedisError> {
        Ok(Self::new(RedisConnection::connect(url).await?))
    }

    /// Buckets on an open handle (the process's one, shared with the cache).
    pub fn new(connection: RedisConnection) -> Self {
        Self { connection, script: Script::new(TAKE) }
    }

    /// `None` when the tokens were taken, else how long until enough have refilled.
    pub(super) async fn take(&self, tenant: &TenantId, bucket: &Bucket) -> Result<Option<Duration>, redis::RedisError> {
        let (granted, retry_us): (i64, i64) = self
            .script
            .key(format!("strand:bucket:{tenant}:{}", bucket.key))
            .arg(bucket.capacity)
            .arg(bucket.refill_per_second)
            .arg(bucket.cost)
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok((granted == 0).then(|| Duration::from_micros(retry_us.max(0) as u64)))
    }
}
