//! Each tenant at a glance, for the console's list of tenants: its writes and denials per second and its
//! dead letters (this node's, from the history), its parked rows and events, and how full its deployed
//! projectors' spaces are. The list takes a few grouped reads for all tenants together, not a round of
//! reads per tenant; one tenant's figures read only its own rows.

use std::collections::HashMap;

use futures::StreamExt;

use serde::Serialize;
use utoipa::ToSchema;

use crate::cache::Cache;
use crate::db::Database;
use crate::graph::TenantId;
use crate::ops::history::tenant_rates;
use crate::ops::observability::causes;
use crate::plugins::PluginRegistry;
use crate::upkeep::lag::parked_rows;
use crate::util::time::rfc3339_millis;

/// One tenant's figures.
#[derive(Debug, Serialize, ToSchema)]
pub struct TenantFigures {
    pub tenant: String,
    /// Writes its rate limiter decided per second on the answering node, over the last 10 s.
    pub writes_per_second: f64,
    /// Of which denied.
    pub denied_per_second: f64,
    /// Outbox rows the relay parked for it (its router over budget, a destination refused).
    pub parked_rows: i64,
    /// Events the projections parked for it (its projector failing, over budget, its space at quota).
    pub parked_events: i64,
    /// When its oldest parked row or event was parked (RFC 3339): how long it has been held back.
    pub oldest_parked_at: Option<String>,
    /// Its events the answering node's workers dead-lettered since the node started (a running total: the
    /// dead-letter topic keeps them; see the `StrandDeadLetters` alert for new ones).
    pub dead_letters: f64,
    /// The fullest of its deployed projectors' spaces, as a share (0-1) of the space quota's keys or
    /// bytes; `null` with no deployed projector, or when the cache does not answer.
    pub quota_use: Option<f64>,
}

/// How many tenants' spaces are read at once for the list's quota use.
const QUOTA_READS: usize = 8;

/// The figures of each of `tenants`, in their order.
pub async fn tenant_figures(
    db: &Database,
    cache: &Cache,
    plugins: &PluginRegistry,
    tenants: &[String],
) -> Result<Vec<TenantFigures>, sqlx::Error> {
    let rates = tenant_rates();
    let relay = parked_by_tenant(db, "relay_parked").await?;
    let projections = parked_by_tenant(db, "projection_parked").await?;
    let quotas: Vec<Option<f64>> = futures::stream::iter(tenants.iter().cloned())
        .map(|tenant| async move { quota_use(cache, plugins, &tenant).await })
        .buffered(QUOTA_READS)
        .collect()
        .await;
    let figures = tenants.iter().zip(quotas).map(|(tenant, quota_use)| {
        let rate = rates.get(tenant).copied().unwrap_or_default();
        let (parked_rows, relay_oldest) = relay.get(tenant).copied().unwrap_or_default();
        let (parked_events, projection_oldest) = projections.get(tenant).copied().unwrap_or_default();
        let oldest = [relay_oldest, projection_oldest].into_iter().flatten().min();
        TenantFigures {
            tenant: tenant.clone(),
            writes_per_second: rate.writes_per_second,
            denied_per_second: rate.denied_per_second,
            parked_rows,
            parked_events,
            oldest_parked_at: oldest.map(rfc3339_millis),
            dead_letters: rate.dead_letters,
            quota_use,
        }
    });
    Ok(figures.collect())
}

/// One tenant's figures, from its own parked rows and events (read by their tenant's indexes).
pub async fn one_tenant_figures(
    db: &Database,
    cache: &Cache,
    plugins: &PluginRegistry,
    tenant: &TenantId,
) -> Result<TenantFigures, sqlx::Error> {
    let rate = tenant_rates().get(tenant.as_str()).copied().unwrap_or_default();
    let parked = parked_rows(db, tenant.as_str()).await?;
    let oldest =
        parked.projections.iter().filter_map(|p| p.oldest_parked_at.clone()).chain(parked.oldest_parked_at).min();
    Ok(TenantFigures {
        tenant: tenant.to_string(),
        writes_per_second: rate.writes_per_second,
        denied_per_second: rate.denied_per_second,
        parked_rows: parked.rows,
        parked_events: parked.projections.iter().map(|p| p.events).sum(),
        oldest_parked_at: oldest,
        dead_letters: rate.dead_letters,
        quota_use: quota_use(cache, plugins, tenant.as_str()).await,
    })
}

/// Per tenant: how many entries `table` holds and when the oldest was parked.
async fn parked_by_tenant(db: &Database, table: &str) -> Result<HashMap<String, (i64, Option<i64>)>, sqlx::Error> {
    let sql = format!("SELECT tenant_id, COUNT(*), MIN(parked_at) FROM {table} GROUP BY tenant_id");
    let rows: Vec<(String, i64, Option<i64>)> = sqlx::query_as(&sql).fetch_all(db.reader()).await?;
    Ok(rows.into_iter().map(|(tenant, count, oldest)| (tenant, (count, oldest))).collect())
}

/// The fullest share of the quota among `tenant`'s deployed projectors' spaces (bundled ones have none).
async fn quota_use(cache: &Cache, plugins: &PluginRegistry, tenant: &str) -> Option<f64> {
    let quota = cache.quota();
    let id: TenantId = tenant.parse().ok()?;
    let mut fullest = None;
    for projector in plugins.projectors(&id).iter().filter(|p| p.version > 0) {
        let space = crate::cache::Space { tenant, plugin: &projector.name, version: projector.version };
        match cache.usage(space).await {
            Ok(usage) => {
                let share =
                    (usage.keys.max(0) as f64 / quota.keys as f64).max(usage.bytes.max(0) as f64 / quota.bytes as f64);
                fullest = Some(fullest.map_or(share, |f: f64| f.max(share)));
            }
            Err(e) => {
                let error = causes(&e);
                tracing::warn!(%tenant, %error, "cannot read a space's usage for the tenants list");
                return None;
            }
        }
    }
    fullest
}
