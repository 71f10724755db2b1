//! Every error the HTTP API returns, as `application/problem+json` (RFC 9457) with a stable `code`.
//!
//! Handlers return [`ApiError`]; this is the one place where failures become status codes, so a client can
//! switch on `code` without parsing prose, and a database failure never leaks its SQL to the caller.

use std::borrow::Cow;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::graph::{Act, WriteError};
use crate::ops::lag::LagError;
use crate::ops::metrics::HTTP_PANICS;
use crate::plugins::{PluginError, RegistryError, SlotError};
use crate::tenancy::jwt_keys::TenantJwtError;
use crate::tenancy::keys::TenantKeyError;

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

/// An error on its way to becoming a problem+json response.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: Cow<'static, str>,
    detail: String,
    retry_after: Option<std::time::Duration>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Self { status, code: Cow::Borrowed(code), detail: detail.into(), retry_after: None }
    }

    /// Over a rate limit: 429, with `Retry-After` (whole seconds, rounded up) when known.
    pub fn rate_limited(retry_after: Option<std::time::Duration>, reason: String) -> Self {
        Self { retry_after, ..Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", reason) }
    }

    /// Tells the client when to try again (`Retry-After`).
    pub fn with_retry_after(self, wait: std::time::Duration) -> Self {
        Self { retry_after: Some(wait), ..self }
    }

    pub fn bad_request(code: &'static str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, detail)
    }

    pub fn unauthorized(code: &'static str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, code, detail)
    }

    pub fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", "no such route; see /openapi.json")
    }

    pub fn method_not_allowed() -> Self {
        Self::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "this route does not take that method")
    }

    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request bodies are limited to {limit} bytes"),
        )
    }

    /// A panic while handling a request (a bug, never expected): logged here with its message; the
    /// caller gets a 500 problem and the process serves on (`CatchPanicLayer`; no lock the handler held
    /// stays poisoned for others: shared state recovers from poisoning or never panics under its lock).
    pub fn panicked(panic: Box<dyn std::any::Any + Send + 'static>) -> Self {
        let message = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic without a message");
        tracing::error!(panic = message, "a request handler panicked");
        metrics::counter!(HTTP_PANICS.name).increment(1);
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "the server failed on this request; it is logged",
        )
    }

    /// A database failure: logged here with its cause, reported to the caller without internals.
    pub fn database(error: &sqlx::Error) -> Self {
        tracing::error!(error = %error, "database request failed");
        let unavailable = matches!(
            error,
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::Tls(_)
        );
        if unavailable {
            Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "database_unavailable",
                "the database cannot be reached; retry later",
            )
        } else {
            Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "database_error",
                "the database refused the operation; nothing was written",
            )
        }
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// What went wrong, as the caller reads it (and the audit log records it).
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// 403: the credential is valid but does not reach this (a tenant key on another tenant's routes, or
    /// on the platform admin's).
    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", detail)
    }

    pub fn code(&self) -> &str {
        &self.code
    }
}

impl From<WriteError> for ApiError {
    fn from(error: WriteError) -> Self {
        match error {
            WriteError::SelfRelation(Act::Follow | Act::Unfollow) => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, "self_follow", error.to_string())
            }
            WriteError::SelfRelation(_) => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, "self_relation", error.to_string())
            }
            WriteError::Blocked => Self::new(StatusCode::FORBIDDEN, "blocked", error.to_string()),
            WriteError::AccountDeleted => Self::new(StatusCode::GONE, "account_deleted", error.to_string()),
            WriteError::AccountSuspended => Self::new(StatusCode::FORBIDDEN, "account_suspended", error.to_string()),
            // The policy's own code, in its namespace: it can never pass for one of the host's.
            WriteError::Refused { code, reason } => {
                Self { code: Cow::Owned(format!("policy.{code}")), ..Self::new(StatusCode::FORBIDDEN, "", reason) }
            }
            WriteError::PolicyUnavailable => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "relation_policy_unavailable",
                "the relation policy is failing and this tenant fails closed; retry later",
            ),
            WriteError::Contended => Self::new(StatusCode::CONFLICT, "write_contended", error.to_string()),
            WriteError::Database(e) => Self::database(&e),
        }
    }
}

impl From<crate::accounts::StartError> for ApiError {
    fn from(error: crate::accounts::StartError) -> Self {
        use crate::accounts::StartError;
        match error {
            StartError::Busy(_) => Self::new(StatusCode::CONFLICT, "job_running", error.to_string()),
            StartError::TooMany(_) => Self::new(StatusCode::TOO_MANY_REQUESTS, "too_many_jobs", error.to_string()),
            StartError::Refused(why) => Self::new(StatusCode::CONFLICT, "account_state", why),
            StartError::Database(e) => Self::database(&e),
        }
    }
}

impl From<crate::transfer::import::ImportError> for ApiError {
    fn from(error: crate::transfer::import::ImportError) -> Self {
        use crate::transfer::import::ImportError;
        match error {
            // The body's own error (too large, cut off) is the caller's to read.
            ImportError::Invalid { .. } | ImportError::Read(_) => {
                Self::bad_request("invalid_import", crate::ops::observability::causes(&error))
            }
            ImportError::Running => Self::new(StatusCode::CONFLICT, "import_running", error.to_string()),
            ImportError::Lost => Self::new(StatusCode::CONFLICT, "import_stalled", error.to_string()),
            ImportError::Write(e) => e.into(),
            ImportError::Database(e) => Self::database(&e),
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> Self {
        Self::database(&error)
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        Self::bad_request("invalid_query", rejection.body_text())
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        Self::bad_request("invalid_body", rejection.body_text())
    }
}

impl From<crate::cache::CacheError> for ApiError {
    fn from(error: crate::cache::CacheError) -> Self {
        tracing::error!(error = %crate::ops::observability::causes(&error), "the cache failed");
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "cache_unavailable", "the cache does not answer; try again")
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        Self::bad_request("invalid_path", rejection.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let problem = Problem {
            problem_type: format!("urn:strand:problem:{}", self.code),
            title: Cow::Borrowed(self.status.canonical_reason().unwrap_or("Error")),
            status: self.status.as_u16(),
            code: self.code,
            detail: self.detail,
        };
        let mut response = (self.status, axum::Json(problem)).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if let Some(wait) = self.retry_after {
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<RegistryError> for ApiError {
    fn from(error: RegistryError) -> Self {
        let detail = error.to_string();
        match error {
            RegistryError::Slot(SlotError::InvalidName(_)) => ApiError::bad_request("invalid_plugin_name", detail),
            RegistryError::Slot(SlotError::ReservedName(_)) => ApiError::bad_request("reserved_plugin_name", detail),
            RegistryError::LimitRefused(_) => ApiError::bad_request("limit_too_high", detail),
            RegistryError::InvalidRollout(_) => ApiError::bad_request("invalid_rollout", detail),
            RegistryError::InvalidReadable(_) => ApiError::bad_request("invalid_readable", detail),
            RegistryError::HistoryNotAProjector(_) => ApiError::bad_request("invalid_history", detail),
            RegistryError::NoSuchVersion { .. }
            | RegistryError::NotDeployed { .. }
            | RegistryError::NoRollout { .. } => ApiError::new(StatusCode::NOT_FOUND, "plugin_not_found", detail),
            RegistryError::Database(e) => ApiError::database(&e),
            RegistryError::TooManyProjectors { .. } => {
                ApiError::new(StatusCode::CONFLICT, "too_many_projectors", detail)
            }
            RegistryError::CompileTooSlow(_) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "compile_too_slow", detail)
            }
            RegistryError::Rejected(PluginError::NotAComponent(_)) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_component", detail)
            }
            RegistryError::Rejected(PluginError::WrongWorld { .. }) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "wrong_world", detail)
            }
            RegistryError::Rejected(host @ PluginError::Host { .. }) => {
                tracing::error!(error = %crate::ops::observability::causes(&host), "plugin host failure during a deploy");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "plugin_host_error", detail)
            }
            RegistryError::Rejected(_) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "conformance_failed", detail),
        }
    }
}

impl From<LagError> for ApiError {
    fn from(error: LagError) -> Self {
        match error {
            LagError::Database(e) => ApiError::database(&e),
            other => {
                tracing::warn!(error = %other, "cannot measure the pipeline lag");
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "lag_unavailable", other.to_string())
            }
        }
    }
}

impl From<TenantKeyError> for ApiError {
    fn from(error: TenantKeyError) -> Self {
        let detail = error.to_string();
        match error {
            TenantKeyError::InvalidName(_) => ApiError::bad_request("invalid_key_name", detail),
            TenantKeyError::Exists { .. } => ApiError::new(StatusCode::CONFLICT, "key_exists", detail),
            TenantKeyError::NotFound { .. } => ApiError::new(StatusCode::NOT_FOUND, "key_not_found", detail),
            TenantKeyError::Randomness(_) => {
                tracing::error!(error = %detail, "cannot issue a tenant key");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", detail)
            }
            TenantKeyError::Database(e) => ApiError::database(&e),
        }
    }
}

impl From<TenantJwtError> for ApiError {
    fn from(error: TenantJwtError) -> Self {
        let detail = error.to_string();
        match error {
            TenantJwtError::InvalidKid(_) => ApiError::bad_request("invalid_kid", detail),
            TenantJwtError::InvalidKey(_) => ApiError::bad_request("invalid_jwt_key", detail),
            TenantJwtError::TooMany(_) => ApiError::new(StatusCode::CONFLICT, "too_many_jwt_keys", detail),
            TenantJwtError::NotFound { .. } => ApiError::new(StatusCode::NOT_FOUND, "jwt_key_not_found", detail),
            TenantJwtError::Database(e) => ApiError::database(&e),
        }
    }
}
