//! Where projector plugins' data lives: Redis in production, an in-process stand-in (`memory.rs`) on the
//! embedded default, with one meaning for both — decided once: every write is one of the Lua scripts of
//! `script.rs`, which Redis runs and the in-process cache runs too, on Redis's data model.
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

mod batch;
mod connection;
mod memory;
mod quota;
mod redis;
mod script;
mod space;

use std::sync::Arc;
use std::time::Duration;

use ::redis::FromRedisValue;
use futures::future::try_join_all;

pub use self::batch::COUNTER_LIMIT;
pub use self::connection::RedisConnection;
pub use self::memory::MemoryCache;
pub use self::quota::{Exceeded, Quota, Usage};
pub use self::redis::RedisCache;
use self::script::CacheScript;
pub use self::space::{home_shard, member, shard, DataKind, PageStart, Space, SHARDS};
use crate::plugins::{Effect, RelationEvent};

/// How long an applied event's marker is kept: redelivery older than this could count twice.
pub const MARKER_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The derived-data store of a deployment.
#[derive(Clone)]
pub enum Cache {
    Redis(RedisCache),
    /// Only this process sees it: the embedded default, where `strand serve` runs the API and the workers.
    Memory(Arc<MemoryCache>),
}

/// A failure of the store.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("Redis failed: {0}")]
    Redis(#[from] ::redis::RedisError),
    /// The in-process cache refused a command or a snapshot: a fault of the cache's own code, never data.
    #[error("the in-process cache failed: {0}")]
    Memory(String),
    /// The in-process cache's Lua failed on a script: the same fault, with Lua's own error.
    #[error("the in-process cache's script failed")]
    MemoryScript(#[source] mlua::Error),
}

/// The condition a batch is applied under, checked atomically with it.
#[derive(Debug, Clone, Copy)]
pub enum Gate<'a> {
    /// Live events: the space was completed by the plugin version with this identity.
    Built(&'a str),
    /// A build's events: `owner` still holds the space's build lock, which is renewed for `ttl`.
    Building { owner: &'a str, ttl: Duration, from: BuildFrom },
}

/// What a build applies, and so which of its events' effects apply. Every build event raises its pair's
/// floors (in every shard its effects name): the bus events it covers are skipped when the live path meets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildFrom {
    /// The truth's current state of each pair: an edge's effects apply, an ended edge's do not.
    Truth,
    /// The bus's retained log, every event in order (a projector that declares history): all apply.
    Log,
    /// The truth's pairs as floors only (a projector that declares history, with no whole log to replay
    /// from): nothing applies, and the space counts from now on.
    Floors,
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

/// What the lock script did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lock {
    HeldByAnother,
    Renewed,
    Taken,
}

/// Everything the cache does is written once, below, in terms of four operations each backend offers:
/// run one of the cache's scripts, run a command, list a space's keys, and say whether keys are spread
/// over a cluster — and one read each does its own way (a page after a cursor).
impl Cache {
    /// On `redis` (the process's one handle, shared with the token buckets), else a new in-process cache;
    /// deployed projectors' spaces held to `quota`.
    pub fn on(redis: Option<RedisConnection>, quota: Quota) -> Self {
        match redis {
            Some(connection) => Self::Redis(RedisCache::new(connection).with_quota(quota)),
            None => Self::Memory(Arc::new(MemoryCache::new(quota))),
        }
    }

    /// What each deployed projector version's space may hold.
    pub fn quota(&self) -> Quota {
        match self {
            Self::Redis(redis) => redis.quota(),
            Self::Memory(memory) => memory.quota(),
        }
    }

    fn is_cluster(&self) -> bool {
        match self {
            Self::Redis(redis) => redis.is_cluster(),
            Self::Memory(_) => false,
        }
    }

    async fn eval<'a, T: FromRedisValue>(
        &self,
        script: &CacheScript,
        keys: &[String],
        args: impl IntoIterator<Item = &'a [u8]> + Send,
    ) -> Result<T, CacheError> {
        crate::db::held::forbid_wait("the cache");
        let reply = match self {
            Self::Redis(redis) => redis.eval(script, keys, args).await?,
            Self::Memory(memory) => memory.eval(script, keys, args)?,
        };
        Ok(::redis::from_redis_value(reply).map_err(::redis::RedisError::from)?)
    }

    async fn query<T: FromRedisValue>(&self, command: ::redis::Cmd) -> Result<T, CacheError> {
        crate::db::held::forbid_wait("the cache");
        let reply = match self {
            Self::Redis(redis) => redis.query(&command).await?,
            Self::Memory(memory) => memory.query(&command)?,
        };
        Ok(::redis::from_redis_value(reply).map_err(::redis::RedisError::from)?)
    }

    async fn space_keys(&self, space: Space<'_>) -> Result<Vec<String>, CacheError> {
        crate::db::held::forbid_wait("the cache");
        match self {
            Self::Redis(redis) => redis.space_keys(space).await,
            Self::Memory(memory) => Ok(memory.space_keys(space)),
        }
    }

    /// Whether the store answers.
    pub async fn ping(&self) -> Result<(), CacheError> {
        let _pong: String = self.query(::redis::cmd("PING")).await?;
        Ok(())
    }

    /// Applies `effects[i]` of `events[i]` in `space` if `gate` holds (see the module's documentation): the
    /// [`script::APPLY`] script, once per batch (once per shard on a cluster).
    pub async fn apply(
        &self,
        space: Space<'_>,
        events: &[RelationEvent],
        effects: &[Vec<Effect>],
        gate: Gate<'_>,
    ) -> Result<Applied, CacheError> {
        let (holder, build) = match gate {
            Gate::Built(identity) => (identity, None),
            Gate::Building { owner, ttl, from } => {
                // Renewed here, checked per shard by the builder's copies (see `lock`).
                if self.take_lock(space, owner, ttl, true).await? != Lock::Renewed {
                    return Ok(Applied::Refused);
                }
                (owner, Some(from))
            }
        };
        let quota = self.quota().of(space);
        // Bundled spaces are not limited: their batches skip the read.
        if quota.limits_size() {
            if let Some(reached) = quota.reached(self.usage(space).await?) {
                return Ok(Applied::OverQuota(reached));
            }
        }
        let calls = batch::apply_calls(space, (events, effects), (holder, build), quota, self.is_cluster());
        let replies = try_join_all(calls.iter().map(|call| {
            let route: Vec<String> = call.route.iter().cloned().collect();
            async move { self.eval::<Vec<i64>>(&script::APPLY, &route, batch::arguments(&call.operands)).await }
        }))
        .await?;
        Ok(batch::applied(&replies, quota))
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
        let marks = self.texts(&(0..SHARDS).map(|shard| space.ready_key_in(shard)).collect::<Vec<_>>()).await?;
        let first = marks.first().cloned().flatten();
        Ok(first.filter(|identity| marks.iter().all(|mark| mark.as_deref() == Some(identity.as_str()))))
    }

    /// Marks `space` complete, built by the plugin version `identity`: reads may use it, live events apply.
    /// Every shard's copy first, shard 0's — the one readers check — last.
    pub async fn mark_built(&self, space: Space<'_>, identity: &str) -> Result<(), CacheError> {
        try_join_all((1..SHARDS).map(|shard| self.set(space.ready_key_in(shard), identity, None))).await?;
        self.set(space.ready_key(), identity, None).await
    }

    async fn set(&self, key: String, value: &str, ttl: Option<Duration>) -> Result<(), CacheError> {
        let mut command = ::redis::cmd("SET");
        command.arg(key).arg(value);
        if let Some(ttl) = ttl {
            command.arg("PX").arg(ttl.as_millis() as u64);
        }
        self.query::<()>(command).await
    }

    async fn delete(&self, keys: &[String]) -> Result<(), CacheError> {
        if keys.is_empty() {
            return Ok(());
        }
        let mut command = ::redis::cmd("DEL");
        command.arg(keys);
        self.query::<()>(command).await
    }

    /// Deletes everything in `space`: the completion marks first (shard 0's first: readers stop at once),
    /// then every key of the space.
    pub async fn clear(&self, space: Space<'_>) -> Result<(), CacheError> {
        self.delete(&[space.ready_key()]).await?;
        self.delete(&(1..SHARDS).map(|shard| space.ready_key_in(shard)).collect::<Vec<_>>()).await?;
        for chunk in self.space_keys(space).await?.chunks(500) {
            self.delete(chunk).await?;
        }
        Ok(())
    }

    /// The keys of `space`'s data (its bookkeeping — marks, markers, versions, floors — left out), found by
    /// a scan of the store: for diffs and audits, not for the request path.
    pub async fn data_keys(&self, space: Space<'_>) -> Result<Vec<String>, CacheError> {
        let mut keys = self.space_keys(space).await?;
        keys.retain(|key| !space.relative(key).starts_with('~'));
        keys.sort_unstable();
        Ok(keys)
    }

    /// Takes (or renews) `space`'s build lock for `owner`; false while another owner holds it. Taken anew,
    /// its holder is copied into every shard first: a shard's snapshot pages check their own copy, so a
    /// builder that lost the lock is refused everywhere once another took it — before that one clears the
    /// space.
    pub async fn lock(&self, space: Space<'_>, owner: &str, ttl: Duration) -> Result<bool, CacheError> {
        Ok(match self.take_lock(space, owner, ttl, false).await? {
            Lock::HeldByAnother => false,
            Lock::Renewed => true,
            Lock::Taken => {
                let copies = (0..SHARDS).map(|shard| self.set(space.builder_key_in(shard), owner, Some(MARKER_TTL)));
                try_join_all(copies).await?;
                true
            }
        })
    }

    /// Renews `space`'s build lock for `owner` if it still holds it (a build between pages that apply
    /// nothing, so that its lock does not lapse); false when it lost it.
    pub async fn renew_lock(&self, space: Space<'_>, owner: &str, ttl: Duration) -> Result<bool, CacheError> {
        Ok(self.take_lock(space, owner, ttl, true).await? == Lock::Renewed)
    }

    /// Runs the lock script; `renew_only`: never takes a free lock (a page of a build that lost it).
    async fn take_lock(
        &self,
        space: Space<'_>,
        owner: &str,
        ttl: Duration,
        renew_only: bool,
    ) -> Result<Lock, CacheError> {
        let args =
            [owner.as_bytes().to_vec(), ttl.as_millis().to_string().into_bytes(), vec![b'0' + u8::from(renew_only)]];
        Ok(match self.eval::<i64>(&script::LOCK, &[space.lock_key()], args.iter().map(Vec::as_slice)).await? {
            0 => Lock::HeldByAnother,
            1 => Lock::Renewed,
            _ => Lock::Taken,
        })
    }

    /// Releases `space`'s build lock if `owner` still holds it.
    pub async fn unlock(&self, space: Space<'_>, owner: &str) -> Result<(), CacheError> {
        self.eval::<i64>(&script::UNLOCK, &[space.lock_key()], [owner.as_bytes()]).await?;
        Ok(())
    }

    /// The values of `keys` (rendered keys), `None` where absent.
    pub async fn texts(&self, keys: &[String]) -> Result<Vec<Option<String>>, CacheError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut command = ::redis::cmd("MGET");
        command.arg(keys);
        self.query(command).await
    }

    /// How many members the sorted set `key` (rendered) holds.
    pub async fn cardinality(&self, key: &str) -> Result<u64, CacheError> {
        let mut command = ::redis::cmd("ZCARD");
        command.arg(key);
        self.query(command).await
    }

    /// Up to `count` members of the sorted set `key` with their scores, highest first (ties: highest member
    /// first), from `from`.
    pub async fn descending(
        &self,
        key: &str,
        from: PageStart<'_>,
        count: usize,
    ) -> Result<Vec<(String, f64)>, CacheError> {
        match from {
            PageStart::Rank(start) => {
                let last = start.saturating_add(count).min(isize::MAX as usize) as isize - 1;
                let mut command = ::redis::cmd("ZREVRANGE");
                command.arg(key).arg(start.min(isize::MAX as usize)).arg(last).arg("WITHSCORES");
                self.query(command).await
            }
            // The in-process set walks its order from the cursor; Redis finds the cursor's rank in a script.
            PageStart::After(score, after) => match self {
                Self::Redis(_) => {
                    let args =
                        [score.to_string().into_bytes(), after.as_bytes().to_vec(), count.to_string().into_bytes()];
                    self.eval(&script::AFTER, &[key.to_owned()], args.iter().map(Vec::as_slice)).await
                }
                Self::Memory(memory) => Ok(memory.after(key, (score, after), count)),
            },
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
