//! The `strand` commands' wiring: configuration in, running parts out — one file per command, wiring
//! only (the logic lives in the stages it wires). Kept in the library, apart from `main`, so that tests and
//! benchmarks run the very server a user runs, in-process.
//!
//! - `serve.rs`: `strand serve`, the API node (with the relay and workers unless configured off).
//! - `relay.rs`: the relay `serve` and `strand relay` run.
//! - `worker.rs`: `strand worker`, the projection workers alone.
//! - `maintenance.rs`: `strand rebuild` and `strand reconcile`.
//!
//! This file holds what they share: the start-up error, the plugin set, the Kafka producer, the refresh.

mod maintenance;
mod relay;
mod serve;
mod worker;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use maintenance::{run_rebuild, run_reconcile, MaintenanceError};
pub use relay::{relay, run_relay};
pub use serve::Server;
pub use worker::run_workers;

use crate::api::{self, AuthSetupError};
use crate::bus::{EmbeddedBus, KafkaBus, KafkaOptionsError, KafkaSettings, Publisher, Topology};
use crate::cache::CacheError;
use crate::config::Config;
use crate::graph::{Database, DatabaseError};
use crate::observability;
use crate::plugins::logs::LogTopic;
use crate::plugins::{PluginError, PluginRegistry, PluginRuntime, RegistryError};
use crate::projection::{SourceError, WorkerFactory};
use crate::relay::RelayError;
use crate::tenants::TenantSettings;

/// Why a command could not start: each arm names the part that failed and keeps its cause.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Database(#[from] DatabaseError),
    #[error(transparent)]
    Auth(#[from] AuthSetupError),
    #[error("cannot start the plugin runtime")]
    Plugins(#[from] PluginError),
    #[error("cannot load deployed plugins")]
    Registry(#[from] RegistryError),
    #[error("cannot read tenant settings")]
    Tenants(#[from] sqlx::Error),
    #[error("cannot connect to Redis")]
    Redis(#[from] redis::RedisError),
    #[error("cannot connect to the cache")]
    Cache(#[from] CacheError),
    #[error("cannot set up a Kafka client")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error(transparent)]
    KafkaOptions(#[from] KafkaOptionsError),
    #[error("cannot start a projection worker")]
    Worker(#[from] SourceError),
    #[error("cannot start the relay")]
    Relay(#[from] RelayError),
    #[error("relay = \"binlog\" follows a MySQL/MariaDB binlog; this database has none (use relay = \"poll\")")]
    BinlogNeedsMySql,
    #[error("cannot listen on {addr}")]
    Bind { addr: SocketAddr, source: io::Error },
}

/// Opens (and migrates) the configured database.
async fn open_database(config: &Config) -> Result<Database, StartupError> {
    Ok(Database::open(&config.database_url, config.database_max_connections).await?)
}

/// The deployed plugins (and the bundled ones), loaded from the database.
async fn load_plugins(config: &Config, db: &Database) -> Result<Arc<PluginRegistry>, StartupError> {
    let (defaults, maxima, cache) = (config.plugin_limits(), config.plugin_maxima(), config.plugin_cache_dir.clone());
    let runtime = PluginRuntime::bounded(defaults, maxima, cache)?.with_tenant_share(config.plugin_tenant_instances);
    let runtime = Arc::new(runtime);
    let registry = PluginRegistry::load_with(runtime, db.clone(), config.rollback_policy()).await?;
    let registry = registry
        .with_compile_budget(Duration::from_millis(config.plugin_compile_budget_ms))
        .with_max_projectors(config.plugin_max_projectors);
    Ok(Arc::new(registry))
}

/// Where this deployment publishes: Kafka when brokers are configured, else the embedded bus in `db`.
fn publisher(config: &Config, db: &Database) -> Result<Publisher, StartupError> {
    Ok(match config.kafka()? {
        Some(connection) => Publisher::Kafka(Arc::new(KafkaBus::connect(KafkaSettings {
            connection,
            partitions: config.kafka_partitions,
            replication: config.kafka_replication,
        })?)),
        None => Publisher::Embedded(EmbeddedBus::new(db.clone())),
    })
}

/// Where a Kafka deployment publishes plugins' log lines besides the database; `None` on the embedded bus
/// (the database's table is the store there).
fn log_topic(config: &Config, db: &Database) -> Result<Option<LogTopic>, StartupError> {
    Ok(match publisher(config, db)? {
        publisher @ Publisher::Kafka(_) => {
            Some(LogTopic { publisher, topic: Topology::new(&config.topic_prefix).plugin_logs_topic() })
        }
        Publisher::Embedded(_) => None,
    })
}

/// How this deployment's projection workers are built: from Kafka or the embedded bus, dead letters
/// published where events are.
fn worker_factory(config: &Config, db: &Database) -> Result<WorkerFactory, StartupError> {
    Ok(WorkerFactory {
        db: db.clone(),
        topology: Topology::new(&config.topic_prefix),
        kafka: config.kafka()?,
        worker_id: config.worker_id.clone(),
        dead_letters: publisher(config, db)?,
        tenant_budget: Duration::from_millis(config.projection_tenant_budget_ms.max(1)),
    })
}

/// The plugins of a process without the API (`strand relay`, `strand worker`), kept in line with the
/// database by the returned task, which also writes their log lines there and serves `/healthz` and
/// `/metrics` on `operations_listen` when set (abort it when done).
async fn refreshed_plugins(
    config: &Config,
    db: &Database,
) -> Result<(Arc<PluginRegistry>, JoinHandle<()>), StartupError> {
    let plugins = load_plugins(config, db).await?;
    let tenants = Arc::new(TenantSettings::load(db.clone()).await?);
    let operations = bind_operations(config).await?;
    let refresh = refresh_from_database(plugins.clone(), tenants, config.refresh_every());
    let serve = async move {
        if let Some(listener) = operations {
            serve_operations(listener).await;
        }
    };
    let (writer, logs_db, topic) = (plugins.clone(), db.clone(), log_topic(config, db)?);
    let keep_logs = async move { writer.logs().write(&logs_db, topic.as_ref()).await };
    let companion = tokio::spawn(async move {
        tokio::join!(refresh, serve, keep_logs);
    });
    Ok((plugins, companion))
}

/// The operations listener (`/healthz`, `/metrics` to whoever reaches it), when `operations_listen` is set.
async fn bind_operations(config: &Config) -> Result<Option<TcpListener>, StartupError> {
    let Some(addr) = config.operations_listen else { return Ok(None) };
    observability::recorder();
    let listener = TcpListener::bind(addr).await.map_err(|source| StartupError::Bind { addr, source })?;
    tracing::info!(addr = %listener.local_addr().unwrap_or(addr), "serving /healthz and /metrics");
    Ok(Some(listener))
}

/// Serves `/healthz` and `/metrics` on `listener` until the process ends or the task is aborted.
async fn serve_operations(listener: TcpListener) {
    if let Err(e) = axum::serve(listener, api::operations_router()).await {
        tracing::error!(error = %e, "/healthz and /metrics stopped");
    }
}

/// Keeps this node's plugins and tenant settings in line with the database, each on its own tick: a slow
/// plugin load (a big component compiling) never holds up a tenant's settings or JWT keys. A failed refresh
/// is logged and tried again on the next tick; the node keeps serving with what it has.
async fn refresh_from_database(plugins: Arc<PluginRegistry>, tenants: Arc<TenantSettings>, every: Duration) {
    tokio::join!(
        on_every_tick(every, "deployed plugins", || plugins.refresh()),
        on_every_tick(every, "tenant settings", || tenants.refresh()),
    );
}

/// Runs `refresh` every `every`, logging a failure (with its cause) and trying again on the next tick.
async fn on_every_tick<T, E, F>(every: Duration, what: &str, refresh: impl Fn() -> F)
where
    E: std::error::Error,
    F: std::future::Future<Output = Result<T, E>>,
{
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if let Err(e) = refresh().await {
            tracing::error!(error = %observability::causes(&e), "cannot refresh {what}; retrying on the next tick");
        }
    }
}
