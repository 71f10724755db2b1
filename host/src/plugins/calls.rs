//! Typed calls into each world, and the checks a plugin's output must pass before the host acts on it.
//!
//! Output is untrusted: one result per input, bounded sizes, names the host can render safely. Anything
//! else is [`PluginError::InvalidOutput`], handled by the kind's failure policy like a trap.

use std::time::Duration;

use super::bindings::{v0_1, v0_2, v0_3, wire, Admission, Decision, Destination, Effect, Key};
use super::error::PluginError;
use super::inputs::{batch_tenant, FollowAttempt, Input, RelationEvent, WriteRequest};
use super::logs::CallLog;
use super::runtime::{Built, CallCost, Called, PluginLimits, PluginRuntime, PreparedPlugin, Since0_3};
use super::PluginKind;
use crate::bus::Header;
use crate::outbox::OutboxRow;

/// Most destinations one event may be routed to.
pub const MAX_DESTINATIONS: usize = 16;
/// Most effects one event may have.
pub const MAX_EFFECTS: usize = 64;
const MAX_NAME: usize = 200;
const MAX_KEY_IDS: usize = 8;
const MAX_VALUE: usize = 64 * 1024;
/// Most bytes of values, message keys and headers one call may return (a batch's worth, not a flood).
const MAX_OUTPUT_BYTES: usize = 4 << 20;
/// The slowest bucket the host keeps: one that refills from empty to full within this time. Slower
/// buckets (`refill-per-second = 1e-300`) would ask for waits and expiries no clock can represent.
pub const MAX_BUCKET_REFILL: Duration = Duration::from_secs(30 * 24 * 3600);
/// Longest time to live an `expire` may set.
pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);
/// Largest step of one `counter-add`: a batch's sums stay exact in `f64` and Lua, and far from the
/// counters' range ([`crate::cache::COUNTER_LIMIT`]).
pub const MAX_COUNTER_STEP: i64 = 1 << 32;

fn converted<T, U: From<T>>(lists: Vec<Vec<T>>) -> Vec<Vec<U>> {
    lists.into_iter().map(|list| list.into_iter().map(U::from).collect()).collect()
}

impl PluginRuntime {
    /// The rate-limit policy's decision for each request (one tenant's), within the version's `limits`.
    pub async fn decide(
        &self,
        plugin: &PreparedPlugin,
        limits: PluginLimits,
        requests: &[WriteRequest],
    ) -> Called<Vec<Decision>> {
        let PreparedPlugin::RateLimiter(built) = plugin else { return refused(mismatch(plugin, "rate-limiter")) };
        let tenant = match batch_tenant(requests) {
            Ok(tenant) => tenant,
            Err(e) => return refused(e),
        };
        let (result, log) = self
            .run(limits, tenant, plugin.kind(), requests.len(), async |store| match built {
                Built::Current(pre) => {
                    let requests: Vec<wire::WriteRequest> = requests.iter().map(Into::into).collect();
                    let instance = pre.instantiate_async(&mut *store).await?;
                    instance.strand_plugin_policy().call_decide(&mut *store, tenant, &requests).await
                }
                Built::V0_3(pre) => {
                    let requests: Vec<v0_3::WriteRequest> = requests.iter().map(Into::into).collect();
                    let instance = pre.instantiate_async(&mut *store).await?;
                    let decisions = instance.strand_plugin_policy().call_decide(&mut *store, tenant, &requests).await?;
                    Ok(decisions.into_iter().map(Decision::from).collect())
                }
                Built::V0_2(pre) => {
                    let requests: Vec<v0_2::WriteRequest> = requests.iter().map(Into::into).collect();
                    let instance = pre.instantiate_async(&mut *store).await?;
                    let decisions = instance.strand_plugin_policy().call_decide(&mut *store, tenant, &requests).await?;
                    Ok(decisions.into_iter().map(Decision::from).collect())
                }
                Built::V0_1(pre) => {
                    let requests: Vec<v0_1::WriteRequest> = requests.iter().map(Into::into).collect();
                    let decisions =
                        pre.instantiate_async(&mut *store).await?.call_decide(&mut *store, &requests).await?;
                    Ok(decisions.into_iter().map(Decision::from).collect())
                }
            })
            .await;
        let result = result.and_then(|(decisions, cost)| {
            check_count(decisions.len(), requests.len())?;
            decisions.iter().try_for_each(check_decision)?;
            Ok((decisions, cost))
        });
        Called::from_call(result, log, requests)
    }

    /// The router's destinations for each event (one tenant's; empty: dropped).
    pub async fn route(
        &self,
        plugin: &PreparedPlugin,
        limits: PluginLimits,
        events: &[OutboxRow],
    ) -> Called<Vec<Vec<Destination>>> {
        let PreparedPlugin::Router(built) = plugin else { return refused(mismatch(plugin, "router")) };
        let tenant = match batch_tenant(events) {
            Ok(tenant) => tenant,
            Err(e) => return refused(e),
        };
        let (result, log) = self
            .run(limits, tenant, plugin.kind(), events.len(), async |store| match built {
                Built::Current(pre) => {
                    let events: Vec<wire::OutboxEvent> = events.iter().map(Into::into).collect();
                    let instance = pre.instantiate_async(&mut *store).await?;
                    instance.strand_plugin_routing().call_route(&mut *store, tenant, &events).await
                }
                Built::V0_3(pre) => {
                    let events: Vec<wire::OutboxEvent> = events.iter().map(Into::into).collect();
                    let instance = pre.instantiate_async(&mut *store).await?;
                    instance.strand_plugin_routing().call_route(&mut *store, tenant, &events).await
                }
                Built::V0_2(pre) => {
                    let events: Vec<wire::OutboxEvent> = events.iter().map(Into::into).collect();
                    let instance = pre.instantiate_async(&mut *store).await?;
                    instance.strand_plugin_routing().call_route(&mut *store, tenant, &events).await
                }
                Built::V0_1(pre) => {
                    let events: Vec<v0_1::OutboxEvent> = events.iter().map(Into::into).collect();
                    Ok(converted(pre.instantiate_async(&mut *store).await?.call_route(&mut *store, &events).await?))
                }
            })
            .await;
        let result = result.and_then(|(routes, cost)| {
            check_count(routes.len(), events.len())?;
            routes.iter().try_for_each(|r| check_destinations(r))?;
            let bytes = routes
                .iter()
                .flatten()
                .map(|d| d.key.len() + d.headers.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>());
            check_output_bytes(bytes.sum())?;
            Ok((routes, cost))
        });
        Called::from_call(result, log, events)
    }

    /// The projector's effects for each event (one tenant's): a projector that receives follows only is
    /// never handed another kind ([`PreparedPlugin::receives`]).
    pub async fn project(
        &self,
        plugin: &PreparedPlugin,
        limits: PluginLimits,
        events: &[RelationEvent],
    ) -> Called<Vec<Vec<Effect>>> {
        if plugin.kind() != PluginKind::Projector {
            return refused(mismatch(plugin, "projector"));
        }
        let tenant = match batch_tenant(events) {
            Ok(tenant) => tenant,
            Err(e) => return refused(e),
        };
        if let Some(event) = events.iter().find(|e| !plugin.receives(e)) {
            let detail = format!("handed a {:?} event to a projector built for follows only", event.kind);
            return refused(PluginError::host("calling the plugin", detail));
        }
        let follows = || events.iter().filter_map(Option::<wire::RelationEvent>::from).collect::<Vec<_>>();
        let (result, log) = self
            .run(limits, tenant, plugin.kind(), events.len(), async |store| match plugin {
                PreparedPlugin::RelationProjector(Since0_3::Current(pre)) => {
                    let changes: Vec<wire::RelationChange> = events.iter().map(Into::into).collect();
                    let instance = pre.instantiate_async(&mut *store).await?;
                    instance
                        .strand_plugin_relation_projection()
                        .call_project_changes(&mut *store, tenant, &changes)
                        .await
                }
                PreparedPlugin::RelationProjector(Since0_3::V0_3(pre)) => {
                    let changes: Vec<wire::RelationChange> = events.iter().map(Into::into).collect();
                    let instance = pre.instantiate_async(&mut *store).await?;
                    instance
                        .strand_plugin_relation_projection()
                        .call_project_changes(&mut *store, tenant, &changes)
                        .await
                }
                PreparedPlugin::Projector(Built::Current(pre)) => {
                    let instance = pre.instantiate_async(&mut *store).await?;
                    instance.strand_plugin_projection().call_project(&mut *store, tenant, &follows()).await
                }
                PreparedPlugin::Projector(Built::V0_3(pre)) => {
                    let instance = pre.instantiate_async(&mut *store).await?;
                    instance.strand_plugin_projection().call_project(&mut *store, tenant, &follows()).await
                }
                PreparedPlugin::Projector(Built::V0_2(pre)) => {
                    let instance = pre.instantiate_async(&mut *store).await?;
                    instance.strand_plugin_projection().call_project(&mut *store, tenant, &follows()).await
                }
                PreparedPlugin::Projector(Built::V0_1(pre)) => {
                    let events: Vec<v0_1::RelationEvent> = events.iter().filter_map(Into::into).collect();
                    Ok(converted(pre.instantiate_async(&mut *store).await?.call_project(&mut *store, &events).await?))
                }
                PreparedPlugin::RateLimiter(_) | PreparedPlugin::Router(_) | PreparedPlugin::RelationPolicy(_) => {
                    Err(wasmtime::format_err!("called a {} plugin as a projector", plugin.kind()))
                }
            })
            .await;
        let result = result.and_then(|(effects, cost)| {
            check_count(effects.len(), events.len())?;
            effects.iter().try_for_each(|e| check_effects(e))?;
            let bytes = effects.iter().flatten().map(|e| if let Effect::ValueSet((_, v)) = e { v.len() } else { 0 });
            check_output_bytes(bytes.sum())?;
            Ok((effects, cost))
        });
        Called::from_call(result, log, events)
    }
}

impl PluginRuntime {
    /// The relation policy's admission for each follow attempt (one tenant's), within the version's `limits`.
    pub async fn admit(
        &self,
        plugin: &PreparedPlugin,
        limits: PluginLimits,
        attempts: &[FollowAttempt],
    ) -> Called<Vec<Admission>> {
        let PreparedPlugin::RelationPolicy(built) = plugin else {
            return refused(mismatch(plugin, "relation-policy"));
        };
        let tenant = match batch_tenant(attempts) {
            Ok(tenant) => tenant,
            Err(e) => return refused(e),
        };
        let (result, log) = self
            .run(limits, tenant, plugin.kind(), attempts.len(), async |store| {
                let attempts: Vec<wire::FollowAttempt> = attempts.iter().map(Into::into).collect();
                match built {
                    Since0_3::Current(pre) => {
                        let instance = pre.instantiate_async(&mut *store).await?;
                        instance.strand_plugin_admission_policy().call_admit(&mut *store, tenant, &attempts).await
                    }
                    Since0_3::V0_3(pre) => {
                        let instance = pre.instantiate_async(&mut *store).await?;
                        instance.strand_plugin_admission_policy().call_admit(&mut *store, tenant, &attempts).await
                    }
                }
            })
            .await;
        let result = result.and_then(|(admissions, cost)| {
            check_count(admissions.len(), attempts.len())?;
            admissions.iter().try_for_each(check_admission)?;
            Ok((admissions, cost))
        });
        Called::from_call(result, log, attempts)
    }
}

/// Longest reason a refusal may give (it reaches the client as the problem's detail).
pub const MAX_REFUSAL_REASON: usize = 500;

/// A refusal's code becomes part of the problem's `code` (`policy.{code}`): the narrow alphabet of names;
/// its reason, plain text of a bounded length.
fn check_admission(admission: &Admission) -> Result<(), PluginError> {
    let Admission::Refuse(refusal) = admission else { return Ok(()) };
    let code_ok = !refusal.code.is_empty()
        && refusal.code.len() <= 64
        && refusal.code.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !code_ok {
        return Err(invalid(format!("refusal code {:?}: 1 to 64 of a-z, 0-9, _", refusal.code)));
    }
    if refusal.reason.len() > MAX_REFUSAL_REASON || refusal.reason.chars().any(char::is_control) {
        return Err(invalid(format!("a refusal reason of {} bytes, or with control characters", refusal.reason.len())));
    }
    Ok(())
}

/// A call the host refused to make.
fn refused<R>(error: PluginError) -> Called<R> {
    Called { result: Err(error), lines: Vec::new(), dropped: 0 }
}

impl<R> Called<R> {
    fn from_call<I: Input>(result: Result<(R, CallCost), PluginError>, log: CallLog, inputs: &[I]) -> Self {
        let (lines, dropped) = log.named(inputs);
        Called { result, lines, dropped }
    }
}

fn mismatch(plugin: &PreparedPlugin, wanted: &str) -> PluginError {
    PluginError::host("calling the plugin", format!("called a {} plugin as a {wanted}", plugin.kind()))
}

fn invalid(detail: impl Into<String>) -> PluginError {
    PluginError::InvalidOutput(detail.into())
}

fn check_output_bytes(bytes: usize) -> Result<(), PluginError> {
    if bytes <= MAX_OUTPUT_BYTES {
        Ok(())
    } else {
        Err(invalid(format!("{bytes} bytes of output for one call (at most {MAX_OUTPUT_BYTES})")))
    }
}

fn check_count(got: usize, expected: usize) -> Result<(), PluginError> {
    if got == expected {
        Ok(())
    } else {
        Err(invalid(format!("{got} results for {expected} inputs")))
    }
}

/// Names become parts of Redis keys and Kafka topics: a narrow alphabet keeps them unambiguous.
fn check_name(what: &str, name: &str) -> Result<(), PluginError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(invalid(format!("{what} {name:?} is not 1 to {MAX_NAME} characters of A-Z a-z 0-9 . _ -")))
    }
}

fn check_decision(decision: &Decision) -> Result<(), PluginError> {
    match decision {
        Decision::Allow => Ok(()),
        Decision::Deny(reason) if reason.len() <= MAX_NAME => Ok(()),
        Decision::Deny(_) => Err(invalid("deny reason too long")),
        Decision::Charge(bucket) => {
            check_name("bucket key", &bucket.key.replace(':', "."))?;
            let refill = bucket.refill_per_second;
            if bucket.capacity == 0 || bucket.cost == 0 || !refill.is_finite() || refill <= 0.0 {
                return Err(invalid(format!("bucket {bucket:?} needs capacity, cost and refill above zero")));
            }
            if bucket.cost > bucket.capacity {
                return Err(invalid(format!("bucket {bucket:?} costs more than it can ever hold")));
            }
            // Also bounds every wait: at most the whole capacity is ever missing.
            if f64::from(bucket.capacity) / refill > MAX_BUCKET_REFILL.as_secs_f64() {
                return Err(invalid(format!("bucket {bucket:?} takes longer than {MAX_BUCKET_REFILL:?} to refill")));
            }
            Ok(())
        }
    }
}

fn check_destinations(destinations: &[Destination]) -> Result<(), PluginError> {
    if destinations.len() > MAX_DESTINATIONS {
        return Err(invalid(format!("{} destinations for one event (at most {MAX_DESTINATIONS})", destinations.len())));
    }
    for destination in destinations {
        check_name("topic", &destination.topic)?;
        if let Some((name, _)) = destination
            .headers
            .iter()
            .find(|(name, _)| Header::ALL.iter().any(|r| r.as_str().eq_ignore_ascii_case(name)))
        {
            let reserved: Vec<&str> = Header::ALL.iter().map(|h| h.as_str()).collect();
            return Err(invalid(format!("header {name:?} is the host's (reserved: {})", reserved.join(", "))));
        }
        let header_bytes: usize = destination.headers.iter().map(|(k, v)| k.len() + v.len()).sum();
        if destination.key.len() > MAX_VALUE || destination.headers.len() > 16 || header_bytes > MAX_VALUE {
            return Err(invalid("message key or headers too large"));
        }
    }
    Ok(())
}

fn check_key(key: &Key) -> Result<(), PluginError> {
    check_name("key space", &key.space)?;
    if key.ids.len() > MAX_KEY_IDS {
        return Err(invalid(format!("key with {} ids (at most {MAX_KEY_IDS})", key.ids.len())));
    }
    Ok(())
}

/// A guarded set and its counter must share their first id: that puts them in one shard, the unit a cache
/// applies atomically (one slot of a Redis Cluster; see `cache`), so the guard is read with the write.
fn check_guard(set: &Key, counter: &Key) -> Result<(), PluginError> {
    check_key(set)?;
    check_key(counter)?;
    if set.ids.first() != counter.ids.first() {
        return Err(invalid(format!(
            "the guard {}:{:?} of the set {}:{:?} has another first id (a guard must share its set's first id)",
            counter.space, counter.ids, set.space, set.ids
        )));
    }
    Ok(())
}

fn check_score(score: f64) -> Result<(), PluginError> {
    if score.is_finite() {
        Ok(())
    } else {
        Err(invalid("sorted-set score is not a finite number"))
    }
}

fn check_effects(effects: &[Effect]) -> Result<(), PluginError> {
    if effects.len() > MAX_EFFECTS {
        return Err(invalid(format!("{} effects for one event (at most {MAX_EFFECTS})", effects.len())));
    }
    for effect in effects {
        match effect {
            Effect::CounterAdd((key, delta)) => {
                check_key(key)?;
                if delta.unsigned_abs() > MAX_COUNTER_STEP.unsigned_abs() {
                    return Err(invalid(format!("counter step {delta} (at most ±{MAX_COUNTER_STEP})")));
                }
            }
            Effect::ZsetRemove((key, _)) | Effect::ValueDelete(key) => check_key(key)?,
            Effect::Expire((key, ms)) => {
                check_key(key)?;
                if u128::from(*ms) > MAX_TTL.as_millis() {
                    return Err(invalid(format!("time to live of {ms} ms (at most {MAX_TTL:?})")));
                }
            }
            Effect::ZsetAdd(entry) => {
                check_key(&entry.key)?;
                check_score(entry.score)?;
            }
            Effect::ZsetAddCapped(capped) => {
                check_key(&capped.entry.key)?;
                check_score(capped.entry.score)?;
            }
            Effect::ZsetAddGuarded(guarded) => {
                check_guard(&guarded.add.entry.key, &guarded.counter)?;
                check_score(guarded.add.entry.score)?;
            }
            Effect::ZsetMemberWhile(while_) => {
                check_guard(&while_.entry.key, &while_.counter)?;
                check_score(while_.entry.score)?;
            }
            Effect::ValueSet((key, value)) => {
                check_key(key)?;
                if value.len() > MAX_VALUE {
                    return Err(invalid("value larger than 64 KiB"));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(headers: &[(&str, &str)]) -> Destination {
        Destination {
            topic: "audit".into(),
            key: "acme:1".into(),
            headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    #[test]
    fn a_router_cannot_set_the_hosts_headers() {
        assert!(check_destinations(&[to(&[("routed-by", "me")])]).is_ok());
        for name in ["tenant", "Event-Id", "VERSION", "router-version", "event-type", "TraceParent"] {
            let refused = check_destinations(&[to(&[("routed-by", "me"), (name, "forged")])]);
            assert!(
                matches!(&refused, Err(PluginError::InvalidOutput(detail)) if detail.contains("reserved")),
                "{name}: {refused:?}"
            );
        }
    }
}
