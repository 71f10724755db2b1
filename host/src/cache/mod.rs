//! Where projector plugins' data lives: Redis in production, an in-process stand-in (`memory.rs`) on the
//! embedded default, with one meaning for both.
//!
//! A batch of events is applied exactly once in result, per event and atomically: its event-id marker (kept
//! [`MARKER_TTL`], longer than any redelivery window), its counter adds only if the marker is new (counters
//! commute: each event counts once, in any order), and its state effects (sorted-set adds and removals,
//! values, expiries) only if the event's version is newer than the last applied for its pair (last writer
//! wins: a late, older event changes nothing). So a redelivered batch, a replayed partition, one pair's
//! events out of order, or a crash between effects and offset commit never double-count. A backfill applies
//! each pair's current state as a snapshot event and raises the pair's floor to its version: bus events at
//! or below the floor are already counted by it (a snapshot's unfollow applies nothing: it only raises the
//! floors, in every shard its effects name).
//!
//! Each batch carries a [`Gate`] checked in the same atomic step: live events apply only to a space that a
//! backfill completed for the plugin version projecting them, snapshot events only while their builder
//! still holds the space's build lock. Keys are rendered `{tenant:plugin@version#shard}:…`: a plugin names
//! only its own data.
//!
//! **Shards.** A space is spread over [`SHARDS`] slot groups by the first id of each key (a user's
//! counters and sets stay together; a tenant's data spreads over every node of a Redis Cluster). The hash
//! tag makes each shard one cluster slot. On a cluster the atomic unit is an event's effects *within one
//! shard*: each shard keeps its own markers, pair versions and floors, so every shard's part of an event
//! applies exactly once in result, on its own, one script per shard. On one Redis (and in memory) a batch
//! is one atomic step and an event one unit, its bookkeeping in its home shard (one marker per event, not
//! per shard: half the writes for a two-key event). Every shard has its copy of the completion mark and of
//! the build lock's holder either way. A guarded effect reads a counter in its own shard: plugin output
//! whose guard is keyed by another first id is refused (`plugins/calls.rs`), on every backend alike. The
//! bookkeeping differs between one Redis and a cluster, so moving to a cluster means building the
//! projections there (the workers do it for an empty cluster), not copying keys.

mod connection;
mod memory;
mod redis;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

pub use self::connection::RedisConnection;
pub use self::memory::MemoryCache;
pub use self::redis::RedisCache;
use crate::plugins::{Effect, Key, RelationEvent};

/// How long an applied event's marker is kept: redelivery older than this could count twice.
pub const MARKER_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The derived-data store of a deployment.
#[derive(Clone)]
pub enum Cache {
    Redis(RedisCache),
    /// Only this process sees it: the embedded default, where `strand serve` runs the API and the workers.
    Memory(Arc<MemoryCache>),
}

/// A failure of the store (the in-process one does not fail).
#[derive(Debug, thiserror::Error)]
#[error("Redis failed: {0}")]
pub struct CacheError(#[from] ::redis::RedisError);

/// The condition a batch is applied under, checked atomically with it.
#[derive(Debug, Clone, Copy)]
pub enum Gate<'a> {
    /// Live events: the space was completed by the plugin version with this identity.
    Built(&'a str),
    /// A backfill's snapshot events: `owner` still holds the space's build lock, which is renewed for `ttl`.
    Building { owner: &'a str, ttl: Duration },
}

/// What became of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Applied; this many events were new.
    Events(usize),
    /// Not applied: the gate did not hold.
    Refused,
    /// Not applied, nothing changed: a counter would leave ±[`COUNTER_LIMIT`] if the batch applied.
    OutOfRange,
    /// Not applied, nothing changed: the space is at its [`Quota`], or a sorted set would pass it.
    OverQuota(Exceeded),
}

/// How much one tenant's space of a deployed projector version may hold: Redis and this process are shared
/// by every tenant, so none may fill them. Measured as the space is written (see [`Usage`]); bundled
/// versions' spaces — the platform's own code, bounded by the truth — are not limited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Data keys (counters, sorted sets, values).
    pub keys: u64,
    /// Bytes of keys, values and members, as [`Usage`] counts them.
    pub bytes: u64,
    /// Members of one sorted set (adds capped at or below it are always within it).
    pub members: u64,
}

impl Default for Quota {
    fn default() -> Self {
        Self { keys: 1_000_000, bytes: 256 << 20, members: 1_000_000 }
    }
}

impl Quota {
    /// No limit: the bundled versions' spaces.
    pub const UNLIMITED: Quota = Quota { keys: u64::MAX, bytes: u64::MAX, members: u64::MAX };

    /// The quota of `space`.
    fn of(&self, space: Space<'_>) -> Quota {
        if space.version == 0 {
            Self::UNLIMITED
        } else {
            *self
        }
    }

    /// Whether it limits a space's keys or bytes at all: an unlimited space's usage is never read.
    fn limits_size(&self) -> bool {
        self.keys != u64::MAX || self.bytes != u64::MAX
    }

    /// What `usage` has reached of this quota, if anything: then no batch applies to the space.
    fn reached(&self, usage: Usage) -> Option<Exceeded> {
        // Counts are never below zero but for a lost write; `u64::MAX` (no quota) is never reached.
        let (keys, bytes) = (usage.keys.max(0) as u64, usage.bytes.max(0) as u64);
        if keys >= self.keys {
            Some(Exceeded::Keys(self.keys))
        } else if bytes >= self.bytes {
            Some(Exceeded::Bytes(self.bytes))
        } else {
            None
        }
    }
}

/// Which part of a [`Quota`] a batch met, with its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    Keys(u64),
    Bytes(u64),
    Members(u64),
}

impl std::fmt::Display for Exceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exceeded::Keys(most) => write!(f, "the space holds its quota of {most} keys"),
            Exceeded::Bytes(most) => write!(f, "the space holds its quota of {most} bytes"),
            Exceeded::Members(most) => write!(f, "a sorted set would pass its quota of {most} members"),
        }
    }
}

/// What a space holds, kept by both backends as effects write it, in two counters per shard: a data key
/// counts its name's bytes, a counter 8 more, a value its text's, a sorted-set member [`MEMBER_BYTES`].
/// Keys that expire are counted until the space is built again (it is cleared first).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub keys: i64,
    pub bytes: i64,
}

impl Usage {
    /// The usage that the counts read at [`Space::usage_keys`] tell.
    fn sum(counts: &[Option<String>]) -> Usage {
        let count = |text: &Option<String>| text.as_deref().and_then(|t| t.parse::<i64>().ok()).unwrap_or(0);
        counts.chunks(2).fold(Usage::default(), |usage, shard| Usage {
            keys: usage.keys + count(&shard[0]),
            bytes: usage.bytes + shard.get(1).map_or(0, count),
        })
    }
}

/// What a sorted-set member counts towards a space's bytes: its fixed-width id and its score.
const MEMBER_BYTES: i64 = 28;
/// What a counter's number counts towards a space's bytes.
const COUNTER_BYTES: i64 = 8;

/// Where a descending page of a sorted set starts.
#[derive(Debug, Clone, Copy)]
pub enum PageStart<'a> {
    /// After skipping this many members.
    Rank(usize),
    /// Strictly after this (score, member): older, or as old with a smaller member.
    After(f64, &'a str),
}

/// One projector version's data of one tenant.
#[derive(Debug, Clone, Copy)]
pub struct Space<'a> {
    pub tenant: &'a str,
    pub plugin: &'a str,
    /// The plugin version that fills it (0: the bundled one).
    pub version: i64,
}

/// The kind of data a key holds, fixed by the effects that write it. It is part of the rendered key, so a
/// plugin that names one key in a counter and in a sorted set gets two keys: no effect can ever meet data
/// of another kind (Redis would abort the script half-way with WRONGTYPE; the in-process cache would
/// replace the data), whatever a plugin returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataKind {
    /// Written by `counter-add`, read by guards and by counts.
    Counter,
    /// Written by the `zset-*` effects, read by lists.
    SortedSet,
    /// Written by `value-set` and `value-delete`.
    Value,
}

impl DataKind {
    pub const ALL: [DataKind; 3] = [DataKind::Counter, DataKind::SortedSet, DataKind::Value];

    /// Prefixes the space name; names are of `A-Z a-z 0-9 . _ -`, so `c.x` (counter `x`) can only be
    /// read back one way.
    fn tag(self) -> &'static str {
        match self {
            DataKind::Counter => "c.",
            DataKind::SortedSet => "z.",
            DataKind::Value => "v.",
        }
    }
}

/// Most a counter may hold either way. Redis's Lua compares in `f64`, exact below 2^53: with the limit at
/// 2^52, a counter plus a batch's checked adds stays exact, so both backends refuse the same batch.
pub const COUNTER_LIMIT: i64 = 1 << 52;

/// How many slot groups one space is spread over (see the module's documentation): enough to spread a big
/// space over every master of a cluster, few enough that per-shard marks stay cheap to write.
pub const SHARDS: u16 = 64;

/// The shard of a key: by its first id, so a key and the guard it reads (same first id) stay together.
/// Keys without ids are in shard 0.
pub fn shard(key: &Key) -> u16 {
    key.ids.first().map_or(0, |id| id.rem_euclid(i64::from(SHARDS)) as u16)
}

/// The shard that keeps an event's own bookkeeping, also when its effects touch no key (the follower's).
pub fn home_shard(event: &RelationEvent) -> u16 {
    event.follower.rem_euclid(i64::from(SHARDS)) as u16
}

impl std::fmt::Display for Space<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}@{}", self.tenant, self.plugin, self.version)
    }
}

impl<'a> Space<'a> {
    /// The bundled version's space: the one the API serves counts and lists from (those projector names are
    /// reserved, so no tenant deploys another version of them).
    pub fn bundled(tenant: &'a str, plugin: &'a str) -> Self {
        Self { tenant, plugin, version: 0 }
    }

    /// A plugin's key holding `kind` data, rendered `{tenant:plugin@version#shard}:{c|z|v}.space:id:…`.
    pub fn key(&self, kind: DataKind, key: &Key) -> String {
        let mut rendered = self.in_shard(shard(key), kind.tag());
        rendered.push_str(&key.space);
        for id in &key.ids {
            rendered.push(':');
            rendered.push_str(&id.to_string());
        }
        rendered
    }

    /// The counter `name:ids…`, as a projector's `counter-add` writes it.
    pub fn counter(&self, name: &str, ids: impl IntoIterator<Item = i64>) -> String {
        self.key(DataKind::Counter, &Key { space: name.to_owned(), ids: ids.into_iter().collect() })
    }

    /// The sorted set `name:ids…`, as a projector's `zset-*` effects write it.
    pub fn sorted_set(&self, name: &str, ids: impl IntoIterator<Item = i64>) -> String {
        self.key(DataKind::SortedSet, &Key { space: name.to_owned(), ids: ids.into_iter().collect() })
    }

    /// The value `name:ids…`, as a projector's `value-set` writes it.
    pub fn value(&self, name: &str, ids: impl IntoIterator<Item = i64>) -> String {
        self.key(DataKind::Value, &Key { space: name.to_owned(), ids: ids.into_iter().collect() })
    }

    /// `{tenant:plugin@version#shard}`: the hash tag that puts a shard in one cluster slot.
    fn tag(&self, shard: u16) -> String {
        format!("{{{self}#{shard}}}")
    }

    /// `{tenant:plugin@version#shard}:name`: a key inside the space.
    fn in_shard(&self, shard: u16, name: &str) -> String {
        format!("{}:{name}", self.tag(shard))
    }

    /// Whether `key` is inside this space (its data or bookkeeping; not the build lock or builder copies).
    pub(super) fn holds(&self, key: &str) -> bool {
        self.relative_part(key).is_some()
    }

    /// The glob of every key inside the space, for `SCAN`.
    fn pattern(&self) -> String {
        format!("{{{self}#*}}:*")
    }

    /// A key of this space without the space's prefix and shard (`c.followers:7`), as a diff shows it.
    pub fn relative<'k>(&self, key: &'k str) -> &'k str {
        self.relative_part(key).unwrap_or(key)
    }

    fn relative_part<'k>(&self, key: &'k str) -> Option<&'k str> {
        // Piece by piece, without rendering the prefix: memory's clear and scans call this for every key.
        let rest = key.strip_prefix('{')?.strip_prefix(self.tenant)?.strip_prefix(':')?.strip_prefix(self.plugin)?;
        let (version, rest) = rest.strip_prefix('@')?.split_once('#')?;
        // Exactly as rendered: digits, no leading zero.
        let canonical = version.bytes().all(|b| b.is_ascii_digit()) && (version == "0" || !version.starts_with('0'));
        if !canonical || version.parse::<i64>().ok()? != self.version {
            return None;
        }
        let (shard, relative) = rest.split_once("}:")?;
        (!shard.is_empty() && shard.bytes().all(|b| b.is_ascii_digit())).then_some(relative)
    }

    /// The key of this space that [`Space::relative`] shows as `relative` (`c.followers:7`).
    pub fn absolute(&self, relative: &str) -> Option<String> {
        let kind = DataKind::ALL.into_iter().find(|kind| relative.starts_with(kind.tag()))?;
        let mut parts = relative[kind.tag().len()..].split(':');
        let space = parts.next()?.to_owned();
        let ids = parts.map(str::parse).collect::<Result<Vec<i64>, _>>().ok()?;
        Some(self.key(kind, &Key { space, ids }))
    }

    /// Holds the identity of the plugin version that completed the space: shard 0's completion mark, which
    /// is written after every other shard's and deleted before them. Its name changes with the layout of
    /// keys (`3`: sharded hash tags), so a space built under an older layout is stale and rebuilt after an
    /// upgrade, never read under the new names.
    pub fn ready_key(&self) -> String {
        self.ready_key_in(0)
    }

    /// A shard's copy of the completion mark, which that shard's live batches check.
    fn ready_key_in(&self, shard: u16) -> String {
        self.in_shard(shard, "~ready3")
    }

    /// Outside every space (tenant ids have no `~`), so clearing the space keeps it.
    fn lock_key(&self) -> String {
        format!("~building:{self}")
    }

    /// A shard's copy of the build lock's holder, which that shard's snapshot pages check; outside the
    /// space (`}~`, not `}:`), so clearing the space keeps it.
    fn builder_key_in(&self, shard: u16) -> String {
        format!("{}~builder", self.tag(shard))
    }

    /// A shard's share of the space's [`Usage`]: its data keys, and their bytes.
    fn usage_keys_in(&self, shard: u16) -> [String; 2] {
        [self.in_shard(shard, "~keys"), self.in_shard(shard, "~bytes")]
    }

    /// Every shard's usage counts, in pairs.
    fn usage_keys(&self) -> Vec<String> {
        (0..SHARDS).flat_map(|shard| self.usage_keys_in(shard)).collect()
    }

    fn marker_key(&self, shard: u16, event: &RelationEvent) -> String {
        self.in_shard(shard, &format!("~applied:{}", event.event_id))
    }

    /// Per follower: the last version applied per followee.
    fn versions_key(&self, shard: u16, event: &RelationEvent) -> String {
        self.in_shard(shard, &format!("~versions:{}", event.follower))
    }

    /// Per follower: the version each followee's snapshot covers.
    fn floors_key(&self, shard: u16, event: &RelationEvent) -> String {
        self.in_shard(shard, &format!("~floors:{}", event.follower))
    }
}

/// Whether an event's effects may apply: not those of a backfill's unfollow, which only raises its pair's
/// floors — in every shard its effects name, so that a bus event the snapshot covers is skipped wherever it
/// would land.
fn applies(event: &RelationEvent, snapshot: bool) -> bool {
    !(snapshot && event.action == crate::plugins::Action::Unfollow)
}

/// An event's effects in the order both backends apply them: memberships that follow a counter last, so
/// they see the event's own counter adds whatever order the plugin listed them in.
fn in_order(effects: &[Effect]) -> impl Iterator<Item = &Effect> {
    let follows_counter = |e: &&Effect| matches!(e, Effect::ZsetMemberWhile(_));
    effects.iter().filter(move |e| !follows_counter(e)).chain(effects.iter().filter(follows_counter))
}

/// Per counter a batch adds to: the key, and the sums of its positive and of its negative adds — the
/// furthest the counter can move up and down if every add applies. Both backends check these against
/// [`COUNTER_LIMIT`] before they change anything, so a batch is applied whole or not at all.
fn counter_swings<'e>(space: Space<'_>, effects: impl IntoIterator<Item = &'e Effect>) -> Vec<(String, i64, i64)> {
    let mut swings: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (counter, delta) in effects.into_iter().filter_map(|effect| match effect {
        Effect::CounterAdd((counter, delta)) => Some((counter, *delta)),
        _ => None,
    }) {
        let (up, down) = swings.entry(space.key(DataKind::Counter, counter)).or_default();
        if delta > 0 {
            *up = up.saturating_add(delta);
        } else {
            *down = down.saturating_add(delta);
        }
    }
    swings.into_iter().map(|(key, (up, down))| (key, up, down)).collect()
}

/// Per sorted set a batch adds to beyond what a cap keeps within `quota`: the key and the members added,
/// which both backends check against the quota (with the members already there) before they change
/// anything. Conservative: every add counts, also one a gate, guard or version would skip.
fn set_growth<'e>(
    space: Space<'_>,
    effects: impl IntoIterator<Item = &'e Effect>,
    quota: Quota,
) -> Vec<(String, BTreeSet<String>)> {
    if quota.members == u64::MAX {
        return Vec::new();
    }
    let uncapped = |keep: u32| keep == 0 || u64::from(keep) > quota.members;
    let mut growth: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for entry in effects.into_iter().filter_map(|effect| match effect {
        Effect::ZsetAdd(entry) => Some(entry),
        Effect::ZsetAddCapped(capped) if uncapped(capped.keep) => Some(&capped.entry),
        Effect::ZsetAddGuarded(guarded) if uncapped(guarded.add.keep) => Some(&guarded.add.entry),
        Effect::ZsetMemberWhile(kept) => Some(&kept.entry),
        _ => None,
    }) {
        growth.entry(space.key(DataKind::SortedSet, &entry.key)).or_default().insert(member(entry.member));
    }
    growth.into_iter().collect()
}

/// Whether a counter now at `current` stays within ±[`COUNTER_LIMIT`] whichever of its adds apply.
fn within_range(current: i64, up: i64, down: i64) -> bool {
    current.saturating_add(up) <= COUNTER_LIMIT && current.saturating_add(down) >= -COUNTER_LIMIT
}

/// A sorted-set member, fixed-width so that equal scores order by user id exactly as the database does.
pub fn member(id: i64) -> String {
    format!("{id:020}")
}

impl Cache {
    /// On `redis` (the process's one handle, shared with the token buckets), else a new in-process cache;
    /// deployed projectors' spaces held to `quota`.
    pub fn on(redis: Option<RedisConnection>, quota: Quota) -> Self {
        match redis {
            Some(connection) => Self::Redis(RedisCache::new(connection).with_quota(quota)),
            None => Self::Memory(Arc::new(MemoryCache::new(quota))),
        }
    }

    /// Whether the store answers (the in-process one always does).
    pub async fn ping(&self) -> Result<(), CacheError> {
        match self {
            Self::Redis(redis) => redis.ping().await,
            Self::Memory(_) => Ok(()),
        }
    }

    /// Applies `effects[i]` of `events[i]` in `space` if `gate` holds (see the module's documentation).
    pub async fn apply(
        &self,
        space: Space<'_>,
        events: &[RelationEvent],
        effects: &[Vec<Effect>],
        gate: Gate<'_>,
    ) -> Result<Applied, CacheError> {
        match self {
            Self::Redis(redis) => redis.apply(space, events, effects, gate).await,
            Self::Memory(memory) => Ok(memory.apply(space, events, effects, gate)),
        }
    }

    /// What `space` holds, by the counts its writes keep.
    pub async fn usage(&self, space: Space<'_>) -> Result<Usage, CacheError> {
        Ok(Usage::sum(&self.texts(&space.usage_keys()).await?))
    }

    /// The identity of the plugin version that completed `space`, if one did: shard 0's mark, which readers
    /// check (cheap: one key).
    pub async fn built_by(&self, space: Space<'_>) -> Result<Option<String>, CacheError> {
        Ok(self.texts(&[space.ready_key()]).await?.pop().flatten())
    }

    /// Like [`Cache::built_by`], but only if every shard still has the mark: after a Redis failover lost some
    /// shards' marks (their live batches are refused), the space must be built again although shard 0 says
    /// it is complete.
    pub async fn built_whole_by(&self, space: Space<'_>) -> Result<Option<String>, CacheError> {
        let Self::Redis(_) = self else { return self.built_by(space).await };
        let marks = self.texts(&(0..SHARDS).map(|shard| space.ready_key_in(shard)).collect::<Vec<_>>()).await?;
        let first = marks.first().cloned().flatten();
        Ok(first.filter(|identity| marks.iter().all(|mark| mark.as_deref() == Some(identity.as_str()))))
    }

    /// Marks `space` complete, built by the plugin version `identity`: reads may use it, live events apply.
    pub async fn mark_built(&self, space: Space<'_>, identity: &str) -> Result<(), CacheError> {
        match self {
            Self::Redis(redis) => redis.mark_built(space, identity).await,
            Self::Memory(memory) => {
                memory.set(&space.ready_key(), identity);
                Ok(())
            }
        }
    }

    /// Deletes everything in `space`, its completion mark first.
    pub async fn clear(&self, space: Space<'_>) -> Result<(), CacheError> {
        match self {
            Self::Redis(redis) => redis.clear(space).await,
            Self::Memory(memory) => {
                memory.clear(space);
                Ok(())
            }
        }
    }

    /// The keys of `space`'s data (its bookkeeping — marks, markers, versions, floors — left out), found by
    /// a scan of the store: for diffs and audits, not for the request path.
    pub async fn data_keys(&self, space: Space<'_>) -> Result<Vec<String>, CacheError> {
        let mut keys = match self {
            Self::Redis(redis) => redis.keys(&space.pattern()).await?,
            Self::Memory(memory) => memory.keys(space),
        };
        keys.retain(|key| !space.relative(key).starts_with('~'));
        keys.sort_unstable();
        Ok(keys)
    }

    /// Takes (or renews) `space`'s build lock for `owner`; false while another owner holds it.
    pub async fn lock(&self, space: Space<'_>, owner: &str, ttl: Duration) -> Result<bool, CacheError> {
        match self {
            Self::Redis(redis) => redis.lock(space, owner, ttl).await,
            Self::Memory(memory) => Ok(memory.lock(&space.lock_key(), owner, ttl)),
        }
    }

    /// Releases `space`'s build lock if `owner` still holds it.
    pub async fn unlock(&self, space: Space<'_>, owner: &str) -> Result<(), CacheError> {
        match self {
            Self::Redis(redis) => redis.unlock(space, owner).await,
            Self::Memory(memory) => {
                memory.unlock(&space.lock_key(), owner);
                Ok(())
            }
        }
    }

    /// The values of `keys` (rendered keys), `None` where absent.
    pub async fn texts(&self, keys: &[String]) -> Result<Vec<Option<String>>, CacheError> {
        match self {
            Self::Redis(redis) => redis.texts(keys).await,
            Self::Memory(memory) => Ok(memory.texts(keys)),
        }
    }

    /// How many members the sorted set `key` (rendered) holds.
    pub async fn cardinality(&self, key: &str) -> Result<u64, CacheError> {
        match self {
            Self::Redis(redis) => redis.cardinality(key).await,
            Self::Memory(memory) => Ok(memory.cardinality(key)),
        }
    }

    /// Up to `count` members of the sorted set `key` with their scores, highest first (ties: highest member
    /// first), from `from`.
    pub async fn descending(
        &self,
        key: &str,
        from: PageStart<'_>,
        count: usize,
    ) -> Result<Vec<(String, f64)>, CacheError> {
        match self {
            Self::Redis(redis) => redis.descending(key, from, count).await,
            Self::Memory(memory) => Ok(memory.descending(key, from, count)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_space_holds_exactly_its_own_keys_and_renders_them_back_from_their_relative_form() {
        let space = Space { tenant: "acme", plugin: "counts", version: 1 };
        let key = space.counter("followers", [70, 3]);
        assert_eq!(key, "{acme:counts@1#6}:c.followers:70:3", "sharded by the first id");
        assert_eq!(space.relative(&key), "c.followers:70:3");
        assert_eq!(space.absolute("c.followers:70:3").as_deref(), Some(key.as_str()));
        assert!(space.holds(&space.ready_key_in(9)), "its bookkeeping");
        for other in
            [Space { version: 11, ..space }, Space { tenant: "acme2", ..space }, Space { plugin: "counts2", ..space }]
        {
            assert!(!space.holds(&other.counter("followers", [70])), "{other}");
        }
        for foreign in ["{acme:counts@01#6}:c.x", "{acme:counts@+1#6}:c.x", "{acme:counts@1#}:c.x", "~building:acme"] {
            assert!(!space.holds(foreign), "{foreign}");
        }
        assert!(!space.holds(&space.builder_key_in(6)), "the builder copies survive a clear");
    }
}
