//! The cache in this process, for the embedded default: the same data model and rules as the Redis script
//! (`redis.rs`), under one lock so that a batch and its gate are one atomic step. Expired entries are
//! dropped when read and swept now and then.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{
    applies, counter_swings, home_shard, in_order, member, set_growth, within_range, Applied, DataKind, Exceeded, Gate,
    PageStart, Quota, Space, Usage, COUNTER_BYTES, MARKER_TTL, MEMBER_BYTES,
};
use crate::plugins::{Effect, RelationEvent};

/// Writes between sweeps of expired entries.
const SWEEP_EVERY: u64 = 16_384;

/// Derived data held by this process.
pub struct MemoryCache {
    state: Mutex<State>,
    quota: Quota,
}

impl Default for MemoryCache {
    fn default() -> Self {
        Self::new(Quota::default())
    }
}

#[derive(Default)]
struct State {
    entries: Entries,
    writes: u64,
}

/// Every entry, kept apart by the space its key is in (`{tenant:plugin@version` — keys of no space in
/// one group of their own): clearing or listing a space touches that space's entries only, never every
/// tenant's under the one lock.
#[derive(Default)]
struct Entries {
    by_space: HashMap<String, HashMap<String, Entry>>,
}

impl Entries {
    /// The group of `key`: its space's `{tenant:plugin@version`, or "" for a key outside every space.
    fn group(key: &str) -> &str {
        match key.find('#') {
            Some(end) if key.starts_with('{') => &key[..end],
            _ => "",
        }
    }

    fn get(&self, key: &str) -> Option<&Entry> {
        self.by_space.get(Self::group(key))?.get(key)
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut Entry> {
        self.by_space.get_mut(Self::group(key))?.get_mut(key)
    }

    fn insert(&mut self, key: String, entry: Entry) {
        match self.by_space.get_mut(Self::group(&key)) {
            Some(group) => {
                group.insert(key, entry);
            }
            None => {
                self.by_space.entry(Self::group(&key).to_owned()).or_default().insert(key, entry);
            }
        }
    }

    fn remove(&mut self, key: &str) {
        let group = Self::group(key);
        if let Some(entries) = self.by_space.get_mut(group) {
            entries.remove(key);
            if entries.is_empty() {
                self.by_space.remove(group);
            }
        }
    }

    /// `space`'s group: every key of the space (and, if any, other keys sharing its prefix).
    fn of_space(&mut self, space: Space<'_>) -> Option<&mut HashMap<String, Entry>> {
        self.by_space.get_mut(&format!("{{{space}"))
    }

    /// Drops the entries that expired by `now`, in every group.
    fn sweep(&mut self, now: Instant) {
        self.by_space.retain(|_, entries| {
            entries.retain(|_, e| e.expires.is_none_or(|at| at > now));
            !entries.is_empty()
        });
    }
}

struct Entry {
    data: Data,
    expires: Option<Instant>,
}

enum Data {
    Text(String),
    /// Pair versions and floors: followee → version.
    Versions(HashMap<i64, i64>),
    Sorted(SortedSet),
}

/// A sorted set ordered like Redis's: by score, then by member.
#[derive(Default)]
struct SortedSet {
    scores: HashMap<String, f64>,
    order: BTreeSet<(Score, String)>,
}

/// A score with a total order (scores are never NaN: plugin output is validated).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Score(f64);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl SortedSet {
    /// Adds or moves `member`; true if it is new.
    fn add(&mut self, member: String, score: f64) -> bool {
        let old = self.scores.insert(member.clone(), score);
        if let Some(old) = old {
            self.order.remove(&(Score(old), member.clone()));
        }
        self.order.insert((Score(score), member));
        old.is_none()
    }

    /// True if `member` was there.
    fn remove(&mut self, member: &str) -> bool {
        let Some((member, old)) = self.scores.remove_entry(member) else { return false };
        self.order.remove(&(Score(old), member));
        true
    }

    /// Keeps only the `keep` highest; returns how many it dropped.
    fn cap(&mut self, keep: usize) -> usize {
        let mut dropped = 0;
        while self.order.len() > keep {
            if let Some((_, lowest)) = self.order.pop_first() {
                self.scores.remove(&lowest);
                dropped += 1;
            }
        }
        dropped
    }
}

impl MemoryCache {
    /// An empty cache holding deployed projectors' spaces to `quota`.
    pub fn new(quota: Quota) -> Self {
        Self { state: Mutex::default(), quota }
    }

    pub(super) fn apply(
        &self,
        space: Space<'_>,
        events: &[RelationEvent],
        effects: &[Vec<Effect>],
        gate: Gate<'_>,
    ) -> Applied {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        let gate_key = match gate {
            Gate::Built(_) => space.ready_key(),
            Gate::Building { .. } => space.lock_key(),
        };
        let (Gate::Built(holder) | Gate::Building { owner: holder, .. }) = gate;
        if state.text(&gate_key, now) != Some(holder) {
            return Applied::Refused;
        }
        let snapshot = matches!(gate, Gate::Building { .. });
        // Only the adds that can apply count (a snapshot's unfollow applies none).
        let adds = events.iter().zip(effects).filter(|(event, _)| applies(event, snapshot)).flat_map(|(_, e)| e);
        let in_range = counter_swings(space, adds.clone())
            .into_iter()
            .all(|(counter, up, down)| within_range(state.number(&counter, now), up, down));
        if !in_range {
            return Applied::OutOfRange;
        }
        let quota = self.quota.of(space);
        // Bundled spaces are not limited: their batches (every one on the embedded default) skip the sum.
        if let Some(reached) = quota.limits_size().then(|| quota.reached(state.usage(space, now))).flatten() {
            return Applied::OverQuota(reached);
        }
        for (set, members) in set_growth(space, adds, quota) {
            let held = match state.sorted(&set, now) {
                Some(held) => held.order.len() + members.iter().filter(|m| !held.scores.contains_key(*m)).count(),
                None => members.len(),
            };
            if held as u64 > quota.members {
                return Applied::OverQuota(Exceeded::Members(quota.members));
            }
        }
        if let Gate::Building { ttl, .. } = gate {
            state.expire(&gate_key, now + ttl);
        }
        let mut applied = 0;
        for (event, effects) in events.iter().zip(effects) {
            // One lock holds the whole batch: an event is one unit here, its bookkeeping in its home shard.
            let shard = home_shard(event);
            let (versions, floors) = (space.versions_key(shard, event), space.floors_key(shard, event));
            let floor = state.version(&floors, event.followee, now);
            let fresh = applies(event, snapshot)
                && event.version > floor
                && state.set_new(space.marker_key(shard, event), now + MARKER_TTL, now);
            let mut newer = false;
            if fresh {
                applied += 1;
                if event.version > state.version(&versions, event.followee, now) {
                    state.set_version(versions, event.followee, event.version);
                    newer = true;
                }
            }
            if snapshot && event.version > floor {
                state.set_version(floors, event.followee, event.version);
            }
            for effect in in_order(effects) {
                state.effect((space, shard), effect, fresh, newer, now);
            }
        }
        Applied::Events(applied)
    }

    pub(super) fn set(&self, key: &str, value: &str) {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.put(key.to_owned(), Data::Text(value.to_owned()), None);
    }

    pub(super) fn clear(&self, space: Space<'_>) {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(entries) = state.entries.of_space(space) {
            entries.retain(|key, _| !space.holds(key));
        }
    }

    pub(super) fn keys(&self, space: Space<'_>) -> Vec<String> {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(entries) = state.entries.of_space(space) else { return Vec::new() };
        entries.keys().filter(|key| space.holds(key)).cloned().collect()
    }

    pub(super) fn lock(&self, key: &str, owner: &str, ttl: Duration) -> bool {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        if state.text(key, now).is_some_and(|holder| holder != owner) {
            return false;
        }
        state.put(key.to_owned(), Data::Text(owner.to_owned()), Some(now + ttl));
        true
    }

    pub(super) fn unlock(&self, key: &str, owner: &str) {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.text(key, Instant::now()) == Some(owner) {
            state.entries.remove(key);
        }
    }

    pub(super) fn texts(&self, keys: &[String]) -> Vec<Option<String>> {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        keys.iter().map(|key| state.text(key, now).map(str::to_owned)).collect()
    }

    pub(super) fn cardinality(&self, key: &str) -> u64 {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.sorted(key, Instant::now()).map_or(0, |set| set.order.len() as u64)
    }

    pub(super) fn descending(&self, key: &str, from: PageStart<'_>, count: usize) -> Vec<(String, f64)> {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(set) = state.sorted(key, Instant::now()) else { return Vec::new() };
        let entry = |(score, member): &(Score, String)| (member.clone(), score.0);
        match from {
            PageStart::Rank(start) => set.order.iter().rev().skip(start).take(count).map(entry).collect(),
            PageStart::After(score, after) => {
                set.order.range(..(Score(score), after.to_owned())).rev().take(count).map(entry).collect()
            }
        }
    }
}

impl State {
    /// The live entry at `key`, dropping it if it expired.
    fn live(&mut self, key: &str, now: Instant) -> Option<&mut Entry> {
        if self.entries.get(key).is_some_and(|e| e.expires.is_some_and(|at| at <= now)) {
            self.entries.remove(key);
        }
        self.entries.get_mut(key)
    }

    fn text(&mut self, key: &str, now: Instant) -> Option<&str> {
        match self.live(key, now) {
            Some(Entry { data: Data::Text(text), .. }) => Some(text),
            _ => None,
        }
    }

    fn number(&mut self, key: &str, now: Instant) -> i64 {
        self.text(key, now).and_then(|t| t.parse().ok()).unwrap_or(0)
    }

    fn version(&mut self, key: &str, followee: i64, now: Instant) -> i64 {
        match self.live(key, now) {
            Some(Entry { data: Data::Versions(versions), .. }) => versions.get(&followee).copied().unwrap_or(0),
            _ => 0,
        }
    }

    fn sorted(&mut self, key: &str, now: Instant) -> Option<&mut SortedSet> {
        match self.live(key, now) {
            Some(Entry { data: Data::Sorted(set), .. }) => Some(set),
            _ => None,
        }
    }

    /// `space`'s usage, from its shards' counts.
    fn usage(&mut self, space: Space<'_>, now: Instant) -> Usage {
        let counts: Vec<Option<String>> =
            space.usage_keys().iter().map(|key| self.text(key, now).map(str::to_owned)).collect();
        Usage::sum(&counts)
    }

    /// Adds to the usage counts of `space`'s `shard`.
    fn grow(&mut self, (space, shard): (Space<'_>, u16), keys: i64, bytes: i64) {
        let now = Instant::now();
        for (count, by) in space.usage_keys_in(shard).into_iter().zip([keys, bytes]) {
            if by != 0 {
                let total = self.number(&count, now) + by;
                self.put(count, Data::Text(total.to_string()), None);
            }
        }
    }

    fn put(&mut self, key: String, data: Data, expires: Option<Instant>) {
        self.entries.insert(key, Entry { data, expires });
        self.writes += 1;
        if self.writes % SWEEP_EVERY == 0 {
            self.entries.sweep(Instant::now());
        }
    }

    /// Sets `key` if absent (Redis `SET NX PX`); true if it did.
    fn set_new(&mut self, key: String, expires: Instant, now: Instant) -> bool {
        if self.live(&key, now).is_some() {
            return false;
        }
        self.put(key, Data::Text("1".to_owned()), Some(expires));
        true
    }

    fn set_version(&mut self, key: String, followee: i64, version: i64) {
        match self.entries.get_mut(&key) {
            Some(Entry { data: Data::Versions(versions), .. }) => {
                versions.insert(followee, version);
            }
            _ => self.put(key, Data::Versions(HashMap::from([(followee, version)])), None),
        }
    }

    fn expire(&mut self, key: &str, at: Instant) {
        if let Some(entry) = self.live(key, Instant::now()) {
            entry.expires = Some(at);
        }
    }

    /// One effect of an event: counters when the event is `fresh`, state when it is `newer` for its pair;
    /// what it adds to or takes from the space counted in its `shard`.
    fn effect(&mut self, (space, shard): (Space<'_>, u16), effect: &Effect, fresh: bool, newer: bool, now: Instant) {
        const SORTED: DataKind = DataKind::SortedSet;
        let at = (space, shard);
        match effect {
            Effect::CounterAdd((counter, delta)) if fresh => {
                let key = space.key(DataKind::Counter, counter);
                if self.live(&key, now).is_none() {
                    self.grow(at, 1, key.len() as i64 + COUNTER_BYTES);
                }
                // In range: the batch's swings were checked before anything was applied.
                let total = self.number(&key, now).saturating_add(*delta);
                let expires = self.live(&key, now).and_then(|e| e.expires);
                self.put(key, Data::Text(total.to_string()), expires);
            }
            Effect::ZsetAdd(e) if newer => self.zadd(at, space.key(SORTED, &e.key), e.member, e.score, 0, now),
            Effect::ZsetAddCapped(c) if newer => {
                self.zadd(at, space.key(SORTED, &c.entry.key), c.entry.member, c.entry.score, c.keep, now)
            }
            Effect::ZsetAddGuarded(g)
                if newer && self.number(&space.key(DataKind::Counter, &g.counter), now) >= g.at_least =>
            {
                let (c, e) = (&g.add, &g.add.entry);
                self.zadd(at, space.key(SORTED, &e.key), e.member, e.score, c.keep, now)
            }
            Effect::ZsetMemberWhile(w) if fresh => {
                let key = space.key(SORTED, &w.entry.key);
                if self.number(&space.key(DataKind::Counter, &w.counter), now) >= w.at_least {
                    self.zadd(at, key, w.entry.member, w.entry.score, 0, now);
                } else {
                    self.zrem(at, key, w.entry.member, now);
                }
            }
            Effect::ZsetRemove((set, id)) if newer => self.zrem(at, space.key(SORTED, set), *id, now),
            Effect::ValueSet((value, text)) if newer => {
                let key = space.key(DataKind::Value, value);
                match self.text(&key, now).map(str::len) {
                    Some(old) => self.grow(at, 0, text.len() as i64 - old as i64),
                    None => self.grow(at, 1, (key.len() + text.len()) as i64),
                }
                self.put(key, Data::Text(text.clone()), None)
            }
            Effect::ValueDelete(value) if newer => {
                let key = space.key(DataKind::Value, value);
                if let Some(old) = self.text(&key, now).map(str::len) {
                    self.entries.remove(&key);
                    self.grow(at, -1, -((key.len() + old) as i64));
                }
            }
            Effect::Expire((expiring, ms)) if newer => {
                // Plugin output bounds the TTL; a later instant than this process can name never comes.
                if let Some(at) = now.checked_add(Duration::from_millis(*ms)) {
                    for kind in DataKind::ALL {
                        self.expire(&space.key(kind, expiring), at);
                    }
                }
            }
            _ => {}
        }
    }

    fn zadd(&mut self, at: (Space<'_>, u16), key: String, id: i64, score: f64, keep: u32, now: Instant) {
        let created = self.sorted(&key, now).is_none();
        if created {
            self.put(key.clone(), Data::Sorted(SortedSet::default()), None);
        }
        let Some(set) = self.sorted(&key, now) else { return };
        let added = i64::from(set.add(member(id), score));
        let dropped = if keep > 0 { set.cap(keep as usize) as i64 } else { 0 };
        let key_bytes = if created { key.len() as i64 } else { 0 };
        self.grow(at, i64::from(created), key_bytes + (added - dropped) * MEMBER_BYTES);
    }

    /// Removes `id` from the sorted set `key`, and the set once empty (as Redis does).
    fn zrem(&mut self, at: (Space<'_>, u16), key: String, id: i64, now: Instant) {
        let Some(set) = self.sorted(&key, now) else { return };
        if !set.remove(&member(id)) {
            return;
        }
        if set.order.is_empty() {
            self.entries.remove(&key);
            self.grow(at, -1, -(key.len() as i64) - MEMBER_BYTES);
        } else {
            self.grow(at, 0, -MEMBER_BYTES);
        }
    }
}
