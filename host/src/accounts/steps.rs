//! The job kinds and the steps of each, in order, and one batch of each: what `edges.rs` does to the account's
//! edges, or the traces of an erased account elsewhere in the host.

use sqlx::{Any, Transaction};

use super::edges::{self, FollowAction, Scope};
use super::rules::Side;
use crate::db::Database;
use crate::graph::{AccountState, TenantId, UserId};
use crate::outbox::Relation;

crate::str_enum! {
    /// What a job does to an account's relations.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum JobKind("account job kind") {
        /// Ends every relation of the account both ways, each with its event, then erases its rows.
        Delete = "delete",
        /// Hides its follows and requests both ways (each ends with its event), restorably.
        Suspend = "suspend",
        /// Brings back what its suspension hid and is still hidden.
        Restore = "restore",
        /// Its followers follow the destination instead (and, if asked, the destination follows whom it did).
        Move = "move",
    }
}

/// One step of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The account's follows and requests on one side ended, hidden or restored.
    Follows(Side, FollowAction),
    /// The blocks or mutes of the account on one side ended.
    EndRelations(Relation, Side),
    /// Every row of the account's relations erased.
    Erase,
    /// What else the host holds naming the account: sampled requests and follow attempts, plugin log lines
    /// about its edges.
    Traces,
    /// The account made active: a restore's account is active from its start; the step stays for restores
    /// started by an older node, whose account it makes active.
    Activate,
    /// The account's follows on one side moved to the destination.
    Move(Side),
}

/// The steps of `kind`, in order.
pub fn of(kind: JobKind, with_followings: bool) -> Vec<Step> {
    use FollowAction::*;
    use Side::*;
    match kind {
        JobKind::Delete => vec![
            Step::Follows(Incoming, End),
            Step::Follows(Outgoing, End),
            Step::EndRelations(Relation::Block, Outgoing),
            Step::EndRelations(Relation::Block, Incoming),
            Step::EndRelations(Relation::Mute, Outgoing),
            Step::EndRelations(Relation::Mute, Incoming),
            Step::Erase,
            Step::Traces,
        ],
        JobKind::Suspend => vec![Step::Follows(Incoming, Hide), Step::Follows(Outgoing, Hide)],
        JobKind::Restore => vec![Step::Follows(Incoming, Restore), Step::Follows(Outgoing, Restore), Step::Activate],
        JobKind::Move if with_followings => vec![Step::Move(Incoming), Step::Move(Outgoing)],
        JobKind::Move => vec![Step::Move(Incoming)],
    }
}

impl Step {
    pub fn name(&self) -> String {
        let side = |side: &Side| match side {
            Side::Incoming => "of it",
            Side::Outgoing => "its own",
        };
        match self {
            Step::Follows(s, FollowAction::End) => format!("end follows and requests {}", side(s)),
            Step::Follows(s, FollowAction::Hide) => format!("hide follows and requests {}", side(s)),
            Step::Follows(s, FollowAction::Restore) => format!("restore follows and requests {}", side(s)),
            Step::EndRelations(r, s) => format!("end {r}s {}", side(s)),
            Step::Erase => "erase its rows".to_owned(),
            Step::Traces => "erase its traces".to_owned(),
            Step::Activate => "activate".to_owned(),
            Step::Move(Side::Incoming) => "move its followers".to_owned(),
            Step::Move(Side::Outgoing) => "move its followings".to_owned(),
        }
    }

    /// How many edges the step has left (the job's total is their sum when it starts).
    pub async fn remaining(&self, db: &Database, tenant: &TenantId, account: UserId) -> Result<i64, sqlx::Error> {
        let scope = Scope { kind: db.kind(), tenant, account, limit: 0, at_ms: 0 };
        match *self {
            Step::Follows(side, action) => edges::follows_left(db, &scope, side, action).await,
            Step::EndRelations(relation, side) => edges::relations_left(db, &scope, relation, side).await,
            Step::Move(side) => edges::moves_left(db, &scope, side).await,
            Step::Erase | Step::Traces | Step::Activate => Ok(0),
        }
    }

    /// One batch; returns how many edges it changed, or `None` when the step is finished. Only edge changes
    /// count towards the job's progress (erased rows and traces do not).
    pub async fn batch(
        &self,
        tx: &mut Transaction<'_, Any>,
        scope: &Scope<'_>,
        destination: Option<UserId>,
    ) -> Result<Option<u64>, sqlx::Error> {
        let changed = match *self {
            Step::Follows(side, action) => edges::follows(tx, scope, side, action).await?,
            Step::EndRelations(relation, side) => edges::end_relations(tx, scope, relation, side).await?,
            Step::Move(side) => {
                let destination =
                    destination.ok_or_else(|| sqlx::Error::Protocol("a move without its destination".into()))?;
                edges::move_follows(tx, scope, side, destination).await?
            }
            Step::Erase => {
                return Ok((edges::erase(tx, scope).await? > 0).then_some(0));
            }
            Step::Traces => {
                erase_traces(tx, scope).await?;
                return Ok(None);
            }
            Step::Activate => {
                sqlx::query(
                    "UPDATE account_settings SET state = ?, updated_at = ? WHERE tenant_id = ? AND user_id = ?",
                )
                .bind(AccountState::Active.stored())
                .bind(scope.at_ms)
                .bind(scope.tenant.as_str())
                .bind(scope.account.get())
                .execute(&mut **tx)
                .await?;
                return Ok(None);
            }
        };
        Ok((changed > 0).then_some(changed))
    }
}

/// Erases what the host holds naming an erased account beyond its edges: its follow counts, its sampled
/// requests and follow attempts (either side) and the plugin log lines whose input is one of its edges' events or requests (both
/// tables are bounded per tenant, so one statement each). Projections keep each ended pair's ids and last
/// version (the follower table's row at `rel_status` 0, a cache space's pair versions): that is what keeps a
/// redelivered older event from counting again.
async fn erase_traces(tx: &mut Transaction<'_, Any>, scope: &Scope<'_>) -> Result<(), sqlx::Error> {
    let (tenant, user) = (scope.tenant.as_str(), scope.account.get());
    let by_user = [
        "DELETE FROM write_request_samples WHERE tenant_id = ? AND (user_id = ? OR target_id = ?)",
        "DELETE FROM follow_attempt_samples WHERE tenant_id = ? AND (follower_id = ? OR target_id = ?)",
        // Its counts, zero by now (every follow ended with its event).
        "DELETE FROM follow_counts WHERE tenant_id = ? AND (user_id = ? OR user_id = ?)",
    ];
    for sql in by_user {
        sqlx::query(sql).bind(tenant).bind(user).bind(user).execute(&mut **tx).await?;
    }
    // Inputs name an edge's event (`tenant:from:to:version`, `tenant:block:from:to:version`) or a request
    // (`user->target`).
    sqlx::query("DELETE FROM plugin_logs WHERE tenant_id = ? AND (input LIKE ? OR input LIKE ? OR input LIKE ?)")
        .bind(tenant)
        .bind(format!("%:{user}:%"))
        .bind(format!("{user}->%"))
        .bind(format!("%->{user}"))
        .execute(&mut **tx)
        .await?;
    Ok(())
}
