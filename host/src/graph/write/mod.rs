//! Every relation write — follow, unfollow, follow requests, removing a follower, block, mute — as one
//! transaction: the edges it changes and, for each real change, an outbox row.
//!
//! A real change is decided from the edges read under their locks (`transaction.rs`), by rules written once
//! for both databases (`decide.rs`), never from a plain affected-rows count (sqlx's MySQL driver sets
//! CLIENT_FOUND_ROWS, so a no-op update reports one row). Deadlocks and lock time-outs are retried whole.

mod command;
pub(super) mod counts;
pub(super) mod decide;
pub mod edge;
mod transaction;

use std::time::Duration;

pub use command::{
    Act, FollowContext, FollowDecision, FollowPolicy, PrivateNeedsApproval, RelationChange, RelationCommand, WriteError,
};
pub use edge::RelStatus;

use self::transaction::{Asked, Attempt};
use crate::db::{is_lock_conflict, Database};

/// How often a transaction that lost a lock race is tried again before the error is returned.
const MAX_ATTEMPTS: u32 = 8;

/// Carries out `command` idempotently under the host's own relation policy ([`PrivateNeedsApproval`]): a
/// follow of a pair already followed (or a block already in place) changes nothing and writes no event.
pub async fn change(db: &Database, command: RelationCommand<'_>) -> Result<RelationChange, WriteError> {
    change_under(db, command, &PrivateNeedsApproval).await
}

/// [`change`], a follow decided by `policy` (a tenant's relation policy plugin): asked before the
/// transaction, on a plain read of what the follow decides on, and again whenever the transaction finds
/// that changed — never while it holds a connection.
pub async fn change_under(
    db: &Database,
    command: RelationCommand<'_>,
    policy: &impl FollowPolicy,
) -> Result<RelationChange, WriteError> {
    command.refuse_oneself()?;
    let ask =
        async |context: FollowContext| Ok::<_, WriteError>(Asked { context, admit: policy.admit(context).await? });
    let mut asked = None;
    if policy.rule().is_none() && command.act == Act::Follow {
        let found = transaction::look(db, &command).await?;
        if decide::needs_admission(&command, &found) {
            asked = Some(ask(decide::follow_context(&command, &found)).await?);
        }
    }
    let mut attempt = 1;
    loop {
        match transaction::run(db, &command, policy, asked.as_ref()).await {
            Ok(Attempt::Done(change)) => return Ok(change),
            Ok(Attempt::Ask(_)) if attempt >= MAX_ATTEMPTS => return Err(WriteError::Contended),
            Ok(Attempt::Ask(context)) => {
                // What it decides on changed meanwhile (another follow of a popular target): a short wait
                // spreads the re-asks of concurrent follows instead of racing them again at once.
                tokio::time::sleep(Duration::from_millis(1u64 << attempt)).await;
                asked = Some(ask(context).await?)
            }
            Err(WriteError::Database(e)) if attempt < MAX_ATTEMPTS && is_lock_conflict(&e) => {
                let RelationCommand { tenant, actor, subject, .. } = command;
                tracing::debug!(%tenant, %actor, %subject, attempt, error = %e, "write lost a lock race; retrying");
                tokio::time::sleep(Duration::from_millis(2u64 << attempt)).await;
            }
            Err(e) => return Err(e),
        }
        attempt += 1;
    }
}
