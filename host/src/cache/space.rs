//! Where a projector version's data lives: a [`Space`] renders every key of it —
//! `{tenant:plugin@version#shard}:{c|z|v}.space:id:…` — and of its bookkeeping, so a plugin names only its
//! own data, and data of one kind never meets another.

use std::fmt::Write;

use crate::outbox::Relation;
use crate::plugins::{Key, RelationEvent};

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
    pub(super) fn tag(self) -> &'static str {
        match self {
            DataKind::Counter => "c.",
            DataKind::SortedSet => "z.",
            DataKind::Value => "v.",
        }
    }
}

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

    /// A plugin's key holding `kind` data, rendered `{tenant:plugin@version#shard}:{c|z|v}.space:id:…`
    /// into one allocation: a build renders one per effect of each of millions of pairs.
    pub fn key(&self, kind: DataKind, key: &Key) -> String {
        let mut rendered = self.prefix(shard(key), kind.tag().len() + key.space.len() + 21 * key.ids.len());
        rendered.push_str(kind.tag());
        rendered.push_str(&key.space);
        for id in &key.ids {
            write!(rendered, ":{id}").expect("a String takes every write");
        }
        rendered
    }

    /// `{tenant:plugin@version#shard}:`, with room for `more` bytes after it.
    fn prefix(&self, shard: u16, more: usize) -> String {
        let mut rendered = String::with_capacity(self.tenant.len() + self.plugin.len() + 28 + more);
        write!(rendered, "{{{}:{}@{}#{shard}}}:", self.tenant, self.plugin, self.version)
            .expect("a String takes every write");
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
    pub(super) fn tag(&self, shard: u16) -> String {
        format!("{{{self}#{shard}}}")
    }

    /// `{tenant:plugin@version#shard}:name`: a key inside the space.
    pub(super) fn in_shard(&self, shard: u16, name: &str) -> String {
        let mut rendered = self.prefix(shard, name.len());
        rendered.push_str(name);
        rendered
    }

    /// Whether `key` is inside this space (its data or bookkeeping; not the build lock or builder copies).
    pub(super) fn holds(&self, key: &str) -> bool {
        self.relative_part(key).is_some()
    }

    /// The glob of every key inside the space, for `SCAN`.
    pub(super) fn pattern(&self) -> String {
        format!("{{{self}#*}}:*")
    }

    /// A key of this space without the space's prefix and shard (`c.followers:7`), as a diff shows it.
    pub fn relative<'k>(&self, key: &'k str) -> &'k str {
        self.relative_part(key).unwrap_or(key)
    }

    pub(super) fn relative_part<'k>(&self, key: &'k str) -> Option<&'k str> {
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
    pub(super) fn ready_key_in(&self, shard: u16) -> String {
        self.in_shard(shard, "~ready3")
    }

    /// Outside every space (tenant ids have no `~`), so clearing the space keeps it.
    pub(super) fn lock_key(&self) -> String {
        format!("~building:{self}")
    }

    /// A shard's copy of the build lock's holder, which that shard's snapshot pages check; outside the
    /// space (`}~`, not `}:`), so clearing the space keeps it.
    pub(super) fn builder_key_in(&self, shard: u16) -> String {
        format!("{}~builder", self.tag(shard))
    }

    /// A shard's share of the space's [`Usage`]: its data keys, and their bytes.
    pub(super) fn usage_keys_in(&self, shard: u16) -> [String; 2] {
        [self.in_shard(shard, "~keys"), self.in_shard(shard, "~bytes")]
    }

    /// Every shard's usage counts, in pairs.
    pub(super) fn usage_keys(&self) -> Vec<String> {
        (0..SHARDS).flat_map(|shard| self.usage_keys_in(shard)).collect()
    }

    pub(super) fn marker_key(&self, shard: u16, event: &RelationEvent) -> String {
        self.in_shard(shard, &format!("~applied:{}", event.event_id))
    }

    /// Per follower: the last version applied per followee.
    pub(super) fn versions_key(&self, shard: u16, event: &RelationEvent) -> String {
        self.in_shard(shard, &format!("~versions:{}", event.follower))
    }

    /// Per follower: the version each followee's snapshot covers.
    pub(super) fn floors_key(&self, shard: u16, event: &RelationEvent) -> String {
        let mut rendered = self.prefix(shard, 28);
        write!(rendered, "~floors:{}", event.follower).expect("a String takes every write");
        rendered
    }
}

/// A sorted-set member, fixed-width so that equal scores order by user id exactly as the database does.
pub fn member(id: i64) -> String {
    format!("{id:020}")
}

/// An edge's field in its owner's versions and floors: the followee for the follow edge (as before
/// other edges existed), `b{id}` and `m{id}` for a block and a mute, whose versions are their own.
pub(super) fn pair_field(event: &RelationEvent) -> String {
    match event.relation() {
        Relation::Follow => event.followee.to_string(),
        Relation::Block => format!("b{}", event.followee),
        Relation::Mute => format!("m{}", event.followee),
    }
}
