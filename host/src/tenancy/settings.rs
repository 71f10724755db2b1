//! Per-tenant settings an operator changes at runtime through the admin API, cached in memory: the
//! policies' failure modes, and the tenant's own JWT keys (`jwt_keys.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};
use sqlx::Row;
use utoipa::ToSchema;

use crate::db::Database;
use crate::graph::TenantId;
use crate::tenancy::jwt_keys::TenantJwtKeys;
use crate::util::time::now_ms;

/// What happens to a write when a tenant policy cannot decide: the rate limiter's policy or its bucket store,
/// or the relation policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FailureMode {
    /// Let the write through (availability first; the default).
    #[default]
    Open,
    /// Refuse the write with 503 (protection first).
    Closed,
}

/// A tenant's settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// The rate limiter's: open lets the write through, closed refuses it (503).
    pub rate_limit_failure: FailureMode,
    /// The relation policy's: open lets the host's rule decide (a private account's follow awaits approval),
    /// closed refuses the follow (503). Absent: the rate limiter's (what a tenant set before the setting
    /// existed keeps meaning what it meant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relation_policy_failure: Option<FailureMode>,
    /// Whether requests may pin a candidate policy version with `Strand-Pinned-Version` (test traffic for
    /// a canary, also one at 0%). Off by default: users cannot choose their policy.
    #[serde(default)]
    pub allow_pinned_versions: bool,
}

/// Every tenant's settings, read from the database at start and on change.
pub struct TenantSettings {
    db: Database,
    cache: ArcSwap<HashMap<TenantId, TenantConfig>>,
    jwt_keys: Arc<TenantJwtKeys>,
    /// Held by a refresh from its read to its store and by a change from its write to its store, so a
    /// refresh that read the table before a change cannot put the old settings back over it.
    changes: tokio::sync::Mutex<()>,
}

impl TenantConfig {
    /// What a failing relation policy does: its own mode, else the rate limiter's.
    pub fn relation_policy_failure(&self) -> FailureMode {
        self.relation_policy_failure.unwrap_or(self.rate_limit_failure)
    }
}

impl TenantSettings {
    pub async fn load(db: Database) -> Result<Self, sqlx::Error> {
        let jwt_keys = Arc::new(TenantJwtKeys::new(db.clone()));
        let settings = Self { db, cache: ArcSwap::from_pointee(HashMap::new()), jwt_keys, changes: Default::default() };
        settings.refresh().await?;
        Ok(settings)
    }

    /// The tenants' own JWT keys (refreshed with the settings).
    pub fn jwt_keys(&self) -> &Arc<TenantJwtKeys> {
        &self.jwt_keys
    }

    /// Re-reads every tenant's settings and JWT keys: how changes made through another node reach this one.
    pub async fn refresh(&self) -> Result<(), sqlx::Error> {
        self.jwt_keys.refresh().await?;
        let _change = self.changes.lock().await;
        let rows = sqlx::query(
            "SELECT tenant_id, rate_limit_fail_closed, relation_policy_fail_closed, allow_pinned_versions \
             FROM tenant_settings",
        )
        .fetch_all(self.db.reader())
        .await?;
        let mut settings = HashMap::new();
        for row in rows {
            let tenant: String = row.try_get(0)?;
            let mode = |closed: i64| if closed == 1 { FailureMode::Closed } else { FailureMode::Open };
            let relation_policy: Option<i64> = row.try_get(2)?;
            match tenant.parse() {
                Ok(tenant) => {
                    let config = TenantConfig {
                        rate_limit_failure: mode(row.try_get(1)?),
                        relation_policy_failure: relation_policy.map(mode),
                        allow_pinned_versions: row.try_get::<i64, _>(3)? == 1,
                    };
                    settings.insert(tenant, config);
                }
                Err(e) => tracing::error!(error = %e, "ignoring tenant_settings row with an invalid tenant id"),
            }
        }
        self.cache.store(Arc::new(settings));
        Ok(())
    }

    pub fn get(&self, tenant: &TenantId) -> TenantConfig {
        self.cache.load().get(tenant).copied().unwrap_or_default()
    }

    pub async fn set(&self, tenant: &TenantId, config: TenantConfig) -> Result<(), sqlx::Error> {
        let _change = self.changes.lock().await;
        let mut tx = self.db.writer().begin().await?;
        sqlx::query("DELETE FROM tenant_settings WHERE tenant_id = ?").bind(tenant.as_str()).execute(&mut *tx).await?;
        sqlx::query(
            "INSERT INTO tenant_settings (tenant_id, rate_limit_fail_closed, relation_policy_fail_closed, \
             allow_pinned_versions, updated_at) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(tenant.as_str())
        .bind(i64::from(config.rate_limit_failure == FailureMode::Closed))
        .bind(config.relation_policy_failure.map(|mode| i64::from(mode == FailureMode::Closed)))
        .bind(i64::from(config.allow_pinned_versions))
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        self.cache.rcu(|current| {
            let mut next = HashMap::clone(current);
            next.insert(tenant.clone(), config);
            next
        });
        Ok(())
    }

    /// Every tenant the deployment knows: with follows, deployed plugins or settings.
    pub async fn known(&self) -> Result<Vec<String>, sqlx::Error> {
        sqlx::query_scalar(
            // DISTINCT on the primary key's first column: a loose index scan on MySQL/MariaDB, one entry per
            // tenant read, not every pair.
            "SELECT DISTINCT tenant_id FROM following UNION SELECT tenant_id FROM plugins \
             UNION SELECT tenant_id FROM tenant_settings ORDER BY tenant_id",
        )
        .fetch_all(self.db.reader())
        .await
    }
}
