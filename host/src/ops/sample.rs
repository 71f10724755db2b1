//! What the API nodes keep of the inputs their tenants' plugins decided — write requests for the rate
//! limiter, follow attempts for the relation policy, refused ones too — for `strand plugin test --replay`
//! (the truth holds only what went through). Each tenant's inputs are kept at up to [`PER_SECOND`] (a quiet
//! tenant's all of them, a busy one's a sample), queued without blocking the write, and written by a
//! supervised task into the kind's table, newest [`KEPT_PER_TENANT`] per tenant. What the bounds leave out
//! is counted in the kind's metric, `{reason=queue|database}` (the rate's sampling is by design).

use futures::future::BoxFuture;

use super::bounded::{KeyedRate, TenantQueue};
use super::metrics::Metric;
use crate::db::Database;

/// Inputs per second kept per tenant, and the burst above it.
const PER_SECOND: f64 = 10.0;
const BURST: f64 = 100.0;
/// Inputs waiting for the database; beyond this they are not kept (and counted).
const QUEUED: usize = 10_000;
/// Inputs kept per tenant and kind; older ones are deleted.
pub const KEPT_PER_TENANT: i64 = 10_000;

/// One kind of sampled input, with what the host answered it.
pub trait Sampled: Send + Sized + 'static {
    /// Its table: an ascending `id` and a `tenant_id`, besides its own columns.
    const TABLE: &'static str;
    /// Counts what is not kept, by tenant and reason.
    const UNSAMPLED: Metric;
    fn tenant(&self) -> &str;
    /// Inserts `batch` into [`Sampled::TABLE`].
    fn insert<'a>(db: &'a Database, batch: &'a [Self]) -> BoxFuture<'a, Result<(), sqlx::Error>>;
}

/// Samples one kind of decided input and (through [`InputSample::write`]) keeps it in the database.
pub struct InputSample<T> {
    rate: KeyedRate<String>,
    queue: TenantQueue<T>,
}

impl<T: Sampled> Default for InputSample<T> {
    fn default() -> Self {
        Self { rate: KeyedRate::new(PER_SECOND, BURST), queue: TenantQueue::new(QUEUED, T::tenant) }
    }
}

impl<T: Sampled> InputSample<T> {
    /// Keeps `tenant`'s `input` (made only then) if the tenant's rate allows.
    pub fn offer(&self, tenant: &str, input: impl FnOnce() -> T) {
        if self.rate.take(tenant.to_owned(), 1) == 0 {
            return;
        }
        if !self.queue.push(input()) {
            unsampled::<T>(tenant, "queue");
        }
    }

    /// Writes queued inputs into the database as they come and keeps each tenant's newest
    /// [`KEPT_PER_TENANT`]. A failed write is logged and counted; the writer goes on.
    pub async fn write(&self, db: &Database) {
        self.queue
            .drain(db, T::TABLE, KEPT_PER_TENANT, |batch| {
                Box::pin(async move {
                    if let Err(e) = T::insert(db, &batch).await {
                        tracing::error!(error = %e, table = T::TABLE, inputs = batch.len(), "cannot keep sampled inputs");
                        batch.iter().for_each(|input| unsampled::<T>(input.tenant(), "database"));
                    }
                    batch
                })
            })
            .await;
    }
}

fn unsampled<T: Sampled>(tenant: &str, reason: &'static str) {
    let labels = [("tenant", tenant.to_owned()), ("reason", reason.to_owned())];
    metrics::counter!(T::UNSAMPLED.name, &labels).increment(1);
}
