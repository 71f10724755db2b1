//! A projector (by name) as this process runs it for every tenant: which of a tenant's versions project
//! (the active one, and a running shadow into its own space), calling them (a batch whole, else event by
//! event so that only the event a version cannot take fails), and applying their effects to a version's
//! space under a gate — live events only to a space complete for that version, backfill pages only under
//! the space's build lock. The live path (`plugin.rs`) and the build from the truth (`build.rs`) both
//! stand on it.

use std::sync::Arc;
use std::time::Duration;

use super::events::Unprojectable;
use super::history::RetainedLog;
use super::spaces;
use crate::cache::{Applied, BuildFrom, Cache, CacheError, Exceeded, Gate, Space, COUNTER_LIMIT};
use crate::db::Database;
use crate::graph::TenantId;
use crate::ops::metrics::PROJECTION_SHADOW_SKIPPED_EVENTS;
use crate::plugins::{
    count_invalid_output, project_with_retries, ActivePlugin, Effect, PluginKind, PluginRegistry, PluginSlot,
    ProjectionFailed, RelationEvent, RetryPolicy, RolloutStage, Tally,
};

/// How long a build lock outlives its holder's last page: a crashed builder's lock frees itself.
pub(super) const LOCK_TTL: Duration = Duration::from_secs(10);

/// One projector (by name) for every tenant.
#[derive(Clone)]
pub struct Projector {
    registry: Arc<PluginRegistry>,
    plugin: String,
    cache: Cache,
    db: Database,
    /// Names this process as a build-lock holder.
    owner: Arc<str>,
    /// The embedded bus's log, which builds of a projector that declares history replay (`None` on Kafka).
    log: Option<Arc<RetainedLog>>,
}

/// A build-lock owner id unique among live builders: the host name (a container's own), the process id
/// (two containers may both be pid 1), the time it was made, a counter within the process, and random bits
/// (their failure is logged: the other parts still tell live builders apart).
pub(super) fn builder_id() -> String {
    static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "unknown-host".to_owned());
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut nonce = [0_u8; 8];
    if let Err(error) = getrandom::fill(&mut nonce) {
        tracing::error!(%error, "no randomness for the build-lock owner id; host, process and time tell it apart");
    }
    let made = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(
        "{}-{}-{}-{made}-{:016x}",
        host.trim(),
        std::process::id(),
        since_epoch.as_nanos(),
        u64::from_le_bytes(nonce)
    )
}

/// How output refused for a space's quota is counted (`strand_plugin_invalid_output_total{stage}`).
const QUOTA_STAGE: &str = "quota";

/// Which of a tenant's versions of the projector a batch is applied for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// The active version: its space serves reads; an event it cannot take is the batch's error.
    Active,
    /// The running shadow: an event it cannot take is left out of its space and counted.
    Shadow,
}

/// Why a batch was not applied.
#[derive(Debug, thiserror::Error)]
pub enum PluginProjectionError {
    #[error(transparent)]
    Unprojectable(#[from] Unprojectable),
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
    #[error("the build lock of {0} was lost to another builder; the build is abandoned")]
    LockLost(String),
    /// The space is not complete and is being built in the background (the worker parks the tenant's events
    /// meanwhile).
    #[error("the space {0} is being built")]
    Building(String),
    /// The tenant's space is at its quota: its events are parked, then dead-lettered.
    #[error("the space {space} is over its quota: {reached}")]
    OverQuota { space: String, reached: Exceeded },
    /// This event would take a sorted set past its quota: refused for good (dead-lettered, never retried).
    #[error("refused for the space's quota: {0}")]
    QuotaRefused(Unprojectable),
    /// An explicit build (`strand rebuild`, a rollback) of a version that declares history, with no log that
    /// holds every event to replay: refused, as a build from the truth would lose the history.
    #[error("projector {projector} v{version} declares history, and {why}: a build from the truth would lose it")]
    NeedsHistory { projector: String, version: i64, why: &'static str },
    /// A try of parked events running in the background ended without an answer (it panicked).
    #[error("a retry of parked events ended without an answer: {0}")]
    Stopped(String),
}

impl Projector {
    /// `db` holds the truth that spaces are built from.
    pub fn new(registry: Arc<PluginRegistry>, plugin: &str, cache: Cache, db: Database) -> Self {
        Self { registry, plugin: plugin.to_owned(), cache, db, owner: builder_id().into(), log: None }
    }

    /// This projector replaying `log` in builds of versions that declare history.
    pub(super) fn with_log(mut self, log: RetainedLog) -> Self {
        self.log = Some(Arc::new(log));
        self
    }

    pub(super) fn log(&self) -> Option<&RetainedLog> {
        self.log.as_deref()
    }

    /// The projector's name.
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    pub(super) fn cache(&self) -> &Cache {
        &self.cache
    }

    pub(super) fn db(&self) -> &Database {
        &self.db
    }

    pub(super) fn owner(&self) -> &str {
        &self.owner
    }

    /// The version projecting `tenant`'s events now, if the tenant uses this projector.
    pub fn active(&self, tenant: &TenantId) -> Option<Arc<ActivePlugin>> {
        // Looked up per batch: a hot swap takes effect at the next batch.
        self.registry.active(tenant, PluginKind::Projector, &self.plugin)
    }

    /// The shadow version beside the active one, while one runs.
    pub(super) fn shadow(&self, tenant: &TenantId) -> Option<Arc<ActivePlugin>> {
        let candidate = self.registry.candidate(&self.slot(tenant))?;
        (candidate.staged == RolloutStage::Shadow).then_some(candidate.plugin)
    }

    pub(super) fn version_for(&self, tenant: &TenantId, role: Role) -> Option<Arc<ActivePlugin>> {
        match role {
            Role::Active => self.active(tenant),
            Role::Shadow => self.shadow(tenant),
        }
    }

    fn slot(&self, tenant: &TenantId) -> PluginSlot {
        PluginSlot { tenant: tenant.clone(), kind: PluginKind::Projector, name: self.plugin.clone() }
    }

    /// Whether `plugin`'s space of `tenant` is still to be kept, by the plugin set in the database now (a
    /// build that outlived its version drops what it built).
    pub(super) async fn still_live(&self, tenant: &TenantId, plugin: &ActivePlugin) -> bool {
        // Unable to tell, the space is kept.
        !self.refresh_plugins().await || self.registry.live_versions(&self.slot(tenant)).contains(&plugin.version)
    }

    /// Reads the plugin set from the database again; false (logged) when it cannot, and the one in hand
    /// goes on.
    pub(super) async fn refresh_plugins(&self) -> bool {
        match self.registry.refresh().await {
            Ok(_) => true,
            Err(error) => {
                tracing::warn!(%error, "cannot refresh the plugin set; going on with the one in hand");
                false
            }
        }
    }

    /// The tenants that deployed a version of this projector (they may have no pairs yet).
    pub(super) fn deploying_tenants(&self) -> Vec<TenantId> {
        self.registry.deployed_tenants(PluginKind::Projector, &self.plugin)
    }

    /// `tenant`'s data of `version` of this projector.
    pub(super) fn space<'a>(&'a self, tenant: &'a TenantId, version: i64) -> Space<'a> {
        Space { tenant: tenant.as_str(), plugin: &self.plugin, version }
    }

    /// `plugin`'s effects for `batch`: for the active version, all of them or the first event it cannot
    /// take as the error; for a shadow, none for the events it cannot take (counted towards its rollback).
    pub(super) async fn effects(
        &self,
        tenant: &TenantId,
        plugin: &Arc<ActivePlugin>,
        role: Role,
        batch: &[RelationEvent],
    ) -> Result<Vec<Vec<Effect>>, Unprojectable> {
        let projected = self.project_each(plugin, role, batch).await;
        if role == Role::Active {
            return projected.into_iter().collect();
        }
        let failures = projected.iter().filter(|effects| effects.is_err()).count() as u64;
        if failures > 0 {
            metrics::counter!(PROJECTION_SHADOW_SKIPPED_EVENTS.name, "projector" => self.plugin.clone())
                .increment(failures);
            tracing::warn!(projector = %self.plugin, %tenant, version = plugin.version, failures,
                "the shadow failed on events; they are left out of its space");
        }
        self.record(tenant, plugin, true, Tally { calls: batch.len() as u64, failures }).await;
        Ok(projected.into_iter().map(Result::unwrap_or_default).collect())
    }

    /// Counts calls towards the running shadow `shadow`'s health; a shadow rolled back for it has its
    /// space dropped.
    pub(super) async fn record(&self, tenant: &TenantId, shadow: &ActivePlugin, by_shadow: bool, tally: Tally) {
        let slot = self.slot(tenant);
        let was_live = self.registry.live_versions(&slot);
        if self.registry.record_calls(&slot, shadow.version, by_shadow, tally).await {
            spaces::retire(&self.cache, &self.registry, &slot, &was_live).await;
        }
    }

    /// Applies `effects` of `batch` under `gate`, each event whole or not at all: a batch that would take a
    /// counter out of range, or a sorted set past its quota, is applied event by event, so that the events
    /// before the culprit apply and the culprit is the error (dead-lettered live, left out of a backfill) —
    /// for a shadow, left out of its space. A space at its quota takes nothing more: the active version's
    /// error, the shadow's loss.
    pub(super) async fn apply_whole(
        &self,
        tenant: &TenantId,
        (plugin, role): (&Arc<ActivePlugin>, Role),
        batch: &[RelationEvent],
        effects: &[Vec<Effect>],
        gate: Gate<'_>,
    ) -> Result<Applied, PluginProjectionError> {
        let space = self.space(tenant, plugin.version);
        match self.cache.apply(space, batch, effects, gate).await? {
            Applied::OutOfRange | Applied::OverQuota(Exceeded::Members(_)) => {}
            Applied::OverQuota(reached) => return self.space_full(tenant, (plugin, role), reached, 0),
            applied => return Ok(applied),
        }
        let mut new = 0;
        for (event, effects) in batch.iter().zip(effects) {
            let (one, effects) = (std::slice::from_ref(event), std::slice::from_ref(effects));
            let unfit = match self.cache.apply(space, one, effects, gate).await? {
                Applied::Events(n) => {
                    new += n;
                    continue;
                }
                Applied::Refused => return Ok(Applied::Refused),
                Applied::OverQuota(Exceeded::Members(most)) => {
                    (QUOTA_STAGE, format!("a sorted set past its quota of {most} members"))
                }
                Applied::OverQuota(reached) => return self.space_full(tenant, (plugin, role), reached, new),
                Applied::OutOfRange => {
                    ("apply", format!("counter adds that would take a counter beyond ±{COUNTER_LIMIT}"))
                }
            };
            let by_quota = unfit.0 == QUOTA_STAGE;
            let culprit = self.unfit(plugin, event, unfit);
            match role {
                Role::Active if by_quota => return Err(PluginProjectionError::QuotaRefused(culprit)),
                Role::Active => return Err(culprit.into()),
                Role::Shadow => {}
            }
            tracing::warn!(projector = %self.plugin, %tenant, error = %culprit, "left out of the shadow's space");
        }
        Ok(Applied::Events(new))
    }

    /// `plugin`'s space is at its quota (`reached`) after `new` events of a batch applied: the active
    /// version's error (its events are parked), the shadow's loss (counted, logged).
    fn space_full(
        &self,
        tenant: &TenantId,
        (plugin, role): (&Arc<ActivePlugin>, Role),
        reached: Exceeded,
        new: usize,
    ) -> Result<Applied, PluginProjectionError> {
        count_invalid_output(tenant.as_str(), plugin, QUOTA_STAGE);
        let space = self.space(tenant, plugin.version).to_string();
        if role == Role::Active {
            return Err(PluginProjectionError::OverQuota { space, reached });
        }
        tracing::warn!(projector = %self.plugin, %tenant, %space, %reached, "the shadow's space is full; events left out");
        Ok(Applied::Events(new))
    }

    /// The plugin's output for `event` cannot be carried out (it would make `unfit`): it is that event's
    /// error (and counted under `stage`).
    fn unfit(
        &self,
        plugin: &ActivePlugin,
        event: &RelationEvent,
        (stage, unfit): (&'static str, String),
    ) -> Unprojectable {
        let detail = format!("projector {} v{} returned {unfit}", plugin.name, plugin.version);
        count_invalid_output(&event.tenant, plugin, stage);
        Unprojectable { event_id: event.event_id.clone(), detail }
    }

    /// Applies a build's page of `tenant` (`from` the truth: the current state of each pair; from the log:
    /// its events in order) as `plugin` projects it. An event the projector refuses (a poison event) is
    /// logged and left out — its bus events are then applied, or dead-lettered, by the live worker like any
    /// other — and the rest is applied.
    pub(super) async fn apply_built(
        &self,
        tenant: &TenantId,
        plugin: &Arc<ActivePlugin>,
        mut pairs: Vec<RelationEvent>,
        from: BuildFrom,
    ) -> Result<(), PluginProjectionError> {
        loop {
            match self.apply_built_page(tenant, plugin, &pairs, from).await {
                Err(PluginProjectionError::Unprojectable(poison) | PluginProjectionError::QuotaRefused(poison)) => {
                    tracing::error!(projector = %self.plugin, error = %poison, "a build leaves out an event the projector refuses");
                    let before = pairs.len();
                    pairs.retain(|p| p.event_id != poison.event_id);
                    if pairs.len() == before {
                        return Err(PluginProjectionError::Unprojectable(poison));
                    }
                }
                other => return other,
            }
        }
    }

    /// Applies a build's page of `tenant` as `plugin` projects it, while this process holds the space's
    /// build lock — the effects `from` lets apply (`crate::cache::BuildFrom`), each event raising its pair's
    /// floors in the shards of the keys the plugin names for it.
    async fn apply_built_page(
        &self,
        tenant: &TenantId,
        plugin: &Arc<ActivePlugin>,
        pairs: &[RelationEvent],
        from: BuildFrom,
    ) -> Result<(), PluginProjectionError> {
        let role = match self.shadow(tenant) {
            Some(shadow) if shadow.version == plugin.version => Role::Shadow,
            _ => Role::Active,
        };
        // Unfollows too: their effects name the shards whose floors they raise (the cache applies none).
        let effects = self.effects(tenant, plugin, role, pairs).await?;
        let gate = Gate::Building { owner: &self.owner, ttl: LOCK_TTL, from };
        match self.apply_whole(tenant, (plugin, role), pairs, &effects, gate).await? {
            Applied::Refused => Err(PluginProjectionError::LockLost(self.space(tenant, plugin.version).to_string())),
            Applied::Events(_) | Applied::OutOfRange | Applied::OverQuota(_) => Ok(()),
        }
    }

    /// Each event's effects, or why `plugin` fails on it: the batch in one call, else (it failed, for one
    /// event or for its size) event by event — for the active version up to the first event it cannot take
    /// (the worker dead-letters it and applies the rest again), for a shadow all of them, each tried once
    /// (a broken shadow must not hold the active version back; its failures roll it back).
    async fn project_each(
        &self,
        plugin: &Arc<ActivePlugin>,
        role: Role,
        batch: &[RelationEvent],
    ) -> Vec<Result<Vec<Effect>, Unprojectable>> {
        let policy = match role {
            Role::Active => RetryPolicy::default(),
            Role::Shadow => RetryPolicy { attempts: 1, ..RetryPolicy::default() },
        };
        let run =
            |events: Vec<RelationEvent>| project_with_retries(&self.registry, plugin.clone(), Arc::new(events), policy);
        let failed: ProjectionFailed = match run(batch.to_vec()).await {
            Ok(effects) => return effects.into_iter().map(Ok).collect(),
            Err(failed) => failed,
        };
        tracing::warn!(projector = %self.plugin, error = %failed, "a batch failed whole; projecting event by event");
        let mut effects = Vec::with_capacity(batch.len());
        for event in batch {
            let projected = run(vec![event.clone()]).await;
            let failed = projected.is_err();
            effects.push(match projected {
                Ok(mut one) => Ok(one.pop().unwrap_or_default()),
                Err(alone) => Err(Unprojectable { event_id: event.event_id.clone(), detail: alone.to_string() }),
            });
            if failed && role == Role::Active {
                break;
            }
        }
        effects
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn builder_ids_name_the_host_and_process_and_differ() {
        let (first, second) = (super::builder_id(), super::builder_id());
        assert_ne!(first, second);
        assert!(first.contains(&format!("-{}-", std::process::id())), "{first}");
    }
}
