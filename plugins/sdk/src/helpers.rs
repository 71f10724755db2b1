//! Constructors and accessors that make the generated WIT types pleasant to use.

use crate::{
    Action, Bucket, CappedZsetAdd, Decision, Effect, GuardedZsetAdd, Key, RelationChange, RelationEvent, RelationKind,
    ZsetEntry, ZsetMemberWhile,
};

impl Key {
    /// `Key::new("followers", [42])` in a counter-add is rendered by the host as
    /// `tenant:plugin@version:c.followers:42`
    /// (`z.` in sorted-set effects, `v.` in values: one key of each kind).
    pub fn new(space: &str, ids: impl IntoIterator<Item = i64>) -> Self {
        Key { space: space.to_owned(), ids: ids.into_iter().collect() }
    }
}

impl Effect {
    pub fn counter_add(key: Key, delta: i64) -> Self {
        Effect::CounterAdd((key, delta))
    }

    pub fn zset_add(key: Key, member: i64, score: f64) -> Self {
        Effect::ZsetAdd(ZsetEntry { key, member, score })
    }

    /// Adds `member`, then keeps only the `keep` highest-scored members.
    pub fn zset_add_capped(key: Key, member: i64, score: f64, keep: u32) -> Self {
        Effect::ZsetAddCapped(CappedZsetAdd { entry: ZsetEntry { key, member, score }, keep })
    }

    /// `member` is in `key` exactly while `counter` is at least `at_least` (checked after the event's counter
    /// adds, whichever order events arrive in).
    pub fn zset_member_while(key: Key, member: i64, score: f64, counter: Key, at_least: i64) -> Self {
        Effect::ZsetMemberWhile(ZsetMemberWhile { entry: ZsetEntry { key, member, score }, counter, at_least })
    }

    /// Like [`Effect::zset_add_capped`], applied only while `counter` is at least `at_least`.
    pub fn zset_add_capped_if(key: Key, member: i64, score: f64, keep: u32, counter: Key, at_least: i64) -> Self {
        let add = CappedZsetAdd { entry: ZsetEntry { key, member, score }, keep };
        Effect::ZsetAddGuarded(GuardedZsetAdd { add, counter, at_least })
    }

    pub fn zset_remove(key: Key, member: i64) -> Self {
        Effect::ZsetRemove((key, member))
    }

    pub fn value_set(key: Key, value: impl Into<String>) -> Self {
        Effect::ValueSet((key, value.into()))
    }

    pub fn value_delete(key: Key) -> Self {
        Effect::ValueDelete(key)
    }

    pub fn expire(key: Key, ttl_ms: u64) -> Self {
        Effect::Expire((key, ttl_ms))
    }
}

impl RelationEvent {
    /// An event at version 1, not followed back, for plugin unit tests.
    pub fn sample(action: Action, follower: i64, followee: i64, occurred_at_ms: i64) -> Self {
        RelationEvent { action, follower, followee, version: 1, occurred_at_ms, followed_back: false }
    }

    /// +1 for a follow, -1 for an unfollow: the change this event makes to a count.
    pub fn delta(&self) -> i64 {
        match self.action {
            Action::Follow => 1,
            Action::Unfollow => -1,
        }
    }
}

impl RelationChange {
    /// A change at version 1 by `from`, for plugin unit tests.
    pub fn sample(kind: RelationKind, from: i64, to: i64, occurred_at_ms: i64) -> Self {
        RelationChange {
            kind,
            from,
            to,
            actor: from,
            version: 1,
            occurred_at_ms,
            followed_back: false,
            expires_at_ms: None,
            notifications: false,
        }
    }
}

impl Decision {
    /// Charge `cost` tokens from the tenant's bucket `key`.
    pub fn charge(key: impl Into<String>, capacity: u32, refill_per_second: f64, cost: u32) -> Self {
        Decision::Charge(Bucket { key: key.into(), capacity, refill_per_second, cost })
    }
}
