//! A projector plugin as a projection: each tenant's events go through that tenant's active version of the
//! plugin (deployed, else bundled; none: the tenant does not use it), and the effects to the cache. Live
//! effects apply only to a space completed for that very version; when it is not (a new tenant, a new
//! version, an empty in-process cache), the space is built first (`build.rs`), in line, so no event slips
//! between the snapshot and the bus. When the plugin keeps failing on a batch, its events are tried one by
//! one so that only the one it cannot take is dead-lettered (the worker then applies the rest again:
//! harmless, effects are exactly once).
//!
//! While a shadow version runs, every event is projected by it too, into its own space (built from the
//! truth first, like the active version's): its failures never hold the active version back — the events
//! it cannot take are left out of its space and count towards its automatic rollback.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;

use super::build::{build, stale_spaces, Rebuild};
use super::events::{relation_event, Unprojectable};
use super::history::RetainedLog;
use super::kept::after_import;
use super::parked::Parked;
use super::projector::{PluginProjectionError, Projector, Role};
use crate::bus::Topology;
use crate::cache::{Applied, Cache, Gate};
use crate::db::Database;
use crate::graph::TenantId;
use crate::outbox::ChangeEvent;
use crate::plugins::{ActivePlugin, PluginRegistry, RelationEvent, Tally};
use crate::util::parking::{Pace, Parking};
use crate::util::side_by_side::{SideBySide, OUTPACED_AFTER};

mod retries;

use self::retries::Tried;

/// How long one tenant's events of a batch may take through the projector unless configured otherwise.
pub const DEFAULT_TENANT_BUDGET: Duration = Duration::from_millis(1000);
/// A parked tenant's events are tried after 200 ms, doubling up to a minute; the table is read again every
/// 30 s (what another worker parked, or this one before a restart).
const PACE: Pace = Pace {
    wait_first: true,
    backoff: Duration::from_millis(200),
    at_most: Duration::from_secs(60),
    reload: Duration::from_secs(30),
};

/// One projector (by name) for every tenant, fed live from the bus.
#[derive(Clone)]
pub struct PluginProjection {
    projector: Projector,
    parked: Parked,
    /// The tenants whose events are parked (they are held: their later events park behind), and when each
    /// is tried again.
    held: Arc<Parking<TenantId>>,
    budget: Duration,
    fence: Arc<Mutex<Background>>,
}

/// What runs in the background for this projection's tenants: builds, and tries of parked events.
#[derive(Default)]
struct Background {
    builds: HashMap<(TenantId, i64), JoinHandle<Result<u64, PluginProjectionError>>>,
    /// A parked tenant's parked events being tried, one try per tenant at a time.
    retries: HashMap<TenantId, JoinHandle<Result<Tried, PluginProjectionError>>>,
}

/// Why a tenant's events were parked.
#[derive(Debug, thiserror::Error)]
enum ParkReason {
    #[error(transparent)]
    Poison(Unprojectable),
    /// Refused for good (a sorted set's quota): dead-lettered at once.
    #[error(transparent)]
    Refused(Unprojectable),
    #[error("the projector took longer than the tenant's {0:?} budget")]
    OverBudget(Duration),
    /// Still running this long after the rest of its live batch was done: its events are tried beside
    /// the live path instead, so the batch commits and the others' next events come.
    #[error("the projector ran {0:?} past the rest of its batch")]
    Outpaced(Duration),
    #[error("the space {0} is being built")]
    Building(String),
    #[error("the space {space} is over its quota: {reached}")]
    OverQuota { space: String, reached: crate::cache::Exceeded },
}

/// Parked events the worker is to dead-letter (tried [`MAX_ATTEMPTS`] times), with why.
pub struct GivenUp {
    pub event: ChangeEvent,
    /// The event as it came on the bus.
    pub payload: String,
    pub reason: String,
    id: i64,
}

/// How a space that is not complete gets built.
#[derive(Clone, Copy)]
enum Builds {
    /// In line, before the batch is applied (`strand rebuild`, tests, benchmarks).
    InLine,
    /// In the background, while the tenant's events are parked (the worker: others go on meanwhile).
    Background,
}

impl PluginProjection {
    /// `db` holds the truth that spaces are built from (and the parked events).
    pub fn new(registry: Arc<PluginRegistry>, plugin: &str, cache: Cache, db: Database) -> Self {
        let parked = Parked::new(db.clone(), Topology::projector_projection(plugin));
        let projector = Projector::new(registry, plugin, cache, db);
        let held = Arc::new(Parking::new(PACE));
        Self { projector, parked, held, budget: DEFAULT_TENANT_BUDGET, fence: Arc::default() }
    }

    /// This projection replaying `log` in builds of versions that declare history (the embedded bus's).
    pub fn with_log(mut self, log: RetainedLog) -> Self {
        self.projector = self.projector.with_log(log);
        self
    }

    /// This projection giving each tenant's events of a batch `budget` (`projection_tenant_budget_ms`).
    pub fn with_tenant_budget(mut self, budget: Duration) -> Self {
        self.budget = budget;
        self
    }

    /// The projector's name.
    pub fn plugin(&self) -> &str {
        self.projector.plugin()
    }

    /// The version projecting `tenant`'s events now, if the tenant uses this projector.
    pub fn active(&self, tenant: &TenantId) -> Option<Arc<ActivePlugin>> {
        self.projector.active(tenant)
    }

    pub(super) fn db(&self) -> &Database {
        self.projector.db()
    }

    /// Makes `tenant`'s space of `plugin` complete (`Rebuild::Always`: again, as `strand rebuild` does),
    /// reporting `(done, total)` pairs per page; returns how many pairs this call replayed.
    pub async fn build(
        &self,
        tenant: &TenantId,
        plugin: &Arc<ActivePlugin>,
        when: Rebuild,
        report: impl FnMut(u64, u64),
    ) -> Result<u64, PluginProjectionError> {
        build(&self.projector, tenant, plugin, when, report).await
    }

    /// Projects `events` (in bus order) and applies the effects, exactly once in result, building a space
    /// that is not complete first, in line: every tenant's events applied before this returns.
    pub async fn apply(&self, events: &[ChangeEvent]) -> Result<(), PluginProjectionError> {
        for (tenant, (batch, _)) in by_tenant(events)? {
            self.apply_tenant(&tenant, &batch, Builds::InLine).await?;
        }
        Ok(())
    }

    /// The worker's [`PluginProjection::apply`], fenced per tenant: a tenant whose events fail, outrun its
    /// budget, run on [`OUTPACED_AFTER`] past the rest of the batch or wait for a build has them parked
    /// (before the batch commits) and is held, its later events parked behind them. Tenants are applied
    /// side by side: a neighbour spinning holds neither the others' effects back nor, beyond that grace,
    /// the batch's commit. Only a failure of the cache itself fails the batch.
    pub async fn apply_fenced(&self, events: &[ChangeEvent]) -> Result<(), PluginProjectionError> {
        let tenants = by_tenant(events)?;
        let side_by_side = SideBySide::default();
        let applied = tenants.iter().map(|(tenant, (batch, raw))| async {
            if self.held.is_parked(tenant) {
                // No work: set aside behind its parked events, it does not count as finishing.
                return Ok(self.parked.park(tenant.as_str(), raw, "the tenant's earlier events wait").await?);
            }
            let applied = self.apply_fenced_tenant(tenant, batch, raw, side_by_side.outpaced()).await;
            side_by_side.finished();
            applied
        });
        futures::future::join_all(applied).await.into_iter().collect()
    }

    /// Applies a tenant's events that is not held, parking them (and holding it) when they cannot be.
    async fn apply_fenced_tenant(
        &self,
        tenant: &TenantId,
        batch: &[RelationEvent],
        raw: &[&ChangeEvent],
        outpaced: impl Future<Output = ()>,
    ) -> Result<(), PluginProjectionError> {
        if let Some(reason) = self.reason_to_park(tenant, batch, outpaced).await? {
            tracing::warn!(projector = %self.plugin(), %tenant, %reason, "parking the tenant's events; the others go on");
            self.parked.park(tenant.as_str(), raw, &reason.to_string()).await?;
            self.held.park(tenant.clone());
        }
        Ok(())
    }

    /// Applies `tenant`'s `batch` within the budget (and until `outpaced`), building in the background; why
    /// it could not (its events are then to be parked), or `None` when applied.
    async fn reason_to_park(
        &self,
        tenant: &TenantId,
        batch: &[RelationEvent],
        outpaced: impl Future<Output = ()>,
    ) -> Result<Option<ParkReason>, PluginProjectionError> {
        let applied = tokio::select! {
            applied = tokio::time::timeout(self.budget, self.apply_tenant(tenant, batch, Builds::Background)) => applied,
            () = outpaced => return Ok(Some(ParkReason::Outpaced(OUTPACED_AFTER))),
        };
        match applied {
            Err(_elapsed) => Ok(Some(ParkReason::OverBudget(self.budget))),
            Ok(Ok(())) => Ok(None),
            Ok(Err(PluginProjectionError::Unprojectable(poison))) => Ok(Some(ParkReason::Poison(poison))),
            Ok(Err(PluginProjectionError::QuotaRefused(refused))) => Ok(Some(ParkReason::Refused(refused))),
            Ok(Err(PluginProjectionError::Building(space))) => Ok(Some(ParkReason::Building(space))),
            Ok(Err(PluginProjectionError::OverQuota { space, reached })) => {
                Ok(Some(ParkReason::OverQuota { space, reached }))
            }
            Ok(Err(other)) => Err(other),
        }
    }

    /// Between batches: starts builds of stale spaces in the background, notes finished ones, and retries
    /// each due parked tenant's parked events; returns the parked events tried too often, for the worker to
    /// dead-letter (then [`PluginProjection::dead_lettered`]).
    pub async fn maintain(&self) -> Result<Vec<GivenUp>, PluginProjectionError> {
        if self.held.reload_due() {
            for tenant in self.parked.tenants().await?.iter().filter_map(|t| t.parse::<TenantId>().ok()) {
                self.held.park(tenant);
            }
            self.held.reloaded();
        }
        for (tenant, plugin) in stale_spaces(&self.projector).await? {
            self.start_build(&tenant, &plugin);
        }
        self.reap_builds();
        self.retry_parked().await
    }

    /// Forgets parked events the worker dead-lettered.
    pub async fn dead_lettered(&self, given_up: &[GivenUp]) -> Result<(), PluginProjectionError> {
        Ok(self.parked.remove(&given_up.iter().map(|g| g.id).collect::<Vec<_>>()).await?)
    }

    /// Stops the builds and retries running in the background (a stopping worker): a stopped build is
    /// simply done again, a stopped retry's events are still parked.
    pub fn stop_background(&self) {
        let mut fence = self.lock();
        for (_, build) in fence.builds.drain() {
            build.abort();
        }
        for (_, retry) in fence.retries.drain() {
            retry.abort();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Background> {
        self.fence.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Builds `tenant`'s space of `plugin` in the background (once an import into the tenant has ended),
    /// unless that runs already; the tenant is held meanwhile.
    fn start_build(&self, tenant: &TenantId, plugin: &Arc<ActivePlugin>) {
        let mut fence = self.lock();
        let key = (tenant.clone(), plugin.version);
        if fence.builds.contains_key(&key) {
            return;
        }
        let (projector, tenant, plugin) = (self.projector.clone(), tenant.clone(), plugin.clone());
        self.held.park(tenant.clone());
        fence.builds.insert(
            key,
            tokio::spawn(async move {
                after_import(projector.db(), &tenant).await?;
                build(&projector, &tenant, &plugin, Rebuild::IfStale, |_, _| {}).await
            }),
        );
    }

    /// Notes the background builds that ended (their tenants' parked events are retried next).
    fn reap_builds(&self) {
        let mut fence = self.lock();
        let ended: Vec<(TenantId, i64)> =
            fence.builds.iter().filter(|(_, b)| b.is_finished()).map(|(k, _)| k.clone()).collect();
        for key in ended {
            let Some(build) = fence.builds.remove(&key) else { continue };
            // A finished task's result is ready: no waiting under the lock.
            let outcome = futures::FutureExt::now_or_never(build);
            match outcome {
                Some(Ok(Ok(_))) => {}
                Some(Ok(Err(error))) => {
                    let error = crate::ops::observability::causes(&error);
                    tracing::error!(projector = %self.plugin(), tenant = %key.0, %error, "a build failed; it is started again");
                }
                Some(Err(join)) => {
                    tracing::error!(projector = %self.plugin(), tenant = %key.0, %join, "a build panicked; it is started again")
                }
                None => {}
            }
            self.held.hurry(&key.0);
        }
    }

    /// Projects `tenant`'s `batch` with its active version (and a running shadow) and applies the effects.
    async fn apply_tenant(
        &self,
        tenant: &TenantId,
        batch: &[RelationEvent],
        builds: Builds,
    ) -> Result<(), PluginProjectionError> {
        // Both looked up once per batch: a promote in between still feeds the promoted space this batch.
        let shadow = self.projector.shadow(tenant);
        let Some(active) = self.projector.active(tenant) else { return Ok(()) };
        // The events it is called for: a projector of follows is not called for a mute.
        let calls = batch.iter().filter(|event| active.prepared.receives(event)).count() as u64;
        let active = self.apply_as(tenant, (active, Role::Active), batch, builds).await;
        // The stable version's calls, beside the shadow's (a transient failure is no call: it is retried).
        let failures = match &active {
            Ok(()) => Some(0),
            Err(PluginProjectionError::Unprojectable(_) | PluginProjectionError::QuotaRefused(_)) => Some(1),
            Err(_) => None,
        };
        if let (Some(shadow), Some(failures)) = (&shadow, failures) {
            self.projector.record(tenant, shadow, false, Tally { calls, failures }).await;
        }
        active?;
        let Some(shadow) = shadow else { return Ok(()) };
        match self.apply_as(tenant, (shadow, Role::Shadow), batch, builds).await {
            // Its build could not take the truth: it is tried again at the next batch or sweep.
            Err(
                error @ (PluginProjectionError::Unprojectable(_)
                | PluginProjectionError::QuotaRefused(_)
                | PluginProjectionError::OverQuota { .. }),
            ) => {
                tracing::warn!(projector = %self.projector.plugin(), %tenant, %error, "the shadow cannot be built");
                Ok(())
            }
            shadowed => shadowed,
        }
    }

    /// Projects `batch` with `plugin`, `tenant`'s version in `role`, and applies it to that version's space,
    /// built first if it is not complete (in line, or in the background and `Building` returned). A space
    /// refused under a version this process still thinks current may have been retired by another node: the
    /// plugin set is read again before anything is built.
    async fn apply_as(
        &self,
        tenant: &TenantId,
        (mut plugin, role): (Arc<ActivePlugin>, Role),
        batch: &[RelationEvent],
        builds: Builds,
    ) -> Result<(), PluginProjectionError> {
        let mut received = received_by(&plugin, batch);
        if received.is_empty() {
            return Ok(());
        }
        let mut effects = self.projector.effects(tenant, &plugin, role, &received).await?;
        let mut refreshed = false;
        while self
            .projector
            .apply_whole(tenant, (&plugin, role), &received, &effects, Gate::Built(&plugin.sha256))
            .await?
            == Applied::Refused
        {
            if !refreshed {
                refreshed = true;
                self.projector.refresh_plugins().await;
                match self.projector.version_for(tenant, role) {
                    None => return Ok(()),
                    Some(now) if now.sha256 != plugin.sha256 => {
                        plugin = now;
                        received = received_by(&plugin, batch);
                        effects = self.projector.effects(tenant, &plugin, role, &received).await?;
                        continue;
                    }
                    Some(_) => {}
                }
            }
            match builds {
                Builds::InLine => {
                    build(&self.projector, tenant, &plugin, Rebuild::IfStale, |_, _| {}).await?;
                }
                Builds::Background => {
                    self.start_build(tenant, &plugin);
                    return Err(PluginProjectionError::Building(
                        self.projector.space(tenant, plugin.version).to_string(),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The events of `batch` that `plugin` is called for (a projector of follows is not called for the other
/// kinds, and its space keeps no trace of them).
fn received_by<'b>(plugin: &ActivePlugin, batch: &'b [RelationEvent]) -> Cow<'b, [RelationEvent]> {
    if batch.iter().all(|event| plugin.prepared.receives(event)) {
        Cow::Borrowed(batch)
    } else {
        Cow::Owned(batch.iter().filter(|event| plugin.prepared.receives(event)).cloned().collect())
    }
}

/// One tenant's events of a batch, in bus order: as projectors see them, and as they came.
type TenantEvents<'e> = (Vec<RelationEvent>, Vec<&'e ChangeEvent>);

/// `events` by tenant, in bus order within each.
fn by_tenant(events: &[ChangeEvent]) -> Result<BTreeMap<TenantId, TenantEvents<'_>>, Unprojectable> {
    let mut by_tenant: BTreeMap<TenantId, TenantEvents<'_>> = BTreeMap::new();
    for event in events {
        let relation = relation_event(event)?;
        let tenant: TenantId = relation.tenant.parse().map_err(|e: crate::graph::InvalidTenantId| Unprojectable {
            event_id: relation.event_id.clone(),
            detail: e.to_string(),
        })?;
        let (relations, raw) = by_tenant.entry(tenant).or_default();
        relations.push(relation);
        raw.push(event);
    }
    Ok(by_tenant)
}
