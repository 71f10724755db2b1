//! The background tasks of a process — the relay, the projection workers, the supervisor of projectors
//! deployed later, the refresh of plugins and settings — under one supervisor, so none can die unnoticed.
//!
//! Policy: every task is **restarted with backoff** (1 s, doubling to 60 s, back to 1 s after a run of a
//! minute). Each one is safe to start again: the relay resumes from the outbox and its checkpoint, a worker
//! from its committed offsets, the refresh and the projector supervisor from the database. A task that ends
//! without being asked to — an error, a panic, or simply returning — is logged with its cause, counted in
//! `strand_task_restarts_total{task}`, shown by `strand_task_up{task}` = 0 and by `/readyz` (check `tasks`)
//! until it has run for [`SETTLED`] again (a task that keeps failing is down most of the time: its backoff
//! grows until a run of [`HEALTHY_RUN`] resets it; a node whose database came back is ready seconds later,
//! not a minute); an error that needs an operator (a purged binlog) keeps it
//! down, loudly. `strand relay` and `strand worker` run their relay or workers the same way; `strand relay`
//! alone exits non-zero on an operator error, so its orchestrator sees it.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::ops::metrics::{TASK_RESTARTS, TASK_UP};
use crate::ops::observability::causes;
use crate::util::backoff::Backoff;

const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const LAST_BACKOFF: Duration = Duration::from_secs(60);
/// How long a task runs before its backoff starts over.
pub const HEALTHY_RUN: Duration = Duration::from_secs(60);
/// How long a restarted task runs before it counts as up again.
pub const SETTLED: Duration = Duration::from_secs(5);

/// The supervised tasks of this process; cloned handles spawn into the same set.
#[derive(Clone, Default)]
pub struct Tasks {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    set: Mutex<JoinSet<()>>,
    stop: CancellationToken,
    states: Mutex<BTreeMap<String, TaskState>>,
}

#[derive(Debug, Clone)]
enum TaskState {
    /// Running since then (restarted after a failure when `restarted`).
    Running {
        since: Instant,
        restarted: bool,
    },
    Down {
        reason: String,
    },
}

/// Why a supervised task's run failed: any error, whose chain of causes the supervisor logs and reports.
pub type TaskError = Box<dyn std::error::Error + Send + Sync>;

impl Tasks {
    /// Runs `start(stop)` as the task `name`, again after each unexpected end (see the module's policy).
    /// `stop` is cancelled at shutdown, or when the returned token is (to retire this task alone, e.g. the
    /// worker of a projector no tenant has any more): the task must then finish what it has in hand and
    /// return.
    pub fn spawn<F>(
        &self,
        name: impl Into<String>,
        mut start: impl FnMut(CancellationToken) -> F + Send + 'static,
    ) -> CancellationToken
    where
        F: Future<Output = Result<(), TaskError>> + Send + 'static,
    {
        let (name, inner) = (name.into(), self.inner.clone());
        let own = inner.stop.child_token();
        let mut set = inner.set.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (supervised, retired) = (inner.clone(), own.clone());
        set.spawn(async move {
            let inner = supervised;
            let mut backoff = Backoff::new(FIRST_BACKOFF, LAST_BACKOFF);
            let mut restarted = false;
            loop {
                inner.set_state(&name, TaskState::Running { since: Instant::now(), restarted });
                metrics::gauge!(TASK_UP.name, "task" => name.clone()).set(1.0);
                let started = Instant::now();
                // Its own tokio task, so that a panic ends only this run; ended with this supervisor.
                let run = tokio::spawn(start(retired.child_token()));
                let _ends_with_its_supervisor = Aborted(run.abort_handle());
                let ended = run.await;
                if inner.stop.is_cancelled() {
                    return;
                }
                if retired.is_cancelled() {
                    inner.states.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&name);
                    metrics::gauge!(TASK_UP.name, "task" => name.clone()).set(0.0);
                    tracing::info!(task = %name, "a background task was retired");
                    return;
                }
                let reason = match ended {
                    Ok(Ok(())) => "it returned without being asked to stop".to_owned(),
                    // The whole chain of causes, e.g. the relay's error and the database's beneath it.
                    Ok(Err(error)) => causes(&*error),
                    Err(join) => format!("it panicked: {join}"),
                };
                if started.elapsed() >= HEALTHY_RUN {
                    backoff.reset();
                }
                let restart_in = backoff.next_wait();
                tracing::error!(task = %name, %reason, ?restart_in, "a background task stopped; restarting it");
                metrics::counter!(TASK_RESTARTS.name, "task" => name.clone()).increment(1);
                metrics::gauge!(TASK_UP.name, "task" => name.clone()).set(0.0);
                inner.set_state(&name, TaskState::Down { reason });
                tokio::select! {
                    () = retired.cancelled() => {
                        // Retired (or shut down) while waiting to restart: no longer a task that is down.
                        inner.states.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&name);
                        return;
                    }
                    () = tokio::time::sleep(restart_in) => {}
                }
                restarted = true;
            }
        });
        own
    }

    /// The tasks that are down (or restarted less than [`SETTLED`] ago), with why; empty when all run.
    pub fn down(&self) -> Vec<(String, String)> {
        let states = self.inner.states.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        states
            .iter()
            .filter_map(|(name, state)| match state {
                TaskState::Down { reason } => Some((name.clone(), reason.clone())),
                TaskState::Running { since, restarted: true } if since.elapsed() < SETTLED => {
                    Some((name.clone(), "restarted after a failure moments ago".to_owned()))
                }
                TaskState::Running { .. } => None,
            })
            .collect()
    }

    /// How many tasks are supervised.
    pub fn len(&self) -> usize {
        self.inner.states.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A guard that ends every task, abruptly, when dropped: a server whose run was dropped without its
    /// graceful shutdown (its future cancelled) stops its tasks as its process's end would, instead of
    /// leaving them running with no owner. After [`Tasks::shutdown`] it has nothing left to end.
    pub fn end_when_dropped(&self) -> EndedWhenDropped {
        EndedWhenDropped(self.clone())
    }

    /// Asks every task to stop and waits for all of them (each finishes the batch in hand).
    pub async fn shutdown(&self) {
        self.inner.stop.cancel();
        let mut set = std::mem::take(&mut *self.inner.set.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        while let Some(ended) = set.join_next().await {
            if let Err(error) = ended {
                tracing::error!(%error, "a supervised task did not stop cleanly");
            }
        }
    }
}

/// See [`Tasks::end_when_dropped`].
pub struct EndedWhenDropped(Tasks);

impl Drop for EndedWhenDropped {
    fn drop(&mut self) {
        self.0.inner.stop.cancel();
        self.0.inner.set.lock().unwrap_or_else(std::sync::PoisonError::into_inner).abort_all();
    }
}

/// Aborts a task's run when its supervisor ends.
struct Aborted(tokio::task::AbortHandle);

impl Drop for Aborted {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Inner {
    fn set_state(&self, name: &str, state: TaskState) {
        self.states.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(name.to_owned(), state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failing_task_is_down_and_restarted_and_shutdown_stops_it() {
        let tasks = Tasks::default();
        let runs = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = runs.clone();
        tasks.spawn("flaky", move |stop: CancellationToken| {
            let run = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                if run == 0 {
                    return Err("injected".into());
                }
                stop.cancelled().await;
                Ok(())
            }
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while runs.load(std::sync::atomic::Ordering::SeqCst) < 2 {
            assert!(Instant::now() < deadline, "restarted within its backoff");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let down = tasks.down();
        assert_eq!(down.len(), 1, "a restarted task counts as down until it has run a while: {down:?}");
        tasks.shutdown().await;
    }

    #[tokio::test]
    async fn a_retired_task_stops_alone_and_is_not_restarted() {
        let tasks = Tasks::default();
        let runs = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let spawn = |name: &'static str| {
            let counted = runs.clone();
            tasks.spawn(name, move |stop: CancellationToken| {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async move {
                    stop.cancelled().await;
                    Ok(())
                }
            })
        };
        let (retired, kept) = (spawn("retired"), spawn("kept"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while tasks.len() < 2 {
            assert!(Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        retired.cancel();
        while tasks.len() > 1 {
            assert!(Instant::now() < deadline, "the retired task leaves the set");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!kept.is_cancelled() && tasks.down().is_empty(), "the other runs on: {:?}", tasks.down());
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 2, "nothing was restarted");
        tasks.shutdown().await;
    }
}
