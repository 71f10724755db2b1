//! A projection worker: a batch from its source → decode → apply (retried with backoff while the failure
//! is transient) → commit the batch's position. A poison event — undecodable, or refused by the projection —
//! goes to the projection's dead-letter topic with its error, and the rest of the batch moves on. Between
//! batches, now and then, a projector's stale spaces are built (see `build.rs`).

use std::future::Future;
use std::time::{Duration, Instant};

use tracing::{Instrument, Span};

use super::follower::{self, FollowerError};
use super::plugin::{GivenUp, PluginProjection};
use super::projector::PluginProjectionError;
use super::source::{EventSource, Received, SourceError};
use crate::bus::{Header, Message, PublishError, Publisher, Topology};
use crate::db::Database;
use crate::ops::metrics::{DEAD_LETTERS, PROJECTION_EVENTS, PROJECTION_LAG_SECONDS, PROJECTION_RETRIES};
use crate::ops::observability::{causes, seconds_since};
use crate::ops::telemetry::{self, TARGET, TRACEPARENT};
use crate::outbox::ChangeEvent;
use crate::util::backoff::Backoff;

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

    async fn apply(&self, events: &[ChangeEvent]) -> Result<(), ApplyError> {
        match self {
            Projection::Follower(db) => follower::apply(db, events).await.map_err(|e| match e {
                FollowerError::Unprojectable(poison) => {
                    ApplyError::Poison { event_id: poison.event_id.clone(), detail: poison.to_string() }
                }
                FollowerError::Database(e) => ApplyError::Transient(WorkerError::Follower(e)),
            }),
            Projection::Plugin(plugin) => plugin.apply_fenced(events).await.map_err(|e| match e {
                PluginProjectionError::Unprojectable(poison) => {
                    ApplyError::Poison { event_id: poison.event_id.clone(), detail: poison.to_string() }
                }
                other => ApplyError::Transient(WorkerError::Projector(other)),
            }),
        }
    }

    /// Work between batches: a projector starts builds of its stale spaces (on a `sweep`) and retries due
    /// parked events; the ones tried too often are returned to be dead-lettered.
    async fn maintain(&self, sweep: bool) -> Result<Vec<GivenUp>, PluginProjectionError> {
        match self {
            Projection::Follower(_) => Ok(Vec::new()),
            Projection::Plugin(plugin) if sweep => plugin.maintain().await,
            Projection::Plugin(plugin) => plugin.retry_parked().await,
        }
    }

    /// Whether parked events are due before the next sweep.
    fn retry_due(&self) -> bool {
        matches!(self, Projection::Plugin(plugin) if plugin.retry_due())
    }
}

enum ApplyError {
    /// This event can never be applied: dead-letter it.
    Poison { event_id: String, detail: String },
    /// Try the batch again later.
    Transient(WorkerError),
}

/// Why a worker could not finish a batch (it is tried again, never skipped).
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("cannot read the bus")]
    Read(#[source] SourceError),
    #[error("cannot commit the batch's position")]
    Commit(#[source] SourceError),
    #[error("the follower table failed")]
    Follower(#[source] sqlx::Error),
    #[error("the projector failed")]
    Projector(#[source] PluginProjectionError),
    #[error("cannot dead-letter {event_id:?}")]
    DeadLetter { event_id: Option<String>, source: PublishError },
    #[error("the projection refused {0}, which is not in the batch")]
    RefusedUnknown(String),
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
        let mut backoff = Backoff::new(FIRST_RETRY, LAST_RETRY);
        let mut failed: Option<Vec<Received>> = None;
        let mut swept: Option<Instant> = None;
        loop {
            let sweep = swept.is_none_or(|at| at.elapsed() >= SWEEP);
            if failed.is_none() && (sweep || self.projection.retry_due()) {
                // Cut short by shutdown, a build is simply done again later: its space is not marked complete.
                tokio::select! {
                    () = &mut shutdown => return self.stop(),
                    maintained = self.projection.maintain(sweep) => match maintained {
                        Ok(given_up) => self.dead_letter_parked(given_up).await,
                        Err(error) => {
                            let error = causes(&error);
                            tracing::error!(projection = %self.projection.name(), %error, "cannot build stale spaces or retry parked events; trying again later");
                        }
                    },
                }
                if sweep {
                    swept = Some(Instant::now());
                }
            }
            let batch = match failed.take() {
                Some(batch) => batch,
                None => tokio::select! {
                    () = &mut shutdown => return self.stop(),
                    read = self.source.next_batch(BATCH, POLL) => match read {
                        Ok(batch) if batch.is_empty() => continue,
                        Ok(batch) => batch,
                        Err(e) => {
                            self.wait_after(&WorkerError::Read(e), &mut backoff, &mut shutdown).await;
                            continue;
                        }
                    },
                },
            };
            match self.project(&batch).await {
                Ok(()) => backoff.reset(),
                Err(error) => {
                    failed = Some(batch);
                    self.wait_after(&error, &mut backoff, &mut shutdown).await;
                }
            }
        }
    }

    /// Stops what runs beside the worker (a projector's background builds and retries).
    fn stop(&self) {
        if let Projection::Plugin(plugin) = &self.projection {
            plugin.stop_background();
        }
    }

    /// Dead-letters parked events tried too often, then forgets them (a failure: they are tried again).
    async fn dead_letter_parked(&self, given_up: Vec<GivenUp>) {
        let Projection::Plugin(plugin) = &self.projection else { return };
        let mut sent = Vec::new();
        for parked in given_up {
            let message = self.source_message(&parked);
            match self.dead_letter(&message, &parked.reason).await {
                Ok(()) => sent.push(parked),
                Err(error) => {
                    tracing::error!(error = %causes(&error), "cannot dead-letter a parked event; it is tried again")
                }
            }
        }
        if let Err(error) = plugin.dead_lettered(&sent).await {
            tracing::error!(error = %causes(&error), "cannot forget dead-lettered parked events; they may be dead-lettered again");
        }
    }

    /// The bus message a parked event came in, as far as the dead-letter topic needs it.
    fn source_message(&self, parked: &GivenUp) -> Message {
        let event = &parked.event;
        Message {
            topic: self.source.topic().to_owned(),
            key: format!("{}:{}", event.tenant, event.from),
            headers: vec![
                (Header::EventId.to_string(), event.event_id.clone()),
                (Header::Tenant.to_string(), event.tenant.clone()),
            ],
            payload: parked.payload.clone(),
        }
    }

    async fn wait_after(
        &self,
        error: &WorkerError,
        backoff: &mut Backoff,
        shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
    ) {
        let error = causes(error);
        let retry_in = backoff.next_wait();
        tracing::error!(projection = %self.projection.name(), %error, ?retry_in, "projection worker failed; retrying");
        metrics::counter!(PROJECTION_RETRIES.name, "projection" => self.projection.name()).increment(1);
        tokio::select! {
            () = shutdown.as_mut() => {}
            () = tokio::time::sleep(retry_in) => {}
        }
    }

    /// Applies one batch until it is done (retrying transient failures), dead-letters its poison, commits.
    async fn project(&mut self, batch: &[Received]) -> Result<(), WorkerError> {
        // The decoded events and the messages they came in, side by side.
        let mut events = Vec::with_capacity(batch.len());
        let mut messages = Vec::with_capacity(batch.len());
        for received in batch {
            match serde_json::from_str::<ChangeEvent>(&received.message.payload) {
                Ok(event) => {
                    events.push(event);
                    messages.push(&received.message);
                }
                Err(e) => self.dead_letter(&received.message, &format!("undecodable event: {e}")).await?,
            }
        }
        let traced = applied_in(&self.projection.name(), &messages);
        loop {
            match self.projection.apply(&events).instrument(traced.clone()).await {
                Ok(()) => break,
                Err(ApplyError::Poison { event_id, detail }) => {
                    let index = events
                        .iter()
                        .position(|e| e.event_id == event_id)
                        .ok_or(WorkerError::RefusedUnknown(event_id))?;
                    events.remove(index);
                    self.dead_letter(messages.remove(index), &detail).await?;
                }
                Err(ApplyError::Transient(error)) => return Err(error),
            }
        }
        self.source.commit(batch).await.map_err(WorkerError::Commit)?;
        let projection = self.projection.name();
        metrics::counter!(PROJECTION_EVENTS.name, "projection" => projection.clone()).increment(events.len() as u64);
        if let Some(lag) = events.last().and_then(|e| seconds_since(&e.occurred_at)) {
            // From the newest event's commit to its projection.
            metrics::gauge!(PROJECTION_LAG_SECONDS.name, "projection" => projection).set(lag);
        }
        Ok(())
    }

    async fn dead_letter(&self, message: &Message, error: &str) -> Result<(), WorkerError> {
        tracing::error!(projection = %self.projection.name(), event_id = message.header(Header::EventId.as_str()), %error, "dead-lettering an event");
        let tenant = message.header(Header::Tenant.as_str()).unwrap_or_default().to_owned();
        metrics::counter!(DEAD_LETTERS.name, "projection" => self.projection.name(), "tenant" => tenant).increment(1);
        let mut dead = message.clone();
        dead.topic = self.dead_letter_topic.clone();
        dead.headers.push(("error".to_owned(), error.to_owned()));
        dead.headers.push(("projection".to_owned(), self.projection.name()));
        dead.headers.push(("source-topic".to_owned(), message.topic.clone()));
        self.dead_letters.publish(&[dead]).await.map_err(|source| WorkerError::DeadLetter {
            event_id: message.header(Header::EventId.as_str()).map(str::to_owned),
            source,
        })
    }
}

/// The `projection.apply` span of a batch: it continues the trace of the batch's first traced message
/// (the relay's publish) and links the others'; a disabled span when none is traced or tracing is off.
fn applied_in(projection: &str, messages: &[&Message]) -> Span {
    if !telemetry::enabled() {
        return Span::none();
    }
    let mut traced = messages.iter().filter_map(|message| message.header(TRACEPARENT));
    let Some(first) = traced.next() else { return Span::none() };
    let span = tracing::info_span!(target: TARGET, "projection.apply", projection, events = messages.len());
    telemetry::continue_trace(&span, first);
    for other in traced {
        telemetry::link(&span, other);
    }
    span
}
