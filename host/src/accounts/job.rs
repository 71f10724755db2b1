//! An account job as `account_jobs` stores it: what it does to whom, where it stands, who holds its lease.
//! Starting one changes the account's state in the same transaction, under the account row's exclusive lock,
//! so a relation beginning concurrently either commits before the job reads any edge or is refused. Jobs
//! compose: no two run on one account — as its account or as a move's destination — at once.

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};
use utoipa::ToSchema;

use super::steps::{self, JobKind, Step};
use crate::db::{held, is_lock_conflict, Database};
use crate::graph::{AccountState, TenantId, UserId};
use crate::util::time::now_ms;

crate::str_enum! {
    /// Where a job stands.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum JobState("account job state") {
        Running = "running",
        Done = "done",
        /// It stopped on an error it kept (see `error`); nothing it committed is lost, and starting the same
        /// kind again continues from the account's edges as they are.
        Failed = "failed",
    }
}

/// What an operator asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobRequest {
    pub kind: JobKind,
    pub user: UserId,
    /// A move's destination.
    pub to: Option<UserId>,
    /// A move: the account's followings move too.
    pub with_followings: bool,
}

/// A job as the admin API and the CLI show it.
#[derive(Debug, Clone, Serialize, serde::Deserialize, ToSchema)]
pub struct Job {
    pub id: i64,
    pub tenant: String,
    #[schema(value_type = String)]
    pub user: String,
    pub kind: JobKind,
    /// A move's destination.
    pub to: Option<String>,
    pub with_followings: bool,
    pub state: JobState,
    /// The step it is at (of `steps`).
    pub step: String,
    pub steps: Vec<String>,
    /// Edges changed so far, and how many there were when it started (relations begun meanwhile by the
    /// account's counterparts are handled too, so `done` may pass `total`).
    pub done: i64,
    pub total: i64,
    pub requested_by: String,
    pub error: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl Job {
    pub fn finished(&self) -> bool {
        self.state != JobState::Running
    }
}

/// Why a job was not started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A running job already works on this account or the move's destination — as its account, or as a
    /// move's destination: jobs on one account never interleave (a suspension of a move's destination would
    /// end followers the move has not handed over yet).
    #[error("job {0} is running on this account or the move's destination; wait for it to end")]
    Busy(i64),
    /// The tenant runs as many jobs as it may (`account_jobs_per_tenant`).
    #[error("this tenant already runs {0} account jobs, its most; wait for one to end")]
    TooMany(i64),
    #[error("{0}")]
    Refused(String),
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
}

/// How often a start that lost a lock race is tried again.
const MAX_START_ATTEMPTS: u32 = 6;

const COLUMNS: &str = "id, tenant_id, user_id, kind, target_user_id, with_followings, state, phase, done, total, \
                       requested_by, error, created_at, updated_at";

/// Starts `request` on `tenant`'s account: checks and changes its state and records the job, in one short
/// transaction. The job's size is counted before it, outside any transaction (a celebrity's count is no
/// reason to hold the account's lock; relations changing meanwhile only make `done` pass `total`). At most
/// `per_tenant` jobs of a tenant run at once.
pub async fn start(
    db: &Database,
    tenant: &TenantId,
    request: JobRequest,
    requested_by: &str,
    per_tenant: u32,
) -> Result<Job, StartError> {
    let mut total = 0;
    for step in steps::of(request.kind, request.with_followings) {
        total += step.remaining(db, tenant, request.user).await?;
    }
    // Two starts in one tenant may deadlock on the gap their locks of its jobs share: the start is short and
    // retried whole, as relation writes are.
    let mut attempt = 1;
    let id = loop {
        let recording = record(db, tenant, request, requested_by, per_tenant, total);
        match held::holding("an account job's start", recording).await {
            Err(StartError::Database(e)) if attempt < MAX_START_ATTEMPTS && is_lock_conflict(&e) => {
                tokio::time::sleep(std::time::Duration::from_millis(5u64 << attempt)).await;
                attempt += 1;
            }
            recorded => break recorded?,
        }
    };
    Ok(get(db, tenant, id).await?.ok_or(sqlx::Error::RowNotFound)?)
}

/// The start's transaction: the checks, the account's new state, the job's row; the job's id.
async fn record(
    db: &Database,
    tenant: &TenantId,
    request: JobRequest,
    requested_by: &str,
    per_tenant: u32,
    total: i64,
) -> Result<i64, StartError> {
    let mut tx = db.writer().begin().await?;
    // The tenant's running jobs locked first (as a runner locks its job before the accounts its batch reads):
    // concurrent starts in one tenant count each other, and wait rather than deadlock.
    let tenant_running: i64 = sqlx::query_scalar(&format!(
        "SELECT COUNT(*) FROM account_jobs WHERE tenant_id = ? AND state = ?{}",
        db.kind().row_lock(false)
    ))
    .bind(tenant.as_str())
    .bind(JobState::Running.as_str())
    .fetch_one(&mut *tx)
    .await?;
    if tenant_running >= i64::from(per_tenant) {
        return Err(StartError::TooMany(tenant_running));
    }
    // Both ends locked in id order: A → B beside B → A waits instead of deadlocking.
    let mut users: Vec<UserId> = [Some(request.user), request.to].into_iter().flatten().collect();
    users.sort_unstable();
    users.dedup();
    let mut state = AccountState::Active;
    for user in users {
        let locked = lock_account(&mut tx, db, tenant, user).await?;
        if user == request.user {
            state = locked;
        }
    }
    // Under the accounts' locks: two starts on one account (or on a move's two ends) cannot both pass.
    let accounts = [Some(request.user), request.to].into_iter().flatten().map(|u| u.get().to_string());
    let accounts = accounts.collect::<Vec<_>>().join(", ");
    let running: Option<i64> = sqlx::query_scalar(&format!(
        "SELECT id FROM account_jobs WHERE tenant_id = ? AND state = ? AND (user_id IN ({accounts}) OR \
         target_user_id IN ({accounts})) LIMIT 1"
    ))
    .bind(tenant.as_str())
    .bind(JobState::Running.as_str())
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(id) = running {
        return Err(StartError::Busy(id));
    }

    let refuse = |why: &str| Err(StartError::Refused(why.to_owned()));
    // Deleting or suspending again runs the steps again (a failed job's account continues; nothing left is
    // quickly done).
    let new_state = match (request.kind, state) {
        (JobKind::Delete, _) => AccountState::Deleted,
        (_, AccountState::Deleted) => return refuse("the account is deleted"),
        (JobKind::Suspend, _) => AccountState::Suspended,
        // Active at once: a restore of another account running beside it then finds this end active and
        // brings their edges back (each waiting for the other to be active, two restores would skip them).
        (JobKind::Restore, AccountState::Suspended) => AccountState::Active,
        (JobKind::Restore, _) => return refuse("the account is not suspended"),
        (JobKind::Move, AccountState::Suspended) => return refuse("a suspended account cannot move"),
        (JobKind::Move, AccountState::Active) => AccountState::Active,
    };
    if request.kind == JobKind::Move {
        let Some(to) = request.to.filter(|to| *to != request.user) else {
            return refuse("a move needs a destination account other than the account itself");
        };
        if account_state(&mut tx, tenant, to).await? != AccountState::Active {
            return refuse("the destination account is not active");
        }
    }
    sqlx::query("UPDATE account_settings SET state = ?, updated_at = ? WHERE tenant_id = ? AND user_id = ?")
        .bind(new_state.stored())
        .bind(now_ms())
        .bind(tenant.as_str())
        .bind(request.user.get())
        .execute(&mut *tx)
        .await?;
    let now = now_ms();
    sqlx::query(
        "INSERT INTO account_jobs (tenant_id, user_id, kind, target_user_id, with_followings, state, phase, done, \
         total, requested_by, error, lease_owner, lease_until, created_at, updated_at) \
         VALUES (?, ?, ?, ?, ?, ?, 0, 0, ?, ?, NULL, NULL, 0, ?, ?)",
    )
    .bind(tenant.as_str())
    .bind(request.user.get())
    .bind(request.kind.as_str())
    .bind(request.to.map(UserId::get))
    .bind(i64::from(request.with_followings))
    .bind(JobState::Running.as_str())
    .bind(total)
    .bind(requested_by)
    .bind(now)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    let id: i64 =
        sqlx::query_scalar("SELECT MAX(id) FROM account_jobs WHERE tenant_id = ? AND user_id = ? AND state = ?")
            .bind(tenant.as_str())
            .bind(request.user.get())
            .bind(JobState::Running.as_str())
            .fetch_one(&mut *tx)
            .await?;
    tx.commit().await?;
    Ok(id)
}

/// Takes the exclusive lock on `user`'s account row (creating it with the defaults when missing) and reads
/// its state.
async fn lock_account(
    tx: &mut Transaction<'_, Any>,
    db: &Database,
    tenant: &TenantId,
    user: UserId,
) -> Result<AccountState, sqlx::Error> {
    let create = format!(
        "INSERT INTO account_settings (tenant_id, user_id, private, state, updated_at) VALUES (?, ?, 0, 0, ?){}\
         private = private",
        db.kind().on_conflict_update(&["tenant_id", "user_id"])
    );
    sqlx::query(&create).bind(tenant.as_str()).bind(user.get()).bind(now_ms()).execute(&mut **tx).await?;
    let read =
        format!("SELECT state FROM account_settings WHERE tenant_id = ? AND user_id = ?{}", db.kind().row_lock(false));
    let state: i64 = sqlx::query_scalar(&read).bind(tenant.as_str()).bind(user.get()).fetch_one(&mut **tx).await?;
    Ok(AccountState::from_stored(state))
}

/// `user`'s state, its row locked by this transaction already.
async fn account_state(
    tx: &mut Transaction<'_, Any>,
    tenant: &TenantId,
    user: UserId,
) -> Result<AccountState, sqlx::Error> {
    let state: i64 = sqlx::query_scalar("SELECT state FROM account_settings WHERE tenant_id = ? AND user_id = ?")
        .bind(tenant.as_str())
        .bind(user.get())
        .fetch_one(&mut **tx)
        .await?;
    Ok(AccountState::from_stored(state))
}

/// `tenant`'s job `id`.
pub async fn get(db: &Database, tenant: &TenantId, id: i64) -> Result<Option<Job>, sqlx::Error> {
    let sql = format!("SELECT {COLUMNS} FROM account_jobs WHERE tenant_id = ? AND id = ?");
    let row = sqlx::query(&sql).bind(tenant.as_str()).bind(id).fetch_optional(db.reader()).await?;
    row.as_ref().map(decode).transpose()
}

/// `tenant`'s newest jobs, newest first (`user`'s only, when given).
pub async fn list(db: &Database, tenant: &TenantId, user: Option<UserId>, limit: u32) -> Result<Vec<Job>, sqlx::Error> {
    let by_user = if user.is_some() { " AND user_id = ?" } else { "" };
    let sql = format!("SELECT {COLUMNS} FROM account_jobs WHERE tenant_id = ?{by_user} ORDER BY id DESC LIMIT ?");
    let mut query = sqlx::query(&sql).bind(tenant.as_str());
    if let Some(user) = user {
        query = query.bind(user.get());
    }
    query.bind(i64::from(limit.min(500))).fetch_all(db.reader()).await?.iter().map(decode).collect()
}

fn decode(row: &AnyRow) -> Result<Job, sqlx::Error> {
    let kind: JobKind = row.try_get::<String, _>(3)?.parse()?;
    let with_followings = row.try_get::<i64, _>(5)? == 1;
    let steps = steps::of(kind, with_followings);
    let phase = usize::try_from(row.try_get::<i64, _>(7)?).unwrap_or(usize::MAX);
    Ok(Job {
        id: row.try_get(0)?,
        tenant: row.try_get(1)?,
        user: row.try_get::<i64, _>(2)?.to_string(),
        kind,
        to: row.try_get::<Option<i64>, _>(4)?.map(|to| to.to_string()),
        with_followings,
        state: row.try_get::<String, _>(6)?.parse()?,
        step: steps.get(phase).map_or_else(|| "finished".to_owned(), Step::name),
        steps: steps.iter().map(Step::name).collect(),
        done: row.try_get(8)?,
        total: row.try_get(9)?,
        requested_by: row.try_get(10)?,
        error: row.try_get(11)?,
        created_at_ms: row.try_get(12)?,
        updated_at_ms: row.try_get(13)?,
    })
}
