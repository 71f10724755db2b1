//! What "ready" means for a node: what it serves with answers — its database, its cache (Redis), its Kafka
//! brokers — and its background tasks (relay, workers, refresh) run. Each check has its own deadline, so a hung dependency makes the node unready instead of hanging
//! the probe. The pipeline's lag is not here: one stuck outbox row must not take every API node out of
//! service; it is the metric `strand_outbox_oldest_seconds` (exported by the relays) and an alert rule.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::producer::{BaseProducer, Producer};
use serde::Serialize;

use crate::bus::KafkaConnection;
use crate::cache::Cache;
use crate::db::Database;
use crate::ops::tasks::Tasks;

/// How long one check may take.
const CHECK_DEADLINE: Duration = Duration::from_secs(2);
/// How long an answer is reused: a flood of probes costs the dependencies one round of checks a second.
const REUSED_FOR: Duration = Duration::from_secs(1);

/// The dependencies a node checks.
pub struct Readiness {
    db: Database,
    cache: Cache,
    /// A client for metadata requests only; `None` without Kafka.
    kafka: Option<Arc<BaseProducer>>,
    /// The node's supervised background tasks (relay, workers, refresh).
    tasks: Tasks,
    /// The last answer and when it was made; held while a new one is made, so concurrent probes share it.
    last: tokio::sync::Mutex<Option<(tokio::time::Instant, Arc<ReadinessReport>)>>,
}

/// The outcome of every check.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReadinessReport {
    pub ready: bool,
    /// By dependency: `database`, `cache`, `kafka` (when configured), `tasks` (the node's relay, workers
    /// and refresh: all running).
    pub checks: BTreeMap<&'static str, Check>,
}

/// One dependency's state.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Check {
    pub ok: bool,
    pub detail: String,
}

impl Readiness {
    /// `kafka`: checked when set.
    pub fn new(
        db: Database,
        cache: Cache,
        kafka: Option<&KafkaConnection>,
        tasks: Tasks,
    ) -> Result<Self, rdkafka::error::KafkaError> {
        let kafka = match kafka {
            Some(kafka) => Some(Arc::new(kafka.client_config().create()?)),
            None => None,
        };
        Ok(Self { db, cache, kafka, tasks, last: tokio::sync::Mutex::default() })
    }

    /// The checks' answer, made at most [`REUSED_FOR`] ago.
    pub async fn check(&self) -> Arc<ReadinessReport> {
        let mut last = self.last.lock().await;
        if let Some((at, report)) = last.as_ref().filter(|(at, _)| at.elapsed() < REUSED_FOR) {
            tracing::trace!(age = ?at.elapsed(), "readiness answered from the last check");
            return report.clone();
        }
        let report = Arc::new(self.check_now().await);
        *last = Some((tokio::time::Instant::now(), report.clone()));
        report
    }

    /// Runs every check at once.
    async fn check_now(&self) -> ReadinessReport {
        let (database, cache, kafka) = tokio::join!(self.database(), self.cache(), self.kafka());
        let mut checks = BTreeMap::from([("database", database), ("cache", cache), ("tasks", self.tasks_check())]);
        if let Some(kafka) = kafka {
            checks.insert("kafka", kafka);
        }
        ReadinessReport { ready: checks.values().all(|c| c.ok), checks }
    }

    fn tasks_check(&self) -> Check {
        let down = self.tasks.down();
        if down.is_empty() {
            return Check { ok: true, detail: "all running".to_owned() };
        }
        let listed: Vec<String> = down.iter().map(|(task, why)| format!("{task} is down: {why}")).collect();
        Check { ok: false, detail: listed.join("; ") }
    }

    async fn database(&self) -> Check {
        let pool = self.db.reader().clone();
        let ping = async move { sqlx::query_scalar::<_, i64>("SELECT 1").fetch_one(&pool).await };
        within(async { detached(ping).await?.map(|_| "answers".to_owned()).map_err(|e| e.to_string()) }).await
    }

    async fn cache(&self) -> Check {
        let what = match self.cache {
            Cache::Redis(_) => "Redis answers",
            Cache::Memory(_) => "in-process",
        };
        within(async { self.cache.ping().await.map(|()| what.to_owned()).map_err(|e| e.to_string()) }).await
    }

    async fn kafka(&self) -> Option<Check> {
        let client = self.kafka.clone()?;
        let fetch = tokio::task::spawn_blocking(move || {
            let metadata = client.client().fetch_metadata(None, CHECK_DEADLINE).map_err(|e| e.to_string())?;
            Ok(format!("{} brokers answer", metadata.brokers().len()))
        });
        Some(within(async { fetch.await.map_err(|e| e.to_string())? }).await)
    }
}

/// Runs `query` as a task of its own, so that a check giving up does not cancel it: a cancelled pool
/// acquire drops the connection it was opening, which the pool could otherwise keep.
async fn detached<T: Send + 'static>(
    query: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, String> {
    tokio::spawn(query).await.map_err(|e| e.to_string())
}

/// Runs a check within [`CHECK_DEADLINE`].
async fn within(check: impl std::future::Future<Output = Result<String, String>>) -> Check {
    match tokio::time::timeout(CHECK_DEADLINE, check).await {
        Ok(Ok(detail)) => Check { ok: true, detail },
        Ok(Err(detail)) => Check { ok: false, detail },
        Err(_) => Check { ok: false, detail: format!("no answer within {CHECK_DEADLINE:?}") },
    }
}
