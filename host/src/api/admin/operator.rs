//! Who calls the admin API: the platform admin's token, or a tenant key fenced to its tenant.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use super::*;
use crate::api::problem::ApiError;
use crate::api::AppState;
use crate::graph::TenantId;
use crate::tenancy::keys;

/// Who calls the admin API: the platform admin (the admin token), or a tenant's team with a tenant key,
/// which reaches only its own tenant's routes. Every handler takes one, so no route is left unguarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operator {
    Admin,
    TenantKey { tenant: TenantId, name: String },
}

impl Operator {
    /// As the audit log names it: `admin`, or `key:NAME`.
    pub fn actor(&self) -> String {
        match self {
            Operator::Admin => "admin".to_owned(),
            Operator::TenantKey { name, .. } => format!("key:{name}"),
        }
    }

    /// The tenant a tenant key is fenced into; `None` for the admin.
    pub fn own_tenant(&self) -> Option<&TenantId> {
        match self {
            Operator::Admin => None,
            Operator::TenantKey { tenant, .. } => Some(tenant),
        }
    }

    /// `raw` as a tenant this operator may act on; 403 for another tenant's, before anything else is
    /// looked at (so a key learns nothing of other tenants, not even whether their ids are valid).
    pub(super) fn reach(&self, raw: &str) -> Result<TenantId, ApiError> {
        match self.own_tenant() {
            Some(own) if own.as_str() != raw => Err(ApiError::Forbidden(format!("this key reaches only tenant {own}"))),
            _ => tenant(raw),
        }
    }

    /// Only the platform admin: the tenant list, issuing and revoking keys, the metrics.
    pub(in crate::api) fn admin_only(&self) -> Result<(), ApiError> {
        match self {
            Operator::Admin => Ok(()),
            Operator::TenantKey { .. } => {
                Err(ApiError::Forbidden("only the platform admin's token reaches this".to_owned()))
            }
        }
    }
}

impl FromRequestParts<AppState> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let Some(expected) = &state.admin_token else {
            return Err(ApiError::AdminDisabled);
        };
        let refused = || ApiError::InvalidAdminToken;
        // No credential is never compared to anything: an empty token cannot match (nor be configured).
        let presented = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .filter(|presented| !presented.is_empty())
            .ok_or_else(refused)?;
        if !expected.is_empty() && constant_time_eq(presented.as_bytes(), expected.as_bytes()) {
            return Ok(Operator::Admin);
        }
        if presented.starts_with(keys::KEY_PREFIX) {
            if let Some((tenant, name)) = keys::authenticate(&state.db, presented).await? {
                return Ok(Operator::TenantKey { tenant, name });
            }
        }
        Err(refused())
    }
}

/// Compares without an early exit, so response timing does not reveal how much of the token matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
