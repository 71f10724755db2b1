//! The sample run every uploaded plugin must pass before it is swapped in: realistic input for its world,
//! within the production limits, with output that passes the host's checks. A plugin that traps, loops or
//! answers nonsense on ordinary events is refused at upload, not discovered in production.

use super::error::PluginError;
use super::inputs::{FollowAttempt, RelationEvent, WriteRequest, WRITE_KINDS};
use super::runtime::{CallCost, PluginLimits, PluginRuntime, PreparedPlugin};
use crate::graph::TenantId;
use crate::outbox::{ChangeEvent, EventId, EventType, OutboxRow};

/// Write requests covering every write's kind and several users.
pub fn sample_requests() -> Vec<WriteRequest> {
    (1..=WRITE_KINDS.len() as i64)
        .map(|i| WriteRequest {
            tenant: "conformance".into(),
            user: i,
            write: WRITE_KINDS[i as usize - 1].0,
            target: i + 100,
            now_ms: 1_700_000_000_000 + i,
        })
        .collect()
}

/// Relation events covering follow, unfollow and re-follow of pairs, then one of each other kind (which only
/// a relation projector receives: see [`PreparedPlugin::receives`]).
pub fn sample_events() -> Vec<RelationEvent> {
    let follows = (1..=8).map(|i| (if i % 2 == 0 { EventType::Unfollow } else { EventType::Follow }, i));
    let others = [
        EventType::FollowRequested,
        EventType::FollowRequestWithdrawn,
        EventType::FollowRequestRejected,
        EventType::Block,
        EventType::Unblock,
        EventType::Mute,
        EventType::Unmute,
    ];
    follows
        .chain(others.into_iter().zip(9..))
        .map(|(event_type, i)| {
            let relation = event_type.relation();
            RelationEvent {
                event_id: EventId { tenant: "conformance", relation, from: i, to: i + 100, version: i }.to_string(),
                tenant: "conformance".into(),
                kind: event_type.into(),
                follower: i,
                followee: i + 100,
                version: i,
                occurred_at_ms: 1_700_000_000_000 + i,
                followed_back: i % 3 == 0,
                actor: (event_type == EventType::FollowRequestRejected).then_some(i + 100),
                expires_at_ms: (event_type == EventType::Mute).then_some(1_700_086_400_000),
                notifications: event_type == EventType::Mute,
            }
        })
        .collect()
}

/// [`sample_events`] that `plugin` receives.
pub fn sample_events_for(plugin: &PreparedPlugin) -> Vec<RelationEvent> {
    sample_events().into_iter().filter(|event| plugin.receives(event)).collect()
}

/// Follow attempts covering private and public targets, followers with few and many follows.
pub fn sample_attempts() -> Vec<FollowAttempt> {
    (1..=8)
        .map(|i| FollowAttempt {
            tenant: "conformance".into(),
            follower: i,
            target: i + 100,
            followed_back: i % 3 == 0,
            target_private: i % 2 == 0,
            follower_followings: i * 1_500,
            follower_followers: i * 1_000,
            target_followers: i * 10,
            now_ms: 1_700_000_000_000 + i,
        })
        .collect()
}

/// `tenant`'s outbox rows as the relay hands them to the router (every kind: routers see them all).
pub fn sample_outbox_events(tenant: &TenantId) -> Vec<OutboxRow> {
    sample_events().iter().zip(1..).map(|(e, id)| OutboxRow::published(id, tenant, ChangeEvent::from(e))).collect()
}

/// The tenant the samples are of, where no tenant is given (`strand plugin test`).
pub fn sample_tenant() -> TenantId {
    "conformance".parse().expect("a valid tenant id, spelt here")
}

/// Runs `plugin` on its kind's samples, within the `limits` it is being deployed with, as `tenant`'s (the
/// uploader's share of the instances and of the cores: a tenant whose uploads spin spends its own). A
/// timeout is tried once more: the first call right after compiling runs cold (code pages, pool slots), and
/// on a busy machine that alone can pass a tight deadline; a plugin that is really too slow times out again.
pub async fn check(
    runtime: &PluginRuntime,
    plugin: &PreparedPlugin,
    limits: PluginLimits,
    tenant: &TenantId,
) -> Result<CallCost, PluginError> {
    let tenant_name = tenant.as_str();
    let mut requests = sample_requests();
    requests.iter_mut().for_each(|r| r.tenant = tenant_name.to_owned());
    let rows = sample_outbox_events(tenant);
    let mut events = sample_events_for(plugin);
    events.iter_mut().for_each(|e| e.tenant = tenant_name.to_owned());
    let mut attempts = sample_attempts();
    attempts.iter_mut().for_each(|a| a.tenant = tenant_name.to_owned());
    let run = || async {
        Ok(match plugin {
            PreparedPlugin::RateLimiter(_) => runtime.decide(plugin, limits, &requests).await.result?.1,
            PreparedPlugin::Router(_) => runtime.route(plugin, limits, &rows).await.result?.1,
            PreparedPlugin::Projector(_) | PreparedPlugin::RelationProjector(_) => {
                runtime.project(plugin, limits, &events).await.result?.1
            }
            PreparedPlugin::RelationPolicy(_) => runtime.admit(plugin, limits, &attempts).await.result?.1,
        })
    };
    match run().await {
        Err(PluginError::Timeout(_)) => run().await,
        checked => checked,
    }
}
