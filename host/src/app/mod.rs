//! The `strand` commands' wiring: configuration in, running parts out — one file per command, wiring
//! only (the logic lives in the stages it wires). Kept in the library, apart from `main`, so that tests and
//! benchmarks run the very server a user runs, in-process.
//!
//! - `serve.rs`: `strand serve`, the API node (with the relay and workers unless configured off).
//! - `relay.rs`: the relay `serve` and `strand relay` run.
//! - `worker.rs`: `strand worker`, the projection workers alone.
//! - `maintenance.rs`: `strand rebuild` and `strand reconcile`.
//!
//! `resources.rs` builds what they share once per process; this file holds the start-up error and the
//! companion tasks every node runs (refresh, plugin logs, the operations listener).

mod maintenance;
mod relay;
mod resources;
mod serve;
mod worker;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use maintenance::{run_rebuild, run_reconcile, MaintenanceError};
pub use relay::{relay, run_relay};
pub use serve::Server;
pub use worker::run_workers;

use self::resources::Resources;
use crate::api::{self, AuthSetupError};
use crate::bus::KafkaOptionsError;
use crate::cache::CacheError;
use crate::config::Config;
use crate::db::{Database, DatabaseError, SchemaState};
use crate::ops::observability;
use crate::ops::tasks::Tasks;
use crate::plugins::logs::LogTopic;
use crate::plugins::{PluginError, PluginRegistry, RegistryError};
use crate::projection::SourceError;
use crate::relay::RelayError;
use crate::tenancy::settings::TenantSettings;

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
    Tenants(#[source] sqlx::Error),
    #[error("cannot reset the relay's checkpoint")]
    CheckpointReset(#[source] sqlx::Error),
    #[error("cannot connect to Redis")]
    Redis(#[from] redis::RedisError),
    #[error("cannot connect to the cache")]
    Cache(#[from] CacheError),
    #[error("cannot set up a Kafka client")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error(transparent)]
    KafkaOptions(#[from] KafkaOptionsError),
    #[error("cannot take back the kept spaces of the in-process cache")]
    KeptSpaces(#[source] sqlx::Error),
    #[error("cannot start a projection worker")]
    Worker(#[from] SourceError),
    #[error("cannot start the relay")]
    Relay(#[from] RelayError),
    #[error("relay = \"binlog\" follows a MySQL/MariaDB binlog; this database has none (use relay = \"poll\")")]
    BinlogNeedsMySql,
    #[error("cannot listen on {addr}")]
    Bind { addr: SocketAddr, source: io::Error },
}

/// Opens the configured database for the maintenance commands: an existing one, whose schema they never
/// change (`strand migrate` does).
async fn open_database(config: &Config) -> Result<Database, StartupError> {
    Ok(Database::open_existing(&config.database_url, config.database_max_connections).await?)
}

/// `strand migrate`: brings the configured database's schema up to this release (creating an SQLite file
/// when missing), and records which releases may run on it. A newer schema compatible with this release is
/// left as it is.
pub async fn migrate(config: &Config) -> Result<SchemaState, StartupError> {
    let db = Database::open(&config.database_url, 1).await?;
    let state = db.check_schema().await?;
    db.close().await;
    Ok(state)
}

/// The tasks every node runs beside its own work, supervised: its plugins and tenant settings kept in line
/// with the database, and its plugins' log lines written there (and, on Kafka, to the log topic).
fn supervise_companions(tasks: &Tasks, resources: &Resources, refresh_every: Duration) {
    supervise_plugin_logs(tasks, resources.plugins.clone(), resources.db.clone(), resources.log_topic().map(Arc::new));
    supervise_refresh(tasks, resources.plugins.clone(), resources.tenants.clone(), refresh_every);
}

/// Writes the plugins' log lines into the database (`strand plugin logs`, the admin page), as a supervised
/// task.
fn supervise_plugin_logs(tasks: &Tasks, plugins: Arc<PluginRegistry>, db: Database, topic: Option<Arc<LogTopic>>) {
    tasks.spawn("plugin-logs", move |stop: CancellationToken| {
        let (plugins, db, topic) = (plugins.clone(), db.clone(), topic.clone());
        async move {
            tokio::select! {
                () = stop.cancelled() => Ok(()),
                // A writer that ends unasked is reported and restarted by the supervisor.
                () = plugins.logs().write(&db, topic.as_deref()) => Ok(()),
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
                () = refresh => Ok(()),
            }
        }
    });
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
