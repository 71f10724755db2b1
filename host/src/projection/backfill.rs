//! Backfill: replays the truth into a projector's space — every pair of a tenant, page by page, as a
//! snapshot event at its current version — while its builder holds the space's build lock (`build.rs`).
//! Per-pair floors (see `cache`) make the snapshot and the bus meet without a gap or a double count, whatever
//! the bus still retains: a bus event the snapshot covers is skipped, a later one applies (writes go on
//! meanwhile: they are later versions, or new pairs, and wait in the bus). Pages need no common snapshot:
//! each pair's row is consistent on its own.

use std::future::Future;

use sqlx::Row;

use std::sync::Arc;

use super::plugin::{PluginProjection, PluginProjectionError};
use crate::graph::{EventId, TenantId};
use crate::plugins::{Action, ActivePlugin, RelationEvent};

/// Pairs per page.
const PAGE: i64 = 500;

/// Replays every pair of `tenant` into `projection` as `plugin` projects it, reporting `(done, total)` pairs after each page (and
/// awaiting the report, so it may be written somewhere); returns how many pairs it replayed.
pub async fn backfill<F: Future<Output = ()>>(
    projection: &PluginProjection,
    tenant: &TenantId,
    plugin: &Arc<ActivePlugin>,
    mut progress: impl FnMut(u64, u64) -> F,
) -> Result<u64, PluginProjectionError> {
    let db = projection.db();
    let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM following WHERE tenant_id = ?")
        .bind(tenant.as_str())
        .fetch_one(db.reader())
        .await?;
    let (mut after_from, mut after_to, mut done) = (i64::MIN, i64::MIN, 0_u64);
    loop {
        let rows = sqlx::query(
            "SELECT from_user_id, to_user_id, rel_status, version, created_at, updated_at FROM following \
             WHERE tenant_id = ? AND (from_user_id > ? OR (from_user_id = ? AND to_user_id > ?)) \
             ORDER BY from_user_id, to_user_id LIMIT ?",
        )
        .bind(tenant.as_str())
        .bind(after_from)
        .bind(after_from)
        .bind(after_to)
        .bind(PAGE)
        .fetch_all(db.reader())
        .await?;
        let Some(last) = rows.last() else { return Ok(done) };
        (after_from, after_to) = (last.try_get(0)?, last.try_get(1)?);
        let pairs = rows
            .iter()
            .map(|row| {
                let (follower, followee, version): (i64, i64, i64) =
                    (row.try_get(0)?, row.try_get(1)?, row.try_get(3)?);
                let active = row.try_get::<i64, _>(2)? == 1;
                Ok(RelationEvent {
                    event_id: EventId { tenant: tenant.as_str(), from: follower, to: followee, version }.to_string(),
                    tenant: tenant.to_string(),
                    action: if active { Action::Follow } else { Action::Unfollow },
                    follower,
                    followee,
                    version,
                    occurred_at_ms: if active { row.try_get(4)? } else { row.try_get(5)? },
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        apply_page(projection, tenant, plugin, pairs.clone()).await?;
        done += pairs.len() as u64;
        progress(done, total.max(0) as u64).await;
    }
}

/// Applies one page; a pair the projector refuses (a poison event) is logged and left out — its bus events
/// are then applied, or dead-lettered, by the live worker like any other — and the rest is applied.
async fn apply_page(
    projection: &PluginProjection,
    tenant: &TenantId,
    plugin: &Arc<ActivePlugin>,
    mut pairs: Vec<RelationEvent>,
) -> Result<(), PluginProjectionError> {
    loop {
        match projection.apply_snapshot(tenant, plugin, &pairs).await {
            Err(PluginProjectionError::Unprojectable(poison)) => {
                tracing::error!(projector = %projection.plugin(), error = %poison, "backfill leaves out a pair the projector refuses");
                let before = pairs.len();
                pairs.retain(|p| p.event_id != poison.event_id);
                if pairs.len() == before {
                    return Err(PluginProjectionError::Unprojectable(poison));
                }
            }
            other => return other,
        }
    }
}
