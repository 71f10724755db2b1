//! What happens when a router or projector call fails (DESIGN §6). The policies' failure modes (open or
//! closed) are the tenant's settings, applied in `policy.rs`; here are the router's and the projector's:
//! - a failing router falls back to the bundled default route, so a broken router never loses events;
//! - a failing projector is retried with backoff, then reported so the caller dead-letters the batch.

use std::sync::Arc;
use std::time::Duration;

use super::bindings::{Destination, Effect};
use super::error::PluginError;
use super::inputs::RelationEvent;
use super::observed::observed;
use super::registry::{ActivePlugin, Chosen, PluginRegistry};
use super::OnePerTenant;
use crate::graph::TenantId;
use crate::ops::metrics::PROJECTOR_RETRIES;
use crate::outbox::OutboxRow;
use crate::util::backoff::Backoff;

/// Destinations for a batch, and which router produced them.
#[derive(Debug)]
pub struct Routed {
    /// Per event, in order; an empty list drops the event.
    pub destinations: Vec<Vec<Destination>>,
    /// Per event, the version of the router that produced its destinations (0: bundled); goes into the
    /// `router-version` header. Two versions appear while a canary routes its share of the message keys.
    pub router_versions: Vec<i64>,
    /// Why a tenant's router was bypassed, when one was.
    pub fell_back: Option<PluginError>,
}

/// Routes `events` with the tenant's router — a running canary routes its share of the message keys (so
/// one key always meets one version), the active router the rest — or with the bundled default where that
/// fails. A canary's failures count towards its automatic rollback.
pub async fn route_or_default(
    registry: &PluginRegistry,
    tenant: &TenantId,
    events: Vec<OutboxRow>,
) -> Result<Routed, PluginError> {
    let chosen: Vec<Chosen> =
        events.iter().map(|e| registry.choose(tenant, OnePerTenant::Router, &e.key, None)).collect();
    let (by_canary, by_stable): (Vec<usize>, Vec<usize>) = (0..events.len()).partition(|&i| chosen[i].by_canary);
    let mut routed = Routed {
        destinations: vec![Vec::new(); events.len()],
        router_versions: vec![0; events.len()],
        fell_back: None,
    };
    for group in [by_stable, by_canary] {
        let Some(&first) = group.first() else { continue };
        let batch: Vec<OutboxRow> = group.iter().map(|&i| events[i].clone()).collect();
        let (destinations, version, fell_back) = route_group(registry, tenant, &chosen[first].plugin, batch).await?;
        registry.record_outcome(tenant, OnePerTenant::Router, &chosen[first], fell_back.as_ref()).await;
        for (i, destinations) in group.into_iter().zip(destinations) {
            routed.destinations[i] = destinations;
            routed.router_versions[i] = version;
        }
        routed.fell_back = routed.fell_back.or(fell_back);
    }
    Ok(routed)
}

/// Routes `events` with `router`, or with the bundled default when that fails: the destinations, the
/// version that produced them, and the router's failure if it failed.
async fn route_group(
    registry: &PluginRegistry,
    tenant: &TenantId,
    router: &Arc<ActivePlugin>,
    events: Vec<OutboxRow>,
) -> Result<(Vec<Vec<Destination>>, i64, Option<PluginError>), PluginError> {
    let events = Arc::new(events);
    match route(registry, tenant, router.clone(), events.clone()).await {
        Ok(destinations) => Ok((destinations, router.version, None)),
        Err(error) => {
            let fallback = registry.default_router();
            tracing::error!(%tenant, version = router.version, %error, "router failed; using the default route");
            let destinations = route(registry, tenant, fallback.clone(), events).await?;
            Ok((destinations, fallback.version, Some(error)))
        }
    }
}

/// Routes `events` with the bundled default router alone: how the relay publishes a tenant's parked rows
/// once its own routers ran past their time budget again.
pub async fn route_by_default(
    registry: &PluginRegistry,
    tenant: &TenantId,
    events: Vec<OutboxRow>,
) -> Result<Routed, PluginError> {
    let router = registry.default_router();
    let count = events.len();
    let destinations = route(registry, tenant, router.clone(), Arc::new(events)).await?;
    Ok(Routed { destinations, router_versions: vec![router.version; count], fell_back: None })
}

async fn route(
    registry: &PluginRegistry,
    tenant: &TenantId,
    router: Arc<ActivePlugin>,
    events: Arc<Vec<OutboxRow>>,
) -> Result<Vec<Vec<Destination>>, PluginError> {
    let call = registry.runtime().route(&router.prepared, router.limits, &events);
    observed(registry.logs(), tenant.as_str(), &router, call).await
}

/// How often and how patiently a failing projector is called again.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub attempts: u32,
    /// Waited before the second attempt, doubled before each next one.
    pub first_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { attempts: 3, first_backoff: Duration::from_millis(100) }
    }
}

/// A projector that kept failing: its batch goes to the dead-letter topic.
#[derive(Debug, thiserror::Error)]
#[error("projector {name} v{version} failed {attempts} times; last error: {last}")]
pub struct ProjectionFailed {
    pub name: String,
    pub version: i64,
    pub attempts: u32,
    pub last: PluginError,
}

/// The projector's effects for `events`, retrying failures with backoff.
pub async fn project_with_retries(
    registry: &PluginRegistry,
    projector: Arc<ActivePlugin>,
    events: Arc<Vec<RelationEvent>>,
    policy: RetryPolicy,
) -> Result<Vec<Vec<Effect>>, ProjectionFailed> {
    let mut backoff = Backoff::new(policy.first_backoff, Duration::MAX);
    let mut attempt = 1;
    loop {
        let tenant = events.first().map_or("", |e| e.tenant.as_str());
        let call = registry.runtime().project(&projector.prepared, projector.limits, &events);
        match observed(registry.logs(), tenant, &projector, call).await {
            Ok(effects) => return Ok(effects),
            Err(last) if attempt >= policy.attempts => {
                return Err(ProjectionFailed {
                    name: projector.name.clone(),
                    version: projector.version,
                    attempts: attempt,
                    last,
                })
            }
            Err(error) => {
                tracing::warn!(projector = %projector.name, attempt, %error, "projector failed; retrying");
                metrics::counter!(PROJECTOR_RETRIES.name, "projector" => projector.name.clone()).increment(1);
                tokio::time::sleep(backoff.next_wait()).await;
                attempt += 1;
            }
        }
    }
}
