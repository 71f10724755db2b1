//! Components built against older packages keep running. `strand:plugin@0.1.0`: their inputs carry the
//! tenant (and the event id) in every record, and their outputs are a subset of today's, so each converts
//! one way. 0.2.0's and 0.3.0's rate limiters and `log` imports: today's records but the write request,
//! which names no write's kind (each write is asked as its `action`), under their own package names.

use super::bindings::v0_1 as old;
use super::bindings::{
    v0_2, v0_3, Action, Bucket, CappedZsetAdd, Decision, Destination, Effect, GuardedZsetAdd, Key, Level, ZsetEntry,
};
use super::inputs::{RelationEvent, WriteRequest};
use crate::outbox::OutboxRow;

fn action(action: Action) -> old::Action {
    match action {
        Action::Follow => old::Action::Follow,
        Action::Unfollow => old::Action::Unfollow,
    }
}

impl From<&WriteRequest> for old::WriteRequest {
    fn from(r: &WriteRequest) -> Self {
        Self { tenant: r.tenant.clone(), user: r.user, action: action(r.action()), target: r.target, now_ms: r.now_ms }
    }
}

impl From<&OutboxRow> for old::OutboxEvent {
    fn from(e: &OutboxRow) -> Self {
        Self {
            id: e.id,
            tenant: e.tenant.to_string(),
            aggregate_type: e.aggregate_type.clone(),
            aggregate_id: e.aggregate_id.clone(),
            event_type: e.event_type.to_string(),
            key: e.key.clone(),
            payload: e.payload.clone(),
        }
    }
}

impl From<&RelationEvent> for Option<old::RelationEvent> {
    fn from(e: &RelationEvent) -> Self {
        Some(old::RelationEvent {
            event_id: e.event_id.clone(),
            tenant: e.tenant.clone(),
            action: action(e.action()?),
            follower: e.follower,
            followee: e.followee,
            version: e.version,
            occurred_at_ms: e.occurred_at_ms,
        })
    }
}

impl From<old::Decision> for Decision {
    fn from(d: old::Decision) -> Self {
        match d {
            old::Decision::Allow => Decision::Allow,
            old::Decision::Deny(reason) => Decision::Deny(reason),
            old::Decision::Charge(b) => Decision::Charge(Bucket {
                key: b.key,
                capacity: b.capacity,
                refill_per_second: b.refill_per_second,
                cost: b.cost,
            }),
        }
    }
}

impl From<old::Destination> for Destination {
    fn from(d: old::Destination) -> Self {
        Destination { topic: d.topic, key: d.key, headers: d.headers }
    }
}

fn key(k: old::Key) -> Key {
    Key { space: k.space, ids: k.ids }
}

fn entry(e: old::ZsetEntry) -> ZsetEntry {
    ZsetEntry { key: key(e.key), member: e.member, score: e.score }
}

fn capped(c: old::CappedZsetAdd) -> CappedZsetAdd {
    CappedZsetAdd { entry: entry(c.entry), keep: c.keep }
}

impl From<old::Effect> for Effect {
    fn from(e: old::Effect) -> Self {
        match e {
            old::Effect::CounterAdd((k, delta)) => Effect::CounterAdd((key(k), delta)),
            old::Effect::ZsetAdd(e) => Effect::ZsetAdd(entry(e)),
            old::Effect::ZsetAddCapped(c) => Effect::ZsetAddCapped(capped(c)),
            old::Effect::ZsetAddGuarded(g) => Effect::ZsetAddGuarded(GuardedZsetAdd {
                add: capped(g.add),
                counter: key(g.counter),
                at_least: g.at_least,
            }),
            old::Effect::ZsetRemove((k, member)) => Effect::ZsetRemove((key(k), member)),
            old::Effect::ValueSet((k, value)) => Effect::ValueSet((key(k), value)),
            old::Effect::ValueDelete(k) => Effect::ValueDelete(key(k)),
            old::Effect::Expire((k, ttl)) => Effect::Expire((key(k), ttl)),
        }
    }
}

/// 0.2.0's and 0.3.0's own records, converted as today's: the same shapes under another package's name.
macro_rules! same_records_but_the_write {
    ($package:ident) => {
        impl From<&WriteRequest> for $package::WriteRequest {
            fn from(r: &WriteRequest) -> Self {
                let action = match r.action() {
                    Action::Follow => $package::Action::Follow,
                    Action::Unfollow => $package::Action::Unfollow,
                };
                Self { user: r.user, action, target: r.target, now_ms: r.now_ms }
            }
        }

        impl From<$package::Decision> for Decision {
            fn from(d: $package::Decision) -> Self {
                match d {
                    $package::Decision::Allow => Decision::Allow,
                    $package::Decision::Deny(reason) => Decision::Deny(reason),
                    $package::Decision::Charge(b) => Decision::Charge(Bucket {
                        key: b.key,
                        capacity: b.capacity,
                        refill_per_second: b.refill_per_second,
                        cost: b.cost,
                    }),
                }
            }
        }

        impl From<$package::Level> for Level {
            fn from(level: $package::Level) -> Self {
                match level {
                    $package::Level::Debug => Level::Debug,
                    $package::Level::Info => Level::Info,
                    $package::Level::Warn => Level::Warn,
                    $package::Level::Error => Level::Error,
                }
            }
        }
    };
}

same_records_but_the_write!(v0_2);
same_records_but_the_write!(v0_3);
