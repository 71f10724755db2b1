//! The cache's scripts — the one place its write semantics are decided — and what a batch becomes for
//! them. Both backends run these Lua scripts as they are: Redis in `EVALSHA`, the in-process cache in an
//! embedded Lua over its own data (`memory.rs`), so a new effect, gate or quota rule is written once and
//! cannot mean one thing in production and another on the embedded default. What a batch becomes for
//! [`APPLY`] is `batch.rs`'s.

use std::sync::LazyLock;

/// A Lua script as both backends run it.
pub struct CacheScript {
    pub(super) source: &'static str,
    /// Redis's handle: the script's SHA-1, sent instead of the source once the server has it.
    pub(super) redis: ::redis::Script,
}

impl CacheScript {
    pub(super) fn new(source: &'static str) -> Self {
        Self { source, redis: ::redis::Script::new(source) }
    }
}

/// ARGV: marker TTL (ms), build flag (1: a build's page, gated by the build lock, raising floors), counter limit, most members of a sorted set, member bytes, counter
/// bytes; number of counter checks, per check: counter key, most it may rise, most it may fall; number of
/// set checks, per check: sorted-set key, how many members, the members (the checks cover every effect of
/// the call); then per shard group: gate key, gate value, the group's usage counts (keys, bytes), how many
/// ARGV entries its events take, then per event: marker key, pair-versions hash (both empty in a build: the
/// floors stand for them), floors hash, pair field,
/// version, its index in the batch, whether its effects may apply (0: a snapshot's unfollow, or a build
/// of floors only, which only raise floors), op count, then per op an op code and its operands. Returns {-1} when a gate does not
/// hold, {-2} when a counter would leave the limit, {-3} when a sorted set would pass its most members (all
/// before anything is written), else {0, the indices of the events that were new here…}. Every write keeps
/// the shard's usage counts (added once per shard group).
///
/// The script reads each floors and pair-versions field it needs in one `HMGET` per hash and writes them back
/// in one `HSET` per hash at its end; a group's counter adds and plain sorted-set adds are gathered per key
/// and written once (before anything else reads or writes that key, and at the group's end) — the same
/// result as one command per effect, in a fraction of the commands (a build's page: ~2 per pair, not ~8).
/// An unknown op is refused before anything is written. Markers are set as events apply, the hashes and
/// gathered writes at the end: a Redis error in between (none can arise from the data: each kind of data
/// has keys of its own) would leave markers without their writes.
pub static APPLY: LazyLock<CacheScript> = LazyLock::new(|| {
    CacheScript::new(
        r#"
local ttl, snapshot, limit, most = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3]), tonumber(ARGV[4])
local member_bytes, counter_bytes = tonumber(ARGV[5]), tonumber(ARGV[6])
-- Most arguments handed to one command (Lua's unpack has a limit).
local chunk = 1000
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
  if held == 0 then
    held = n
  else
    for from = i + 2, i + 1 + n, chunk do
      local scores = redis.call('ZMSCORE', key, unpack(ARGV, from, math.min(from + chunk - 1, i + 1 + n)))
      for j = 1, #scores do
        if not scores[j] then held = held + 1 end
      end
    end
  end
  if held > most then return {-3} end
  i = i + 2 + n
end
-- The ARGV entries each op takes, its code included.
local width = {counter = 3, zadd = 7, zsync = 7, zrem = 3, set = 3, del = 2, expire = 3}
-- Every floors and pair-versions field the events name, read once per hash.
local fields, wanted, dirty = {}, {}, {}
local function want(hash, pair)
  if hash == '' then return end
  if not fields[hash] then fields[hash], wanted[hash] = {}, {} end
  if not fields[hash][pair] then
    fields[hash][pair] = 0
    table.insert(wanted[hash], pair)
  end
end
i = parts
while i <= #ARGV do
  i = i + 4
  local stop = i + tonumber(ARGV[i])
  i = i + 1
  while i <= stop do
    want(ARGV[i + 1], ARGV[i + 3])
    want(ARGV[i + 2], ARGV[i + 3])
    local n = tonumber(ARGV[i + 7])
    i = i + 8
    for _ = 1, n do
      local w = width[ARGV[i]]
      if not w then return redis.error_reply('unknown effect ' .. tostring(ARGV[i])) end
      i = i + w
    end
  end
end
for hash, names in pairs(wanted) do
  for from = 1, #names, chunk do
    local values = redis.call('HMGET', hash, unpack(names, from, math.min(from + chunk - 1, #names)))
    for j = 1, #values do fields[hash][names[from + j - 1]] = tonumber(values[j] or '0') end
  end
end
local function raise(hash, pair, version)
  fields[hash][pair] = version
  if not dirty[hash] then dirty[hash] = {} end
  dirty[hash][pair] = version
end
local applied = {0}
i = parts
while i <= #ARGV do
  local keys_count, bytes_count = ARGV[i + 2], ARGV[i + 3]
  local keys_grown, bytes_grown = 0, 0
  local function grow(keys, bytes)
    keys_grown, bytes_grown = keys_grown + keys, bytes_grown + bytes
  end
  -- Counter adds and plain sorted-set adds gathered per key, in the order they came.
  local sums, adds = {}, {}
  local function flush(key)
    local sum = sums[key]
    if sum then
      sums[key] = nil
      if redis.call('EXISTS', key) == 0 then grow(1, #key + counter_bytes) end
      redis.call('INCRBY', key, string.format('%d', sum))
    end
    local members = adds[key]
    if members then
      adds[key] = nil
      local created, added = redis.call('EXISTS', key) == 0, 0
      for from = 1, #members, chunk do
        added = added + redis.call('ZADD', key, unpack(members, from, math.min(from + chunk - 1, #members)))
      end
      if created then grow(1, #key + added * member_bytes) else grow(0, added * member_bytes) end
    end
  end
  -- The group's gathered writes, and its usage added once.
  local function settle()
    for key in pairs(sums) do flush(key) end
    for key in pairs(adds) do flush(key) end
    if keys_grown ~= 0 then redis.call('INCRBY', keys_count, keys_grown) end
    if bytes_grown ~= 0 then redis.call('INCRBY', bytes_count, bytes_grown) end
  end
  local function counter(key)
    flush(key)
    return tonumber(redis.call('GET', key) or '0')
  end
  local function zadd(key, score, member, keep)
    flush(key)
    local created = redis.call('EXISTS', key) == 0
    local added = redis.call('ZADD', key, score, member)
    if keep > 0 then added = added - redis.call('ZREMRANGEBYRANK', key, 0, -keep - 1) end
    if created then grow(1, #key + added * member_bytes) else grow(0, added * member_bytes) end
  end
  local function zrem(key, member)
    flush(key)
    if redis.call('ZREM', key, member) == 1 then
      if redis.call('EXISTS', key) == 0 then grow(-1, -#key - member_bytes) else grow(0, -member_bytes) end
    end
  end
  i = i + 4
  local stop = i + tonumber(ARGV[i])
  i = i + 1
  while i <= stop do
    local marker, versions, floors, pair = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    local version, index, applies, n = tonumber(ARGV[i + 4]), ARGV[i + 5], ARGV[i + 6] == '1', tonumber(ARGV[i + 7])
    i = i + 8
    local floor = fields[floors][pair]
    local fresh, newer = false, false
    if snapshot then
      -- A build's event is fresh above its pair's floor (a page applied again is below it), and newer too:
      -- the build began on a cleared space and is its only writer, so no marker or pair version is kept.
      fresh = applies and version > floor
      newer = fresh
    else
      fresh = applies and version > floor and redis.call('SET', marker, '1', 'NX', 'PX', ttl)
      if fresh and version > fields[versions][pair] then
        raise(versions, pair, version)
        newer = true
      end
    end
    if fresh then table.insert(applied, index) end
    if snapshot and version > floor then raise(floors, pair, version) end
    for _ = 1, n do
      local op, key = ARGV[i], ARGV[i + 1]
      if op == 'counter' then
        if fresh then sums[key] = (sums[key] or 0) + tonumber(ARGV[i + 2]) end
      elseif op == 'zadd' then
        local guard, at_least, keep = ARGV[i + 5], tonumber(ARGV[i + 6]), tonumber(ARGV[i + 4])
        if newer and guard == '' and keep == 0 then
          if not adds[key] then adds[key] = {} end
          table.insert(adds[key], ARGV[i + 3])
          table.insert(adds[key], ARGV[i + 2])
        elseif newer and (guard == '' or counter(guard) >= at_least) then
          zadd(key, ARGV[i + 3], ARGV[i + 2], keep)
        end
      elseif op == 'zsync' then
        if fresh then
          if counter(ARGV[i + 5]) >= tonumber(ARGV[i + 6]) then
            zadd(key, ARGV[i + 3], ARGV[i + 2], 0)
          else
            zrem(key, ARGV[i + 2])
          end
        end
      elseif op == 'zrem' then
        if newer then zrem(key, ARGV[i + 2]) end
      elseif op == 'set' then
        if newer then
          flush(key)
          local value = ARGV[i + 2]
          if redis.call('EXISTS', key) == 0 then
            grow(1, #key + #value)
          else
            grow(0, #value - redis.call('STRLEN', key))
          end
          redis.call('SET', key, value)
        end
      elseif op == 'del' then
        if newer then
          flush(key)
          local old = redis.call('STRLEN', key)
          if redis.call('DEL', key) == 1 then grow(-1, -#key - old) end
        end
      elseif newer then
        flush(key)
        redis.call('PEXPIRE', key, ARGV[i + 2])
      end
      i = i + width[op]
    end
  end
  settle()
end
for hash, changed in pairs(dirty) do
  local values = {}
  for pair, version in pairs(changed) do
    table.insert(values, pair)
    table.insert(values, string.format('%d', version))
  end
  for from = 1, #values, chunk do
    redis.call('HSET', hash, unpack(values, from, math.min(from + chunk - 1, #values)))
  end
end
return applied
"#,
    )
});

/// Takes the lock (KEYS[1]) for ARGV[1] for ARGV[2] ms if it is free (2; unless ARGV[3] is '1': only renew)
/// or already ARGV[1]'s (1); 0 when another holds it (or, renewing only, nobody).
pub static LOCK: LazyLock<CacheScript> = LazyLock::new(|| {
    CacheScript::new(
        r#"
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] and (holder or ARGV[3] == '1') then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if holder then return 1 end
return 2
"#,
    )
});

/// Deletes the lock (KEYS[1]) if ARGV[1] holds it.
pub static UNLOCK: LazyLock<CacheScript> = LazyLock::new(|| {
    CacheScript::new(
        r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"#,
    )
});

/// KEYS[1] a sorted set; ARGV score, member, count (Redis only: the in-process cache walks its set). The `count` entries after (score, member) in descending
/// order, found by rank — O(log n + count), however many members share the score. When the member has moved
/// or gone since the cursor was made, its position is taken by putting the member there for the moment of
/// the script and putting back what was (atomic: no other command sees it).
pub static AFTER: LazyLock<CacheScript> = LazyLock::new(|| {
    CacheScript::new(
        r#"
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
"#,
    )
});
