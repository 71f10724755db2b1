//! The rules of a batch both backends obey before and while they apply it: which events apply, in which
//! order an event's effects run, and the checks made before anything changes (counter range, set growth
//! against the quota). Written once here; each backend carries them out in its own atomic step.

use std::collections::{BTreeMap, BTreeSet};

use super::{member, DataKind, Quota, Space};
use crate::plugins::{Effect, RelationEvent};

/// Most a counter may hold either way. Redis's Lua compares in `f64`, exact below 2^53: with the limit at
/// 2^52, a counter plus a batch's checked adds stays exact, so both backends refuse the same batch.
pub const COUNTER_LIMIT: i64 = 1 << 52;

/// Whether an event's effects may apply: not those of a backfill's unfollow, which only raises its pair's
/// floors — in every shard its effects name, so that a bus event the snapshot covers is skipped wherever it
/// would land.
pub(super) fn applies(event: &RelationEvent, snapshot: bool) -> bool {
    !(snapshot && event.action == crate::plugins::Action::Unfollow)
}

/// An event's effects in the order both backends apply them: memberships that follow a counter last, so
/// they see the event's own counter adds whatever order the plugin listed them in.
pub(super) fn in_order(effects: &[Effect]) -> impl Iterator<Item = &Effect> {
    let follows_counter = |e: &&Effect| matches!(e, Effect::ZsetMemberWhile(_));
    effects.iter().filter(move |e| !follows_counter(e)).chain(effects.iter().filter(follows_counter))
}

/// Per counter a batch adds to: the key, and the sums of its positive and of its negative adds — the
/// furthest the counter can move up and down if every add applies. Both backends check these against
/// [`COUNTER_LIMIT`] before they change anything, so a batch is applied whole or not at all.
pub(super) fn counter_swings<'e>(
    space: Space<'_>,
    effects: impl IntoIterator<Item = &'e Effect>,
) -> Vec<(String, i64, i64)> {
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
pub(super) fn set_growth<'e>(
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
