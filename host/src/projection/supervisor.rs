//! Projection workers as a deployment runs them: which projections it has (`Projections`), how a worker is
//! built (its bus, consumer name and dead-letter topic), and a watch that starts a worker for each
//! projector deployed after start-up. A new worker
//! builds its spaces from the truth before it applies events (`build.rs`); the other projections keep
//! running meanwhile. Every worker runs as a supervised task (`crate::ops::tasks`): restarted if it ends.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::history::RetainedLog;
use super::plugin::PluginProjection;
use super::source::{EventSource, SourceError};
use super::worker::{Projection, Worker};
use crate::bus::{KafkaConnection, Publisher, Topology};
use crate::cache::Cache;
use crate::db::Database;
use crate::ops::tasks::{TaskError, Tasks};
use crate::plugins::PluginRegistry;

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
    /// How long one tenant's events of a batch may take through a projector before they are parked.
    pub tenant_budget: Duration,
}

impl WorkerFactory {
    /// The projection of projector `name`, as this deployment runs it.
    fn projector(&self, plugins: &Arc<PluginRegistry>, name: &str, cache: &Cache) -> PluginProjection {
        let projection = PluginProjection::new(plugins.clone(), name, cache.clone(), self.db.clone())
            .with_tenant_budget(self.tenant_budget);
        match RetainedLog::unless_kafka(self.kafka.is_some(), &self.db, &self.topology) {
            Some(log) => projection.with_log(log),
            None => projection,
        }
    }

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
        for name in &plugins.projector_names() {
            let projection = Projection::Plugin(factory.projector(plugins, name, &cache));
            workers.push((projection.clone(), factory.worker(projection).await?));
        }
        let new_projectors = NewProjectors { plugins: plugins.clone(), cache, running: Default::default(), every };
        Ok(Self { factory, workers, new_projectors: Some(new_projectors) })
    }

    /// Runs every worker, and the watch for projectors deployed or removed later, as supervised tasks.
    pub fn supervise(self, tasks: &Tasks) {
        let mut running = BTreeMap::new();
        for (projection, worker) in self.workers {
            let name = match &projection {
                Projection::Plugin(plugin) => Some(plugin.plugin().to_owned()),
                Projection::Follower(_) => None,
            };
            let stop = supervise_worker(tasks, &self.factory, projection, Some(worker));
            if let Some(name) = name {
                running.insert(name, stop);
            }
        }
        let Some(watch) = self.new_projectors else { return };
        *watch.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = running;
        let (factory, spawner) = (self.factory, tasks.clone());
        tasks.spawn("projector-supervisor", move |stop: CancellationToken| {
            let (watch, factory, tasks) = (watch.clone(), factory.clone(), spawner.clone());
            async move { watch.run(&factory, &tasks, stop).await }
        });
    }
}

/// Supervises `projection`'s worker as a task named after it: `first` on the first run, a new one from
/// `factory` on each restart. Cancelling the returned token retires it.
fn supervise_worker(
    tasks: &Tasks,
    factory: &WorkerFactory,
    projection: Projection,
    first: Option<Worker>,
) -> CancellationToken {
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
    })
}

/// Starts a worker for each projector deployed after start-up, and retires the worker of a projector no
/// tenant has any more (a tenant creating and removing projector names in a loop leaves no workers, nor
/// consumer groups reading the whole events topic, behind).
#[derive(Clone)]
struct NewProjectors {
    plugins: Arc<PluginRegistry>,
    cache: Cache,
    /// The projectors that have workers, with the token that retires each, kept across restarts of the
    /// watch.
    running: Arc<Mutex<BTreeMap<String, CancellationToken>>>,
    every: Duration,
}

impl NewProjectors {
    /// Looks for new and removed projectors every `every` until `stop` is cancelled.
    async fn run(&self, factory: &WorkerFactory, tasks: &Tasks, stop: CancellationToken) -> Result<(), TaskError> {
        let mut ticks = tokio::time::interval(self.every);
        loop {
            tokio::select! {
                () = stop.cancelled() => return Ok(()),
                _ = ticks.tick() => {}
            }
            let names = self.plugins.projector_names();
            let mut running = self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            running.retain(|name, retire| {
                let kept = names.contains(name);
                if !kept {
                    tracing::info!(projector = %name, "no tenant has the projector any more; its worker stops");
                    retire.cancel();
                }
                kept
            });
            for name in names {
                if running.contains_key(&name) {
                    continue;
                }
                let projection = factory.projector(&self.plugins, &name, &self.cache);
                tracing::info!(projector = %name, "a new projector is starting");
                let retire = supervise_worker(tasks, factory, Projection::Plugin(projection), None);
                running.insert(name, retire);
            }
        }
    }
}
