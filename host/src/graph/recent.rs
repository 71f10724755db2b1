//! A user's newest relations, for support staff: the pairs around the user whose edge began most recently —
//! follows either way (held, requested or ended), the user's blocks and mutes — each with its state now,
//! version and last change. Read from the truth's list indexes (ordered by when an edge began, not when it
//! last changed: an old follow ended today shows while it is among the newest ended ones), a bounded number
//! of rows whatever the user's follower count.

use sqlx::Row;

use super::write::edge::RelStatus;
use super::{TenantId, UserId};
use crate::db::Database;
use crate::outbox::Relation;

/// One pair's latest change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentChange {
    pub relation: Relation,
    pub from: i64,
    pub to: i64,
    /// Where the edge stands now (an ended follow is `None`).
    pub status: RelStatus,
    /// How many real changes the pair has seen.
    pub version: i64,
    pub updated_at_ms: i64,
}

/// The index ranges read: (table, the user's column, the relation).
const RANGES: [(&str, &str, Relation); 4] = [
    ("following", "from_user_id", Relation::Follow),
    ("following", "to_user_id", Relation::Follow),
    ("blocks", "from_user_id", Relation::Block),
    ("mutes", "from_user_id", Relation::Mute),
];

/// `user`'s `limit` newest relations: the newest `limit` pairs (by their latest start) of each index range
/// and state, merged by when they last changed, newest first.
pub async fn recent_changes(
    db: &Database,
    tenant: &TenantId,
    user: UserId,
    limit: u32,
) -> Result<Vec<RecentChange>, sqlx::Error> {
    let mut changes = Vec::new();
    for (table, owner, relation) in RANGES {
        for status in [RelStatus::None, RelStatus::Active, RelStatus::Requested] {
            if status == RelStatus::Requested && relation != Relation::Follow {
                continue;
            }
            let sql = format!(
                "SELECT from_user_id, to_user_id, version, updated_at FROM {table} \
                 WHERE tenant_id = ? AND {owner} = ? AND rel_status = {status} \
                 ORDER BY created_at DESC LIMIT ?"
            );
            let query = sqlx::query(&sql).bind(tenant.as_str()).bind(user.get()).bind(i64::from(limit));
            for row in query.fetch_all(db.reader()).await? {
                let version: i64 = row.try_get(2)?;
                if version == 0 {
                    // A block's flag on a pair that never followed: no change of the follow. Skipped after
                    // the read, not in it, so that the read stays `limit` rows.
                    continue;
                }
                changes.push(RecentChange {
                    relation,
                    from: row.try_get(0)?,
                    to: row.try_get(1)?,
                    status,
                    version,
                    updated_at_ms: row.try_get(3)?,
                });
            }
        }
    }
    changes.sort_by_key(|change| std::cmp::Reverse(change.updated_at_ms));
    changes.truncate(limit as usize);
    Ok(changes)
}
