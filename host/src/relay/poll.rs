//! Poll mode (the seeds' EventPublish design): read the oldest committed outbox rows, route and publish
//! them, delete exactly those rows, commit — one transaction. Not `WHERE id > last_seen`: auto-increment
//! ids become visible out of order under concurrent writers; every batch reads the head of what is left.
//!
//! The read is a plain consistent read under READ COMMITTED, not `FOR UPDATE SKIP LOCKED`: MariaDB was
//! seen waiting on the implicit lock of an uncommitted insert despite `SKIP LOCKED` (stalling the relay
//! for a lock time-out behind any long transaction), and under REPEATABLE READ the locking scan also took
//! gap locks that stalled every concurrent outbox insert. A consistent read never waits: uncommitted rows
//! are invisible and are read once they commit. Point `DELETE`s by id then lock exactly those rows; if it removes fewer than
//! were read, another relay published them first, and this batch rolls back instead of publishing twice.

use std::future::Future;
use std::time::Duration;

use super::outlet::Outlet;
use super::{Checkpoint, Lead, Leadership, RelayError, RELAY_LOCK};
use crate::db::Database;
use crate::ops::observability::causes;
use crate::outbox::OUTBOX_COLUMNS;
use crate::util::backoff::Backoff;

/// The longest wait after failed batches.
const LAST_RETRY: Duration = Duration::from_secs(10);

/// Relays the outbox of one database to the bus.
pub struct PollRelay {
    db: Database,
    outlet: Outlet,
    batch: u32,
    idle_wait: Duration,
}

impl PollRelay {
    pub fn new(db: Database, outlet: Outlet, idle_wait: Duration) -> Self {
        Self { db, outlet, batch: 256, idle_wait }
    }

    pub fn db(&self) -> &Database {
        &self.db
    }

    /// Publishes the oldest unpublished outbox rows; returns how many (0: caught up). The committed head
    /// is read in one statement and published holding no connection; its rows are deleted only once the bus
    /// has them (a row already gone — another relay published it — rolls the deletion back whole).
    pub async fn publish_batch(&self) -> Result<usize, RelayError> {
        let rows = sqlx::query(&format!("SELECT {OUTBOX_COLUMNS} FROM outbox ORDER BY id LIMIT ?"))
            .bind(i64::from(self.batch))
            .fetch_all(self.db.reader())
            .await?;
        let events = super::outbox_rows(&rows)?;
        let count = events.len();
        if count > 0 {
            self.outlet.publish(&self.db, events).await?;
        }
        Ok(count)
    }

    /// Publishes until `shutdown` completes: straight on while there is a backlog, every `idle_wait` when
    /// caught up. A failed batch is logged and retried with backoff; nothing is skipped. On MySQL only the
    /// holder of the relay lock publishes; others wait as standbys.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut backoff = Backoff::new(self.idle_wait, LAST_RETRY);
        let mut leadership: Option<Leadership> = None;
        loop {
            if self.db.kind().has_named_locks() {
                let lead = Leadership::keep(&self.db, RELAY_LOCK, &mut leadership).await;
                if lead == Lead::Standby {
                    tokio::select! {
                        () = &mut shutdown => return,
                        () = tokio::time::sleep(backoff.peek()) => continue,
                    }
                }
                // The outbox table is what remains to publish; a binlog checkpoint left from an earlier
                // binlog-mode relay would be stale once this relay deletes rows.
                if lead == Lead::Taken {
                    if let Err(e) = Checkpoint::forget(&self.db).await {
                        tracing::error!(error = %e, "cannot clear the binlog checkpoint; retrying");
                        leadership = None;
                        continue;
                    }
                }
            }
            // Parked rows, between batches and only while leading: one due tenant's at a time.
            self.outlet.retry_due(&self.db).await;
            let wait = match self.publish_batch().await {
                Ok(0) => self.idle_wait,
                Ok(published) => {
                    tracing::debug!(published, "relayed outbox rows");
                    backoff.reset();
                    Duration::ZERO
                }
                Err(e) => {
                    let retry_in = backoff.next_wait();
                    tracing::error!(error = %causes(&e), ?retry_in, "relay batch failed; retrying");
                    retry_in
                }
            };
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
}
