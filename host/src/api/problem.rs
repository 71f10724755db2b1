//! Every error the HTTP API returns, as `application/problem+json` (RFC 9457) with a stable `code`.
//!
//! Handlers return [`ApiError`]; this is the one place where failures become status codes, so a client can
//! switch on `code` without parsing prose, and a database failure never leaks its SQL to the caller.

use std::borrow::Cow;
use std::time::Duration;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::accounts::StartError;
use crate::cache::CacheError;
use crate::graph::{Act, InvalidTenantId, InvalidUserId, WriteError};
use crate::ops::metrics::HTTP_PANICS;
use crate::ops::observability::causes;
use crate::plugins::{PluginError, RegistryError, SlotError};
use crate::projection::PluginProjectionError;
use crate::tenancy::jwt_keys::TenantJwtError;
use crate::tenancy::keys::TenantKeyError;
use crate::transfer::import::ImportError;
use crate::upkeep::lag::LagError;
use crate::util::str_enum::UnknownName;

/// The body of every error response (also read back by the `strand` CLI).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    /// `urn:strand:problem:{code}`.
    #[serde(rename = "type")]
    pub problem_type: String,
    /// A short summary of the kind of problem.
    #[schema(value_type = String)]
    pub title: Cow<'static, str>,
    pub status: u16,
    /// Stable, machine-readable reason, e.g. `self_follow`, `invalid_token`.
    #[schema(value_type = String)]
    pub code: Cow<'static, str>,
    /// What went wrong in this request.
    pub detail: String,
}

/// Every way a request fails. Handlers return it (`?` converts the modules' own errors); [`ApiError::code`]
/// and [`ApiError::status`] below are the one place a failure becomes a status and a stable code, and the
/// variant's message (or, for internals, a fixed sentence) is the problem's `detail`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    // What the request itself gets wrong (400).
    #[error(transparent)]
    InvalidTenant(#[from] InvalidTenantId),
    #[error(transparent)]
    InvalidUserId(#[from] InvalidUserId),
    #[error("user_ids must name at least one user, e.g. user_ids=2,3")]
    NoUserIds,
    #[error("at most {max} user ids per request")]
    TooManyUserIds { max: usize },
    #[error("limit must be 1 to {max}")]
    InvalidLimit { max: u32 },
    #[error("give either cursor or offset, not both")]
    CursorAndOffset,
    #[error("offset is at most {max}; page deeper with the cursor (next_cursor)")]
    OffsetTooLarge { max: u64 },
    #[error("cursor is not one this server issued")]
    InvalidCursor,
    #[error("ids must be 1 to {max} comma-separated integers")]
    InvalidIds { max: usize },
    #[error("duration is at most {max_seconds} seconds; omit it for a mute without an end")]
    MuteTooLong { max_seconds: u64 },
    #[error("export one of following, followers, blocks or mutes")]
    UnknownExport,
    #[error(transparent)]
    InvalidPluginKind(UnknownName),
    #[error(transparent)]
    InvalidImportFormat(UnknownName),
    #[error("{0}")]
    InvalidReadable(String),
    #[error("a version is a canary or a shadow, not both")]
    CanaryAndShadow,
    #[error(transparent)]
    InvalidAuditFilter(#[from] crate::tenancy::audit::AuditFilterError),
    /// A body read by hand (not by axum's `Json`) that is not the JSON the route takes.
    #[error("{0}")]
    InvalidJson(serde_json::Error),
    #[error("{}", .0.body_text())]
    Query(#[from] QueryRejection),
    #[error("{}", .0.body_text())]
    Body(#[from] JsonRejection),
    #[error("{}", .0.body_text())]
    Path(#[from] PathRejection),
    #[error("request bodies are limited to {0} bytes")]
    PayloadTooLarge(usize),
    // Who is asking (401, 403).
    #[error("send Authorization: Bearer <JWT>")]
    MissingToken,
    #[error("{0}")]
    InvalidToken(String),
    #[error("send Authorization: Bearer <admin token or tenant key>")]
    InvalidAdminToken,
    #[error("the admin API is disabled: set STRAND_ADMIN_TOKEN")]
    AdminDisabled,
    /// The credential is valid but does not reach this (a tenant key on another tenant's routes, or on the
    /// platform admin's).
    #[error("{0}")]
    Forbidden(String),
    // What is not there (404, 405).
    #[error("no such route; see /openapi.json")]
    NoSuchRoute,
    #[error("this route does not take that method")]
    MethodNotAllowed,
    #[error("no such account job for this tenant")]
    NoSuchJob,
    #[error("no readable space {space:?} of projector {plugin:?} for this tenant")]
    NoSuchSpace { plugin: String, space: String },
    // The state of the service (409, 429, 503).
    #[error("{reason}")]
    RateLimited { retry_after: Option<Duration>, reason: String },
    #[error("rate limiting is failing and this tenant fails closed; retry later")]
    RateLimiterUnavailable,
    #[error("this node is not ready; its log says why")]
    NotReady,
    #[error("projector {plugin:?} version {version} is being built for this tenant: {progress}")]
    ProjectionBuilding { plugin: String, version: i64, progress: String },
    #[error(transparent)]
    NeedsHistory(PluginProjectionError),
    /// A panic while handling a request (a bug, never expected), logged by [`ApiError::panicked`].
    #[error("the server failed on this request; it is logged")]
    Panicked,
    // The modules' own errors, each mapped below.
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error(transparent)]
    Job(#[from] StartError),
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Lag(#[from] LagError),
    #[error(transparent)]
    TenantKey(#[from] TenantKeyError),
    #[error(transparent)]
    TenantJwt(#[from] TenantJwtError),
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

impl ApiError {
    /// A panic while handling a request: logged here with its message; the caller gets a 500 problem and
    /// the process serves on (`CatchPanicLayer`; no lock the handler held stays poisoned for others: shared
    /// state recovers from poisoning or never panics under its lock).
    pub fn panicked(panic: Box<dyn std::any::Any + Send + 'static>) -> Self {
        let message = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic without a message");
        tracing::error!(panic = message, "a request handler panicked");
        metrics::counter!(HTTP_PANICS.name).increment(1);
        Self::Panicked
    }

    /// The stable, machine-readable reason a client switches on.
    pub fn code(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            Self::InvalidTenant(_) => "invalid_tenant",
            Self::InvalidUserId(_) => "invalid_user_id",
            Self::NoUserIds => "invalid_user_ids",
            Self::TooManyUserIds { .. } => "too_many_user_ids",
            Self::InvalidLimit { .. } => "invalid_limit",
            Self::CursorAndOffset => "invalid_pagination",
            Self::OffsetTooLarge { .. } => "offset_too_large",
            Self::InvalidCursor => "invalid_cursor",
            Self::InvalidIds { .. } => "invalid_ids",
            Self::MuteTooLong { .. } => "invalid_duration",
            Self::UnknownExport => "invalid_export",
            Self::InvalidPluginKind(_) => "invalid_plugin_kind",
            Self::InvalidImportFormat(_) => "invalid_import",
            Self::InvalidReadable(_) => "invalid_readable",
            Self::CanaryAndShadow => "invalid_rollout",
            Self::InvalidAuditFilter(_) => "invalid_query",
            Self::InvalidJson(_) | Self::Body(_) => "invalid_body",
            Self::Query(_) => "invalid_query",
            Self::Path(_) => "invalid_path",
            Self::PayloadTooLarge(_) => "payload_too_large",
            Self::MissingToken => "missing_token",
            Self::InvalidToken(_) => "invalid_token",
            Self::InvalidAdminToken => "invalid_admin_token",
            Self::AdminDisabled => "admin_disabled",
            Self::Forbidden(_) => "forbidden",
            Self::NoSuchRoute | Self::NoSuchJob | Self::NoSuchSpace { .. } => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::RateLimited { .. } => "rate_limited",
            Self::RateLimiterUnavailable => "rate_limiter_unavailable",
            Self::NotReady => "not_ready",
            Self::ProjectionBuilding { .. } => "projection_building",
            Self::NeedsHistory(_) => "needs_history",
            Self::Panicked => "internal_error",
            Self::Write(error) => return write_code(error),
            Self::Job(error) => match error {
                StartError::Busy(_) => "job_running",
                StartError::TooMany(_) => "too_many_jobs",
                StartError::Refused(_) => "account_state",
                StartError::Database(e) => database_code(e),
            },
            Self::Import(error) => match error {
                ImportError::Invalid { .. } | ImportError::Read(_) => "invalid_import",
                ImportError::Running => "import_running",
                ImportError::Lost => "import_stalled",
                ImportError::Stopped(_) => "internal_error",
                ImportError::Write(e) => return write_code(e),
                ImportError::Database(e) => database_code(e),
            },
            Self::Registry(error) => match error {
                RegistryError::Slot(SlotError::InvalidName(_)) => "invalid_plugin_name",
                RegistryError::Slot(SlotError::ReservedName(_)) => "reserved_plugin_name",
                RegistryError::LimitRefused(_) => "limit_too_high",
                RegistryError::InvalidRollout(_) => "invalid_rollout",
                RegistryError::InvalidReadable(_) => "invalid_readable",
                RegistryError::HistoryNotAProjector(_) => "invalid_history",
                RegistryError::NoSuchVersion { .. }
                | RegistryError::NotDeployed { .. }
                | RegistryError::NoRollout { .. } => "plugin_not_found",
                RegistryError::Database(e) => database_code(e),
                RegistryError::TooManyProjectors { .. } => "too_many_projectors",
                RegistryError::CompileTooSlow(_) => "compile_too_slow",
                RegistryError::Rejected(PluginError::NotAComponent(_)) => "invalid_component",
                RegistryError::Rejected(PluginError::WrongWorld { .. }) => "wrong_world",
                RegistryError::Rejected(PluginError::Host { .. }) => "plugin_host_error",
                RegistryError::Rejected(_) => "conformance_failed",
            },
            Self::Lag(LagError::Database(e)) => database_code(e),
            Self::Lag(_) => "lag_unavailable",
            Self::TenantKey(error) => match error {
                TenantKeyError::InvalidName(_) => "invalid_key_name",
                TenantKeyError::Exists { .. } => "key_exists",
                TenantKeyError::NotFound { .. } => "key_not_found",
                TenantKeyError::Randomness(_) => "internal_error",
                TenantKeyError::Database(e) => database_code(e),
            },
            Self::TenantJwt(error) => match error {
                TenantJwtError::InvalidKid(_) => "invalid_kid",
                TenantJwtError::InvalidKey(_) => "invalid_jwt_key",
                TenantJwtError::TooMany(_) => "too_many_jwt_keys",
                TenantJwtError::NotFound { .. } => "jwt_key_not_found",
                TenantJwtError::Database(e) => database_code(e),
            },
            Self::Cache(_) => "cache_unavailable",
            Self::Database(e) => database_code(e),
        })
    }

    /// The HTTP status of [`ApiError::code`].
    pub fn status(&self) -> StatusCode {
        status_of(&self.code())
    }

    /// What went wrong, as the caller reads it (and the audit log records it): the message, but never a
    /// database's or a cache's internals.
    pub fn detail(&self) -> String {
        match self.database_error() {
            Some(error) if database_code(error) == "database_unavailable" => {
                "the database cannot be reached; retry later".to_owned()
            }
            Some(_) => "the database refused the operation; nothing was written".to_owned(),
            None => match self {
                Self::Cache(_) => "the cache does not answer; try again".to_owned(),
                // The body's own error (too large, cut off) is the caller's to read.
                Self::Import(error @ (ImportError::Invalid { .. } | ImportError::Read(_))) => causes(error),
                _ => self.to_string(),
            },
        }
    }

    /// When to try again (`Retry-After`), where the server knows.
    fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } => *retry_after,
            Self::ProjectionBuilding { .. } => Some(Duration::from_secs(1)),
            _ => None,
        }
    }

    /// The database failure under this error, if any: logged with its cause, never shown.
    fn database_error(&self) -> Option<&sqlx::Error> {
        match self {
            Self::Database(e)
            | Self::Write(WriteError::Database(e))
            | Self::Job(StartError::Database(e))
            | Self::Import(ImportError::Database(e) | ImportError::Write(WriteError::Database(e)))
            | Self::Registry(RegistryError::Database(e))
            | Self::Lag(LagError::Database(e))
            | Self::TenantKey(TenantKeyError::Database(e))
            | Self::TenantJwt(TenantJwtError::Database(e)) => Some(e),
            _ => None,
        }
    }

    /// Logs what the caller is not told: the server's own failures, with their causes.
    fn log(&self) {
        if let Some(error) = self.database_error() {
            tracing::error!(error = %error, "database request failed");
            return;
        }
        match self {
            Self::Cache(error) => tracing::error!(error = %causes(error), "the cache failed"),
            Self::Lag(error) => tracing::warn!(error = %error, "cannot measure the pipeline lag"),
            Self::Registry(RegistryError::Rejected(host @ PluginError::Host { .. })) => {
                tracing::error!(error = %causes(host), "plugin host failure during a deploy")
            }
            Self::TenantKey(error @ TenantKeyError::Randomness(_)) => {
                tracing::error!(error = %error, "cannot issue a tenant key")
            }
            _ => {}
        }
    }
}

/// A refused write's code: the relation rule it broke, or the policy's own code in its namespace (it can
/// never pass for one of the host's).
fn write_code(error: &WriteError) -> Cow<'static, str> {
    Cow::Borrowed(match error {
        WriteError::SelfRelation(Act::Follow | Act::Unfollow) => "self_follow",
        WriteError::SelfRelation(_) => "self_relation",
        WriteError::Blocked => "blocked",
        WriteError::AccountDeleted => "account_deleted",
        WriteError::AccountSuspended => "account_suspended",
        WriteError::Refused { code, .. } => return Cow::Owned(format!("policy.{code}")),
        WriteError::PolicyUnavailable => "relation_policy_unavailable",
        WriteError::Contended => "write_contended",
        WriteError::Database(e) => database_code(e),
    })
}

/// A database failure is the server's (500) unless the database cannot be reached (503: retry).
fn database_code(error: &sqlx::Error) -> &'static str {
    match error {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::Tls(_) => {
            "database_unavailable"
        }
        _ => "database_error",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.log();
        let status = self.status();
        let code = self.code();
        let problem = Problem {
            problem_type: format!("urn:strand:problem:{code}"),
            title: Cow::Borrowed(status.canonical_reason().unwrap_or("Error")),
            status: status.as_u16(),
            code,
            detail: self.detail(),
        };
        let mut response = (status, axum::Json(problem)).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if let Some(wait) = self.retry_after() {
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)));
        }
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// The HTTP status of a problem's `code` (one table for the API and its generated reference).
pub fn status_of(code: &str) -> StatusCode {
    match code {
        code if code.starts_with("policy.") => StatusCode::FORBIDDEN,
        "self_follow" | "self_relation" | "compile_too_slow" | "invalid_component" | "wrong_world"
        | "conformance_failed" => StatusCode::UNPROCESSABLE_ENTITY,
        "missing_token" | "invalid_token" | "invalid_admin_token" => StatusCode::UNAUTHORIZED,
        "forbidden" | "admin_disabled" | "blocked" | "account_suspended" => StatusCode::FORBIDDEN,
        "not_found" | "plugin_not_found" | "key_not_found" | "jwt_key_not_found" => StatusCode::NOT_FOUND,
        "method_not_allowed" => StatusCode::METHOD_NOT_ALLOWED,
        "account_deleted" => StatusCode::GONE,
        "payload_too_large" => StatusCode::PAYLOAD_TOO_LARGE,
        "write_contended"
        | "job_running"
        | "account_state"
        | "import_running"
        | "import_stalled"
        | "needs_history"
        | "too_many_projectors"
        | "key_exists"
        | "too_many_jwt_keys" => StatusCode::CONFLICT,
        "rate_limited" | "too_many_jobs" => StatusCode::TOO_MANY_REQUESTS,
        "rate_limiter_unavailable"
        | "relation_policy_unavailable"
        | "not_ready"
        | "projection_building"
        | "lag_unavailable"
        | "cache_unavailable"
        | "database_unavailable" => StatusCode::SERVICE_UNAVAILABLE,
        "internal_error" | "plugin_host_error" | "database_error" => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::BAD_REQUEST,
    }
}
