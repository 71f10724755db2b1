//! Applying a projector's effects to Redis, exactly once in result. One Lua script call per batch applies,
//! per event and atomically: its event-id marker (kept `MARKER_TTL`, longer than any redelivery window),
//! its counter adds only if the marker is new (counters commute: each event counts once, in any order),
//! and its state effects (sorted-set adds and removals, values, expiries) only if the event's version is
//! newer than the last applied for its pair (last writer wins: a late, older event changes nothing). So a
//! redelivered batch, a replayed partition, one pair's events out of order, or a crash between effects and
//! offset commit never double-count. A backfill applies each pair's current state as a snapshot event and
//! raises the pair's floor to its version: bus events at or below the floor are already counted by it. Keys are rendered `tenant:plugin:space:id:…`: a plugin names only its
//! own data.

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{Script, ScriptInvocation};

use crate::plugins::{Effect, Key, RelationEvent};

/// How long an applied event's marker is kept: redelivery older than this could count twice.
pub const MARKER_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// ARGV: marker TTL (ms), snapshot flag, then per event: marker key, pair-versions hash, floors hash, pair
/// field, version, effect count, then per effect an op code and its operands. An event at or below its
/// pair's floor is already accounted for; a snapshot event raises the floor to its version (everything up
/// to it is in the snapshot). Returns how many events were new.
const APPLY: &str = r#"
local ttl, snapshot = ARGV[1], ARGV[2] == '1'
local i = 3
local applied = 0
while i <= #ARGV do
  local marker, pairs, floors, pair = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local version, n = tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5])
  i = i + 6
  local fresh = version > tonumber(redis.call('HGET', floors, pair) or '0')
    and redis.call('SET', marker, '1', 'NX', 'PX', ttl)
  local newer = false
  if fresh then
    applied = applied + 1
    if version > tonumber(redis.call('HGET', pairs, pair) or '0') then
      redis.call('HSET', pairs, pair, version)
      newer = true
    end
  end
  if snapshot and version > tonumber(redis.call('HGET', floors, pair) or '0') then
    redis.call('HSET', floors, pair, version)
  end
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

/// A Redis connection and the apply script.
pub struct RedisEffects {
    connection: ConnectionManager,
    script: Script,
}

impl RedisEffects {
    pub async fn connect(url: &str) -> Result<Self, redis::RedisError> {
        let client = redis::Client::open(url)?;
        Ok(Self { connection: ConnectionManager::new(client).await?, script: Script::new(APPLY) })
    }

    /// Applies `effects[i]` of `events[i]` for `plugin` of `tenant`, atomically per event and in one call;
    /// returns how many events were applied for the first time. `snapshot`: the events are the truth's
    /// current state of their pairs (a backfill), not changes from the bus.
    pub async fn apply(
        &self,
        tenant: &str,
        plugin: &str,
        events: &[RelationEvent],
        effects: &[Vec<Effect>],
        snapshot: bool,
    ) -> Result<usize, redis::RedisError> {
        let space = |name: &str| format!("{tenant}:{plugin}:{name}");
        let mut invocation = self.script.prepare_invoke();
        invocation.arg(MARKER_TTL.as_millis() as u64).arg(u8::from(snapshot));
        for (event, effects) in events.iter().zip(effects) {
            invocation
                .arg(space(&format!("~applied:{}", event.event_id)))
                .arg(space(&format!("~versions:{}", event.follower)))
                .arg(space(&format!("~floors:{}", event.follower)))
                .arg(event.followee)
                .arg(event.version)
                .arg(effects.len());
            for effect in effects {
                let key = |key: &Key| render(tenant, plugin, key);
                match effect {
                    Effect::CounterAdd((counter, delta)) => {
                        invocation.arg("counter").arg(key(counter)).arg(delta);
                    }
                    Effect::ZsetAdd(e) => zadd(&mut invocation, key(&e.key), e.member, e.score, 0, None),
                    Effect::ZsetAddCapped(c) => {
                        zadd(&mut invocation, key(&c.entry.key), c.entry.member, c.entry.score, c.keep, None)
                    }
                    Effect::ZsetAddGuarded(g) => {
                        let (c, e) = (&g.add, &g.add.entry);
                        let guard = Some((key(&g.counter), g.at_least));
                        zadd(&mut invocation, key(&e.key), e.member, e.score, c.keep, guard)
                    }
                    Effect::ZsetRemove((set, id)) => {
                        invocation.arg("zrem").arg(key(set)).arg(member(*id));
                    }
                    Effect::ValueSet((value, text)) => {
                        invocation.arg("set").arg(key(value)).arg(text);
                    }
                    Effect::ValueDelete(value) => {
                        invocation.arg("del").arg(key(value));
                    }
                    Effect::Expire((expiring, ms)) => {
                        invocation.arg("expire").arg(key(expiring)).arg(ms);
                    }
                };
            }
        }
        let applied: usize = invocation.invoke_async(&mut self.connection.clone()).await?;
        Ok(applied)
    }
}

/// The operands of the script's `zadd`: key, member, score, how many to keep (0: all), and the counter that
/// must be at least some value for the add to apply (none: always).
fn zadd(
    invocation: &mut ScriptInvocation<'_>,
    key: String,
    id: i64,
    score: f64,
    keep: u32,
    guard: Option<(String, i64)>,
) {
    let (guard, at_least) = guard.unwrap_or_default();
    invocation.arg("zadd").arg(key).arg(member(id)).arg(score).arg(keep).arg(guard).arg(at_least);
}

/// A sorted-set member, fixed-width so that equal scores order by user id exactly as the database does.
pub(crate) fn member(id: i64) -> String {
    format!("{id:020}")
}

/// `tenant:plugin:space:id:…`, the only keys a plugin's effects can reach.
pub fn render(tenant: &str, plugin: &str, key: &Key) -> String {
    let mut rendered = format!("{tenant}:{plugin}:{}", key.space);
    for id in &key.ids {
        rendered.push(':');
        rendered.push_str(&id.to_string());
    }
    rendered
}
