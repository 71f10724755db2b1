//! Building a tenant's space of a projector version from the truth: when it is not complete yet (a new
//! tenant, a new version or shadow — each version has a space of its own —, an empty in-process cache), or
//! on `strand rebuild`. The builder takes the space's build lock (single flight across every
//! worker process; the others wait for its result), clears the space — reads fall back to the database
//! meanwhile, never to partial data — backfills it, records its progress for the admin API, and marks it
//! complete for the version. The worker runs builds in the background while the tenant's live events are
//! parked (`plugin.rs`), so other tenants are not held up; the parked events apply once the space is
//! complete: what the snapshot covers is skipped by the pair floors, the rest applies once.
//!
//! A version that declares history is never built from the truth (`history.rs`): its space replays the
//! embedded bus's log while it holds every event, else takes the truth's pairs as floors only and counts
//! from the build on — and an explicit build (`strand rebuild`) with no whole log is refused.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::backfill::Snapshot;
use super::history::{cannot_replay, RetainedLog};
use super::kept::importing;
use super::progress::{self, BackfillState};
use super::projector::{builder_id, PluginProjectionError, Projector, LOCK_TTL};
use crate::bus::Topology;
use crate::cache::{BuildFrom, Cache, CacheError, Space};
use crate::graph::{tenants_with_pairs, TenantId};
use crate::plugins::{ActivePlugin, PluginKind, PluginRegistry, PluginSlot};

/// How often a process waiting for another's build checks it.
const LOCK_WAIT: Duration = Duration::from_millis(200);

/// Whether a space complete for the version is built again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rebuild {
    /// Only if no version, or another one, completed it.
    IfStale,
    /// In any case (`strand rebuild`).
    Always,
}

/// Makes `tenant`'s space of `projection` complete for `plugin`, reporting `(done, total)` pairs per page;
/// returns how many pairs this call replayed (0 when the space was already complete or another process
/// built it).
pub(super) async fn build(
    projection: &Projector,
    tenant: &TenantId,
    plugin: &Arc<ActivePlugin>,
    when: Rebuild,
    mut report: impl FnMut(u64, u64),
) -> Result<u64, PluginProjectionError> {
    let (cache, space, owner) = (projection.cache(), projection.space(tenant, plugin.version), projection.owner());
    let mut waited = false;
    loop {
        let complete = cache.built_whole_by(space).await?.is_some_and(|by| by == plugin.sha256);
        if complete && (when == Rebuild::IfStale || waited) {
            return Ok(0);
        }
        if cache.lock(space, owner, LOCK_TTL).await? {
            let built = fill(projection, tenant, plugin, when, &mut report).await;
            if let Err(error) = cache.unlock(space, owner).await {
                tracing::warn!(%error, "cannot release a build lock; it expires by itself");
            }
            return built;
        }
        waited = true;
        tokio::time::sleep(LOCK_WAIT).await;
    }
}

/// Clears, builds and marks the space, holding its build lock.
async fn fill(
    projection: &Projector,
    tenant: &TenantId,
    plugin: &Arc<ActivePlugin>,
    when: Rebuild,
    report: &mut impl FnMut(u64, u64),
) -> Result<u64, PluginProjectionError> {
    let (db, name) = (projection.db(), Topology::projector_projection(projection.plugin()));
    let from = build_from(projection, plugin, when).await?;
    tracing::info!(projection = %name, %tenant, version = plugin.version, ?from, "building");
    let space = projection.space(tenant, plugin.version);
    let mut record = |done, total| {
        report(done, total);
        progress::record(db, &name, tenant, plugin.version, (done, total), BackfillState::Backfilling)
    };
    record(0, 0).await?;
    projection.cache().clear(space).await?;
    let replayed = match (from, projection.log()) {
        (BuildFrom::Log, Some(log)) => replay_log(projection, tenant, plugin, log, &mut record).await?,
        _ => replay_truth(projection, tenant, plugin, from, &mut record).await?,
    };
    if !projection.still_live(tenant, plugin).await {
        // Promoted over, aborted or replaced while it was built: nothing will read or feed it.
        projection.cache().clear(space).await?;
        tracing::info!(projection = %name, %tenant, version = plugin.version, "built for a retired version; dropped");
        return Ok(replayed);
    }
    projection.cache().mark_built(space, &plugin.sha256).await?;
    progress::record(db, &name, tenant, plugin.version, (replayed, replayed), BackfillState::Complete).await?;
    tracing::info!(projection = %name, %tenant, version = plugin.version, replayed, "built");
    Ok(replayed)
}

/// What a build of `plugin`'s space replays: the truth, unless the version declares history — then the log
/// while it is whole, else the truth's pairs as floors only; an explicit build (`Rebuild::Always`) is
/// refused rather than lose the history.
async fn build_from(
    projection: &Projector,
    plugin: &ActivePlugin,
    when: Rebuild,
) -> Result<BuildFrom, PluginProjectionError> {
    if !plugin.history {
        return Ok(BuildFrom::Truth);
    }
    let Some(why) = cannot_replay(projection.log()).await? else { return Ok(BuildFrom::Log) };
    if when == Rebuild::Always {
        return Err(needs_history(plugin, why));
    }
    tracing::warn!(projector = %plugin.name, version = plugin.version, why,
        "a projector that declares history counts from this build on");
    Ok(BuildFrom::Floors)
}

/// Replays the truth's pairs into the space, page by page; returns how many. A record failing to save its
/// progress is logged: the build goes on.
async fn replay_truth<F: std::future::Future<Output = Result<(), sqlx::Error>>>(
    projection: &Projector,
    tenant: &TenantId,
    plugin: &Arc<ActivePlugin>,
    from: BuildFrom,
    record: &mut impl FnMut(u64, u64) -> F,
) -> Result<u64, PluginProjectionError> {
    let mut snapshot = Snapshot::start(projection.db(), tenant, plugin.prepared.receives_every_kind()).await?;
    let mut replayed = 0;
    let mut page = snapshot.next_page().await?;
    while !page.is_empty() {
        let pairs = page.len() as u64;
        // The next page is read while this one is applied: the database and the projector work at once.
        let (next, applied) = tokio::join!(snapshot.next_page(), projection.apply_built(tenant, plugin, page, from));
        applied?;
        page = next?;
        replayed += pairs;
        if let Err(error) = record(replayed, snapshot.total).await {
            tracing::warn!(%error, "cannot record build progress; the build goes on");
        }
    }
    Ok(replayed)
}

/// Replays `tenant`'s events of the log, from the first to where it ends now, into the space; returns how
/// many. Progress counts the log's messages read (every tenant's). A page with none of the tenant's events
/// renews the build lock by itself (the others renew it as they apply); retention pruning the log while it
/// was read fails the build, which the next attempt makes from the truth's floors (an explicit one: refused).
async fn replay_log<F: std::future::Future<Output = Result<(), sqlx::Error>>>(
    projection: &Projector,
    tenant: &TenantId,
    plugin: &Arc<ActivePlugin>,
    log: &RetainedLog,
    record: &mut impl FnMut(u64, u64) -> F,
) -> Result<u64, PluginProjectionError> {
    let space = projection.space(tenant, plugin.version);
    let end = log.end().await?;
    let (mut read, mut replayed) = (0, 0);
    while read < end {
        let (events, reached) = log.page(tenant, plugin, read, end).await?;
        read = reached;
        replayed += events.len() as u64;
        if !events.is_empty() {
            projection.apply_built(tenant, plugin, events, BuildFrom::Log).await?;
        } else if !projection.cache().renew_lock(space, projection.owner(), LOCK_TTL).await? {
            return Err(PluginProjectionError::LockLost(space.to_string()));
        }
        if let Err(error) = record(read as u64, end as u64).await {
            tracing::warn!(%error, "cannot record build progress; the build goes on");
        }
    }
    if let Some(why) = cannot_replay(Some(log)).await? {
        return Err(needs_history(plugin, why));
    }
    Ok(replayed)
}

/// `plugin`'s build refused: `why` no log can replay its history.
fn needs_history(plugin: &ActivePlugin, why: &'static str) -> PluginProjectionError {
    PluginProjectionError::NeedsHistory { projector: plugin.name.clone(), version: plugin.version, why }
}

/// Makes every space of `tenant`'s projectors (each active version's and a running shadow's) stale, so the
/// workers build them again from the truth: after the truth changed without events (an import). Each is
/// cleared under its build lock: a build running meanwhile ends first, and one that starts later reads the
/// truth as it is now. A version that declares history keeps its space: the change came without events,
/// and it is not built from the truth. Returns how many spaces were cleared.
pub async fn build_again(cache: &Cache, registry: &PluginRegistry, tenant: &TenantId) -> Result<usize, CacheError> {
    let owner = builder_id();
    let mut cleared = 0;
    for projector in registry.projectors(tenant) {
        let slot = PluginSlot { tenant: tenant.clone(), kind: PluginKind::Projector, name: projector.name.clone() };
        for plugin in registry.live_plugins(&slot).iter().filter(|plugin| !plugin.history) {
            let space = Space { tenant: tenant.as_str(), plugin: &slot.name, version: plugin.version };
            while !cache.lock(space, &owner, LOCK_TTL).await? {
                tokio::time::sleep(LOCK_WAIT).await;
            }
            let result = cache.clear(space).await;
            cache.unlock(space, &owner).await?;
            result?;
            cleared += 1;
        }
    }
    Ok(cleared)
}

/// The stale spaces of `projection` — its active version's and a running shadow's — among the truth's
/// tenants and those that deployed it (a new version or shadow was deployed, a tenant is new, the
/// in-process cache is empty after a restart): the worker builds them in the background, so that reads use
/// them before the tenant's next write, and a deploy's build shows in the admin API even for a tenant with
/// no pairs yet. A tenant an import is writing into is left until the import ends, which clears its spaces
/// to be built once from the whole truth: built meanwhile, they were built twice, and the build beside the
/// import took most of its CPU (300 000 edges: 4 300 edges/s with the build beside it, 24 000 without).
pub(super) async fn stale_spaces(
    projection: &Projector,
) -> Result<Vec<(TenantId, Arc<ActivePlugin>)>, PluginProjectionError> {
    let mut tenants = BTreeSet::new();
    for tenant in tenants_with_pairs(projection.db()).await? {
        match tenant.parse::<TenantId>() {
            Ok(tenant) => tenants.insert(tenant),
            Err(error) => {
                tracing::warn!(%tenant, %error, "the truth holds an invalid tenant id; not projected");
                continue;
            }
        };
    }
    tenants.extend(projection.deploying_tenants());
    let importing = importing(projection.db()).await?;
    tenants.retain(|tenant| !importing.iter().any(|i| i == tenant.as_str()));
    let mut stale = Vec::new();
    for tenant in tenants {
        for plugin in projection.active(&tenant).into_iter().chain(projection.shadow(&tenant)) {
            let built_by = projection.cache().built_by(projection.space(&tenant, plugin.version)).await?;
            if built_by.as_deref() != Some(plugin.sha256.as_str()) {
                stale.push((tenant.clone(), plugin));
            }
        }
    }
    Ok(stale)
}
