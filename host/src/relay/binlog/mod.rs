//! Binlog mode (the seeds' Canal design, inside the host): follow the MySQL/MariaDB binlog as a replica,
//! take the row inserts of `outbox` from committed transactions, publish them, and advance the checkpoint
//! only once the bus acknowledged them. The checkpoint transaction also deletes the published rows (the
//! retention of binlog mode), so the outbox table always holds exactly the rows not yet covered by the
//! checkpoint — which is what makes the first start, a reset after a purged binlog and a failover to a
//! replica lossless.
//!
//! A transaction's rows are published only after its commit event (XID) was read, in binlog (commit) order,
//! so a long transaction that commits late is published when it commits, and a rolled-back one never is.
//!
//! Two stages overlap, like Debezium's or Canal's pipelines: reading dispatches batches (routed, and to
//! Kafka already sent) while settling acknowledges, deletes and checkpoints earlier ones — every batch
//! waiting when a settlement starts in one database transaction. Up to `IN_FLIGHT` batches are unsettled,
//! all of them after the checkpoint, so a crash republishes them (at least once) and never skips one.

mod reader;
mod server;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures::StreamExt;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn, Opts};
use sqlx::Acquire;
use tokio::sync::mpsc;
use tokio::time::{timeout_at, Instant};

use self::reader::{OutboxTable, Step, TransactionReader};
use self::server::{check_retained, check_server, outbox_snapshot, unreadable};
use super::checkpoint::{BinlogPosition, Checkpoint};
use super::outlet::{Dispatched, Outlet};
use super::{Lead, Leadership, RelayError, RELAY_LOCK};
use crate::db::{held, Database};
use crate::ops::metrics::RELAY_SERVER_CHANGES;
use crate::ops::observability::causes;
use crate::outbox::OUTBOX_COLUMNS;
use crate::util::backoff::Backoff;

/// How often the server sends a heartbeat on an idle link.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// Silence (no event, not even a heartbeat) after which the link is taken for dead and reopened.
const SILENCE_LIMIT: Duration = Duration::from_secs(5);
/// How long committed rows wait for more before they are published (a batch forms under load).
const LINGER: Duration = Duration::from_millis(2);
/// How long a checkpoint that moved far without outbox rows (other tables' transactions) waits to be saved.
const CHECKPOINT_IDLE: Duration = Duration::from_secs(1);
/// The first wait before a failed session is retried (doubling to 10 s while failures repeat).
const FIRST_RETRY: Duration = Duration::from_millis(500);
const LAST_RETRY: Duration = Duration::from_secs(10);
/// A session that lasted this long was healthy: a failure after it starts the backoff afresh.
const HEALTHY_SESSION: Duration = Duration::from_secs(60);
/// How often an idle relay looks for parked rows due for a retry.
const RETRY_IDLE: Duration = Duration::from_millis(200);
/// Most rows dispatched in one batch.
const BATCH: usize = 512;
/// Most batches dispatched and not yet settled: the window in which reading, routing, Kafka and the
/// database's commits overlap.
const IN_FLIGHT: usize = 16;

/// Relays the outbox of one MySQL/MariaDB database by following its binlog.
pub struct BinlogRelay {
    db: Database,
    outlet: Outlet,
    source: Opts,
    server_id: u32,
}

impl BinlogRelay {
    /// `database_url` is the database's `mysql://` URL; `server_id` is the replica id the relay registers
    /// with (unique among the server's replicas).
    pub fn db(&self) -> &Database {
        &self.db
    }

    pub fn new(db: Database, outlet: Outlet, database_url: &str, server_id: u32) -> Result<Self, RelayError> {
        let source = Opts::from_url(database_url)
            .map_err(|e| RelayError::BinlogNotConfigured(format!("cannot use the database URL: {e}")))?;
        Ok(Self { db, outlet, source, server_id })
    }

    /// Follows the binlog until `shutdown`, holding the relay lock (a standby waits for it). A lost link is
    /// reopened from the checkpoint; what needs an operator (a purged binlog, a server without a row
    /// binlog) ends the relay with an error that says what to do.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), RelayError> {
        tokio::pin!(shutdown);
        let mut leadership: Option<Leadership> = None;
        let mut backoff = Backoff::new(FIRST_RETRY, LAST_RETRY);
        loop {
            // A standby waits as long as a failed session would.
            let mut wait = backoff.peek();
            if Leadership::keep(&self.db, RELAY_LOCK, &mut leadership).await != Lead::Standby {
                let began = Instant::now();
                match self.follow(&mut leadership, shutdown.as_mut()).await {
                    Ok(()) => return Ok(()),
                    Err(e) if e.needs_operator() => {
                        tracing::error!(error = %causes(&e), "the binlog relay stopped");
                        return Err(e);
                    }
                    Err(e) => {
                        // A session that ran a while was healthy: its failure starts a fresh backoff.
                        if began.elapsed() > HEALTHY_SESSION {
                            backoff.reset();
                        }
                        wait = backoff.next_wait();
                        tracing::error!(error = %causes(&e), retry_in = ?wait, "the binlog relay failed; resuming from the checkpoint");
                    }
                }
            }
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// One session on one binlog connection: from the checkpoint (or the first start) until shutdown or
    /// the first error.
    async fn follow(
        &self,
        leadership: &mut Option<Leadership>,
        mut shutdown: Pin<&mut impl Future<Output = ()>>,
    ) -> Result<(), RelayError> {
        let mut conn = Conn::new(self.source.clone()).await?;
        let server = check_server(&mut conn).await?;
        let start = match Checkpoint::load(&self.db).await? {
            Some(saved) if saved.server_id.is_none_or(|id| id == server) => saved.position,
            Some(saved) => {
                // A failover: the checkpoint (replicated with the data) is a place in the old primary's
                // binlog. The outbox here holds every row that checkpoint did not cover, so starting as
                // on a first start loses nothing; rows the old relay published whose deletion had not
                // replicated yet go out again (at-least-once; consumers dedupe by event id).
                tracing::warn!(checkpoint = %saved.position, checkpoint_server = ?saved.server_id, server,
                    "the checkpoint is another server's binlog position (a failover): resuming from the outbox");
                metrics::counter!(RELAY_SERVER_CHANGES.name).increment(1);
                self.first_start(&mut conn, server).await?
            }
            None => self.first_start(&mut conn, server).await?,
        };
        check_retained(&mut conn, &start).await?;
        let table = OutboxTable::describe(&mut conn).await?;
        // Real GTID events from MariaDB (MySQL ignores the variable), and a heartbeat on an idle link so a
        // dead one is noticed.
        conn.query_drop("SET @mariadb_slave_capability = 4").await?;
        conn.query_drop(format!("SET @master_heartbeat_period = {}", HEARTBEAT.as_nanos())).await?;
        let request = BinlogStreamRequest::new(self.server_id).with_filename(start.file.as_bytes()).with_pos(start.pos);
        let mut stream = conn.get_binlog_stream(request).await?;
        tracing::info!(from = %start, "following the binlog");

        // Reading and routing overlap with settling: while one group of batches is acknowledged, deleted
        // and checkpointed, the next batches are read, routed and sent.
        let (to_settle, in_flight) = mpsc::channel(IN_FLIGHT);
        let reading = self.read(&mut stream, &table, start, to_settle, shutdown.as_mut());
        let settling = self.settle(leadership, in_flight, server);
        tokio::try_join!(reading, settling)?;
        stream.close().await?;
        Ok(())
    }

    /// Reads committed transactions from the binlog and dispatches their outbox rows in batches (with the
    /// position they end at) until `shutdown`, which dispatches what was read and committed first.
    async fn read(
        &self,
        stream: &mut BinlogStream,
        table: &OutboxTable,
        start: BinlogPosition,
        to_settle: mpsc::Sender<Flight>,
        mut shutdown: Pin<&mut impl Future<Output = ()>>,
    ) -> Result<(), RelayError> {
        let mut reader = TransactionReader::new(start.clone());
        let mut dispatched_to = start;
        let mut flush_due: Option<Instant> = None;
        let mut silence_due = Instant::now() + SILENCE_LIMIT;
        loop {
            let deadline = flush_due.map_or(silence_due, |due| due.min(silence_due));
            let next = tokio::select! {
                () = &mut shutdown => {
                    // What was read and committed is published before stopping; the rest is read again.
                    return self.dispatch(&mut reader, &mut dispatched_to, &to_settle).await;
                }
                next = timeout_at(deadline, stream.next()) => next,
            };
            let event = match next {
                Err(_elapsed) if flush_due.is_some_and(|due| due <= Instant::now()) => {
                    self.dispatch(&mut reader, &mut dispatched_to, &to_settle).await?;
                    flush_due = None;
                    continue;
                }
                Err(_elapsed) => return Err(RelayError::BinlogSilent(SILENCE_LIMIT)),
                Ok(None) => return Err(RelayError::BinlogEnded),
                Ok(Some(event)) => event.map_err(|e| unreadable(e, &dispatched_to))?,
            };
            silence_due = Instant::now() + SILENCE_LIMIT;
            reader.apply(Step::of(&event, table, |id| stream.get_tme(id))?);
            if reader.ready.len() >= BATCH {
                self.dispatch(&mut reader, &mut dispatched_to, &to_settle).await?;
                flush_due = None;
            } else if !reader.ready.is_empty() {
                let soon = Instant::now() + LINGER;
                flush_due = Some(flush_due.map_or(soon, |due| due.min(soon)));
            } else if flush_due.is_none() && reader.committed.far_ahead_of(&dispatched_to) {
                // Only other tables' transactions: save the position now and then, so a restart need not
                // reread them (not after every transaction: saving it is a transaction in the binlog too).
                flush_due = Some(Instant::now() + CHECKPOINT_IDLE);
            }
        }
    }

    /// Routes the committed rows read so far and sends them on their way, with the position their
    /// transactions end at; waits while `IN_FLIGHT` batches are unsettled.
    async fn dispatch(
        &self,
        reader: &mut TransactionReader,
        dispatched_to: &mut BinlogPosition,
        to_settle: &mpsc::Sender<Flight>,
    ) -> Result<(), RelayError> {
        if reader.committed == *dispatched_to {
            return Ok(());
        }
        let rows = std::mem::take(&mut reader.ready);
        let dispatched = if rows.is_empty() { None } else { Some(self.outlet.dispatch(rows).await?) };
        let flight = Flight { dispatched, end: reader.committed.clone() };
        *dispatched_to = reader.committed.clone();
        // Settling ends only with this sender or with an error, which ends the session: nothing to add.
        if to_settle.send(flight).await.is_err() {
            tracing::debug!("settling stopped; its error ends the session");
        }
        Ok(())
    }

    /// Settles dispatched batches in order, as many as are waiting in one database transaction: the bus has
    /// them (Kafka acknowledged them), their rows are deleted from the outbox and the checkpoint moves to
    /// the end of their transactions.
    async fn settle(
        &self,
        leadership: &mut Option<Leadership>,
        mut in_flight: mpsc::Receiver<Flight>,
        server: u32,
    ) -> Result<(), RelayError> {
        loop {
            // Parked rows are retried between settlements (the one writer of the embedded bus), also when idle.
            let first = tokio::select! {
                next = in_flight.recv() => match next {
                    Some(first) => first,
                    None => return Ok(()),
                },
                () = tokio::time::sleep(RETRY_IDLE) => {
                    self.outlet.retry_due(&self.db).await;
                    continue;
                }
            };
            self.outlet.retry_due(&self.db).await;
            let mut end = first.end;
            let mut batches: Vec<Dispatched> = first.dispatched.into_iter().collect();
            while let Ok(next) = in_flight.try_recv() {
                end = next.end;
                batches.extend(next.dispatched);
            }
            let still_leading = match leadership.as_mut() {
                Some(held) => held.still_held().await,
                None => false,
            };
            if !still_leading {
                return Err(RelayError::LostLead);
            }
            let acknowledged = self.outlet.acknowledge(batches).await?;
            let mut conn = self.db.writer().acquire().await?;
            held::holding("the relay's transaction", async {
                let mut tx = conn.begin().await?;
                self.outlet.settle(&mut tx, acknowledged).await?;
                Checkpoint::save(&mut tx, &end, server).await?;
                tx.commit().await?;
                Ok::<_, RelayError>(())
            })
            .await?;
            tracing::debug!(checkpoint = %end, "relayed outbox rows from the binlog");
        }
    }

    /// The first start (no checkpoint, or another server's): note the binlog's end and the rows still in the outbox, consistently
    /// — every row committed before that end is in the table, every later one in the binlog after it. The
    /// rows are published now, then the binlog is followed from that end.
    async fn first_start(&self, conn: &mut Conn, server: u32) -> Result<BinlogPosition, RelayError> {
        let (end, ids) = outbox_snapshot(conn).await?;
        tracing::info!(unpublished = ids.len(), binlog_end = %end, "first start: publishing the outbox, then following the binlog");
        for chunk in ids.chunks(BATCH) {
            let placeholders = vec!["?"; chunk.len()].join(", ");
            let sql = format!("SELECT {OUTBOX_COLUMNS} FROM outbox WHERE id IN ({placeholders}) ORDER BY id");
            let rows =
                chunk.iter().fold(sqlx::query(&sql), |query, id| query.bind(id)).fetch_all(self.db.reader()).await?;
            let events = super::outbox_rows(&rows)?;
            self.outlet.publish(&self.db, events).await?;
        }
        let mut db = self.db.writer().acquire().await?;
        let mut tx = db.begin().await?;
        Checkpoint::save(&mut tx, &end, server).await?;
        tx.commit().await?;
        Ok(end)
    }
}

/// A dispatched batch (none when only the position moved) and where its transactions end in the binlog.
struct Flight {
    dispatched: Option<Dispatched>,
    end: BinlogPosition,
}
