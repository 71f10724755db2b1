//! What a command's parts share, each built once per process from the configuration: the database, the
//! plugin set and tenant settings, the Kafka client setup, one publisher (a Kafka producer and topic admin,
//! or the embedded bus) and one Redis handle. The relay, the workers' dead letters and the plugin log topic
//! publish through the same producer; the cache and the token buckets share the Redis handle; a restarted
//! relay reuses them rather than opening new clients.

use std::sync::Arc;
use std::time::Duration;

use super::StartupError;
use crate::bus::{EmbeddedBus, KafkaBus, KafkaConnection, KafkaSettings, Publisher, Topology};
use crate::cache::{Cache, RedisConnection};
use crate::config::Config;
use crate::db::Database;
use crate::plugins::logs::LogTopic;
use crate::plugins::{PluginRegistry, PluginRuntime};
use crate::projection::WorkerFactory;
use crate::tenancy::settings::TenantSettings;

/// The shared parts of one process.
#[derive(Clone)]
pub(super) struct Resources {
    pub(super) db: Database,
    pub(super) plugins: Arc<PluginRegistry>,
    pub(super) tenants: Arc<TenantSettings>,
    /// The Kafka cluster, when brokers are configured.
    pub(super) kafka: Option<KafkaConnection>,
    /// Where this deployment publishes: Kafka when brokers are configured, else the embedded bus in `db`.
    pub(super) publisher: Publisher,
    /// Redis, when `redis_url` is set.
    pub(super) redis: Option<RedisConnection>,
    pub(super) topology: Topology,
}

impl Resources {
    /// Opens the database (migrating it with `migrate_on_start`, else checking this release can run on it),
    /// loads the plugins and tenant settings, and connects the bus and Redis: every configuration error
    /// shows here.
    pub(super) async fn open(config: &Config) -> Result<Self, StartupError> {
        let (url, connections) = (&config.database_url, config.database_max_connections);
        let db = match config.migrate_on_start {
            true => Database::open(url, connections).await?,
            false => Database::open_existing(url, connections).await?,
        };
        let plugins = load_plugins(config, &db).await?;
        let tenants = Arc::new(TenantSettings::load(db.clone()).await.map_err(StartupError::Tenants)?);
        let kafka = config.kafka()?;
        let publisher = publisher(config, &db, kafka.as_ref())?;
        let redis = match &config.redis_url {
            Some(url) => Some(RedisConnection::connect(url).await?),
            None => None,
        };
        Ok(Self { db, plugins, tenants, kafka, publisher, redis, topology: Topology::new(&config.topic_prefix) })
    }

    /// The projector data store: Redis when configured, else (`strand serve` only: its workers and reads
    /// share it) this process's memory.
    pub(super) fn cache(&self, config: &Config) -> Cache {
        Cache::on(self.redis.clone(), config.projector_quota())
    }

    /// Where a Kafka deployment publishes plugins' log lines besides the database; `None` on the embedded
    /// bus (the database's table is the store there).
    pub(super) fn log_topic(&self) -> Option<LogTopic> {
        match &self.publisher {
            Publisher::Kafka(_) => {
                Some(LogTopic { publisher: self.publisher.clone(), topic: self.topology.plugin_logs_topic() })
            }
            Publisher::Embedded(_) => None,
        }
    }

    /// How this deployment's projection workers are built: from Kafka or the embedded bus, dead letters
    /// published where events are.
    pub(super) fn worker_factory(&self, config: &Config) -> WorkerFactory {
        WorkerFactory {
            db: self.db.clone(),
            topology: self.topology.clone(),
            kafka: self.kafka.clone(),
            worker_id: config.worker_id.clone(),
            dead_letters: self.publisher.clone(),
            tenant_budget: Duration::from_millis(config.projection_tenant_budget_ms.max(1)),
        }
    }
}

/// Where a deployment publishes: to `kafka` when brokers are configured (a producer and a topic admin),
/// else to the embedded bus in `db`.
pub(super) fn publisher(
    config: &Config,
    db: &Database,
    kafka: Option<&KafkaConnection>,
) -> Result<Publisher, StartupError> {
    Ok(match kafka {
        Some(connection) => Publisher::Kafka(Arc::new(KafkaBus::connect(KafkaSettings {
            connection: connection.clone(),
            partitions: config.kafka_partitions,
            replication: config.kafka_replication,
        })?)),
        None => Publisher::Embedded(EmbeddedBus::new(db.clone())),
    })
}

/// The deployed plugins (and the bundled ones), loaded from the database.
pub(super) async fn load_plugins(config: &Config, db: &Database) -> Result<Arc<PluginRegistry>, StartupError> {
    let (defaults, maxima, cache) = (config.plugin_limits(), config.plugin_maxima(), config.plugin_cache_dir.clone());
    let runtime = PluginRuntime::bounded(defaults, maxima, cache)?
        .with_tenant_share(config.plugin_tenant_instances)
        .with_tenant_cpu_share(config.plugin_tenant_cpu_share);
    let runtime = Arc::new(runtime);
    let registry = PluginRegistry::load_with(runtime, db.clone(), config.rollback_policy()).await?;
    let registry = registry
        .with_compile_budget(Duration::from_millis(config.plugin_compile_budget_ms))
        .with_max_projectors(config.plugin_max_projectors);
    Ok(Arc::new(registry))
}
