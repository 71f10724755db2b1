//! Each user's follow counts in the truth (`follow_counts`): every transaction that makes a follow begin or
//! end — a single write, an account job's batch, an import's batch — adds its changes here before it commits,
//! so the counts a relation policy decides on are exact at the moment of the decision, and a count is one
//! primary-key lookup however many follows it counts.

use std::collections::BTreeMap;

use super::edge::RelStatus;
use crate::db::DatabaseKind;
use crate::graph::{TenantId, UserId};

/// A user's follow counts as the truth holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FollowCounts {
    pub followings: i64,
    pub followers: i64,
}

/// The changes to the counts one transaction makes, by user.
#[derive(Debug, Default)]
pub struct CountChanges(BTreeMap<i64, FollowCounts>);

impl CountChanges {
    /// The follow edge `from → to` went from status `was` to `now`: a follow that begins or ends moves
    /// `from`'s followings and `to`'s followers; a request or an ending of one moves nothing.
    pub fn edge(&mut self, from: i64, to: i64, was: RelStatus, now: RelStatus) {
        let step = match (was == RelStatus::Active, now == RelStatus::Active) {
            (false, true) => 1,
            (true, false) => -1,
            _ => return,
        };
        self.0.entry(from).or_default().followings += step;
        self.0.entry(to).or_default().followers += step;
    }

    /// The statement adding the changes (one multi-row upsert, its rows in user order: every transaction
    /// locks counts in the same order), or nothing when there are none.
    pub fn statement(&self, kind: DatabaseKind, tenant: &TenantId) -> String {
        let rows: Vec<String> = self
            .0
            .iter()
            .filter(|(_, change)| **change != FollowCounts::default())
            .map(|(user, change)| format!("('{tenant}', {user}, {}, {})", change.followings, change.followers))
            .collect();
        if rows.is_empty() {
            return String::new();
        }
        let add = |c: &str| format!("{c} = {c} + {}", kind.inserted(c));
        format!(
            "INSERT INTO follow_counts (tenant_id, user_id, followings, followers) VALUES {}{}{}, {};",
            rows.join(", "),
            kind.on_conflict_update(&["tenant_id", "user_id"]),
            add("followings"),
            add("followers")
        )
    }
}

/// The statement creating `users`' counts rows (at zero) when missing, in user order, before a transaction
/// locks them: a locking read of a missing row would take a gap lock (MySQL), which two first follows — or
/// the next tenant's keys — would then wait on; a row that exists is locked alone. `None` on SQLite.
pub fn create(kind: DatabaseKind, tenant: &TenantId, users: [UserId; 2]) -> Option<String> {
    let mut users = users.map(UserId::get);
    users.sort_unstable();
    kind.has_row_locks().then(|| {
        format!(
            "INSERT INTO follow_counts (tenant_id, user_id, followings, followers) VALUES ('{tenant}', {}, 0, 0), \
             ('{tenant}', {}, 0, 0){}followings = followings;",
            users[0],
            users[1],
            kind.on_conflict_update(&["tenant_id", "user_id"])
        )
    })
}

/// The `SELECT` reading `users`' counts as result rows `label` in a relation transaction's eight columns
/// (label, followings, followers, user, then padding); `locked`: exclusively, since the transaction that
/// decides on them may change them (no shared-to-exclusive upgrade to deadlock on).
pub fn read(kind: DatabaseKind, tenant: &TenantId, label: usize, users: [UserId; 2], locked: bool) -> String {
    let lock = if locked { kind.row_lock(false) } else { "" };
    format!(
        "SELECT {label}, followings, followers, user_id, NULL, 0, 0, 0 FROM follow_counts WHERE tenant_id = \
         '{tenant}' AND user_id IN ({}, {}){lock}",
        users[0], users[1]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_follows_that_begin_or_end_count() {
        let mut changes = CountChanges::default();
        changes.edge(1, 2, RelStatus::None, RelStatus::Active);
        changes.edge(1, 3, RelStatus::Requested, RelStatus::None);
        changes.edge(3, 2, RelStatus::None, RelStatus::Requested);
        changes.edge(4, 2, RelStatus::Active, RelStatus::None);
        changes.edge(5, 6, RelStatus::Active, RelStatus::Active);
        let tenant: TenantId = "acme".parse().unwrap();
        let sql = changes.statement(DatabaseKind::Sqlite, &tenant);
        assert!(sql.contains("VALUES ('acme', 1, 1, 0), ('acme', 4, -1, 0) ON CONFLICT"), "{sql}");
        assert!(sql.contains("followings = followings + excluded.followings"), "{sql}");
        assert!(!sql.contains("'acme', 2,"), "user 2's followers +1 -1 cancel out: {sql}");
        assert_eq!(CountChanges::default().statement(DatabaseKind::MySql, &tenant), "");
    }
}
