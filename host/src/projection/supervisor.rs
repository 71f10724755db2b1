//! Projection workers as a deployment runs them: how one is built (its bus, consumer name and dead-letter
//! topic), and a supervisor that starts a worker for each projector deployed after start-up. A new worker
//! builds its spaces from the truth before it applies events (`build.rs`); the other projections keep
//! running meanwhile. Every worker runs as a supervised task (`crate::tasks`): restarted if it ends.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::plugin::PluginProjection;
use super::source::{EventSource, SourceError};
use super::worker::{Projection, Worker};
use crate::bus::{KafkaConnection, Publisher, Topology};
use crate::cache::Cache;
use crate::graph::Database;
use crate::plugins::PluginRegistry;
use crate::tasks::Tasks;

/// Builds the workers of one deployment.
#[derive(Clone)]
pub struct WorkerFactory {
    pub db: Database,
    /// The names of topics and groups.
    pub topology: Topology,
    /// The Kafka cluster; `None`: the embedded bus.
    pub kafka: Option<KafkaConnection>,
    /// This process's stable name in its consumer groups (Kafka static membership), if it has one.
    pub worker_id: Option<String>,
    pub dead_letters: Publisher,
}

impl WorkerFactory {
    /// A worker for `projection`: a consumer group / subscriber named after it, and its dead-letter topic.
    pub async fn worker(&self, projection: Projection) -> Result<Worker, SourceError> {
        let name = projection.name();
        let topic = self.topology.events_topic();
        let source = match &self.kafka {
            Some(kafka) => {
                let group = self.topology.consumer_group(&name);
                EventSource::kafka(kafka, &group, &topic, self.worker_id.as_deref())?
            }
            None => EventSource::embedded(crate::bus::EmbeddedBus::new(self.db.clone()), &name, &topic).await?,
        };
        let dead_letter_topic = self.topology.dead_letter_topic(&name);
        Ok(Worker::new(source, projection, self.dead_letters.clone(), dead_letter_topic))
    }
}

/// Supervises `projection`'s worker as a task named after it: `first` (built at start-up, so that its
/// configuration errors stop the start) on the first run, a new one from `factory` on each restart.
pub fn supervise_worker(tasks: &Tasks, factory: &WorkerFactory, projection: Projection, first: Option<Worker>) {
    let (factory, mut first) = (factory.clone(), first);
    tasks.spawn(projection.name(), move |stop: CancellationToken| {
        let (factory, projection, first) = (factory.clone(), projection.clone(), first.take());
        async move {
            let worker = match first {
                Some(worker) => worker,
                None => factory.worker(projection).await.map_err(|e| e.to_string())?,
            };
            worker.run(stop.cancelled_owned()).await;
            Ok(())
        }
    });
}

/// Starts a supervised worker for each projector deployed after start-up, checking every `every`;
/// `running` are the names that already have workers (kept across restarts of this task). Returns when
/// `stop` is cancelled.
pub async fn supervise_new_projectors(
    factory: WorkerFactory,
    plugins: Arc<PluginRegistry>,
    cache: Cache,
    running: Arc<Mutex<BTreeSet<String>>>,
    every: Duration,
    (tasks, stop): (Tasks, CancellationToken),
) -> Result<(), String> {
    let mut ticks = tokio::time::interval(every);
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            _ = ticks.tick() => {}
        }
        for name in plugins.projector_names() {
            if running.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(&name) {
                continue;
            }
            let projection =
                Projection::Plugin(PluginProjection::new(plugins.clone(), &name, cache.clone(), factory.db.clone()));
            tracing::info!(projector = %name, "a new projector is starting");
            supervise_worker(&tasks, &factory, projection, None);
            running.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(name);
        }
    }
}
