//! `strand rebuild <projection>`: derives a projection again from the truth, while its workers keep
//! running. The `follower` table is replaced in one transaction (later events are newer and apply, older
//! ones are gated out). A projector's space of every tenant that uses it is built again (`build.rs`): under
//! its build lock, the workers wait for each tenant's new space, then go on where they were.

use super::build::Rebuild;
use super::plugin::PluginProjection;
use super::projector::PluginProjectionError;
use crate::db::Database;
use crate::graph::tenants_with_pairs;
use crate::graph::TenantId;

/// Why a rebuild stopped; running it again is safe.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Projection(#[from] PluginProjectionError),
    #[error("tenant {0:?} in the truth is not a valid tenant id")]
    Tenant(String),
    /// Some tenants' spaces were not rebuilt (their versions declare history and the log cannot replay
    /// it); every other tenant's were.
    #[error("{rebuilt} pairs rebuilt; refused for {}: {}", refused.len(), refused.join("; "))]
    Refused { rebuilt: u64, refused: Vec<String> },
}

/// Replaces the `follower` table with the truth's pairs; returns how many rows it holds.
pub async fn rebuild_follower(db: &Database) -> Result<u64, RebuildError> {
    let mut tx = db.writer().begin().await?;
    sqlx::query("DELETE FROM follower").execute(&mut *tx).await?;
    let rows = sqlx::query(
        "INSERT INTO follower (tenant_id, to_user_id, from_user_id, rel_status, version, created_at, updated_at) \
         SELECT tenant_id, to_user_id, from_user_id, rel_status, version, created_at, updated_at FROM following \
         WHERE version > 0",
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    tx.commit().await?;
    Ok(rows)
}

/// Builds `projection`'s space of every tenant in the truth that uses it, reporting `(tenant, done, total)`;
/// returns how many pairs were replayed. A tenant whose build is refused (`NeedsHistory`) keeps its space,
/// and the others are rebuilt all the same: one tenant's declaration does not stop theirs.
pub async fn rebuild_projector(
    projection: &PluginProjection,
    mut progress: impl FnMut(&str, u64, u64),
) -> Result<u64, RebuildError> {
    let (mut rebuilt, mut refused) = (0, Vec::new());
    for tenant in tenants_with_pairs(projection.db()).await? {
        let tenant_id: TenantId = tenant.parse().map_err(|_| RebuildError::Tenant(tenant.clone()))?;
        let Some(plugin) = projection.active(&tenant_id) else { continue };
        match projection.build(&tenant_id, &plugin, Rebuild::Always, |done, total| progress(&tenant, done, total)).await
        {
            Ok(pairs) => rebuilt += pairs,
            Err(error @ PluginProjectionError::NeedsHistory { .. }) => {
                tracing::error!(%tenant, %error, "not rebuilt");
                refused.push(format!("tenant {tenant}: {error}"));
            }
            Err(error) => return Err(error.into()),
        }
    }
    match refused.is_empty() {
        true => Ok(rebuilt),
        false => Err(RebuildError::Refused { rebuilt, refused }),
    }
}
