//! Projection workers as a deployment runs them: which projections it has (`Projections`), how a worker is
//! built (its bus, consumer name and dead-letter topic), and a watch that starts a worker for each
//! projector deployed after start-up. A new worker
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

/// The projection workers of a deployment, all reading `{prefix}following`: the `follower` table, and
/// with a cache one worker per projector plugin (bundled or deployed) for every tenant — those deployed
/// later are started as they appear.
pub struct Projections {
    factory: WorkerFactory,
    /// Built at start-up, so that their configuration errors stop the start.
    workers: Vec<(Projection, Worker)>,
    new_projectors: Option<NewProjectors>,
}

impl Projections {
    /// The workers `factory` builds for the follower table and, with `cache`, for each of `plugins`'
    /// projectors; `every` is how often projectors deployed later are looked for.
    pub async fn build(
        factory: WorkerFactory,
        plugins: &Arc<PluginRegistry>,
        cache: Option<Cache>,
        every: Duration,
    ) -> Result<Self, SourceError> {
        let follower = Projection::Follower(factory.db.clone());
        let mut workers = vec![(follower.clone(), factory.worker(follower).await?)];
        let Some(cache) = cache else { return Ok(Self { factory, workers, new_projectors: None }) };
        let running = plugins.projector_names();
        for name in &running {
            let projection =
                Projection::Plugin(PluginProjection::new(plugins.clone(), name, cache.clone(), factory.db.clone()));
            workers.push((projection.clone(), factory.worker(projection).await?));
        }
        let running = Arc::new(Mutex::new(running));
        let new_projectors = NewProjectors { plugins: plugins.clone(), cache, running, every };
        Ok(Self { factory, workers, new_projectors: Some(new_projectors) })
    }

    /// Runs every worker, and the watch for projectors deployed later, as supervised tasks.
    pub fn supervise(self, tasks: &Tasks) {
        for (projection, worker) in self.workers {
            supervise_worker(tasks, &self.factory, projection, Some(worker));
        }
        let Some(watch) = self.new_projectors else { return };
        let (factory, spawner) = (self.factory, tasks.clone());
        tasks.spawn("projector-supervisor", move |stop: CancellationToken| {
            let (watch, factory, tasks) = (watch.clone(), factory.clone(), spawner.clone());
            async move { watch.run(&factory, &tasks, stop).await }
        });
    }
}

/// Supervises `projection`'s worker as a task named after it: `first` on the first run, a new one from
/// `factory` on each restart.
fn supervise_worker(tasks: &Tasks, factory: &WorkerFactory, projection: Projection, first: Option<Worker>) {
    let (factory, mut first) = (factory.clone(), first);
    tasks.spawn(projection.name(), move |stop: CancellationToken| {
        let (factory, projection, first) = (factory.clone(), projection.clone(), first.take());
        async move {
            let worker = match first {
                Some(worker) => worker,
                None => factory.worker(projection).await?,
            };
            worker.run(stop.cancelled_owned()).await;
            Ok(())
        }
    });
}

/// Starts a worker for each projector deployed after start-up.
#[derive(Clone)]
struct NewProjectors {
    plugins: Arc<PluginRegistry>,
    cache: Cache,
    /// The projectors that have workers, kept across restarts of the watch.
    running: Arc<Mutex<BTreeSet<String>>>,
    every: Duration,
}

impl NewProjectors {
    /// Looks for new projectors every `every` until `stop` is cancelled.
    async fn run(&self, factory: &WorkerFactory, tasks: &Tasks, stop: CancellationToken) -> anyhow::Result<()> {
        let mut ticks = tokio::time::interval(self.every);
        loop {
            tokio::select! {
                () = stop.cancelled() => return Ok(()),
                _ = ticks.tick() => {}
            }
            for name in self.plugins.projector_names() {
                let mut running = self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if !running.insert(name.clone()) {
                    continue;
                }
                let projection =
                    PluginProjection::new(self.plugins.clone(), &name, self.cache.clone(), factory.db.clone());
                tracing::info!(projector = %name, "a new projector is starting");
                supervise_worker(tasks, factory, Projection::Plugin(projection), None);
            }
        }
    }
}
