//! Projection workers as a deployment runs them: how one is built (its bus, consumer name and dead-letter
//! topic), and — for projectors deployed after start-up — a supervisor that backfills each new projector
//! for the tenants that have it, marks it complete, and then starts its live worker from the bus's
//! beginning (the backfill's floors make the two meet without a gap or a double count). The other
//! projections keep running meanwhile.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::backfill::backfill;
use super::cached_reads::mark_ready;
use super::effects::RedisEffects;
use super::plugin::PluginProjection;
use super::progress;
use super::source::{EventSource, SourceError};
use super::worker::{Projection, Worker};
use crate::bus::Publisher;
use crate::graph::{Database, TenantId};
use crate::plugins::{PluginKind, PluginRegistry};

/// Builds the workers of one deployment.
#[derive(Clone)]
pub struct WorkerFactory {
    pub db: Database,
    /// Topic prefix (`strand.`): events come from `{prefix}following`.
    pub prefix: String,
    /// Kafka brokers; `None`: the embedded bus.
    pub brokers: Option<String>,
    pub dead_letters: Publisher,
}

impl WorkerFactory {
    /// A worker for `projection`: a consumer group / subscriber named after it, and its dead-letter topic.
    pub async fn worker(&self, projection: Projection) -> Result<Worker, SourceError> {
        let name = projection.name();
        let topic = format!("{}following", self.prefix);
        let source = match &self.brokers {
            Some(brokers) => EventSource::kafka(brokers, &format!("{}{name}", self.prefix), &topic)?,
            None => EventSource::embedded(crate::bus::EmbeddedBus::new(self.db.clone()), &name, &topic).await?,
        };
        let dead_letter_topic = format!("{}dead-letter.{name}", self.prefix);
        Ok(Worker::new(source, projection, self.dead_letters.clone(), dead_letter_topic))
    }
}

/// Starts projectors deployed after start-up, checking every `every`; `running` are the names that already
/// have workers. Ends (with the workers it started) when `stopped` does.
pub async fn supervise_new_projectors(
    factory: WorkerFactory,
    plugins: Arc<PluginRegistry>,
    effects: Arc<RedisEffects>,
    redis_url: String,
    mut running: BTreeSet<String>,
    every: Duration,
    stopped: watch::Receiver<()>,
) {
    let mut started = Vec::new();
    let mut ticks = tokio::time::interval(every);
    let mut stop = stopped.clone();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = ticks.tick() => {}
        }
        for name in plugins.projector_names() {
            if running.contains(&name) {
                continue;
            }
            let projection = PluginProjection::new(plugins.clone(), &name, effects.clone());
            // A backfill cut short by shutdown is simply done again at the next start: it applies once.
            let outcome = tokio::select! {
                _ = stop.changed() => break,
                outcome = start(&factory, &plugins, projection, &redis_url) => outcome,
            };
            match outcome {
                Ok(worker) => {
                    tracing::info!(projector = %name, "a new projector is backfilled and live");
                    started.push(tokio::spawn(worker.run(until(stopped.clone()))));
                    running.insert(name);
                }
                Err(error) => tracing::error!(projector = %name, %error, "cannot start a new projector; retrying"),
            }
        }
    }
    for task in started {
        if let Err(e) = task.await {
            tracing::error!(error = %e, "a projection worker failed");
        }
    }
}

/// Backfills `projection` for every tenant of the truth that has it, marks each complete, and returns its
/// live worker (reading the bus from its beginning).
async fn start(
    factory: &WorkerFactory,
    plugins: &PluginRegistry,
    projection: PluginProjection,
    redis_url: &str,
) -> Result<Worker, String> {
    let mut redis = redis::Client::open(redis_url)
        .map_err(|e| e.to_string())?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let tenants: Vec<String> = sqlx::query_scalar("SELECT DISTINCT tenant_id FROM following ORDER BY tenant_id")
        .fetch_all(factory.db.reader())
        .await
        .map_err(|e| e.to_string())?;
    for tenant in tenants {
        let Ok(tenant) = tenant.parse::<TenantId>() else { continue };
        if plugins.active(&tenant, PluginKind::Projector, projection.plugin()).is_none() {
            continue;
        }
        let (name, db) = (format!("projector.{}", projection.plugin()), &factory.db);
        progress::record(db, &name, &tenant, (0, 0), "backfilling").await.map_err(|e| e.to_string())?;
        let replayed = backfill(db, &projection, &tenant, |done, total| {
            let (name, tenant) = (name.clone(), tenant.clone());
            async move {
                tracing::info!(projection = %name, %tenant, done, total, "backfilling");
                if let Err(error) = progress::record(db, &name, &tenant, (done, total), "backfilling").await {
                    tracing::warn!(%error, "cannot record backfill progress; the backfill goes on");
                }
            }
        })
        .await
        .map_err(|e| e.to_string())?;
        mark_ready(&mut redis, Some(&tenant), projection.plugin()).await.map_err(|e| e.to_string())?;
        progress::record(db, &name, &tenant, (replayed, replayed), "complete").await.map_err(|e| e.to_string())?;
    }
    factory.worker(Projection::Plugin(projection)).await.map_err(|e| e.to_string())
}

/// Completes when the sender of `signal` is dropped.
pub async fn until(mut signal: watch::Receiver<()>) {
    let _sender_dropped = signal.changed().await;
}
