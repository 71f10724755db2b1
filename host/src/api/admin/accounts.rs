//! Account jobs from the admin API: delete (erase), suspend, restore or move an account, and follow the jobs'
//! progress. A job runs in the background on whichever node takes it; starting one is audited.

use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::*;
use crate::accounts::{self, Job, JobKind, JobRequest};
use crate::api::params::{parse_user_id, ApiJson as Json, ApiPath as Path};
use crate::api::problem::{ApiError, Problem};
use crate::api::AppState;
use crate::graph::{account_state, AccountState};
use crate::tenancy::audit::AuditAction;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Account jobs and an account's state.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(start_job)).routes(routes!(account)).routes(routes!(jobs)).routes(routes!(job))
}

#[derive(Deserialize)]
pub struct AccountPath {
    tenant: String,
    user: String,
}

#[derive(Deserialize)]
pub struct JobPath {
    tenant: String,
    id: i64,
}

/// What to do to the account.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartJob {
    pub kind: JobKind,
    /// A move's destination account.
    #[serde(default)]
    pub to: Option<String>,
    /// A move: the account's followings move too (the destination follows them).
    #[serde(default)]
    pub with_followings: bool,
}

/// An account's state and its newest jobs.
#[derive(Debug, Serialize, ToSchema)]
pub struct AccountView {
    pub state: AccountState,
    pub jobs: Vec<Job>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct JobList {
    pub jobs: Vec<Job>,
}

/// Starts a job on the account: `delete` (every relation ends with its event, then its rows are erased; no
/// relation with it begins again), `suspend` (its follows and requests are hidden, restorably), `restore`,
/// or `move` to `to` (its followers follow `to` instead). Answers at once; the job runs in the background.
#[utoipa::path(post, path = "/admin/v1/tenants/{tenant}/accounts/{user}/jobs", tag = "admin",
    params(("tenant" = String, Path), ("user" = String, Path)), request_body = StartJob,
    responses((status = 202, body = Job), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem),
        (status = 409, description = "a job runs on the account or the move's destination, or its state refuses",
            body = Problem),
        (status = 429, description = "the tenant runs its most jobs (`too_many_jobs`)", body = Problem)),
    security(("admin" = [])))]
pub async fn start_job(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<AccountPath>,
    Json(body): Json<StartJob>,
) -> Result<(StatusCode, axum::Json<Job>), ApiError> {
    let tenant = operator.reach(&path.tenant)?;
    let user = parse_user_id(&path.user)?;
    let to = body.to.as_deref().map(parse_user_id).transpose()?;
    let request = JobRequest { kind: body.kind, user, to, with_followings: body.with_followings };
    let started = accounts::start(&state.db, &tenant, request, &operator.actor(), state.account_jobs_per_tenant)
        .await
        .map_err(ApiError::from);
    let mut detail = format!("{} account {user}", body.kind);
    if let Some(to) = to {
        detail.push_str(&format!(" to {to}"));
    }
    if let Ok(job) = &started {
        detail.push_str(&format!(" (job {})", job.id));
    }
    let change = Change { detail, ..Change::of(AuditAction::StartAccountJob) };
    let job = audited(&state, &operator, &tenant, change, started).await?;
    Ok((StatusCode::ACCEPTED, axum::Json(job)))
}

/// The account's state and its newest jobs.
#[utoipa::path(get, path = "/admin/v1/tenants/{tenant}/accounts/{user}", tag = "admin",
    params(("tenant" = String, Path), ("user" = String, Path)),
    responses((status = 200, body = AccountView), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem)),
    security(("admin" = [])))]
pub async fn account(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<AccountPath>,
) -> Result<axum::Json<AccountView>, ApiError> {
    let tenant = operator.reach(&path.tenant)?;
    let user = parse_user_id(&path.user)?;
    let view = AccountView {
        state: account_state(&state.db, &tenant, user).await?,
        jobs: accounts::list(&state.db, &tenant, Some(user), 20).await?,
    };
    Ok(axum::Json(view))
}

/// The tenant's newest account jobs (100), newest first, with their progress.
#[utoipa::path(get, path = "/admin/v1/tenants/{tenant}/jobs", tag = "admin", params(("tenant" = String, Path)),
    responses((status = 200, body = JobList), (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("admin" = [])))]
pub async fn jobs(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<TenantPath>,
) -> Result<axum::Json<JobList>, ApiError> {
    let tenant = operator.reach(&path.tenant)?;
    Ok(axum::Json(JobList { jobs: accounts::list(&state.db, &tenant, None, 100).await? }))
}

/// One account job and its progress.
#[utoipa::path(get, path = "/admin/v1/tenants/{tenant}/jobs/{id}", tag = "admin",
    params(("tenant" = String, Path), ("id" = i64, Path)),
    responses((status = 200, body = Job), (status = 401, body = Problem), (status = 403, body = Problem),
        (status = 404, body = Problem)),
    security(("admin" = [])))]
pub async fn job(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<JobPath>,
) -> Result<axum::Json<Job>, ApiError> {
    let tenant = operator.reach(&path.tenant)?;
    accounts::get(&state.db, &tenant, path.id).await?.map(axum::Json).ok_or(ApiError::NoSuchJob)
}
