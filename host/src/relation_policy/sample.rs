//! A sample of the follow attempts a tenant's relation policy decided, refused ones too, in
//! `follow_attempt_samples`: what `strand plugin test --replay` runs a candidate policy on (bounds and
//! sampling: `ops::sample`; what is left out is counted in `strand_follow_attempts_unsampled_total`).
//! Attempts are sampled while the tenant runs a policy of its own: the host's rule reads no counts, so
//! before a tenant's first policy there is nothing to replay (`strand plugin test --input` runs a candidate
//! on attempts of its own).

use futures::future::BoxFuture;
use sqlx::Row;

use crate::db::Database;
use crate::graph::TenantId;
use crate::ops::metrics::{Metric, FOLLOW_ATTEMPTS_UNSAMPLED};
use crate::ops::sample::{InputSample, Sampled};
use crate::plugins::FollowAttempt;

/// An attempt and what the host answered it: `allow`, `require_approval`, `refuse` or `failed`.
pub struct SampledAttempt {
    pub attempt: FollowAttempt,
    pub answer: &'static str,
}

/// The relation policy's inputs kept for replay.
pub type AttemptSample = InputSample<SampledAttempt>;

impl Sampled for SampledAttempt {
    const TABLE: &'static str = "follow_attempt_samples";
    const UNSAMPLED: Metric = FOLLOW_ATTEMPTS_UNSAMPLED;

    fn tenant(&self) -> &str {
        &self.attempt.tenant
    }

    fn insert<'a>(db: &'a Database, batch: &'a [Self]) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(insert(db, batch))
    }
}

async fn insert(db: &Database, batch: &[SampledAttempt]) -> Result<(), sqlx::Error> {
    let mut insert = sqlx::QueryBuilder::new(
        "INSERT INTO follow_attempt_samples (tenant_id, follower_id, target_id, followed_back, target_private, \
         follower_followings, follower_followers, target_followers, now_ms, answer) ",
    );
    insert.push_values(batch, |mut row, sampled| {
        let a = &sampled.attempt;
        row.push_bind(a.tenant.clone())
            .push_bind(a.follower)
            .push_bind(a.target)
            .push_bind(i64::from(a.followed_back))
            .push_bind(i64::from(a.target_private))
            .push_bind(a.follower_followings)
            .push_bind(a.follower_followers)
            .push_bind(a.target_followers)
            .push_bind(a.now_ms)
            .push_bind(sampled.answer);
    });
    insert.build().execute(db.writer()).await?;
    Ok(())
}

/// `tenant`'s `last` sampled attempts, oldest first, with what the host answered each.
pub async fn recent_attempts(
    db: &Database,
    tenant: &TenantId,
    last: u32,
) -> Result<Vec<(FollowAttempt, String)>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT follower_id, target_id, followed_back, target_private, follower_followings, follower_followers, \
         target_followers, now_ms, answer FROM follow_attempt_samples WHERE tenant_id = ? ORDER BY id DESC LIMIT ?",
    )
    .bind(tenant.as_str())
    .bind(i64::from(last))
    .fetch_all(db.reader())
    .await?;
    let mut attempts = rows
        .iter()
        .map(|row| {
            let attempt = FollowAttempt {
                tenant: tenant.to_string(),
                follower: row.try_get(0)?,
                target: row.try_get(1)?,
                followed_back: row.try_get::<i64, _>(2)? == 1,
                target_private: row.try_get::<i64, _>(3)? == 1,
                follower_followings: row.try_get(4)?,
                follower_followers: row.try_get(5)?,
                target_followers: row.try_get(6)?,
                now_ms: row.try_get(7)?,
            };
            Ok((attempt, row.try_get(8)?))
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    attempts.reverse();
    Ok(attempts)
}
