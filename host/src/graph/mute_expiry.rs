//! Mutes end by themselves: a mute whose time ran out is ended by the host with its `unmute` event, so a
//! projection of mutes needs no clock. Reads already treat a mute past its end as ended; this makes the
//! truth and the event stream say so too. Every serving node sweeps; two ending the same mute is harmless
//! (the second finds it ended, under the same lock).

use crate::db::Database;
use crate::graph::write::edge::ACTIVE;
use crate::graph::write::{change, Act, RelationCommand, WriteError};
use crate::graph::{TenantId, UserId};
use crate::util::time::now_ms;

/// Most mutes ended per sweep (the rest at the next).
pub const BATCH: i64 = 500;
/// How often a node sweeps: a mute's `unmute` comes at most this late.
pub const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Ends up to [`BATCH`] mutes whose time ran out, oldest end first; how many.
pub async fn end_expired(db: &Database) -> Result<usize, WriteError> {
    let now = now_ms();
    let expired: Vec<(String, i64, i64)> = sqlx::query_as(&format!(
        "SELECT tenant_id, from_user_id, to_user_id FROM mutes WHERE rel_status = {ACTIVE} AND expires_at <= ? \
         ORDER BY expires_at LIMIT ?",
    ))
    .bind(now)
    .bind(BATCH)
    .fetch_all(db.reader())
    .await?;
    let mut ended = 0;
    for (tenant, from, to) in expired {
        let (Ok(tenant), Ok(from), Ok(to)) = (tenant.parse::<TenantId>(), UserId::try_from(from), UserId::try_from(to))
        else {
            tracing::warn!(%tenant, from, to, "a mute with an invalid id; left as it is");
            continue;
        };
        if change(db, RelationCommand::new(&tenant, from, Act::ExpireMute, to)).await?.changed {
            ended += 1;
        }
    }
    Ok(ended)
}
