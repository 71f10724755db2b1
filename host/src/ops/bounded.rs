//! Bounds on what the host keeps of tenants' activity (plugins' log lines, sampled write requests): a rate
//! per key, so one busy writer cannot crowd out the others, and a table trimmed to each tenant's newest
//! rows, so nothing a tenant does grows the database without end.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::mpsc;

use crate::db::Database;
use crate::util::token_bucket::TokenBucket;

/// A token bucket per key: `per_second` tokens a second, at most `burst` held.
pub struct KeyedRate<K> {
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<K, TokenBucket>>,
}

impl<K: Eq + Hash> KeyedRate<K> {
    pub fn new(per_second: f64, burst: f64) -> Self {
        Self { per_second, burst, buckets: Mutex::default() }
    }

    /// How many of `wanted` tokens `key` may take now (taking them).
    pub fn take(&self, key: K, wanted: usize) -> usize {
        if wanted == 0 {
            return 0;
        }
        let mut buckets = self.buckets.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        let bucket = buckets.entry(key).or_insert(TokenBucket::new(self.burst, now));
        bucket.refill(now, self.burst, self.per_second);
        bucket.take_up_to(wanted)
    }
}

/// Deletes `tenant`'s rows of `table` (one with an ascending `id` and a `tenant_id`) older than its newest
/// `keep`.
async fn keep_newest(db: &Database, table: &'static str, tenant: &str, keep: i64) -> Result<(), sqlx::Error> {
    let newest = format!("SELECT id FROM {table} WHERE tenant_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?");
    let oldest_kept: Option<i64> =
        sqlx::query_scalar(&newest).bind(tenant).bind(keep - 1).fetch_optional(db.reader()).await?;
    if let Some(oldest_kept) = oldest_kept {
        let older = format!("DELETE FROM {table} WHERE tenant_id = ? AND id < ?");
        sqlx::query(&older).bind(tenant).bind(oldest_kept).execute(db.writer()).await?;
    }
    Ok(())
}

/// How often a [`TenantQueue`]'s writer deletes what is beyond each tenant's share.
const PRUNE_EVERY: Duration = Duration::from_secs(10);

/// Rows on their way to a table bounded per tenant: a bounded queue (a full one refuses, it never blocks
/// the caller), drained by one writer task at a time (a restarted writer goes on with what is queued). One
/// tenant holds at most [`TENANT_SHARE`] of it, so a flood of one tenant's rows leaves room for the others'.
pub struct TenantQueue<T> {
    queue: mpsc::Sender<T>,
    queued: tokio::sync::Mutex<mpsc::Receiver<T>>,
    tenant_of: fn(&T) -> &str,
    /// Rows queued per tenant, and the most one tenant may have queued.
    held: Mutex<HashMap<String, usize>>,
    share: usize,
}

/// The part of a [`TenantQueue`] one tenant may fill.
pub const TENANT_SHARE: f64 = 0.125;

impl<T> TenantQueue<T> {
    pub fn new(capacity: usize, tenant_of: fn(&T) -> &str) -> Self {
        let (queue, queued) = mpsc::channel(capacity);
        let share = ((capacity as f64 * TENANT_SHARE) as usize).max(1);
        Self { queue, queued: tokio::sync::Mutex::new(queued), tenant_of, held: Mutex::default(), share }
    }

    /// Queues `row`; `false` when its tenant's share or the queue is full (the writer is behind, or runs in
    /// no task of this process).
    pub fn push(&self, row: T) -> bool {
        let mut held = self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let tenant = (self.tenant_of)(&row);
        if held.get(tenant).is_some_and(|&queued| queued >= self.share) {
            return false;
        }
        let tenant = tenant.to_owned();
        if self.queue.try_send(row).is_err() {
            return false;
        }
        *held.entry(tenant).or_default() += 1;
        true
    }

    /// How many of `tenant`'s rows are queued.
    pub fn held_by(&self, tenant: &str) -> usize {
        self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(tenant).copied().unwrap_or(0)
    }

    /// Counts `batch` as no longer queued.
    fn release(&self, batch: &[T]) {
        let mut held = self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for row in batch {
            let tenant = (self.tenant_of)(row);
            if let Some(queued) = held.get_mut(tenant) {
                *queued = queued.saturating_sub(1);
                if *queued == 0 {
                    held.remove(tenant);
                }
            }
        }
    }

    /// Hands queued rows to `write` in batches as they come (it hands the batch back), and every
    /// [`PRUNE_EVERY`] keeps the newest `keep` rows of `table` of each tenant written meanwhile. `write`
    /// reports its own failures.
    pub async fn drain<'a>(
        &self,
        db: &Database,
        table: &'static str,
        keep: i64,
        mut write: impl FnMut(Vec<T>) -> BoxFuture<'a, Vec<T>>,
    ) {
        let mut queued = self.queued.lock().await;
        let (mut batch, mut written) = (Vec::new(), HashSet::new());
        let mut pruned = Instant::now();
        while queued.recv_many(&mut batch, 256).await > 0 {
            self.release(&batch);
            batch = write(batch).await;
            written.extend(batch.drain(..).map(|row| (self.tenant_of)(&row).to_owned()));
            if pruned.elapsed() >= PRUNE_EVERY {
                for tenant in written.drain() {
                    if let Err(e) = keep_newest(db, table, &tenant, keep).await {
                        tracing::warn!(%tenant, table, error = %e, "cannot delete old rows; trying again later");
                    }
                }
                pruned = Instant::now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant_of(row: &(String, usize)) -> &str {
        &row.0
    }

    #[test]
    fn one_tenant_fills_at_most_its_share_of_the_queue() {
        let queue = TenantQueue::new(80, tenant_of);
        let flooded = (0..80).filter(|&i| queue.push(("evil".to_owned(), i))).count();
        assert_eq!(flooded, 10, "an eighth of 80");
        assert!(queue.push(("acme".to_owned(), 0)), "another tenant still finds room");
        queue.release(&[("evil".to_owned(), 0)]);
        assert_eq!(queue.held_by("evil"), 9);
        assert!(queue.push(("evil".to_owned(), 80)), "written rows free the share again");
    }
}
