//! The cache in Redis: one Lua script call per batch, so a batch and its gate are one atomic step.

use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::{AsyncCommands, Script, ScriptInvocation};
use futures::StreamExt;

use super::{counter_swings, in_order, member, Applied, CacheError, DataKind, Gate, PageStart, Space};
use super::{COUNTER_LIMIT, MARKER_TTL};
use crate::plugins::{Effect, RelationEvent, ZsetEntry};

const SORTED: DataKind = DataKind::SortedSet;

/// ARGV: gate key, gate value, gate TTL (ms; renewed when > 0), marker TTL (ms), snapshot flag, counter
/// limit, number of counter checks, then per check: counter key, most it may rise, most it may fall; then per
/// event: marker key, pair-versions hash, floors hash, pair field, version, op count, then per op an op code
/// and its operands. Returns -1 when the gate does not hold, -2 when a counter would leave the limit (both
/// before anything is written), else how many events were new.
const APPLY: &str = r#"
if redis.call('GET', ARGV[1]) ~= ARGV[2] then return -1 end
local limit = tonumber(ARGV[6])
local i = 8
for _ = 1, tonumber(ARGV[7]) do
  local current = tonumber(redis.call('GET', ARGV[i]) or '0')
  if current + tonumber(ARGV[i + 1]) > limit or current + tonumber(ARGV[i + 2]) < -limit then return -2 end
  i = i + 3
end
if tonumber(ARGV[3]) > 0 then redis.call('PEXPIRE', ARGV[1], ARGV[3]) end
local ttl, snapshot = ARGV[4], ARGV[5] == '1'
local applied = 0
while i <= #ARGV do
  local marker, pairs, floors, pair = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local version, n = tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5])
  i = i + 6
  local floor = tonumber(redis.call('HGET', floors, pair) or '0')
  local fresh = version > floor and redis.call('SET', marker, '1', 'NX', 'PX', ttl)
  local newer = false
  if fresh then
    applied = applied + 1
    if version > tonumber(redis.call('HGET', pairs, pair) or '0') then
      redis.call('HSET', pairs, pair, version)
      newer = true
    end
  end
  if snapshot and version > floor then redis.call('HSET', floors, pair, version) end
  for _ = 1, n do
    local op, key = ARGV[i], ARGV[i + 1]
    if op == 'counter' then
      if fresh then redis.call('INCRBY', key, ARGV[i + 2]) end
      i = i + 3
    elseif op == 'zadd' then
      local keep, guard, at_least = tonumber(ARGV[i + 4]), ARGV[i + 5], tonumber(ARGV[i + 6])
      if newer and (guard == '' or tonumber(redis.call('GET', guard) or '0') >= at_least) then
        redis.call('ZADD', key, ARGV[i + 3], ARGV[i + 2])
        if keep > 0 then redis.call('ZREMRANGEBYRANK', key, 0, -keep - 1) end
      end
      i = i + 7
    elseif op == 'zsync' then
      if fresh then
        if tonumber(redis.call('GET', ARGV[i + 5]) or '0') >= tonumber(ARGV[i + 6]) then
          redis.call('ZADD', key, ARGV[i + 3], ARGV[i + 2])
        else
          redis.call('ZREM', key, ARGV[i + 2])
        end
      end
      i = i + 7
    elseif op == 'zrem' then
      if newer then redis.call('ZREM', key, ARGV[i + 2]) end
      i = i + 3
    elseif op == 'set' then
      if newer then redis.call('SET', key, ARGV[i + 2]) end
      i = i + 3
    elseif op == 'del' then
      if newer then redis.call('DEL', key) end
      i = i + 2
    elseif op == 'expire' then
      if newer then redis.call('PEXPIRE', key, ARGV[i + 2]) end
      i = i + 3
    else
      return redis.error_reply('unknown effect ' .. tostring(op))
    end
  end
end
return applied
"#;

/// Takes the lock (KEYS[1]) for ARGV[1] for ARGV[2] ms if it is free or already ARGV[1]'s.
const LOCK: &str = r#"
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"#;

/// Deletes the lock (KEYS[1]) if ARGV[1] holds it.
const UNLOCK: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"#;

/// How long connecting to Redis may take before a call fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a Redis call may take.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// A connection to Redis that reconnects by itself but, while Redis is down, fails each call within
/// about a second — so callers fall back (reads to the database, rate limits to the tenant's failure mode)
/// instead of holding requests through the default retries.
pub async fn connection(url: &str) -> Result<ConnectionManager, ::redis::RedisError> {
    let config = ConnectionManagerConfig::new()
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(50))
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT));
    ConnectionManager::new_with_config(::redis::Client::open(url)?, config).await
}

/// A Redis connection and the scripts.
#[derive(Clone)]
pub struct RedisCache {
    connection: ConnectionManager,
    apply: Script,
    lock: Script,
    unlock: Script,
}

impl RedisCache {
    pub async fn connect(url: &str) -> Result<Self, CacheError> {
        Ok(Self {
            connection: connection(url).await?,
            apply: Script::new(APPLY),
            lock: Script::new(LOCK),
            unlock: Script::new(UNLOCK),
        })
    }

    pub(super) async fn apply(
        &self,
        space: Space<'_>,
        events: &[RelationEvent],
        effects: &[Vec<Effect>],
        gate: Gate<'_>,
    ) -> Result<Applied, CacheError> {
        let mut invocation = self.apply.prepare_invoke();
        match gate {
            Gate::Built(identity) => invocation.arg(space.ready_key()).arg(identity).arg(0),
            Gate::Building { owner, ttl } => invocation.arg(space.lock_key()).arg(owner).arg(ttl.as_millis() as u64),
        };
        let snapshot = matches!(gate, Gate::Building { .. });
        invocation.arg(MARKER_TTL.as_millis() as u64).arg(u8::from(snapshot)).arg(COUNTER_LIMIT);
        let swings = counter_swings(space, effects);
        invocation.arg(swings.len());
        for (counter, up, down) in swings {
            invocation.arg(counter).arg(up).arg(down);
        }
        for (event, effects) in events.iter().zip(effects) {
            // An expiry is one op per kind of data its key may name.
            let expiries = effects.iter().filter(|e| matches!(e, Effect::Expire(_))).count();
            invocation
                .arg(space.marker_key(event))
                .arg(space.versions_key(event))
                .arg(space.floors_key(event))
                .arg(event.followee)
                .arg(event.version)
                .arg(effects.len() + expiries * (DataKind::ALL.len() - 1));
            for effect in in_order(effects) {
                match effect {
                    Effect::CounterAdd((counter, delta)) => {
                        invocation.arg("counter").arg(space.key(DataKind::Counter, counter)).arg(delta);
                    }
                    Effect::ZsetAdd(e) => zadd(&mut invocation, "zadd", space.key(SORTED, &e.key), e, 0, None),
                    Effect::ZsetAddCapped(c) => {
                        zadd(&mut invocation, "zadd", space.key(SORTED, &c.entry.key), &c.entry, c.keep, None)
                    }
                    Effect::ZsetAddGuarded(g) => {
                        let (c, e) = (&g.add, &g.add.entry);
                        let guard = Some((space.key(DataKind::Counter, &g.counter), g.at_least));
                        zadd(&mut invocation, "zadd", space.key(SORTED, &e.key), e, c.keep, guard)
                    }
                    Effect::ZsetMemberWhile(w) => {
                        let guard = Some((space.key(DataKind::Counter, &w.counter), w.at_least));
                        zadd(&mut invocation, "zsync", space.key(SORTED, &w.entry.key), &w.entry, 0, guard)
                    }
                    Effect::ZsetRemove((set, id)) => {
                        invocation.arg("zrem").arg(space.key(SORTED, set)).arg(member(*id));
                    }
                    Effect::ValueSet((value, text)) => {
                        invocation.arg("set").arg(space.key(DataKind::Value, value)).arg(text);
                    }
                    Effect::ValueDelete(value) => {
                        invocation.arg("del").arg(space.key(DataKind::Value, value));
                    }
                    Effect::Expire((expiring, ms)) => {
                        for kind in DataKind::ALL {
                            invocation.arg("expire").arg(space.key(kind, expiring)).arg(ms);
                        }
                    }
                };
            }
        }
        let applied: i64 = invocation.invoke_async(&mut self.connection.clone()).await?;
        Ok(match applied {
            -2 => Applied::OutOfRange,
            applied => usize::try_from(applied).map_or(Applied::Refused, Applied::Events),
        })
    }

    pub(super) async fn ping(&self) -> Result<(), CacheError> {
        Ok(::redis::cmd("PING").query_async(&mut self.connection.clone()).await?)
    }

    pub(super) async fn set(&self, key: &str, value: &str) -> Result<(), CacheError> {
        Ok(self.connection.clone().set(key, value).await?)
    }

    pub(super) async fn clear(&self, ready_key: &str, prefix: &str) -> Result<(), CacheError> {
        let mut connection = self.connection.clone();
        let _: () = connection.del(ready_key).await?;
        for chunk in self.keys(prefix).await?.chunks(500) {
            let _: () = connection.del(chunk).await?;
        }
        Ok(())
    }

    /// Every key starting with `prefix`, by `SCAN` (which never blocks the server for long).
    pub(super) async fn keys(&self, prefix: &str) -> Result<Vec<String>, CacheError> {
        let mut scanning = self.connection.clone();
        let found: Vec<Result<String, ::redis::RedisError>> =
            scanning.scan_match::<_, String>(format!("{prefix}*")).await?.collect().await;
        Ok(found.into_iter().collect::<Result<_, _>>()?)
    }

    pub(super) async fn lock(&self, key: &str, owner: &str, ttl: Duration) -> Result<bool, CacheError> {
        let mut invocation = self.lock.key(key);
        invocation.arg(owner).arg(ttl.as_millis() as u64);
        Ok(invocation.invoke_async::<i64>(&mut self.connection.clone()).await? == 1)
    }

    pub(super) async fn unlock(&self, key: &str, owner: &str) -> Result<(), CacheError> {
        let _: i64 = self.unlock.key(key).arg(owner).invoke_async(&mut self.connection.clone()).await?;
        Ok(())
    }

    pub(super) async fn texts(&self, keys: &[String]) -> Result<Vec<Option<String>>, CacheError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.connection.clone().mget(keys).await?)
    }

    pub(super) async fn cardinality(&self, key: &str) -> Result<u64, CacheError> {
        Ok(self.connection.clone().zcard(key).await?)
    }

    pub(super) async fn descending(
        &self,
        key: &str,
        from: PageStart<'_>,
        count: usize,
    ) -> Result<Vec<(String, f64)>, CacheError> {
        let mut redis = self.connection.clone();
        let last = |start: usize| isize::try_from(start.saturating_add(count)).unwrap_or(isize::MAX) - 1;
        Ok(match from {
            PageStart::Rank(start) => {
                let first = isize::try_from(start).unwrap_or(isize::MAX);
                redis.zrevrange_withscores(key, first, last(start)).await?
            }
            PageStart::After(score, after) => {
                // As old, smaller member (few: one millisecond's follows), then strictly older.
                let mut tied: Vec<(String, f64)> = redis.zrangebyscore_withscores(key, score, score).await?;
                tied.retain(|(m, _)| m.as_str() < after);
                tied.reverse();
                tied.truncate(count);
                let rest = count - tied.len();
                let older: Vec<(String, f64)> = if rest == 0 {
                    Vec::new()
                } else {
                    let limit = isize::try_from(rest).unwrap_or(isize::MAX);
                    redis.zrevrangebyscore_limit_withscores(key, format!("({score}"), "-inf", 0, limit).await?
                };
                tied.into_iter().chain(older).collect()
            }
        })
    }
}

/// The operands of the script's `zadd` and `zsync` (`op`): key, member, score, how many to keep (0: all),
/// and the counter that must be at least some value for the add to apply (none: always).
fn zadd(
    invocation: &mut ScriptInvocation<'_>,
    op: &str,
    key: String,
    entry: &ZsetEntry,
    keep: u32,
    guard: Option<(String, i64)>,
) {
    let (guard, at_least) = guard.unwrap_or_default();
    invocation.arg(op).arg(key).arg(member(entry.member)).arg(entry.score).arg(keep).arg(guard).arg(at_least);
}
