//! Tenant keys: credentials the platform admin issues to a tenant's team, so that the team deploys and
//! watches its own plugins without the admin token. The secret is shown once, at creation; only its
//! SHA-256 is stored (a leaked table grants nothing), and a key is revoked by deleting it.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use sqlx::Row;
use utoipa::ToSchema;

use crate::db::Database;
use crate::graph::TenantId;
use crate::util::hashing::hex_sha256;
use crate::util::time::{now_ms, rfc3339_millis};

/// Every tenant key starts with it, so a key is told from the admin token (and found by secret scanners).
pub const KEY_PREFIX: &str = "stk_";

/// A key as listed: never its secret.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TenantKey {
    pub tenant: String,
    pub name: String,
    pub created_at: String,
    /// When a request last authenticated with it; `null` if never.
    pub last_used_at: Option<String>,
}

/// A key just created, with the secret this one answer shows.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct IssuedKey {
    #[serde(flatten)]
    pub key: TenantKey,
    /// `stk_…`: send it as `Authorization: Bearer`; it is not stored and cannot be shown again.
    pub secret: String,
}

/// Why a key could not be issued.
#[derive(Debug, thiserror::Error)]
pub enum TenantKeyError {
    #[error("invalid key name: {0:?} is not 1 to 64 characters of a-z, 0-9, -")]
    InvalidName(String),
    #[error("tenant {tenant} already has a key named {name:?}")]
    Exists { tenant: String, name: String },
    #[error("tenant {tenant} has no key named {name:?}")]
    NotFound { tenant: String, name: String },
    #[error("no randomness for a secret")]
    Randomness(#[source] getrandom::Error),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Creates a key `name` for `tenant`.
pub async fn issue(db: &Database, tenant: &TenantId, name: &str) -> Result<IssuedKey, TenantKeyError> {
    let valid = (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid {
        return Err(TenantKeyError::InvalidName(name.to_owned()));
    }
    let mut random = [0_u8; 32];
    getrandom::fill(&mut random).map_err(TenantKeyError::Randomness)?;
    let secret = format!("{KEY_PREFIX}{}", URL_SAFE_NO_PAD.encode(random));
    let created = now_ms();
    let inserted =
        sqlx::query("INSERT INTO tenant_keys (tenant_id, name, secret_sha256, created_at) VALUES (?, ?, ?, ?)")
            .bind(tenant.as_str())
            .bind(name)
            .bind(hex_sha256(secret.as_bytes()))
            .bind(created)
            .execute(db.writer())
            .await;
    match inserted {
        Ok(_) => {}
        // The primary key keeps one key per name, also when two nodes create it at once.
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
            return Err(TenantKeyError::Exists { tenant: tenant.to_string(), name: name.to_owned() })
        }
        Err(e) => return Err(e.into()),
    }
    let key = TenantKey {
        tenant: tenant.to_string(),
        name: name.to_owned(),
        created_at: rfc3339_millis(created),
        last_used_at: None,
    };
    Ok(IssuedKey { key, secret })
}

/// `tenant`'s keys, by name.
pub async fn list(db: &Database, tenant: &TenantId) -> Result<Vec<TenantKey>, sqlx::Error> {
    let rows = sqlx::query("SELECT name, created_at, last_used_at FROM tenant_keys WHERE tenant_id = ? ORDER BY name")
        .bind(tenant.as_str())
        .fetch_all(db.reader())
        .await?;
    rows.iter()
        .map(|row| {
            Ok(TenantKey {
                tenant: tenant.to_string(),
                name: row.try_get(0)?,
                created_at: rfc3339_millis(row.try_get(1)?),
                last_used_at: row.try_get::<Option<i64>, _>(2)?.map(rfc3339_millis),
            })
        })
        .collect()
}

/// Deletes `tenant`'s key `name`: requests with it are refused from now on.
pub async fn revoke(db: &Database, tenant: &TenantId, name: &str) -> Result<(), TenantKeyError> {
    let deleted = sqlx::query("DELETE FROM tenant_keys WHERE tenant_id = ? AND name = ?")
        .bind(tenant.as_str())
        .bind(name)
        .execute(db.writer())
        .await?;
    if deleted.rows_affected() == 0 {
        return Err(TenantKeyError::NotFound { tenant: tenant.to_string(), name: name.to_owned() });
    }
    Ok(())
}

/// How stale a key's `last_used_at` may be: it is written at most this often per key, so a team polling the
/// admin API does not take the database's writer (SQLite has one) from every tenant's follows.
const LAST_USED_RESOLUTION_MS: i64 = 60_000;

/// The tenant and name of the key whose secret is `secret`, recording its use (to the minute); `None` for no
/// such key.
pub async fn authenticate(db: &Database, secret: &str) -> Result<Option<(TenantId, String)>, sqlx::Error> {
    let hash = hex_sha256(secret.as_bytes());
    let row = sqlx::query("SELECT tenant_id, name, last_used_at FROM tenant_keys WHERE secret_sha256 = ?")
        .bind(&hash)
        .fetch_optional(db.reader())
        .await?;
    let Some(row) = row else { return Ok(None) };
    let (tenant, name, last_used): (String, String, Option<i64>) = (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
    let Ok(tenant) = tenant.parse::<TenantId>() else {
        tracing::error!(%tenant, "a tenant key names an invalid tenant id; refused");
        return Ok(None);
    };
    let now = now_ms();
    if last_used.is_none_or(|at| now - at >= LAST_USED_RESOLUTION_MS) {
        sqlx::query("UPDATE tenant_keys SET last_used_at = ? WHERE secret_sha256 = ?")
            .bind(now)
            .bind(&hash)
            .execute(db.writer())
            .await?;
    }
    Ok(Some((tenant, name)))
}
