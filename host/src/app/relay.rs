//! The relay of `strand serve` and `strand relay`: the outbox published to Kafka when brokers are
//! configured, else to the embedded bus; from the binlog or by polling, as `relay` says.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::resources::{publisher, Resources};
use super::{bind_operations, serve_operations, supervise_companions, StartupError};
use crate::bus::{Publisher, Topology};
use crate::config::{Config, RelayMode};
use crate::db::Database;
use crate::ops::tasks::Tasks;
use crate::plugins::PluginRegistry;
use crate::relay::{BinlogRelay, Checkpoint, Outlet, PollRelay, Relay};

/// The configured relay on `db`, routing with `plugins`, with a publisher of its own; `None` when the relay
/// is off. What `strand relay` runs, for tests and benchmarks that hold their own database and plugins.
pub fn relay(config: &Config, db: &Database, plugins: &Arc<PluginRegistry>) -> Result<Option<Relay>, StartupError> {
    let publisher = publisher(config, db, config.kafka()?.as_ref())?;
    build(config, db, plugins, publisher)
}

/// The configured relay, publishing through `publisher`; `None` when the relay is off.
fn build(
    config: &Config,
    db: &Database,
    plugins: &Arc<PluginRegistry>,
    publisher: Publisher,
) -> Result<Option<Relay>, StartupError> {
    if config.relay == RelayMode::Off {
        return Ok(None);
    }
    let outlet = Outlet::new(plugins.clone(), publisher, Topology::new(&config.topic_prefix))
        .with_router_budget(Duration::from_millis(config.relay_tenant_budget_ms.max(1)));
    Ok(Some(match config.relay {
        RelayMode::Binlog if !db.kind().has_binlog() => return Err(StartupError::BinlogNeedsMySql),
        RelayMode::Binlog => {
            Relay::Binlog(BinlogRelay::new(db.clone(), outlet, &config.database_url, config.relay_server_id)?)
        }
        _ => Relay::Poll(PollRelay::new(db.clone(), outlet, Duration::from_millis(config.relay_idle_ms.max(1)))),
    }))
}

impl Resources {
    /// The configured relay, publishing through this process's publisher; `None` when the relay is off.
    fn relay(&self, config: &Config) -> Result<Option<Relay>, StartupError> {
        build(config, &self.db, &self.plugins, self.publisher.clone())
    }
}

/// `strand relay`: runs the relay alone until `shutdown`, keeping its router plugins in line with the
/// database like any node. `reset_checkpoint` first drops the binlog checkpoint (the recovery from a purged
/// binlog: the outbox still holds every unpublished row). An error ends the process: its orchestrator
/// restarts it, or an operator looks.
pub async fn run_relay(
    config: &Config,
    reset_checkpoint: bool,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StartupError> {
    let resources = Resources::open(config).await?;
    let db = resources.db.clone();
    let tasks = Tasks::default();
    supervise_companions(&tasks, &resources, config.refresh_every());
    let operations = bind_operations(config).await?.map(|listener| tokio::spawn(serve_operations(listener)));
    if reset_checkpoint {
        Checkpoint::forget(&db).await.map_err(StartupError::CheckpointReset)?;
        tracing::warn!("the binlog checkpoint was reset: the outbox is published, then the binlog from its end");
    }
    let result = match resources.relay(config)? {
        Some(relay) => {
            tracing::info!(database = ?db.kind(), mode = ?config.relay, "relay is running");
            relay.run(shutdown).await.map_err(StartupError::from)
        }
        None => {
            tracing::warn!("relay = \"off\": nothing to run");
            Ok(())
        }
    };
    tasks.shutdown().await;
    if let Some(operations) = operations {
        operations.abort();
    }
    db.close().await;
    result
}

/// The relay of `strand serve`, as a supervised task: built again after it ended (its first build checked
/// the configuration at start).
pub(super) struct RestartableRelay {
    config: Config,
    resources: Resources,
    first: Option<Relay>,
}

impl RestartableRelay {
    /// `None` when the relay is off.
    pub(super) fn new(config: &Config, resources: &Resources) -> Result<Option<Self>, StartupError> {
        let Some(first) = resources.relay(config)? else { return Ok(None) };
        Ok(Some(Self { config: config.clone(), resources: resources.clone(), first: Some(first) }))
    }

    pub(super) fn supervise(mut self, tasks: &Tasks) {
        tasks.spawn("relay", move |stop: CancellationToken| {
            let built = match self.first.take() {
                Some(relay) => Ok(Some(relay)),
                None => self.resources.relay(&self.config),
            };
            async move {
                // Never off once it was on; were it, the supervisor would report a relay that returned.
                let Some(relay) = built? else { return Ok(()) };
                Ok(relay.run(stop.cancelled_owned()).await?)
            }
        });
    }
}
