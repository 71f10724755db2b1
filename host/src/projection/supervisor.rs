//! Projection workers as a deployment runs them: how one is built (its bus, consumer name and dead-letter
//! topic), and a supervisor that starts a worker for each projector deployed after start-up. A new worker
//! builds its spaces from the truth before it applies events (`build.rs`); the other projections keep
//! running meanwhile.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::plugin::PluginProjection;
use super::source::{EventSource, SourceError};
use super::worker::{Projection, Worker};
use crate::bus::Publisher;
use crate::cache::Cache;
use crate::graph::Database;
use crate::plugins::PluginRegistry;

/// Builds the workers of one deployment.
#[derive(Clone)]
pub struct WorkerFactory {
    pub db: Database,
    /// Topic prefix (`strand.`): events come from `{prefix}following`.
    pub prefix: String,
    /// Kafka brokers; `None`: the embedded bus.
    pub brokers: Option<String>,
    /// This process's stable name in its consumer groups (Kafka static membership), if it has one.
    pub worker_id: Option<String>,
    pub dead_letters: Publisher,
}

impl WorkerFactory {
    /// A worker for `projection`: a consumer group / subscriber named after it, and its dead-letter topic.
    pub async fn worker(&self, projection: Projection) -> Result<Worker, SourceError> {
        let name = projection.name();
        let topic = format!("{}following", self.prefix);
        let source = match &self.brokers {
            Some(brokers) => {
                let group = format!("{}{name}", self.prefix);
                EventSource::kafka(brokers, &group, &topic, self.worker_id.as_deref())?
            }
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
    cache: Cache,
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
            let projection = PluginProjection::new(plugins.clone(), &name, cache.clone(), factory.db.clone());
            match factory.worker(Projection::Plugin(projection)).await {
                Ok(worker) => {
                    tracing::info!(projector = %name, "a new projector is starting");
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

/// Completes when the sender of `signal` is dropped.
pub async fn until(mut signal: watch::Receiver<()>) {
    let _sender_dropped = signal.changed().await;
}
