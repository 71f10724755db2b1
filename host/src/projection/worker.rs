//! A projection worker: a batch from its source → decode → apply (retried with backoff while the failure
//! is transient) → commit the batch's position. A poison event — undecodable, or refused by the projection —
//! goes to the projection's dead-letter topic with its error, and the rest of the batch moves on. Between
//! batches, now and then, a projector's stale spaces are built (see `build.rs`).

use std::future::Future;
use std::time::{Duration, Instant};

use super::build::build_stale;
use super::follower::{self, FollowerError};
use super::plugin::{PluginProjection, PluginProjectionError};
use super::source::{EventSource, Received};
use crate::bus::{Message, Publisher, Topology};
use crate::graph::{Database, OutboxEvent};
use crate::observability::seconds_since;

/// Most events per batch.
const BATCH: usize = 256;
/// How long a worker waits for a first event before checking for shutdown again.
const POLL: Duration = Duration::from_millis(50);
const FIRST_RETRY: Duration = Duration::from_millis(100);
const LAST_RETRY: Duration = Duration::from_secs(10);
/// How often a projector worker looks for stale spaces.
const SWEEP: Duration = Duration::from_secs(2);

/// What a worker keeps up to date.
#[derive(Clone)]
pub enum Projection {
    /// The host's `follower` table.
    Follower(Database),
    /// A projector plugin's data in Redis.
    Plugin(PluginProjection),
}

impl Projection {
    /// The projection's name: its consumer group / subscriber and its dead-letter topic's suffix.
    pub fn name(&self) -> String {
        match self {
            Projection::Follower(_) => "follower".to_owned(),
            Projection::Plugin(plugin) => Topology::projector_projection(plugin.plugin()),
        }
    }

    async fn apply(&self, events: &[OutboxEvent]) -> Result<(), ApplyError> {
        match self {
            Projection::Follower(db) => follower::apply(db, events).await.map_err(|e| match e {
                FollowerError::Unprojectable(poison) => {
                    ApplyError::Poison { event_id: poison.event_id.clone(), detail: poison.to_string() }
                }
                FollowerError::Database(e) => ApplyError::Transient(e.to_string()),
            }),
            Projection::Plugin(plugin) => plugin.apply(events).await.map_err(|e| match e {
                PluginProjectionError::Unprojectable(poison) => {
                    ApplyError::Poison { event_id: poison.event_id.clone(), detail: poison.to_string() }
                }
                other => ApplyError::Transient(other.to_string()),
            }),
        }
    }

    /// Work between batches: a projector builds its stale spaces.
    async fn maintain(&self) -> Result<(), String> {
        match self {
            Projection::Follower(_) => Ok(()),
            Projection::Plugin(plugin) => build_stale(plugin).await.map_err(|e| e.to_string()),
        }
    }
}

enum ApplyError {
    /// This event can never be applied: dead-letter it.
    Poison { event_id: String, detail: String },
    /// Try the batch again later.
    Transient(String),
}

/// One projection's consumer.
pub struct Worker {
    source: EventSource,
    projection: Projection,
    dead_letters: Publisher,
    dead_letter_topic: String,
}

impl Worker {
    /// `dead_letter_topic` receives what can never be applied.
    pub fn new(
        source: EventSource,
        projection: Projection,
        dead_letters: Publisher,
        dead_letter_topic: String,
    ) -> Self {
        Self { source, projection, dead_letters, dead_letter_topic }
    }

    /// Projects until `shutdown`; the batch in hand is finished (applied and committed) first. A batch that
    /// failed is retried, never skipped.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut backoff = FIRST_RETRY;
        let mut failed: Option<Vec<Received>> = None;
        let mut swept: Option<Instant> = None;
        loop {
            if failed.is_none() && swept.is_none_or(|at| at.elapsed() >= SWEEP) {
                // Cut short by shutdown, a build is simply done again later: its space is not marked complete.
                tokio::select! {
                    () = &mut shutdown => return,
                    maintained = self.projection.maintain() => if let Err(error) = maintained {
                        tracing::error!(projection = %self.projection.name(), %error, "cannot build stale spaces; trying again later");
                    },
                }
                swept = Some(Instant::now());
            }
            let batch = match failed.take() {
                Some(batch) => batch,
                None => tokio::select! {
                    () = &mut shutdown => return,
                    read = self.source.next_batch(BATCH, POLL) => match read {
                        Ok(batch) if batch.is_empty() => continue,
                        Ok(batch) => batch,
                        Err(e) => {
                            self.wait_after(&e.to_string(), &mut backoff, &mut shutdown).await;
                            continue;
                        }
                    },
                },
            };
            match self.project(&batch).await {
                Ok(()) => backoff = FIRST_RETRY,
                Err(error) => {
                    failed = Some(batch);
                    self.wait_after(&error, &mut backoff, &mut shutdown).await;
                }
            }
        }
    }

    async fn wait_after(
        &self,
        error: &str,
        backoff: &mut Duration,
        shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
    ) {
        tracing::error!(projection = %self.projection.name(), %error, retry_in = ?backoff, "projection worker failed; retrying");
        metrics::counter!("strand_projection_retries_total", "projection" => self.projection.name()).increment(1);
        tokio::select! {
            () = shutdown.as_mut() => {}
            () = tokio::time::sleep(*backoff) => {}
        }
        *backoff = (*backoff * 2).min(LAST_RETRY);
    }

    /// Applies one batch until it is done (retrying transient failures), dead-letters its poison, commits.
    async fn project(&mut self, batch: &[Received]) -> Result<(), String> {
        // The decoded events and the messages they came in, side by side.
        let mut events = Vec::with_capacity(batch.len());
        let mut messages = Vec::with_capacity(batch.len());
        for received in batch {
            match serde_json::from_str::<OutboxEvent>(&received.message.payload) {
                Ok(event) => {
                    events.push(event);
                    messages.push(&received.message);
                }
                Err(e) => self.dead_letter(&received.message, &format!("undecodable event: {e}")).await?,
            }
        }
        loop {
            match self.projection.apply(&events).await {
                Ok(()) => break,
                Err(ApplyError::Poison { event_id, detail }) => {
                    let index = events
                        .iter()
                        .position(|e| e.event_id == event_id)
                        .ok_or_else(|| format!("the projection refused {event_id}, which is not in the batch"))?;
                    events.remove(index);
                    self.dead_letter(messages.remove(index), &detail).await?;
                }
                Err(ApplyError::Transient(error)) => return Err(error),
            }
        }
        self.source.commit(batch).await.map_err(|e| e.to_string())?;
        let projection = self.projection.name();
        metrics::counter!("strand_projection_events_total", "projection" => projection.clone())
            .increment(events.len() as u64);
        if let Some(lag) = events.last().and_then(|e| seconds_since(&e.occurred_at)) {
            // From the newest event's commit to its projection.
            metrics::gauge!("strand_projection_lag_seconds", "projection" => projection).set(lag);
        }
        Ok(())
    }

    async fn dead_letter(&self, message: &Message, error: &str) -> Result<(), String> {
        tracing::error!(projection = %self.projection.name(), event_id = message.header("event-id"), %error, "dead-lettering an event");
        metrics::counter!("strand_dead_letters_total", "projection" => self.projection.name()).increment(1);
        let mut dead = message.clone();
        dead.topic = self.dead_letter_topic.clone();
        dead.headers.push(("error".to_owned(), error.to_owned()));
        dead.headers.push(("projection".to_owned(), self.projection.name()));
        dead.headers.push(("source-topic".to_owned(), message.topic.clone()));
        self.dead_letters.publish(&[dead]).await.map_err(|e| format!("cannot dead-letter: {e}"))
    }
}
