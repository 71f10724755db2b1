//! A sample of the write requests the rate-limit policy decided, refused ones too: what `strand plugin test
//! --replay` runs a candidate policy on (the truth holds only the writes that went through). Each tenant's
//! requests are kept at up to [`PER_SECOND`] (a quiet tenant's all of them, a busy one's a sample), queued
//! without blocking the write, and written by a supervised task into `write_request_samples`, newest
//! [`KEPT_PER_TENANT`] per tenant. What the bounds leave out is counted in
//! `strand_write_requests_unsampled_total{reason=queue|database}` (the rate's sampling is by design).

use sqlx::Row;

use super::Verdict;
use crate::db::Database;
use crate::graph::TenantId;
use crate::ops::bounded::{KeyedRate, TenantQueue};
use crate::ops::metrics::WRITE_REQUESTS_UNSAMPLED;
use crate::outbox::EventType;
use crate::plugins::{Action, WriteRequest};

/// Requests per second kept per tenant, and the burst above it.
const PER_SECOND: f64 = 10.0;
const BURST: f64 = 100.0;
/// Requests waiting for the database; beyond this they are not kept (and counted).
const QUEUED: usize = 10_000;
/// Requests kept per tenant; older ones are deleted.
pub const KEPT_PER_TENANT: i64 = 10_000;

/// A request and what the host answered it.
struct Sampled {
    request: WriteRequest,
    verdict: &'static str,
}

/// Samples decided requests and (through [`RequestSample::write`]) keeps them in the database.
pub struct RequestSample {
    rate: KeyedRate<String>,
    queue: TenantQueue<Sampled>,
}

impl Default for RequestSample {
    fn default() -> Self {
        Self { rate: KeyedRate::new(PER_SECOND, BURST), queue: TenantQueue::new(QUEUED, tenant_of) }
    }
}

impl RequestSample {
    /// Keeps `request` if its tenant's rate allows.
    pub fn offer(&self, request: &WriteRequest, verdict: &Verdict) {
        if self.rate.take(request.tenant.clone(), 1) == 0 {
            return;
        }
        if !self.queue.push(Sampled { request: request.clone(), verdict: verdict.name() }) {
            unsampled(&request.tenant, "queue");
        }
    }

    /// Writes queued requests into `db` as they come and keeps each tenant's newest [`KEPT_PER_TENANT`]. A
    /// failed write is logged and counted; the writer goes on.
    pub async fn write(&self, db: &Database) {
        self.queue
            .drain(db, "write_request_samples", KEPT_PER_TENANT, |batch| {
                Box::pin(async move {
                    if let Err(e) = insert(db, &batch).await {
                        tracing::error!(error = %e, requests = batch.len(), "cannot keep sampled write requests");
                        batch.iter().for_each(|s| unsampled(&s.request.tenant, "database"));
                    }
                    batch
                })
            })
            .await;
    }
}

fn tenant_of(sampled: &Sampled) -> &str {
    &sampled.request.tenant
}

fn unsampled(tenant: &str, reason: &'static str) {
    let labels = [("tenant", tenant.to_owned()), ("reason", reason.to_owned())];
    metrics::counter!(WRITE_REQUESTS_UNSAMPLED.name, &labels).increment(1);
}

async fn insert(db: &Database, batch: &[Sampled]) -> Result<(), sqlx::Error> {
    let mut insert = sqlx::QueryBuilder::new(
        "INSERT INTO write_request_samples (tenant_id, user_id, action, target_id, now_ms, verdict) ",
    );
    insert.push_values(batch, |mut row, sampled| {
        let request = &sampled.request;
        row.push_bind(request.tenant.clone())
            .push_bind(request.user)
            .push_bind(EventType::from(request.action).as_str())
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
            let action: String = row.try_get(1)?;
            let action = match action.parse::<EventType>()? {
                EventType::Follow => Action::Follow,
                EventType::Unfollow => Action::Unfollow,
                other => return Err(sqlx::Error::Decode(format!("a sampled request of type {other}").into())),
            };
            let request = WriteRequest {
                tenant: tenant.to_string(),
                user: row.try_get(0)?,
                action,
                target: row.try_get(2)?,
                now_ms: row.try_get(3)?,
            };
            Ok((request, row.try_get(4)?))
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    requests.reverse();
    Ok(requests)
}
