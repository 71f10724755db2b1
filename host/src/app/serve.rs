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
use super::{
    bind_operations, load_plugins, log_topic, open_database, refresh_from_database, serve_operations, worker_factory,
    StartupError,
};
use crate::api::{self, AppState, Authenticator};
use crate::bus::Topology;
use crate::cache::Cache;
use crate::config::Config;
use crate::graph::Database;
use crate::health::Readiness;
use crate::lag::LagProbe;
use crate::observability;
use crate::plugins::logs::LogTopic;
use crate::plugins::PluginRegistry;
use crate::projection::{CachedReads, Projections};
use crate::ratelimit::{RateLimiting, TokenBuckets};
use crate::retention::Retention;
use crate::tasks::Tasks;
use crate::tenants::TenantSettings;

/// A bound, ready-to-serve Strand.
pub struct Server {
    listener: TcpListener,
    /// `operations_listen`: `/healthz` and `/metrics` for the platform's scraper, without a token.
    operations: Option<TcpListener>,
    router: Router,
    db: Database,
    plugins: Arc<PluginRegistry>,
    tenants: Arc<TenantSettings>,
    rate_limiting: Arc<RateLimiting>,
    refresh_every: Duration,
    retention: Retention,
    plugin_cache_dir: Option<std::path::PathBuf>,
    relay: Option<RestartableRelay>,
    projections: Option<Projections>,
    /// Where plugins' log lines are also published (a Kafka deployment).
    log_topic: Option<LogTopic>,
    /// The relay, workers and refresh, supervised; `/readyz` reports those that are down.
    tasks: Tasks,
}

impl Server {
    /// Opens and migrates the database, loads the plugins and JWT keys, connects the cache and the bus,
    /// and binds the listener: every configuration error shows here, before anything serves.
    pub async fn build(config: &Config) -> Result<Self, StartupError> {
        config.check_secrets()?;
        let db = open_database(config).await?;
        let plugins = load_plugins(config, &db).await?;
        let tenants = Arc::new(TenantSettings::load(db.clone()).await?);
        let auth = Arc::new(Authenticator::from_config(config, tenants.jwt_keys().clone())?);
        let buckets = TokenBuckets::connect(config.redis_url.as_deref()).await?;
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
            rate_limiting: rate_limiting.clone(),
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
        let operations = bind_operations(config).await?;
        let relay = RestartableRelay::new(config, &db, &plugins)?;
        let projections = match config.workers {
            true => {
                let factory = worker_factory(config, &db)?;
                Some(Projections::build(factory, &plugins, Some(cache), config.refresh_every()).await?)
            }
            false => None,
        };
        let log_topic = log_topic(config, &db)?;
        Ok(Self {
            listener,
            operations,
            router: api::router(state),
            db,
            plugins,
            tenants,
            rate_limiting,
            refresh_every: config.refresh_every(),
            retention: config.retention(),
            plugin_cache_dir: config.plugin_cache_dir.clone(),
            relay,
            projections,
            log_topic,
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
        supervise_plugin_logs(&self.tasks, self.plugins.clone(), self.db.clone(), self.log_topic.map(Arc::new));
        supervise_request_sample(&self.tasks, self.rate_limiting, self.db.clone());
        supervise_refresh(&self.tasks, self.plugins, self.tenants, self.refresh_every);
        supervise_retention(&self.tasks, self.retention, self.db.clone(), self.plugin_cache_dir);
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
        self.db.close().await;
        served
    }
}

/// Writes the plugins' log lines into the database (`strand plugin logs`, the admin page), as a supervised
/// task.
fn supervise_plugin_logs(tasks: &Tasks, plugins: Arc<PluginRegistry>, db: Database, topic: Option<Arc<LogTopic>>) {
    tasks.spawn("plugin-logs", move |stop: CancellationToken| {
        let (plugins, db, topic) = (plugins.clone(), db.clone(), topic.clone());
        async move {
            tokio::select! {
                () = stop.cancelled() => Ok(()),
                () = plugins.logs().write(&db, topic.as_deref()) => anyhow::bail!("the plugin log writer ended"),
            }
        }
    });
}

/// Writes the sampled write requests into the database (`strand plugin test --replay` of a rate limiter), as
/// a supervised task.
fn supervise_request_sample(tasks: &Tasks, rate_limiting: Arc<RateLimiting>, db: Database) {
    tasks.spawn("request-sample", move |stop: CancellationToken| {
        let (rate_limiting, db) = (rate_limiting.clone(), db.clone());
        async move {
            tokio::select! {
                () = stop.cancelled() => Ok(()),
                () = rate_limiting.sample().write(&db) => anyhow::bail!("the request sample writer ended"),
            }
        }
    });
}

/// Deletes what is past retention every hour, as a supervised task; a failed run is logged and tried again
/// at the next.
fn supervise_retention(tasks: &Tasks, retention: Retention, db: Database, cache_dir: Option<std::path::PathBuf>) {
    tasks.spawn("retention", move |stop: CancellationToken| {
        let (db, cache_dir) = (db.clone(), cache_dir.clone());
        async move {
            let mut ticks = tokio::time::interval(crate::retention::EVERY);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return Ok(()),
                    _ = ticks.tick() => {}
                }
                match retention.prune(&db, cache_dir.as_deref()).await {
                    Ok(pruned) => tracing::info!(?pruned, "deleted what is past retention"),
                    Err(e) => tracing::error!(error = %crate::observability::causes(&e), "retention failed; trying again in an hour"),
                }
            }
        }
    });
}

/// Keeps the plugins and tenant settings in line with the database, as a supervised task.
fn supervise_refresh(tasks: &Tasks, plugins: Arc<PluginRegistry>, tenants: Arc<TenantSettings>, every: Duration) {
    tasks.spawn("refresh", move |stop: CancellationToken| {
        let refresh = refresh_from_database(plugins.clone(), tenants.clone(), every);
        async move {
            tokio::select! {
                () = stop.cancelled() => Ok(()),
                () = refresh => anyhow::bail!("the refresh loop ended"),
            }
        }
    });
}
