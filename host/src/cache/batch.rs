//! A batch as calls of the `APPLY` script (`script.rs`), and what the script is told to check before it
//! changes anything: which events apply, in which order an event's effects run, how far each counter may
//! swing and how much each sorted set may grow against the quota.

use std::collections::{BTreeMap, BTreeSet};

use super::quota::{COUNTER_BYTES, MEMBER_BYTES};
use super::space::pair_field;
use super::{home_shard, member, shard, Applied, BuildFrom, DataKind, Exceeded, Quota, Space, MARKER_TTL};
use crate::plugins::{Effect, Key, RelationEvent, ZsetEntry};

/// Most a counter may hold either way. Redis's Lua compares in `f64`, exact below 2^53: with the limit at
/// 2^52, a counter plus a batch's checked adds stays exact, so both backends refuse the same batch.
pub const COUNTER_LIMIT: i64 = 1 << 52;

/// Whether an event's effects may apply (`build`: `None` for a live event): not those of a backfill's ended
/// edge (an unfollow, an unblock…), nor any of a build of floors only, which only raise their pair's floors —
/// in every shard their effects name, so that a bus event the build covers is skipped wherever it would land.
fn applies(event: &RelationEvent, build: Option<BuildFrom>) -> bool {
    match build {
        None | Some(BuildFrom::Log) => true,
        Some(BuildFrom::Truth) => !event.ends_edge(),
        Some(BuildFrom::Floors) => false,
    }
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

/// The arguments of one script call, built as a command's are: in one buffer (a build's page has
/// thousands, and an allocation each cost more than the script spent on them).
pub type Operands = ::redis::Cmd;

/// `operands`, in order.
pub fn arguments(operands: &Operands) -> impl Iterator<Item = &[u8]> + Send {
    // The script's operands are all simple: a cursor is a SCAN's.
    operands.args_iter().filter_map(|arg| match arg {
        ::redis::Arg::Simple(arg) => Some(arg),
        _ => None,
    })
}

fn push(operands: &mut Operands, value: impl ::redis::ToRedisArgs) {
    operands.arg(value);
}

/// One call of [`APPLY`]: the key it is routed by on a cluster (a key of its shard), and its ARGV.
pub struct ApplyCall {
    pub route: Option<String>,
    pub operands: Operands,
}

/// A batch as calls of [`APPLY`]. On one store (one Redis, or this process) every key is in one place: one
/// call, an event one unit (one marker, one pair version) with its bookkeeping in its home shard. On a
/// cluster, one call per shard, an event one unit per shard it touches.
pub fn apply_calls(
    space: Space<'_>,
    (events, effects): (&[RelationEvent], &[Vec<Effect>]),
    (holder, build): (&str, Option<BuildFrom>),
    quota: Quota,
    cluster: bool,
) -> Vec<ApplyCall> {
    let mut parts: BTreeMap<u16, Vec<(usize, Vec<&Effect>)>> = BTreeMap::new();
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
    let batch = Batch { space, events, holder, build, quota };
    if cluster {
        // One script per shard: each shard is one slot, and slots live on different servers.
        parts
            .iter()
            .map(|(&shard, part)| {
                let mut operands = Operands::new();
                batch.header(&[(shard, part)], &mut operands);
                let gate_key = batch.part((shard, part), &mut operands);
                ApplyCall { route: Some(gate_key), operands }
            })
            .collect()
    } else {
        let call: Vec<Part<'_>> = parts.iter().map(|(&shard, part)| (shard, part.as_slice())).collect();
        let mut operands = Operands::new();
        batch.header(&call, &mut operands);
        for &part in &call {
            batch.part(part, &mut operands);
        }
        vec![ApplyCall { route: None, operands }]
    }
}

/// What became of a batch, from its calls' replies. An event is new if any of its shards' parts was (a
/// retry after a partial failure finds the rest).
pub fn applied(replies: &[Vec<i64>], quota: Quota) -> Applied {
    let statuses: Vec<i64> = replies.iter().map(|reply| reply.first().copied().unwrap_or(0)).collect();
    if statuses.contains(&-1) {
        Applied::Refused
    } else if statuses.contains(&-2) {
        Applied::OutOfRange
    } else if statuses.contains(&-3) {
        Applied::OverQuota(Exceeded::Members(quota.members))
    } else {
        let new: BTreeSet<i64> = replies.iter().flat_map(|reply| reply.iter().skip(1).copied()).collect();
        Applied::Events(new.len())
    }
}

/// One shard's group of a call: per event (by its index in the batch), its effects there.
type Part<'p> = (u16, &'p [(usize, Vec<&'p Effect>)]);

/// What every call of one batch shares.
struct Batch<'b> {
    space: Space<'b>,
    events: &'b [RelationEvent],
    holder: &'b str,
    /// `None`: live events.
    build: Option<BuildFrom>,
    quota: Quota,
}

impl Batch<'_> {
    /// The checks of a call, over every effect it carries: on one store, one set's or counter's adds come
    /// in several shard groups (by the events' home shards) of the one call.
    fn header(&self, call: &[Part<'_>], operands: &mut Operands) {
        push(operands, MARKER_TTL.as_millis() as u64);
        push(operands, u8::from(self.build.is_some()));
        push(operands, COUNTER_LIMIT);
        push(operands, self.quota.members);
        push(operands, MEMBER_BYTES);
        push(operands, COUNTER_BYTES);
        // Only the adds that can apply count (a snapshot's unfollow applies none).
        let adds = call
            .iter()
            .flat_map(|(_, part)| part.iter())
            .filter(|(index, _)| applies(&self.events[*index], self.build))
            .flat_map(|(_, effects)| effects.iter().copied());
        let swings = counter_swings(self.space, adds.clone());
        push(operands, swings.len());
        for (counter, up, down) in swings {
            push(operands, counter);
            push(operands, up);
            push(operands, down);
        }
        let growth = set_growth(self.space, adds, self.quota);
        push(operands, growth.len());
        for (set, members) in growth {
            push(operands, set);
            push(operands, members.len());
            for member in members {
                push(operands, member);
            }
        }
    }

    /// A shard's group: its gate, usage counts and units. Returns the gate key.
    fn part(&self, (shard, part): Part<'_>, operands: &mut Operands) -> String {
        let space = self.space;
        let gate_key = if self.build.is_some() { space.builder_key_in(shard) } else { space.ready_key_in(shard) };
        push(operands, &gate_key);
        push(operands, self.holder);
        for count in space.usage_keys_in(shard) {
            push(operands, count);
        }
        let mut units = Operands::new();
        for (index, effects) in part {
            self.unit(&mut units, shard, *index, effects);
        }
        push(operands, units.args_iter().len());
        for unit in arguments(&units) {
            push(operands, unit);
        }
        gate_key
    }

    /// One event's part in one shard: its bookkeeping there and its effects there.
    fn unit(&self, operands: &mut Operands, shard: u16, index: usize, effects: &[&Effect]) {
        const SORTED: DataKind = DataKind::SortedSet;
        let (space, event) = (self.space, &self.events[index]);
        // An expiry is one op per kind of data its key may name.
        let expiries = effects.iter().filter(|e| matches!(e, Effect::Expire(_))).count();
        // A build keeps no marker or pair version (the script's floors stand for both).
        match self.build {
            Some(_) => {
                push(operands, "");
                push(operands, "");
            }
            None => {
                push(operands, space.marker_key(shard, event));
                push(operands, space.versions_key(shard, event));
            }
        }
        push(operands, space.floors_key(shard, event));
        push(operands, pair_field(event));
        push(operands, event.version);
        push(operands, index);
        push(operands, u8::from(applies(event, self.build)));
        push(operands, effects.len() + expiries * (DataKind::ALL.len() - 1));
        for effect in effects {
            match effect {
                Effect::CounterAdd((counter, delta)) => {
                    push(operands, "counter");
                    push(operands, space.key(DataKind::Counter, counter));
                    push(operands, delta);
                }
                Effect::ZsetAdd(e) => zadd(operands, "zadd", space.key(SORTED, &e.key), e, 0, None),
                Effect::ZsetAddCapped(c) => {
                    zadd(operands, "zadd", space.key(SORTED, &c.entry.key), &c.entry, c.keep, None)
                }
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
}

/// The key an effect writes, which places it in its shard (a guard shares its first id: checked output).
fn effect_key(effect: &Effect) -> &Key {
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
