//! `strand rebuild <projection>`: derives a projection again from the truth. The `follower` table is
//! replaced in one transaction (its worker may keep running: later events are newer and apply, older ones
//! are gated out). A projector's Redis data is deleted for every tenant and backfilled; stop that
//! projector's workers first, so that no event lands between the deletion and the backfill — when they
//! restart, bus events the backfill covers are skipped by the pair floors.

use futures::StreamExt;
use redis::AsyncCommands;

use super::backfill::{backfill, BackfillError};
use super::cached_reads::mark_ready;
use super::plugin::PluginProjection;
use crate::graph::{Database, TenantId};

/// Why a rebuild stopped; running it again is safe.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
    #[error("Redis failed: {0}")]
    Redis(#[from] redis::RedisError),
    #[error(transparent)]
    Backfill(#[from] BackfillError),
    #[error("tenant {0:?} in the truth is not a valid tenant id")]
    Tenant(String),
}

/// Replaces the `follower` table with the truth's pairs; returns how many rows it holds.
pub async fn rebuild_follower(db: &Database) -> Result<u64, RebuildError> {
    let mut tx = db.writer().begin().await?;
    sqlx::query("DELETE FROM follower").execute(&mut *tx).await?;
    let rows = sqlx::query(
        "INSERT INTO follower (tenant_id, to_user_id, from_user_id, rel_status, version, created_at, updated_at) \
         SELECT tenant_id, to_user_id, from_user_id, rel_status, version, created_at, updated_at FROM following",
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    tx.commit().await?;
    Ok(rows)
}

/// Deletes `projection`'s data of every tenant in the truth, backfills it and marks it complete (per tenant,
/// then as a whole), reporting `(tenant, done, total)`; returns how many pairs were replayed.
pub async fn rebuild_projector(
    db: &Database,
    redis: &mut redis::aio::MultiplexedConnection,
    projection: &PluginProjection,
    mut progress: impl FnMut(&str, u64, u64),
) -> Result<u64, RebuildError> {
    let tenants: Vec<String> = sqlx::query_scalar("SELECT DISTINCT tenant_id FROM following ORDER BY tenant_id")
        .fetch_all(db.reader())
        .await?;
    let mut replayed = 0;
    for tenant in tenants {
        let tenant_id: TenantId = tenant.parse().map_err(|_| RebuildError::Tenant(tenant.clone()))?;
        let pattern = format!("{tenant}:{}:*", projection.plugin());
        let keys: Vec<Result<String, redis::RedisError>> =
            redis.scan_match::<_, String>(&pattern).await?.collect().await;
        let keys = keys.into_iter().collect::<Result<Vec<_>, _>>()?;
        for chunk in keys.chunks(500) {
            let _: () = redis.del(chunk).await?;
        }
        replayed += backfill(db, projection, &tenant_id, |done, total| {
            progress(&tenant, done, total);
            std::future::ready(())
        })
        .await?;
        mark_ready(redis, Some(&tenant_id), projection.plugin()).await?;
    }
    mark_ready(redis, None, projection.plugin()).await?;
    Ok(replayed)
}
