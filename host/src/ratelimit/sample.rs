//! A sample of the write requests the rate-limit policy decided, refused ones too, in
//! `write_request_samples`: what `strand plugin test --replay` runs a candidate policy on (bounds and
//! sampling: `ops::sample`; what is left out is counted in `strand_write_requests_unsampled_total`).

use sqlx::Row;

use futures::future::BoxFuture;

use crate::db::Database;
use crate::graph::TenantId;
use crate::ops::metrics::{Metric, WRITE_REQUESTS_UNSAMPLED};
use crate::ops::sample::{InputSample, Sampled};
use crate::plugins::{write_kind_name, WriteRequest, WRITE_KINDS};

/// A request and what the host answered it.
pub struct SampledRequest {
    pub request: WriteRequest,
    pub verdict: &'static str,
}

/// The rate limiter's inputs kept for replay.
pub type RequestSample = InputSample<SampledRequest>;

impl Sampled for SampledRequest {
    const TABLE: &'static str = "write_request_samples";
    const UNSAMPLED: Metric = WRITE_REQUESTS_UNSAMPLED;

    fn tenant(&self) -> &str {
        &self.request.tenant
    }

    fn insert<'a>(db: &'a Database, batch: &'a [Self]) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(insert(db, batch))
    }
}

async fn insert(db: &Database, batch: &[SampledRequest]) -> Result<(), sqlx::Error> {
    let mut insert = sqlx::QueryBuilder::new(
        "INSERT INTO write_request_samples (tenant_id, user_id, action, target_id, now_ms, verdict) ",
    );
    insert.push_values(batch, |mut row, sampled| {
        let request = &sampled.request;
        row.push_bind(request.tenant.clone())
            .push_bind(request.user)
            .push_bind(write_kind_name(request.write))
            .push_bind(request.target)
            .push_bind(request.now_ms)
            .push_bind(sampled.verdict);
    });
    insert.build().execute(db.writer()).await?;
    Ok(())
}

/// `tenant`'s `last` sampled requests, oldest first, with what the host answered each.
pub async fn recent_requests(
    db: &Database,
    tenant: &TenantId,
    last: u32,
) -> Result<Vec<(WriteRequest, String)>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT user_id, action, target_id, now_ms, verdict FROM write_request_samples \
         WHERE tenant_id = ? ORDER BY id DESC LIMIT ?",
    )
    .bind(tenant.as_str())
    .bind(i64::from(last))
    .fetch_all(db.reader())
    .await?;
    let mut requests = rows
        .iter()
        .map(|row| {
            let name: String = row.try_get(1)?;
            let Some(&(write, _)) = WRITE_KINDS.iter().find(|(_, known)| *known == name) else {
                return Err(sqlx::Error::Decode(format!("a sampled request of kind {name}").into()));
            };
            let request = WriteRequest {
                tenant: tenant.to_string(),
                user: row.try_get(0)?,
                write,
                target: row.try_get(2)?,
                now_ms: row.try_get(3)?,
            };
            Ok((request, row.try_get(4)?))
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    requests.reverse();
    Ok(requests)
}
