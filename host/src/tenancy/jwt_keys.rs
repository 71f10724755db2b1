//! A tenant's own token verification: its identity provider's HS256 secret or RSA/EC public key, with the
//! issuer and audience its tokens carry. A token whose `tenant` claim names a tenant with keys here verifies
//! only with them — never with the deployment's global key or another tenant's — so one tenant's leaked
//! secret cannot mint tokens for another. Two keys at once (chosen by the token's `kid`) let a tenant rotate
//! without downtime. Read from the database at start and every `refresh_ms`, like plugins and settings.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::{Deserialize, Serialize};
use sqlx::Row;
use utoipa::ToSchema;

use crate::config::MIN_SECRET_BYTES;
use crate::db::Database;
use crate::graph::TenantId;
use crate::util::time::{now_ms, rfc3339_millis};

/// Keys a tenant may hold at once: the current one and the next (or the previous).
pub const MAX_KEYS_PER_TENANT: usize = 2;

crate::str_enum! {
    /// The algorithms a tenant's key may be for.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum JwtAlgorithm("JWT algorithm") {
        HS256 = "HS256",
        RS256 = "RS256",
        ES256 = "ES256",
    }
}

impl JwtAlgorithm {
    fn algorithm(self) -> Algorithm {
        match self {
            JwtAlgorithm::HS256 => Algorithm::HS256,
            JwtAlgorithm::RS256 => Algorithm::RS256,
            JwtAlgorithm::ES256 => Algorithm::ES256,
        }
    }
}

/// A key as a tenant registers it.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JwtKeySpec {
    pub algorithm: JwtAlgorithm,
    /// The HS256 secret (at least 32 bytes), or the RSA / EC P-256 public key in PEM.
    pub key: String,
    /// Required `iss` of the tenant's tokens, if any.
    pub issuer: Option<String>,
    /// Required `aud` of the tenant's tokens, if any.
    pub audience: Option<String>,
}

/// A registered key as listed: never the key material.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JwtKeyInfo {
    pub kid: String,
    pub algorithm: JwtAlgorithm,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    pub created_at: String,
}

/// A key ready to verify with.
pub struct TenantVerifier {
    pub kid: String,
    pub algorithm: Algorithm,
    pub key: DecodingKey,
    pub issuer: Option<String>,
    pub audience: Option<String>,
}

/// Why a key was refused.
#[derive(Debug, thiserror::Error)]
pub enum TenantJwtError {
    #[error("invalid kid {0:?}: 1 to 64 characters of A-Z a-z 0-9 . _ -")]
    InvalidKid(String),
    #[error("invalid key: {0}")]
    InvalidKey(String),
    #[error("tenant {0} already has {MAX_KEYS_PER_TENANT} keys: remove one before adding another")]
    TooMany(String),
    #[error("tenant {tenant} has no key {kid:?}")]
    NotFound { tenant: String, kid: String },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Every tenant's own keys, cached.
pub struct TenantJwtKeys {
    db: Database,
    verifiers: ArcSwap<HashMap<TenantId, Arc<[TenantVerifier]>>>,
    /// One refresh at a time, from its read to its store: one that read before a change cannot store after
    /// the refresh that follows the change.
    refreshing: tokio::sync::Mutex<()>,
}

impl TenantJwtKeys {
    /// None yet: [`TenantJwtKeys::refresh`] reads them.
    pub fn new(db: Database) -> Self {
        Self { db, verifiers: ArcSwap::from_pointee(HashMap::new()), refreshing: Default::default() }
    }

    /// `tenant`'s keys, if it registered any (then only they verify its tokens).
    pub fn of(&self, tenant: &TenantId) -> Option<Arc<[TenantVerifier]>> {
        self.verifiers.load().get(tenant).cloned()
    }

    /// Re-reads every tenant's keys: how a key registered through another node reaches this one.
    pub async fn refresh(&self) -> Result<(), sqlx::Error> {
        let _one_at_a_time = self.refreshing.lock().await;
        let rows = sqlx::query(
            "SELECT tenant_id, kid, algorithm, key_material, issuer, audience FROM tenant_jwt_keys ORDER BY tenant_id, kid",
        )
        .fetch_all(self.db.reader())
        .await?;
        let mut by_tenant: HashMap<TenantId, Vec<TenantVerifier>> = HashMap::new();
        for row in rows {
            let (tenant, kid): (String, String) = (row.try_get(0)?, row.try_get(1)?);
            let (algorithm, key): (String, String) = (row.try_get(2)?, row.try_get(3)?);
            let (issuer, audience) = (row.try_get(4)?, row.try_get(5)?);
            let spec = match algorithm.parse() {
                Ok(algorithm) => {
                    verifier(&kid, &JwtKeySpec { algorithm, key, issuer, audience }).map_err(|e| e.to_string())
                }
                Err(unknown) => Err(unknown.to_string()),
            };
            let tenant = match tenant.parse::<TenantId>() {
                Ok(tenant) => tenant,
                Err(error) => {
                    tracing::error!(%error, "ignoring a tenant JWT key of an invalid tenant id");
                    continue;
                }
            };
            // The tenant is entered even when its key cannot be used: with no usable key its tokens are
            // refused (fail closed), never verified with the global key instead.
            let verifiers = by_tenant.entry(tenant).or_default();
            match spec {
                Ok(verifier) => verifiers.push(verifier),
                Err(error) => {
                    tracing::error!(%kid, %error, "a stored tenant JWT key cannot be used; the tenant's tokens with it are refused")
                }
            }
        }
        self.verifiers.store(Arc::new(by_tenant.into_iter().map(|(t, v)| (t, v.into())).collect()));
        Ok(())
    }

    /// Registers (or replaces) `tenant`'s key `kid`.
    pub async fn set(&self, tenant: &TenantId, kid: &str, spec: &JwtKeySpec) -> Result<(), TenantJwtError> {
        verifier(kid, spec)?;
        let mut tx = self.db.writer().begin().await?;
        let others: Vec<String> =
            sqlx::query_scalar("SELECT kid FROM tenant_jwt_keys WHERE tenant_id = ? AND kid <> ?")
                .bind(tenant.as_str())
                .bind(kid)
                .fetch_all(&mut *tx)
                .await?;
        if others.len() >= MAX_KEYS_PER_TENANT {
            return Err(TenantJwtError::TooMany(tenant.to_string()));
        }
        sqlx::query("DELETE FROM tenant_jwt_keys WHERE tenant_id = ? AND kid = ?")
            .bind(tenant.as_str())
            .bind(kid)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO tenant_jwt_keys (tenant_id, kid, algorithm, key_material, issuer, audience, created_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(tenant.as_str())
        .bind(kid)
        .bind(spec.algorithm.as_str())
        .bind(&spec.key)
        .bind(&spec.issuer)
        .bind(&spec.audience)
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(self.refresh().await?)
    }

    /// Removes `tenant`'s key `kid`; with none left, the tenant's tokens verify with the global key again.
    pub async fn remove(&self, tenant: &TenantId, kid: &str) -> Result<(), TenantJwtError> {
        let deleted = sqlx::query("DELETE FROM tenant_jwt_keys WHERE tenant_id = ? AND kid = ?")
            .bind(tenant.as_str())
            .bind(kid)
            .execute(self.db.writer())
            .await?;
        if deleted.rows_affected() == 0 {
            return Err(TenantJwtError::NotFound { tenant: tenant.to_string(), kid: kid.to_owned() });
        }
        Ok(self.refresh().await?)
    }

    /// `tenant`'s keys, without their material.
    pub async fn list(&self, tenant: &TenantId) -> Result<Vec<JwtKeyInfo>, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT kid, algorithm, issuer, audience, created_at FROM tenant_jwt_keys WHERE tenant_id = ? ORDER BY kid",
        )
        .bind(tenant.as_str())
        .fetch_all(self.db.reader())
        .await?;
        rows.iter()
            .map(|row| {
                Ok(JwtKeyInfo {
                    kid: row.try_get(0)?,
                    algorithm: row.try_get::<String, _>(1)?.parse()?,
                    issuer: row.try_get(2)?,
                    audience: row.try_get(3)?,
                    created_at: rfc3339_millis(row.try_get(4)?),
                })
            })
            .collect()
    }
}

/// Checks `spec` and builds its verifier: the key must parse as what its algorithm needs.
fn verifier(kid: &str, spec: &JwtKeySpec) -> Result<TenantVerifier, TenantJwtError> {
    let valid_kid = (1..=64).contains(&kid.len())
        && kid.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !valid_kid {
        return Err(TenantJwtError::InvalidKid(kid.to_owned()));
    }
    let key = match spec.algorithm {
        JwtAlgorithm::HS256 if spec.key.len() >= MIN_SECRET_BYTES => DecodingKey::from_secret(spec.key.as_bytes()),
        JwtAlgorithm::HS256 => {
            return Err(TenantJwtError::InvalidKey(format!("an HS256 secret needs at least {MIN_SECRET_BYTES} bytes")))
        }
        JwtAlgorithm::RS256 => DecodingKey::from_rsa_pem(spec.key.as_bytes())
            .map_err(|e| TenantJwtError::InvalidKey(format!("not an RSA public key in PEM: {e}")))?,
        JwtAlgorithm::ES256 => DecodingKey::from_ec_pem(spec.key.as_bytes())
            .map_err(|e| TenantJwtError::InvalidKey(format!("not an EC P-256 public key in PEM: {e}")))?,
    };
    Ok(TenantVerifier {
        kid: kid.to_owned(),
        algorithm: spec.algorithm.algorithm(),
        key,
        issuer: spec.issuer.clone(),
        audience: spec.audience.clone(),
    })
}
