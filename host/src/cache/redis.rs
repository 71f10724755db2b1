//! The cache in Redis: one Lua script call per batch (per shard on a cluster), so a batch and its gate are
//! one atomic step.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;
use std::time::Duration;

use ::redis::{AsyncCommands, Script};
use futures::future::try_join_all;

use super::{
    applies, counter_swings, home_shard, in_order, member, set_growth, shard, Applied, CacheError, DataKind, Exceeded,
    Gate, PageStart, Quota, Usage, COUNTER_BYTES, MEMBER_BYTES,
};
use super::{RedisConnection, Space, COUNTER_LIMIT, MARKER_TTL, SHARDS};
use crate::plugins::{Effect, RelationEvent, ZsetEntry};

const SORTED: DataKind = DataKind::SortedSet;

/// ARGV: marker TTL (ms), snapshot flag, counter limit, most members of a sorted set, member bytes, counter
/// bytes; number of counter checks, per check: counter key, most it may rise, most it may fall; number of
/// set checks, per check: sorted-set key, how many members, the members (the checks cover every effect of
/// the call); then per shard group: gate key, gate value, the group's usage counts (keys, bytes), how many
/// ARGV entries its events take, then per event: marker key, pair-versions hash, floors hash, pair field,
/// version, its index in the batch, whether its effects may apply (0: a snapshot's unfollow, which only
/// raises floors), op count, then per op an op code and its operands. Returns {-1} when a gate does not
/// hold, {-2} when a counter would leave the limit, {-3} when a sorted set would pass its most members (all
/// before anything is written), else {0, the indices of the events that were new here…}. Writes keep the
/// usage counts as `memory.rs` does.
const APPLY: &str = r#"
local ttl, snapshot, limit, most = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3]), tonumber(ARGV[4])
local member_bytes, counter_bytes = tonumber(ARGV[5]), tonumber(ARGV[6])
local i = 7
local checks = tonumber(ARGV[i])
i = i + 1
local counters = i
i = i + 3 * checks
local sets = tonumber(ARGV[i])
i = i + 1
local set_checks = i
for _ = 1, sets do i = i + 2 + tonumber(ARGV[i + 1]) end
local parts = i
while i <= #ARGV do
  if redis.call('GET', ARGV[i]) ~= ARGV[i + 1] then return {-1} end
  i = i + 5 + tonumber(ARGV[i + 4])
end
i = counters
for _ = 1, checks do
  local current = tonumber(redis.call('GET', ARGV[i]) or '0')
  if current + tonumber(ARGV[i + 1]) > limit or current + tonumber(ARGV[i + 2]) < -limit then return {-2} end
  i = i + 3
end
i = set_checks
for _ = 1, sets do
  local key, n = ARGV[i], tonumber(ARGV[i + 1])
  local held = redis.call('ZCARD', key)
  for j = i + 2, i + 1 + n do
    if not redis.call('ZSCORE', key, ARGV[j]) then held = held + 1 end
  end
  if held > most then return {-3} end
  i = i + 2 + n
end
local applied = {0}
i = parts
while i <= #ARGV do
  local keys_count, bytes_count = ARGV[i + 2], ARGV[i + 3]
  local function grow(keys, bytes)
    if keys ~= 0 then redis.call('INCRBY', keys_count, keys) end
    if bytes ~= 0 then redis.call('INCRBY', bytes_count, bytes) end
  end
  local function zrem(key, member)
    if redis.call('ZREM', key, member) == 1 then
      if redis.call('EXISTS', key) == 0 then grow(-1, -#key - member_bytes) else grow(0, -member_bytes) end
    end
  end
  i = i + 4
  local stop = i + tonumber(ARGV[i])
  i = i + 1
  while i <= stop do
    local marker, pairs, floors, pair = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    local version, index, applies, n = tonumber(ARGV[i + 4]), ARGV[i + 5], ARGV[i + 6] == '1', tonumber(ARGV[i + 7])
    i = i + 8
    local floor = tonumber(redis.call('HGET', floors, pair) or '0')
    local fresh = applies and version > floor and redis.call('SET', marker, '1', 'NX', 'PX', ttl)
    local newer = false
    if fresh then
      table.insert(applied, index)
      if version > tonumber(redis.call('HGET', pairs, pair) or '0') then
        redis.call('HSET', pairs, pair, version)
        newer = true
      end
    end
    if snapshot and version > floor then redis.call('HSET', floors, pair, version) end
    for _ = 1, n do
      local op, key = ARGV[i], ARGV[i + 1]
      if op == 'counter' then
        if fresh then
          if redis.call('EXISTS', key) == 0 then grow(1, #key + counter_bytes) end
          redis.call('INCRBY', key, ARGV[i + 2])
        end
        i = i + 3
      elseif op == 'zadd' then
        local keep, guard, at_least = tonumber(ARGV[i + 4]), ARGV[i + 5], tonumber(ARGV[i + 6])
        if newer and (guard == '' or tonumber(redis.call('GET', guard) or '0') >= at_least) then
          local created = redis.call('EXISTS', key) == 0
          local added = redis.call('ZADD', key, ARGV[i + 3], ARGV[i + 2])
          if keep > 0 then added = added - redis.call('ZREMRANGEBYRANK', key, 0, -keep - 1) end
          if created then grow(1, #key + added * member_bytes) else grow(0, added * member_bytes) end
        end
        i = i + 7
      elseif op == 'zsync' then
        if fresh then
          if tonumber(redis.call('GET', ARGV[i + 5]) or '0') >= tonumber(ARGV[i + 6]) then
            local created = redis.call('EXISTS', key) == 0
            local added = redis.call('ZADD', key, ARGV[i + 3], ARGV[i + 2])
            if created then grow(1, #key + added * member_bytes) else grow(0, added * member_bytes) end
          else
            zrem(key, ARGV[i + 2])
          end
        end
        i = i + 7
      elseif op == 'zrem' then
        if newer then zrem(key, ARGV[i + 2]) end
        i = i + 3
      elseif op == 'set' then
        if newer then
          local value = ARGV[i + 2]
          if redis.call('EXISTS', key) == 0 then
            grow(1, #key + #value)
          else
            grow(0, #value - redis.call('STRLEN', key))
          end
          redis.call('SET', key, value)
        end
        i = i + 3
      elseif op == 'del' then
        if newer then
          local old = redis.call('STRLEN', key)
          if redis.call('DEL', key) == 1 then grow(-1, -#key - old) end
        end
        i = i + 2
      elseif op == 'expire' then
        if newer then redis.call('PEXPIRE', key, ARGV[i + 2]) end
        i = i + 3
      else
        return redis.error_reply('unknown effect ' .. tostring(op))
      end
    end
  end
end
return applied
"#;

/// Takes the lock (KEYS[1]) for ARGV[1] for ARGV[2] ms if it is free (2; unless ARGV[3] is '1': only renew)
/// or already ARGV[1]'s (1); 0 when another holds it (or, renewing only, nobody).
const LOCK: &str = r#"
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] and (holder or ARGV[3] == '1') then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if holder then return 1 end
return 2
"#;

/// What the lock script did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lock {
    Held,
    Renewed,
    Taken,
}

/// Deletes the lock (KEYS[1]) if ARGV[1] holds it.
const UNLOCK: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"#;

/// KEYS[1] a sorted set; ARGV score, member, count. The `count` entries after (score, member) in descending
/// order, found by rank — O(log n + count), however many members share the score. When the member has moved
/// or gone since the cursor was made, its position is taken by putting the member there for the moment of
/// the script and putting back what was (atomic: no other command sees it).
const AFTER: &str = r#"
local key, score, member = KEYS[1], ARGV[1], ARGV[2]
local held = redis.call('ZSCORE', key, member)
local rank
if held and tonumber(held) == tonumber(score) then
  -- The member is where the cursor left it (the common case): a read alone.
  rank = redis.call('ZREVRANK', key, member) + 1
else
  redis.call('ZADD', key, score, member)
  rank = redis.call('ZREVRANK', key, member)
  if held then redis.call('ZADD', key, held, member) else redis.call('ZREM', key, member) end
  -- Moved ahead of the cursor's place, the member itself is not after it.
  if held and tonumber(held) > tonumber(score) then rank = rank + 1 end
end
return redis.call('ZREVRANGE', key, rank, rank + tonumber(ARGV[3]) - 1, 'WITHSCORES')
"#;

/// Projector data in one Redis or a Redis Cluster.
#[derive(Clone)]
pub struct RedisCache {
    connection: RedisConnection,
    /// Held to every deployed version's space: its usage is read before each batch (a space passes its
    /// key and byte quota by at most one batch of each worker writing it at that moment).
    quota: Quota,
}

/// The scripts, each hashed once per process (calls send only the hash).
static APPLY_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(APPLY));
static LOCK_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(LOCK));
static UNLOCK_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(UNLOCK));
static AFTER_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(AFTER));

/// Operands of the apply script.
type Operands = Vec<Vec<u8>>;

fn push(operands: &mut Operands, value: impl ::redis::ToRedisArgs) {
    operands.extend(value.to_redis_args());
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

    /// What `space`'s usage has reached of `quota` (read only for a limited space).
    async fn quota_reached(&self, space: Space<'_>, quota: Quota) -> Result<Option<Exceeded>, CacheError> {
        if !quota.limits_size() {
            return Ok(None);
        }
        Ok(quota.reached(Usage::sum(&self.texts(&space.usage_keys()).await?)))
    }

    pub(super) async fn apply(
        &self,
        space: Space<'_>,
        events: &[RelationEvent],
        effects: &[Vec<Effect>],
        gate: Gate<'_>,
    ) -> Result<Applied, CacheError> {
        let (holder, snapshot) = match gate {
            Gate::Built(identity) => (identity, false),
            Gate::Building { owner, ttl } => {
                // Renewed here, checked per shard by the builder's copies (see `lock`).
                if self.take_lock(space, owner, ttl, true).await? != Lock::Renewed {
                    return Ok(Applied::Refused);
                }
                (owner, true)
            }
        };
        let quota = self.quota.of(space);
        if let Some(reached) = self.quota_reached(space, quota).await? {
            return Ok(Applied::OverQuota(reached));
        }
        let mut parts: BTreeMap<u16, Vec<(usize, Vec<&Effect>)>> = BTreeMap::new();
        // On one Redis every key is on one server: an event is one unit (one marker, one pair version), its
        // bookkeeping in its home shard, as in memory. On a cluster, one unit per shard it touches.
        let cluster = self.connection.is_cluster();
        for (index, (event, effects)) in events.iter().zip(effects).enumerate() {
            let home = home_shard(event);
            let mut by_shard: BTreeMap<u16, Vec<&Effect>> = BTreeMap::from([(home, Vec::new())]);
            for effect in in_order(effects) {
                let unit = if cluster { shard(effect_key(effect)) } else { home };
                by_shard.entry(unit).or_default().push(effect);
            }
            for (shard, effects) in by_shard {
                parts.entry(shard).or_default().push((index, effects));
            }
        }
        // The checks of a script call cover every effect it carries: on one Redis, one set's or counter's
        // adds come in several shard groups (by the events' home shards) of the one call.
        type Part<'p> = (u16, &'p [(usize, Vec<&'p Effect>)]);
        let header = |call: &[Part<'_>], operands: &mut Operands| {
            push(operands, MARKER_TTL.as_millis() as u64);
            push(operands, u8::from(snapshot));
            push(operands, COUNTER_LIMIT);
            push(operands, quota.members);
            push(operands, MEMBER_BYTES);
            push(operands, COUNTER_BYTES);
            // Only the adds that can apply count (a snapshot's unfollow applies none).
            let adds = call
                .iter()
                .flat_map(|(_, part)| part.iter())
                .filter(|(index, _)| applies(&events[*index], snapshot))
                .flat_map(|(_, effects)| effects.iter().copied());
            let swings = counter_swings(space, adds.clone());
            push(operands, swings.len());
            for (counter, up, down) in swings {
                push(operands, counter);
                push(operands, up);
                push(operands, down);
            }
            let growth = set_growth(space, adds, quota);
            push(operands, growth.len());
            for (set, members) in growth {
                push(operands, set);
                push(operands, members.len());
                for member in members {
                    push(operands, member);
                }
            }
        };
        let part = |(shard, part): Part<'_>, operands: &mut Operands| {
            let gate_key = if snapshot { space.builder_key_in(shard) } else { space.ready_key_in(shard) };
            push(operands, &gate_key);
            push(operands, holder);
            for count in space.usage_keys_in(shard) {
                push(operands, count);
            }
            let mut units = Operands::new();
            for (index, effects) in part {
                unit(&mut units, (space, shard, snapshot), *index, &events[*index], effects);
            }
            push(operands, units.len());
            operands.extend(units);
            gate_key
        };
        let outcomes = if cluster {
            // One script per shard: each shard is one slot, and slots live on different servers.
            let calls = parts.iter().map(|(&shard, shard_part)| {
                let mut operands = Operands::new();
                header(&[(shard, shard_part)], &mut operands);
                let gate_key = part((shard, shard_part), &mut operands);
                self.run(Some(gate_key), operands)
            });
            try_join_all(calls).await?
        } else {
            let call: Vec<Part<'_>> = parts.iter().map(|(&shard, part)| (shard, part.as_slice())).collect();
            let mut operands = Operands::new();
            header(&call, &mut operands);
            for &shard_part in &call {
                part(shard_part, &mut operands);
            }
            vec![self.run(None, operands).await?]
        };
        // An event is new if any of its shards' parts was (a retry after a partial failure finds the rest).
        let statuses: Vec<i64> = outcomes.iter().map(|outcome| outcome.first().copied().unwrap_or(0)).collect();
        Ok(if statuses.contains(&-1) {
            Applied::Refused
        } else if statuses.contains(&-2) {
            Applied::OutOfRange
        } else if statuses.contains(&-3) {
            Applied::OverQuota(Exceeded::Members(quota.members))
        } else {
            let new: BTreeSet<i64> = outcomes.iter().flat_map(|outcome| outcome.iter().skip(1).copied()).collect();
            Applied::Events(new.len())
        })
    }

    /// Runs the apply script on `operands`, routed by `key` on a cluster.
    async fn run(&self, key: Option<String>, operands: Operands) -> Result<Vec<i64>, CacheError> {
        let mut invocation = APPLY_SCRIPT.prepare_invoke();
        if let Some(key) = key {
            invocation.key(key);
        }
        for operand in &operands {
            invocation.arg(operand.as_slice());
        }
        Ok(invocation.invoke_async(&mut self.connection.clone()).await?)
    }

    pub(super) async fn ping(&self) -> Result<(), CacheError> {
        Ok(::redis::cmd("PING").query_async(&mut self.connection.clone()).await?)
    }

    /// Marks every shard complete, shard 0 — the one readers check — last.
    pub(super) async fn mark_built(&self, space: Space<'_>, identity: &str) -> Result<(), CacheError> {
        let others = (1..SHARDS).map(|shard| self.set(space.ready_key_in(shard), identity, None));
        try_join_all(others).await?;
        self.set(space.ready_key(), identity, None).await
    }

    async fn set(&self, key: String, value: &str, ttl: Option<Duration>) -> Result<(), CacheError> {
        let mut connection = self.connection.clone();
        match ttl {
            Some(ttl) => connection.pset_ex::<_, _, ()>(key, value, ttl.as_millis() as u64).await?,
            None => connection.set::<_, _, ()>(key, value).await?,
        }
        Ok(())
    }

    /// Deletes the completion marks (shard 0's first: readers stop at once), then every key of the space.
    pub(super) async fn clear(&self, space: Space<'_>) -> Result<(), CacheError> {
        let mut connection = self.connection.clone();
        let _: () = connection.del(space.ready_key()).await?;
        let marks: Vec<String> = (1..SHARDS).map(|shard| space.ready_key_in(shard)).collect();
        let _: () = connection.del(marks).await?;
        for chunk in self.keys(&space.pattern()).await?.chunks(500) {
            let _: () = connection.del(chunk).await?;
        }
        Ok(())
    }

    /// Every key matching `pattern`, on every server.
    pub(super) async fn keys(&self, pattern: &str) -> Result<Vec<String>, CacheError> {
        Ok(self.connection.scan(pattern).await?)
    }

    /// Takes the build lock. Taken anew, its holder is copied into every shard first: a shard's snapshot
    /// pages check their own copy, so a builder that lost the lock is refused everywhere once another took
    /// it — before that one clears the space.
    pub(super) async fn lock(&self, space: Space<'_>, owner: &str, ttl: Duration) -> Result<bool, CacheError> {
        Ok(match self.take_lock(space, owner, ttl, false).await? {
            Lock::Held => false,
            Lock::Renewed => true,
            Lock::Taken => {
                let copies = (0..SHARDS).map(|shard| self.set(space.builder_key_in(shard), owner, Some(MARKER_TTL)));
                try_join_all(copies).await?;
                true
            }
        })
    }

    /// Runs the lock script; `renew_only`: never takes a free lock (a page of a build that lost it).
    async fn take_lock(
        &self,
        space: Space<'_>,
        owner: &str,
        ttl: Duration,
        renew_only: bool,
    ) -> Result<Lock, CacheError> {
        let mut invocation = LOCK_SCRIPT.key(space.lock_key());
        invocation.arg(owner).arg(ttl.as_millis() as u64).arg(u8::from(renew_only));
        Ok(match invocation.invoke_async::<i64>(&mut self.connection.clone()).await? {
            0 => Lock::Held,
            1 => Lock::Renewed,
            _ => Lock::Taken,
        })
    }

    pub(super) async fn unlock(&self, space: Space<'_>, owner: &str) -> Result<(), CacheError> {
        let _: i64 = UNLOCK_SCRIPT.key(space.lock_key()).arg(owner).invoke_async(&mut self.connection.clone()).await?;
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
                let page: Vec<(String, f64)> =
                    AFTER_SCRIPT.key(key).arg(score).arg(after).arg(count).invoke_async(&mut redis).await?;
                page
            }
        })
    }
}

/// One event's part in one shard: its bookkeeping there and its effects there.
fn unit(
    operands: &mut Operands,
    (space, shard, snapshot): (Space<'_>, u16, bool),
    index: usize,
    event: &RelationEvent,
    effects: &[&Effect],
) {
    // An expiry is one op per kind of data its key may name.
    let expiries = effects.iter().filter(|e| matches!(e, Effect::Expire(_))).count();
    push(operands, space.marker_key(shard, event));
    push(operands, space.versions_key(shard, event));
    push(operands, space.floors_key(shard, event));
    push(operands, event.followee);
    push(operands, event.version);
    push(operands, index);
    push(operands, u8::from(applies(event, snapshot)));
    push(operands, effects.len() + expiries * (DataKind::ALL.len() - 1));
    for effect in effects {
        match effect {
            Effect::CounterAdd((counter, delta)) => {
                push(operands, "counter");
                push(operands, space.key(DataKind::Counter, counter));
                push(operands, delta);
            }
            Effect::ZsetAdd(e) => zadd(operands, "zadd", space.key(SORTED, &e.key), e, 0, None),
            Effect::ZsetAddCapped(c) => zadd(operands, "zadd", space.key(SORTED, &c.entry.key), &c.entry, c.keep, None),
            Effect::ZsetAddGuarded(g) => {
                let (c, e) = (&g.add, &g.add.entry);
                let guard = Some((space.key(DataKind::Counter, &g.counter), g.at_least));
                zadd(operands, "zadd", space.key(SORTED, &e.key), e, c.keep, guard)
            }
            Effect::ZsetMemberWhile(w) => {
                let guard = Some((space.key(DataKind::Counter, &w.counter), w.at_least));
                zadd(operands, "zsync", space.key(SORTED, &w.entry.key), &w.entry, 0, guard)
            }
            Effect::ZsetRemove((set, id)) => {
                push(operands, "zrem");
                push(operands, space.key(SORTED, set));
                push(operands, member(*id));
            }
            Effect::ValueSet((value, text)) => {
                push(operands, "set");
                push(operands, space.key(DataKind::Value, value));
                push(operands, text);
            }
            Effect::ValueDelete(value) => {
                push(operands, "del");
                push(operands, space.key(DataKind::Value, value));
            }
            Effect::Expire((expiring, ms)) => {
                for kind in DataKind::ALL {
                    push(operands, "expire");
                    push(operands, space.key(kind, expiring));
                    push(operands, ms);
                }
            }
        }
    }
}

/// The key an effect writes, which places it in its shard (a guard shares its first id: checked output).
fn effect_key(effect: &Effect) -> &crate::plugins::Key {
    match effect {
        Effect::CounterAdd((key, _)) | Effect::ZsetRemove((key, _)) | Effect::ValueSet((key, _)) => key,
        Effect::ValueDelete(key) | Effect::Expire((key, _)) => key,
        Effect::ZsetAdd(entry) => &entry.key,
        Effect::ZsetAddCapped(capped) => &capped.entry.key,
        Effect::ZsetAddGuarded(guarded) => &guarded.add.entry.key,
        Effect::ZsetMemberWhile(syncing) => &syncing.entry.key,
    }
}

/// The operands of the script's `zadd` and `zsync` (`op`): key, member, score, how many to keep (0: all),
/// and the counter that must be at least some value for the add to apply (none: always).
fn zadd(operands: &mut Operands, op: &str, key: String, entry: &ZsetEntry, keep: u32, guard: Option<(String, i64)>) {
    let (guard, at_least) = guard.unwrap_or_default();
    push(operands, op);
    push(operands, key);
    push(operands, member(entry.member));
    push(operands, entry.score);
    push(operands, keep);
    push(operands, guard);
    push(operands, at_least);
}
