//! Wiring: configuration in, a listening server out. Kept apart from `main` so tests and benchmarks run the
//! very server a user runs, in-process.

use std::collections::BTreeSet;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::{self, AppState, AuthSetupError, Authenticator};
use crate::bus::{EmbeddedBus, KafkaBus, KafkaConnection, KafkaOptionsError, KafkaSettings, Publisher, Topology};
use crate::cache::{Cache, CacheError, RedisCache};
use crate::config::{Config, RelayMode};
use crate::graph::{Database, DatabaseError, DatabaseKind};
use crate::health::Readiness;
use crate::lag::LagProbe;
use crate::observability;
use crate::plugins::{PluginError, PluginRegistry, PluginRuntime, RegistryError};
use crate::projection::{
    rebuild_follower, rebuild_projector, reconcile, supervise_new_projectors, supervise_worker, CachedReads,
    PluginProjection, Projection, RebuildError, ReconcileError, Report, SourceError, Worker, WorkerFactory,
};
use crate::ratelimit::{LocalBuckets, RateLimiting, RedisBuckets, TokenBuckets};
use crate::relay::{BinlogRelay, Checkpoint, Outlet, PollRelay, Relay, RelayError};
use crate::tasks::Tasks;
use crate::tenants::TenantSettings;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Database(#[from] DatabaseError),
    #[error(transparent)]
    Auth(#[from] AuthSetupError),
    #[error("cannot start the plugin runtime: {0}")]
    Plugins(#[from] PluginError),
    #[error("cannot load deployed plugins: {0}")]
    Registry(#[from] RegistryError),
    #[error("cannot read tenant settings: {0}")]
    Tenants(#[from] sqlx::Error),
    #[error("cannot connect to Redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("cannot connect to the cache: {0}")]
    Cache(#[from] CacheError),
    #[error("cannot set up a Kafka client: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error(transparent)]
    KafkaOptions(#[from] KafkaOptionsError),
    #[error("cannot start a projection worker: {0}")]
    Worker(#[from] SourceError),
    #[error("cannot rebuild: {0}")]
    Rebuild(#[from] RebuildError),
    #[error(
        "rebuilding a projector needs redis_url: without it, its data lives in the `strand serve` process, \
         which builds it at start"
    )]
    RebuildNeedsRedis,
    #[error("no projection {0:?}: `follower` or a projector plugin's name")]
    UnknownProjection(String),
    #[error("cannot reconcile: {0}")]
    Reconcile(#[from] ReconcileError),
    #[error("cannot start the relay: {0}")]
    Relay(#[from] RelayError),
    #[error("relay = \"binlog\" follows a MySQL/MariaDB binlog; this database has none (use relay = \"poll\")")]
    BinlogNeedsMySql,
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: io::Error },
}

/// A bound, ready-to-serve Strand.
pub struct Server {
    listener: TcpListener,
    router: Router,
    db: Database,
    plugins: Arc<PluginRegistry>,
    tenants: Arc<TenantSettings>,
    refresh_every: Duration,
    relay: Option<RestartableRelay>,
    projections: Option<Projections>,
    /// The relay, workers and refresh, supervised; `/readyz` reports those that are down.
    tasks: Tasks,
}

impl Server {
    /// Opens and migrates the database, loads the JWT keys and binds the listener.
    pub async fn build(config: &Config) -> Result<Self, StartupError> {
        let db = Database::open(&config.database_url, config.database_max_connections).await?;
        let plugins = load_plugins(config, &db).await?;
        let tenants = Arc::new(TenantSettings::load(db.clone()).await?);
        let auth = Arc::new(Authenticator::from_config(config, tenants.jwt_keys().clone())?);
        let buckets = match &config.redis_url {
            Some(url) => TokenBuckets::Redis(RedisBuckets::connect(url).await?),
            None => TokenBuckets::Local(LocalBuckets::default()),
        };
        let rate_limiting = Arc::new(RateLimiting::new(plugins.clone(), tenants.clone(), buckets));
        // One cache for the reads and the workers: on the embedded default, it is this process's memory.
        let cache = Cache::connect(config.redis_url.as_deref()).await?;
        observability::recorder();
        let tasks = Tasks::default();
        let kafka = config.kafka()?;
        let readiness = Readiness::new(db.clone(), cache.clone(), kafka.as_ref(), tasks.clone())?;
        let state = AppState {
            db: db.clone(),
            auth,
            rate_limiting,
            plugins: plugins.clone(),
            tenants: tenants.clone(),
            reads: Arc::new(CachedReads::new(cache.clone())),
            cache: cache.clone(),
            readiness: Arc::new(readiness),
            lag: Arc::new(LagProbe::new(db.clone(), Topology::new(&config.topic_prefix), kafka)),
            admin_token: config.admin_token.as_deref().map(Arc::from),
            max_body_bytes: config.max_body_bytes,
            max_plugin_bytes: config.max_plugin_bytes,
        };
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|source| StartupError::Bind { addr: config.listen, source })?;
        let refresh_every = config.refresh_every();
        let relay = RestartableRelay::new(config, &db, &plugins)?;
        let projections = match config.workers {
            true => Some(Projections::build(config, &db, &plugins, Some(cache)).await?),
            false => None,
        };
        Ok(Self {
            listener,
            router: api::router(state),
            db,
            plugins,
            tenants,
            refresh_every,
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
        &self.db
    }

    /// Serves until `shutdown` completes, then drains in-flight requests and closes the database.
    pub async fn run_until(self, shutdown: impl Future<Output = ()> + Send + 'static) -> io::Result<()> {
        tracing::info!(addr = %self.local_addr()?, database = ?self.db.kind(), "strand is serving");
        supervise_refresh(&self.tasks, self.plugins, self.tenants, self.refresh_every);
        if let Some(relay) = self.relay {
            // Down, it is restarted; the API keeps serving meanwhile (rows wait in the outbox).
            relay.supervise(&self.tasks);
        }
        if let Some(projections) = self.projections {
            projections.supervise(&self.tasks);
        }
        let served = axum::serve(self.listener, self.router).with_graceful_shutdown(shutdown).await;
        // The relay and the workers finish the batch in hand, commit what they did, then stop.
        self.tasks.shutdown().await;
        self.db.close().await;
        served
    }
}

/// Runs the relay alone (`strand relay`) until `shutdown`, keeping its router plugins in line with the
/// database like any node. `reset_checkpoint` first drops the binlog checkpoint (the recovery from a purged
/// binlog: the outbox still holds every unpublished row).
pub async fn run_relay(
    config: &Config,
    reset_checkpoint: bool,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StartupError> {
    let db = Database::open(&config.database_url, config.database_max_connections).await?;
    let (plugins, refresher) = refreshed_plugins(config, &db).await?;
    if reset_checkpoint {
        Checkpoint::forget(&db).await?;
        tracing::warn!("the binlog checkpoint was reset: the outbox is published, then the binlog from its end");
    }
    let result = match relay(config, &db, &plugins)? {
        Some(relay) => {
            tracing::info!(database = ?db.kind(), mode = ?config.relay, "relay is running");
            relay.run(shutdown).await.map_err(StartupError::from)
        }
        None => {
            tracing::warn!("relay = \"off\": nothing to run");
            Ok(())
        }
    };
    refresher.abort();
    db.close().await;
    result
}

/// A relay that can be built again after it ended (its first build checked the configuration at start).
struct RestartableRelay {
    config: Config,
    db: Database,
    plugins: Arc<PluginRegistry>,
    first: Option<Relay>,
}

impl RestartableRelay {
    fn new(config: &Config, db: &Database, plugins: &Arc<PluginRegistry>) -> Result<Option<Self>, StartupError> {
        let Some(first) = relay(config, db, plugins)? else { return Ok(None) };
        Ok(Some(Self { config: config.clone(), db: db.clone(), plugins: plugins.clone(), first: Some(first) }))
    }

    fn supervise(mut self, tasks: &Tasks) {
        tasks.spawn("relay", move |stop: CancellationToken| {
            let built = match self.first.take() {
                Some(relay) => Ok(Some(relay)),
                None => relay(&self.config, &self.db, &self.plugins),
            };
            async move {
                let relay = built.map_err(|e| e.to_string())?.ok_or("the relay is off")?;
                relay.run(stop.cancelled_owned()).await.map_err(|e| e.to_string())
            }
        });
    }
}

/// Keeps the plugins and tenant settings in line with the database, as a supervised task.
fn supervise_refresh(tasks: &Tasks, plugins: Arc<PluginRegistry>, tenants: Arc<TenantSettings>, every: Duration) {
    tasks.spawn("refresh", move |stop: CancellationToken| {
        let refresh = refresh_from_database(plugins.clone(), tenants.clone(), every);
        async move {
            tokio::select! {
                () = stop.cancelled() => Ok(()),
                () = refresh => Err("the refresh loop ended".to_owned()),
            }
        }
    });
}

/// The relay `strand serve` and `strand relay` run, from the configuration: to Kafka when brokers are
/// configured, else to the embedded bus; `None` when the relay is off.
pub fn relay(config: &Config, db: &Database, plugins: &Arc<PluginRegistry>) -> Result<Option<Relay>, StartupError> {
    if config.relay == RelayMode::Off {
        return Ok(None);
    }
    let publisher = match config.kafka()? {
        Some(kafka) => Publisher::Kafka(Arc::new(kafka_bus(config, kafka)?)),
        None => Publisher::Embedded(EmbeddedBus::new(db.clone())),
    };
    let outlet = Outlet::new(plugins.clone(), publisher, Topology::new(&config.topic_prefix));
    Ok(Some(match config.relay {
        RelayMode::Binlog if db.kind() != DatabaseKind::MySql => return Err(StartupError::BinlogNeedsMySql),
        RelayMode::Binlog => {
            Relay::Binlog(BinlogRelay::new(db.clone(), outlet, &config.database_url, config.relay_server_id)?)
        }
        _ => Relay::Poll(PollRelay::new(db.clone(), outlet, Duration::from_millis(config.relay_idle_ms.max(1)))),
    }))
}

/// Runs the projection workers alone (`strand worker`) until `shutdown`.
pub async fn run_workers(config: &Config, shutdown: impl Future<Output = ()>) -> Result<(), StartupError> {
    let db = Database::open(&config.database_url, config.database_max_connections).await?;
    let (plugins, refresher) = refreshed_plugins(config, &db).await?;
    let cache = match &config.redis_url {
        Some(url) => Some(Cache::Redis(RedisCache::connect(url).await?)),
        None => {
            tracing::warn!("no redis_url: only the follower table is projected here (`strand serve` projects the rest in its own memory)");
            None
        }
    };
    let tasks = Tasks::default();
    Projections::build(config, &db, &plugins, cache).await?.supervise(&tasks);
    tracing::info!(tasks = tasks.len(), "projection workers are running");
    shutdown.await;
    tasks.shutdown().await;
    refresher.abort();
    db.close().await;
    Ok(())
}

/// The projection workers of this deployment, reading Kafka when brokers are configured, else the
/// embedded bus, all from `{prefix}following`: the `follower` table, and with a cache one worker per
/// projector plugin (bundled or deployed) for every tenant — those deployed later are started by a
/// supervisor.
pub struct Projections {
    factory: WorkerFactory,
    workers: Vec<(Projection, Worker)>,
    supervisor: Option<Supervisor>,
}

struct Supervisor {
    plugins: Arc<PluginRegistry>,
    cache: Cache,
    running: BTreeSet<String>,
    every: Duration,
}

impl Projections {
    pub async fn build(
        config: &Config,
        db: &Database,
        plugins: &Arc<PluginRegistry>,
        cache: Option<Cache>,
    ) -> Result<Self, StartupError> {
        let kafka = config.kafka()?;
        let dead_letters = match &kafka {
            Some(kafka) => Publisher::Kafka(Arc::new(kafka_bus(config, kafka.clone())?)),
            None => Publisher::Embedded(EmbeddedBus::new(db.clone())),
        };
        let factory = WorkerFactory {
            db: db.clone(),
            topology: Topology::new(&config.topic_prefix),
            kafka,
            worker_id: config.worker_id.clone(),
            dead_letters,
        };
        let follower = Projection::Follower(db.clone());
        let mut workers = vec![(follower.clone(), factory.worker(follower).await?)];
        let Some(cache) = cache else { return Ok(Self { factory, workers, supervisor: None }) };
        let running = plugins.projector_names();
        for name in &running {
            let projection =
                Projection::Plugin(PluginProjection::new(plugins.clone(), name, cache.clone(), db.clone()));
            workers.push((projection.clone(), factory.worker(projection).await?));
        }
        let every = config.refresh_every();
        let supervisor = Supervisor { plugins: plugins.clone(), cache, running, every };
        Ok(Self { factory, workers, supervisor: Some(supervisor) })
    }

    /// Runs every worker (and the supervisor of projectors deployed later) as supervised tasks.
    pub fn supervise(self, tasks: &Tasks) {
        for (projection, worker) in self.workers {
            supervise_worker(tasks, &self.factory, projection, Some(worker));
        }
        let Some(s) = self.supervisor else { return };
        let (factory, running, spawner) = (self.factory, Arc::new(std::sync::Mutex::new(s.running)), tasks.clone());
        tasks.spawn("projector-supervisor", move |stop: CancellationToken| {
            let (plugins, cache, every) = (s.plugins.clone(), s.cache.clone(), s.every);
            supervise_new_projectors(factory.clone(), plugins, cache, running.clone(), every, (spawner.clone(), stop))
        });
    }
}

fn kafka_bus(config: &Config, connection: KafkaConnection) -> Result<KafkaBus, StartupError> {
    Ok(KafkaBus::connect(KafkaSettings {
        connection,
        partitions: config.kafka_partitions,
        replication: config.kafka_replication,
    })?)
}

/// `strand reconcile`: the truth against the follower table and, with Redis configured, the bundled
/// counters and `sample_lists` list caches.
pub async fn run_reconcile(config: &Config, sample_lists: usize) -> Result<Report, StartupError> {
    let db = Database::open(&config.database_url, config.database_max_connections).await?;
    let cache = match &config.redis_url {
        Some(url) => Some(Cache::Redis(RedisCache::connect(url).await?)),
        None => None,
    };
    let report = reconcile(&db, cache.as_ref(), sample_lists).await?;
    db.close().await;
    Ok(report)
}

/// `strand rebuild <projection>`: `follower`, or a projector's name (needs Redis); reports progress per page
/// as `(tenant, done, total)` (an empty tenant for the follower table) and returns the rows or pairs done.
pub async fn run_rebuild(
    config: &Config,
    projection: &str,
    progress: impl FnMut(&str, u64, u64),
) -> Result<u64, StartupError> {
    let db = Database::open(&config.database_url, config.database_max_connections).await?;
    let done = if projection == "follower" {
        rebuild_follower(&db).await?
    } else {
        let url = config.redis_url.as_deref().ok_or(StartupError::RebuildNeedsRedis)?;
        let plugins = load_plugins(config, &db).await?;
        if !plugins.projector_names().contains(projection) {
            return Err(StartupError::UnknownProjection(projection.to_owned()));
        }
        let cache = Cache::Redis(RedisCache::connect(url).await?);
        let projector = PluginProjection::new(plugins, projection, cache, db.clone());
        rebuild_projector(&projector, progress).await?
    };
    db.close().await;
    Ok(done)
}

/// The deployed plugins (and the bundled ones), loaded from the database.
async fn load_plugins(config: &Config, db: &Database) -> Result<Arc<PluginRegistry>, StartupError> {
    let (defaults, maxima, cache) = (config.plugin_limits(), config.plugin_maxima(), config.plugin_cache_dir.clone());
    let runtime = Arc::new(PluginRuntime::bounded(defaults, maxima, cache)?);
    Ok(Arc::new(PluginRegistry::load_with(runtime, db.clone(), config.rollback_policy()).await?))
}

/// The plugins of a process without the API (`strand relay`, `strand worker`), kept in line with the
/// database by the returned task, which also serves `/healthz` and `/metrics` on `operations_listen` when
/// set (abort it when done).
async fn refreshed_plugins(
    config: &Config,
    db: &Database,
) -> Result<(Arc<PluginRegistry>, JoinHandle<()>), StartupError> {
    let plugins = load_plugins(config, db).await?;
    let tenants = Arc::new(TenantSettings::load(db.clone()).await?);
    let every = config.refresh_every();
    let operations = match config.operations_listen {
        Some(addr) => {
            observability::recorder();
            let listener = TcpListener::bind(addr).await.map_err(|source| StartupError::Bind { addr, source })?;
            tracing::info!(addr = %listener.local_addr().unwrap_or(addr), "serving /healthz and /metrics");
            Some(listener)
        }
        None => None,
    };
    let refresh = refresh_from_database(plugins.clone(), tenants, every);
    let serve = async move {
        let Some(listener) = operations else { return };
        if let Err(e) = axum::serve(listener, api::operations_router()).await {
            tracing::error!(error = %e, "/healthz and /metrics stopped");
        }
    };
    let companion = tokio::spawn(async move {
        tokio::join!(refresh, serve);
    });
    Ok((plugins, companion))
}

/// Keeps this node's plugins and tenant settings in line with the database. A failed refresh is logged and
/// tried again on the next tick; the node keeps serving with what it has.
pub async fn refresh_from_database(plugins: Arc<PluginRegistry>, tenants: Arc<TenantSettings>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if let Err(e) = plugins.refresh().await {
            tracing::error!(error = %e, "cannot refresh deployed plugins; retrying on the next tick");
        }
        if let Err(e) = tenants.refresh().await {
            tracing::error!(error = %e, "cannot refresh tenant settings; retrying on the next tick");
        }
    }
}
