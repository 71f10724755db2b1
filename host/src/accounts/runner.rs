//! Runs account jobs: any node may, one node at a time per job — whichever holds its lease. Each batch
//! renews the lease in its own transaction after checking it still holds it, so a node that stopped (or was
//! SIGKILLed) mid-job loses nothing: its last batch either committed with its progress or not at all, and
//! after [`LEASE`] another node (or itself, restarted) takes the job over from the account's edges as they are.

use std::time::Duration;

use sqlx::{Any, Row, Transaction};
use tokio_util::sync::CancellationToken;

use super::edges::Scope;
use super::job::JobState;
use super::pace::Pace;
use super::steps::JobKind;
use super::steps::{self, Step};
use crate::db::{held, Database};
use crate::graph::{TenantId, UserId};
use crate::ops::metrics::{ACCOUNT_JOBS_FAILED, ACCOUNT_JOB_EDGES, ACCOUNT_JOB_RETRIES};
use crate::util::backoff::Backoff;
use crate::util::time::now_ms;

/// How long a job stays with a node that renews it no more.
pub const LEASE: Duration = Duration::from_secs(10);
/// How long a node works on one job (at most, and at most how many batches) before it lets the
/// longest-waiting job have a turn.
const SLICE: Duration = Duration::from_secs(2);
const SLICE_BATCHES: u32 = 100;
/// How often an idle runner looks for a job.
const IDLE_POLL: Duration = Duration::from_millis(500);
/// Failed tries of one batch before its job is marked failed.
const MAX_TRIES: u32 = 8;

/// A node's runner of account jobs.
#[derive(Clone)]
pub struct JobRunner {
    db: Database,
    owner: String,
    /// Edges per batch beside live writes (`account_job_batch`): one short transaction each.
    batch: u32,
    /// The most share of time it works (`account_job_share`), in (0, 1]; `pace.rs` chooses within it.
    most_share: f64,
}

/// A job as its runner needs it.
struct Claimed {
    id: i64,
    tenant: TenantId,
    user: UserId,
    kind: JobKind,
    destination: Option<UserId>,
    steps: Vec<Step>,
    phase: usize,
}

impl JobRunner {
    pub fn new(db: Database, batch: u32, share: f64) -> Self {
        let owner = format!("{}-{:016x}", std::process::id(), rand::random::<u64>());
        Self { db, owner, batch: batch.max(1), most_share: share }
    }

    /// Takes and runs jobs until `stop`.
    pub async fn run(&self, stop: CancellationToken) -> Result<(), sqlx::Error> {
        let mut pace = Pace::new(self.most_share);
        while !stop.is_cancelled() {
            match self.claim().await? {
                Some(job) => self.work(job, &mut pace, &stop).await?,
                None => {
                    pace.idle();
                    tokio::select! {
                        () = tokio::time::sleep(IDLE_POLL) => {}
                        () = stop.cancelled() => {}
                    }
                }
            }
        }
        Ok(())
    }

    /// Takes the lease of the running job nobody holds that waited longest since its last batch: jobs (and so
    /// tenants) take turns of [`SLICE`] (or [`SLICE_BATCHES`]) on a node, so one tenant's celebrity deletion does not hold another's
    /// job back until it ends.
    async fn claim(&self) -> Result<Option<Claimed>, sqlx::Error> {
        let now = now_ms();
        let Some(id) = sqlx::query_scalar::<_, i64>(
            "SELECT id FROM account_jobs WHERE state = ? AND lease_until < ? ORDER BY updated_at, id LIMIT 1",
        )
        .bind(JobState::Running.as_str())
        .bind(now)
        .fetch_optional(self.db.reader())
        .await?
        else {
            return Ok(None);
        };
        let taken = sqlx::query(
            "UPDATE account_jobs SET lease_owner = ?, lease_until = ? WHERE id = ? AND state = ? AND lease_until < ?",
        )
        .bind(&self.owner)
        .bind(now + LEASE.as_millis() as i64)
        .bind(id)
        .bind(JobState::Running.as_str())
        .bind(now)
        .execute(self.db.writer())
        .await?;
        if taken.rows_affected() != 1 {
            return Ok(None);
        }
        let row = sqlx::query(
            "SELECT tenant_id, user_id, kind, target_user_id, with_followings, phase FROM account_jobs WHERE id = ?",
        )
        .bind(id)
        .fetch_one(self.db.writer())
        .await?;
        let decode = |e: Box<dyn std::error::Error + Send + Sync>| sqlx::Error::Decode(e);
        let kind: JobKind = row.try_get::<String, _>(2)?.parse().map_err(|e| decode(Box::new(e)))?;
        let tenant: TenantId = row.try_get::<String, _>(0)?.parse().map_err(|e| decode(Box::new(e)))?;
        let user = UserId::try_from(row.try_get::<i64, _>(1)?).map_err(|e| decode(Box::new(e)))?;
        let destination =
            row.try_get::<Option<i64>, _>(3)?.map(UserId::try_from).transpose().map_err(|e| decode(Box::new(e)))?;
        let steps = steps::of(kind, row.try_get::<i64, _>(4)? == 1);
        let phase = usize::try_from(row.try_get::<i64, _>(5)?).unwrap_or(usize::MAX);
        tracing::debug!(job = id, %tenant, %user, %kind, phase, "account job taken");
        Ok(Some(Claimed { id, tenant, user, kind, destination, steps, phase }))
    }

    /// Runs `job`'s batches from where it stands to its end, or until `stop`, a lost lease or the end of its
    /// slice (then its lease is given back, for the next claim to choose).
    async fn work(&self, mut job: Claimed, pace: &mut Pace, stop: &CancellationToken) -> Result<(), sqlx::Error> {
        let (turn, mut batches) = (std::time::Instant::now(), 0);
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));
        let mut failures = 0;
        while let Some(step) = job.steps.get(job.phase).copied() {
            if stop.is_cancelled() {
                return Ok(());
            }
            if turn.elapsed() >= SLICE || batches >= SLICE_BATCHES {
                sqlx::query(
                    "UPDATE account_jobs SET lease_owner = NULL, lease_until = 0 WHERE id = ? AND lease_owner = ?",
                )
                .bind(job.id)
                .bind(&self.owner)
                .execute(self.db.writer())
                .await?;
                return Ok(());
            }
            batches += 1;
            let begun = std::time::Instant::now();
            let asked = pace.batch(self.batch);
            match self.batch(&job, step, asked).await {
                Ok(Progress::Lost) => {
                    tracing::warn!(job = job.id, "account job lease lost to another node");
                    return Ok(());
                }
                Ok(Progress::Edges(n)) => {
                    metrics::counter!(ACCOUNT_JOB_EDGES.name, "kind" => job.kind.as_str()).increment(n);
                    failures = 0;
                    pace.rest_after(n, asked, begun.elapsed()).await;
                }
                Ok(Progress::StepDone) => {
                    job.phase += 1;
                    failures = 0;
                }
                Err(error) => {
                    failures += 1;
                    metrics::counter!(ACCOUNT_JOB_RETRIES.name, "kind" => job.kind.as_str()).increment(1);
                    let conflict = crate::db::is_lock_conflict(&error);
                    if failures >= MAX_TRIES {
                        self.fail(&job, &error).await?;
                        return Ok(());
                    }
                    if !conflict {
                        tracing::warn!(job = job.id, failures, error = %crate::ops::observability::causes(&error), "account job batch failed; retrying");
                    }
                    tokio::time::sleep(backoff.next_wait()).await;
                }
            }
        }
        sqlx::query(
            "UPDATE account_jobs SET state = ?, lease_owner = NULL, updated_at = ? WHERE id = ? AND lease_owner = ?",
        )
        .bind(JobState::Done.as_str())
        .bind(now_ms())
        .bind(job.id)
        .bind(&self.owner)
        .execute(self.db.writer())
        .await?;
        tracing::info!(job = job.id, tenant = %job.tenant, user = %job.user, kind = %job.kind, "account job done");
        Ok(())
    }

    /// One batch of `step`, of at most `limit` edges, in its own transaction, fenced by the lease.
    async fn batch(&self, job: &Claimed, step: Step, limit: u32) -> Result<Progress, sqlx::Error> {
        held::holding("an account job's batch", self.batch_held(job, step, limit)).await
    }

    async fn batch_held(&self, job: &Claimed, step: Step, limit: u32) -> Result<Progress, sqlx::Error> {
        let kind = self.db.kind();
        let mut tx = self.db.writer().begin().await?;
        if !self.holds_lease(&mut tx, job.id).await? {
            return Ok(Progress::Lost);
        }
        let now = now_ms();
        let scope = Scope { kind, tenant: &job.tenant, account: job.user, limit, at_ms: now };
        let lease_until = now + LEASE.as_millis() as i64;
        let progress = match step.batch(&mut tx, &scope, job.destination).await? {
            Some(edges) => {
                sqlx::query("UPDATE account_jobs SET done = done + ?, lease_until = ?, updated_at = ? WHERE id = ?")
                    .bind(edges as i64)
                    .bind(lease_until)
                    .bind(now)
                    .bind(job.id)
                    .execute(&mut *tx)
                    .await?;
                Progress::Edges(edges)
            }
            None => {
                sqlx::query("UPDATE account_jobs SET phase = ?, lease_until = ?, updated_at = ? WHERE id = ?")
                    .bind(job.phase as i64 + 1)
                    .bind(lease_until)
                    .bind(now)
                    .bind(job.id)
                    .execute(&mut *tx)
                    .await?;
                Progress::StepDone
            }
        };
        tx.commit().await?;
        Ok(progress)
    }

    /// Whether this runner still holds `id`'s lease (its row locked until the batch ends).
    async fn holds_lease(&self, tx: &mut Transaction<'_, Any>, id: i64) -> Result<bool, sqlx::Error> {
        let sql = format!("SELECT lease_owner, state FROM account_jobs WHERE id = ?{}", self.db.kind().row_lock(false));
        let row = sqlx::query(&sql).bind(id).fetch_optional(&mut **tx).await?;
        Ok(match row {
            Some(row) => {
                row.try_get::<Option<String>, _>(0)?.as_deref() == Some(self.owner.as_str())
                    && row.try_get::<String, _>(1)? == JobState::Running.as_str()
            }
            None => false,
        })
    }

    /// Marks `job` failed with `error`, kept for the operator (starting its kind again continues it).
    async fn fail(&self, job: &Claimed, error: &sqlx::Error) -> Result<(), sqlx::Error> {
        let message = crate::ops::observability::causes(error);
        tracing::error!(job = job.id, tenant = %job.tenant, user = %job.user, kind = %job.kind, error = %message, "account job failed");
        metrics::counter!(ACCOUNT_JOBS_FAILED.name, "kind" => job.kind.as_str()).increment(1);
        let kept: String = message.chars().take(1000).collect();
        sqlx::query("UPDATE account_jobs SET state = ?, error = ?, lease_owner = NULL, updated_at = ? WHERE id = ?")
            .bind(JobState::Failed.as_str())
            .bind(kept)
            .bind(now_ms())
            .bind(job.id)
            .execute(self.db.writer())
            .await?;
        Ok(())
    }
}

/// What a batch did.
enum Progress {
    Edges(u64),
    StepDone,
    Lost,
}
