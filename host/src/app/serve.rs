//! `strand serve`: the API node — the database, the plugins, authentication, rate limiting, the cached
//! reads and the admin API behind one listener, with the relay and the projection workers as supervised
//! tasks unless the configuration turns them off.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::relay::RestartableRelay;
use super::resources::Resources;
use super::{bind_operations, serve_operations, supervise_companions, StartupError};
use crate::api::{self, AppState, Authenticator};
use crate::bus::Publisher;
use crate::cache::{Cache, MemoryCache};
use crate::config::Config;
use crate::db::Database;
use crate::ops::observability;
use crate::ops::sample::{InputSample, Sampled};
use crate::ops::tasks::Tasks;
use crate::projection::{CachedReads, Projections, RetainedLog};
use crate::ratelimit::{RateLimiting, TokenBuckets};
use crate::relation_policy::RelationPolicies;
use crate::upkeep::health::Readiness;
use crate::upkeep::lag::LagProbe;
use crate::upkeep::retention::Retention;

/// A bound, ready-to-serve Strand.
pub struct Server {
    listener: TcpListener,
    /// `operations_listen`: `/healthz` and `/metrics` for the platform's scraper, without a token.
    operations: Option<TcpListener>,
    router: Router,
    resources: Resources,
    rate_limiting: Arc<RateLimiting>,
    relation_policies: Arc<RelationPolicies>,
    /// The cache the reads use: an abandoned import's spaces are cleared in it.
    cache: Cache,
    refresh_every: Duration,
    account_job_batch: u32,
    account_job_share: f64,
    retention: Retention,
    plugin_cache_dir: Option<std::path::PathBuf>,
    relay: Option<RestartableRelay>,
    projections: Option<Projections>,
    /// The relay, workers and refresh, supervised; `/readyz` reports those that are down.
    tasks: Tasks,
}

impl Server {
    /// Opens and migrates the database, loads the plugins and JWT keys, connects the cache and the bus,
    /// and binds the listener: every configuration error shows here, before anything serves.
    pub async fn build(config: &Config) -> Result<Self, StartupError> {
        config.check_secrets()?;
        let resources = Resources::open(config).await?;
        let (db, plugins, tenants) = (resources.db.clone(), resources.plugins.clone(), resources.tenants.clone());
        let auth = Arc::new(Authenticator::from_config(config, tenants.jwt_keys().clone())?);
        let buckets = TokenBuckets::on(resources.redis.clone());
        let rate_limiting = Arc::new(RateLimiting::new(plugins.clone(), tenants.clone(), buckets));
        // One cache for the reads and the workers: on the embedded default, it is this process's memory.
        let cache = resources.cache(config);
        match kept_spaces(&cache, &resources) {
            Some(memory) if config.workers => {
                crate::projection::kept::restore(&db, &memory).await.map_err(StartupError::KeptSpaces)?;
            }
            // No workers here: the node that runs them keeps its own.
            Some(_) => {}
            // Redis or Kafka now: what an embedded default kept before must not come back one day.
            None => crate::projection::kept::forget(&db).await.map_err(StartupError::KeptSpaces)?,
        }
        observability::recorder();
        let tasks = Tasks::default();
        let kafka = resources.kafka.clone();
        let readiness = Readiness::new(db.clone(), cache.clone(), kafka.as_ref(), tasks.clone())?;
        let reads = Arc::new(CachedReads::new(cache.clone()));
        let relation_policies = Arc::new(RelationPolicies::new(plugins.clone(), tenants.clone()));
        let state = AppState {
            db: db.clone(),
            auth,
            rate_limiting: rate_limiting.clone(),
            relation_policies: relation_policies.clone(),
            plugins: plugins.clone(),
            tenants: tenants.clone(),
            reads,
            cache: cache.clone(),
            readiness: Arc::new(readiness),
            lag: Arc::new(LagProbe::new(db.clone(), resources.topology.clone(), kafka)),
            admin_token: config.admin_token.as_deref().map(Arc::from),
            max_body_bytes: config.max_body_bytes,
            max_plugin_bytes: config.max_plugin_bytes,
            account_jobs_per_tenant: config.account_jobs_per_tenant,
            retained_log: RetainedLog::unless_kafka(resources.kafka.is_some(), &db, &resources.topology),
        };
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|source| StartupError::Bind { addr: config.listen, source })?;
        let operations = bind_operations(config).await?;
        let relay = RestartableRelay::new(config, &resources)?;
        let projections = match config.workers {
            true => {
                let factory = resources.worker_factory(config);
                Some(Projections::build(factory, &plugins, Some(cache.clone()), config.refresh_every()).await?)
            }
            false => None,
        };
        Ok(Self {
            listener,
            operations,
            router: api::router(state),
            resources,
            rate_limiting,
            relation_policies,
            cache,
            refresh_every: config.refresh_every(),
            account_job_batch: config.account_job_batch,
            account_job_share: config.account_job_share,
            retention: config.retention(),
            plugin_cache_dir: config.plugin_cache_dir.clone(),
            relay,
            projections,
            tasks,
        })
    }

    /// The address actually bound (differs from the configured one when its port is 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The database the server writes to.
    pub fn database(&self) -> &Database {
        &self.resources.db
    }

    /// Serves until `shutdown` completes, then drains in-flight requests and closes the database.
    pub async fn run_until(self, shutdown: impl Future<Output = ()> + Send + 'static) -> io::Result<()> {
        let db = self.resources.db.clone();
        // Dropped without the shutdown below (this future cancelled): its tasks end with it.
        let _tasks_end_with_this = self.tasks.end_when_dropped();
        tracing::info!(addr = %self.local_addr()?, database = ?db.kind(), "strand is serving");
        supervise_companions(&self.tasks, &self.resources, self.refresh_every);
        // The console's charts: this node's last hour.
        self.tasks.spawn("history", |stop: CancellationToken| async move {
            tokio::select! {
                () = stop.cancelled() => Ok(()),
                never = crate::ops::history::record() => match never {},
            }
        });
        supervise_sample(&self.tasks, "request-sample", self.rate_limiting, |r| r.sample(), db.clone());
        supervise_sample(&self.tasks, "attempt-sample", self.relation_policies, |r| r.sample(), db.clone());
        let (retention, cache_dir, pruned_db) = (self.retention, self.plugin_cache_dir, db.clone());
        // What is past retention, hourly.
        supervise_every(&self.tasks, "retention", crate::upkeep::retention::EVERY, move || {
            let (db, cache_dir) = (pruned_db.clone(), cache_dir.clone());
            async move { retention.prune(&db, cache_dir.as_deref()).await }
        });
        supervise_account_jobs(&self.tasks, db.clone(), self.account_job_batch, self.account_job_share);
        // The in-process cache's spaces, kept across restarts (the embedded default).
        let kept = kept_spaces(&self.cache, &self.resources).filter(|_| self.projections.is_some());
        if let Some(memory) = kept.clone() {
            let kept_db = db.clone();
            supervise_every(&self.tasks, "keep-spaces", crate::projection::kept::KEEP_EVERY, move || {
                let (db, memory) = (kept_db.clone(), memory.clone());
                async move { crate::projection::kept::keep(&db, &memory).await.map(|_| ()) }
            });
        }
        // Imports whose process stopped mid-way: their tenants' spaces built again from the truth.
        let (imports_db, cache, plugins) = (db.clone(), self.cache, self.resources.plugins.clone());
        supervise_every(&self.tasks, "abandoned-imports", crate::transfer::marks::RECOVER_EVERY, move || {
            let (db, cache, plugins) = (imports_db.clone(), cache.clone(), plugins.clone());
            async move { crate::transfer::marks::recover_abandoned(&db, &cache, &plugins).await }
        });
        // Mutes whose time ran out, ended with their `unmute` events.
        let mutes_db = db.clone();
        supervise_every(&self.tasks, "mute-expiry", crate::graph::mute_expiry::SWEEP_EVERY, move || {
            let db = mutes_db.clone();
            async move { crate::graph::mute_expiry::end_expired(&db).await }
        });
        if let Some(relay) = self.relay {
            // Down, it is restarted; the API keeps serving meanwhile (rows wait in the outbox).
            relay.supervise(&self.tasks);
        }
        if let Some(projections) = self.projections {
            projections.supervise(&self.tasks);
        }
        let operations = self.operations.map(|listener| tokio::spawn(serve_operations(listener)));
        let served = axum::serve(self.listener, self.router).with_graceful_shutdown(shutdown).await;
        if let Some(operations) = operations {
            operations.abort();
        }
        // The relay and the workers finish the batch in hand, commit what they did, then stop.
        self.tasks.shutdown().await;
        // Kept once more with the workers stopped: the next start takes back every event applied.
        if let Some(memory) = kept {
            if let Err(error) = crate::projection::kept::keep(&db, &memory).await {
                tracing::error!(error = %crate::ops::observability::causes(&error), "cannot keep the spaces at shutdown; the next start applies the events since the last kept ones again");
            }
        }
        db.close().await;
        served
    }
}

/// The in-process cache whose spaces are kept across restarts: the embedded default's, whose projectors'
/// positions are on the embedded bus in the same database (with Kafka, a restart builds them from the
/// truth).
fn kept_spaces(cache: &Cache, resources: &Resources) -> Option<Arc<MemoryCache>> {
    match (cache, &resources.publisher) {
        (Cache::Memory(memory), Publisher::Embedded(_)) => Some(memory.clone()),
        _ => None,
    }
}

/// Writes the inputs `owner` samples (`sample` of it) into the database, for `strand plugin test --replay`,
/// as a supervised task.
fn supervise_sample<O: Send + Sync + 'static, T: Sampled>(
    tasks: &Tasks,
    name: &'static str,
    owner: Arc<O>,
    sample: fn(&O) -> &InputSample<T>,
    db: Database,
) {
    tasks.spawn(name, move |stop: CancellationToken| {
        let (owner, db) = (owner.clone(), db.clone());
        async move {
            tokio::select! {
                () = stop.cancelled() => Ok(()),
                () = sample(&owner).write(&db) => Ok(()),
            }
        }
    });
}

/// Runs the account jobs (deletion, suspension, restore, move) this node takes the lease of, as a supervised
/// task: every API node offers to, so a job outlives the node it started on.
fn supervise_account_jobs(tasks: &Tasks, db: Database, batch: u32, share: f64) {
    let runner = crate::accounts::JobRunner::new(db, batch, share);
    tasks.spawn("account-jobs", move |stop: CancellationToken| {
        let runner = runner.clone();
        async move { Ok(runner.run(stop).await?) }
    });
}

/// Runs `work` at start and then every `every`, as the supervised task `name`: what it did is logged (not
/// when it found nothing to do), and a failure is logged with its cause and tried again at the next tick.
fn supervise_every<T, E, F, W>(tasks: &Tasks, name: &'static str, every: Duration, work: W)
where
    T: std::fmt::Debug + PartialEq + Default,
    E: std::error::Error,
    F: Future<Output = Result<T, E>> + Send + 'static,
    W: Fn() -> F + Clone + Send + Sync + 'static,
{
    tasks.spawn(name, move |stop: CancellationToken| {
        let work = work.clone();
        async move {
            let mut ticks = tokio::time::interval(every);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return Ok(()),
                    _ = ticks.tick() => {}
                }
                match work().await {
                    Ok(done) if done == T::default() => {}
                    Ok(done) => tracing::info!(task = name, ?done, "periodic work done"),
                    Err(e) => {
                        let error = crate::ops::observability::causes(&e);
                        tracing::error!(task = name, %error, "periodic work failed; trying again at the next tick");
                    }
                }
            }
        }
    });
}
