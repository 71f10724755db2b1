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

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures::StreamExt;
use mysql_async::binlog::events::{Event, EventData, RowsEventData};
use mysql_async::binlog::row::BinlogRow;
use mysql_async::binlog::value::BinlogValue;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn, Opts, Row, Value};
use sqlx::Acquire;
use tokio::sync::mpsc;
use tokio::time::{timeout_at, Instant};

use super::checkpoint::{BinlogPosition, Checkpoint};
use super::outlet::{outbox_event, Dispatched, Outlet, OUTBOX_COLUMNS};
use super::{Lead, Leadership, RelayError, RELAY_LOCK};
use crate::graph::Database;
use crate::plugins::OutboxEvent;
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
/// How long a first start on MySQL waits for in-flight outbox writers before it gives up and retries.
const SNAPSHOT_LOCK_WAIT_S: u32 = 5;
/// MariaDB's GTID event (the start of an event group when `@mariadb_slave_capability` is 4).
const MARIADB_GTID_EVENT: u8 = 162;
/// MariaDB's GTID flag for an event group without BEGIN/COMMIT (a DDL statement).
const MARIADB_GTID_STANDALONE: u8 = 1;
/// The server's "cannot read binlog" error (e.g. the requested file was purged).
const ER_MASTER_FATAL_ERROR_READING_BINLOG: u16 = 1236;

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
                        tracing::error!(error = %e, "the binlog relay stopped");
                        return Err(e);
                    }
                    Err(e) => {
                        // A session that ran a while was healthy: its failure starts a fresh backoff.
                        if began.elapsed() > HEALTHY_SESSION {
                            backoff.reset();
                        }
                        wait = backoff.next_wait();
                        tracing::error!(error = %e, retry_in = ?wait, "the binlog relay failed; resuming from the checkpoint");
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
                metrics::counter!("strand_relay_server_changes_total").increment(1);
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
            let table_map = |id| stream.get_tme(id);
            reader.read(&event, table, table_map)?;
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
            let mut conn = self.db.writer().acquire().await?;
            let mut tx = conn.begin().await?;
            self.outlet.settle(&mut tx, batches).await?;
            Checkpoint::save(&mut tx, &end, server).await?;
            tx.commit().await?;
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
            let mut db = self.db.writer().acquire().await?;
            let mut tx = db.begin().await?;
            let placeholders = vec!["?"; chunk.len()].join(", ");
            let sql = format!("SELECT {OUTBOX_COLUMNS} FROM outbox WHERE id IN ({placeholders}) ORDER BY id");
            let rows = chunk.iter().fold(sqlx::query(&sql), |query, id| query.bind(id)).fetch_all(&mut *tx).await?;
            let events = rows.iter().map(outbox_event).collect::<Result<Vec<_>, sqlx::Error>>()?;
            self.outlet.publish_and_delete(&mut tx, events).await?;
            tx.commit().await?;
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

/// Reads events into committed transactions' outbox rows, tracking where the last complete transaction
/// ends (the only safe place to resume).
struct TransactionReader {
    file: String,
    in_transaction: bool,
    /// Outbox rows of the transaction being read.
    pending: Vec<OutboxEvent>,
    /// Outbox rows of committed transactions, in commit order, not yet published.
    ready: Vec<OutboxEvent>,
    /// The end of the last committed transaction read.
    committed: BinlogPosition,
}

impl TransactionReader {
    fn new(start: BinlogPosition) -> Self {
        Self {
            file: start.file.clone(),
            in_transaction: false,
            pending: Vec::new(),
            ready: Vec::new(),
            committed: start,
        }
    }

    fn read<'s>(
        &mut self,
        event: &Event,
        table: &OutboxTable,
        table_map: impl Fn(u64) -> Option<&'s mysql_async::binlog::events::TableMapEvent<'static>>,
    ) -> Result<(), RelayError> {
        let header = event.header();
        if header.event_type_raw() == MARIADB_GTID_EVENT {
            // seq_no (8 bytes), domain_id (4), flags (1)
            let flags = event.data().get(12).copied().unwrap_or(MARIADB_GTID_STANDALONE);
            self.in_transaction = flags & MARIADB_GTID_STANDALONE == 0;
            return Ok(());
        }
        let end = || header.log_pos() as u64;
        match event.read_data().map_err(RelayError::BinlogEvent)? {
            // The rotate the server sends first (header position 0) names the file requested; MariaDB leaves
            // checksum bytes on its name, so only real rotates (at the end of a file) are taken.
            Some(EventData::RotateEvent(rotate)) if header.log_pos() != 0 => {
                self.file = rotate.name().into_owned();
            }
            Some(EventData::RowsEvent(
                rows @ (RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_)),
            )) => {
                if let Some(map) = table_map(rows.table_id()).filter(|map| table.is(map)) {
                    for row in rows.rows(map) {
                        let (_, after) = row.map_err(RelayError::BinlogEvent)?;
                        self.pending.push(table.event(after)?);
                    }
                }
            }
            Some(EventData::XidEvent(_)) => self.commit(end()),
            Some(EventData::QueryEvent(query)) => match query.query_raw() {
                b"BEGIN" => self.in_transaction = true,
                b"COMMIT" => self.commit(end()),
                b"ROLLBACK" => {
                    self.pending.clear();
                    self.commit(end());
                }
                // A statement that commits itself (DDL); inside a transaction (SAVEPOINT …) it ends nothing.
                _ if !self.in_transaction => self.commit(end()),
                _ => {}
            },
            _ => {}
        }
        Ok(())
    }

    fn commit(&mut self, end: u64) {
        self.ready.append(&mut self.pending);
        self.in_transaction = false;
        self.committed = BinlogPosition { file: self.file.clone(), pos: end };
    }
}

/// Which binlog rows are the outbox's, and how its columns are named.
struct OutboxTable {
    schema: String,
    /// Column names by position, for servers that do not log them (`binlog_row_metadata` other than FULL).
    columns: Vec<String>,
}

impl OutboxTable {
    async fn describe(conn: &mut Conn) -> Result<Self, RelayError> {
        let schema: Option<String> = conn.query_first("SELECT DATABASE()").await?;
        let schema =
            schema.ok_or_else(|| RelayError::BinlogNotConfigured("the database URL names no database".into()))?;
        let columns = conn
            .exec(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'outbox' \
                 ORDER BY ORDINAL_POSITION",
                (&schema,),
            )
            .await?;
        Ok(Self { schema, columns })
    }

    fn is(&self, map: &mysql_async::binlog::events::TableMapEvent<'_>) -> bool {
        map.table_name_raw() == b"outbox" && map.database_name_raw() == self.schema.as_bytes()
    }

    fn event(&self, row: Option<BinlogRow>) -> Result<OutboxEvent, RelayError> {
        let row = row.ok_or_else(|| RelayError::BinlogEvent(std::io::Error::other("an insert without its row")))?;
        let mut event = OutboxEvent {
            id: 0,
            tenant: String::new(),
            aggregate_type: String::new(),
            aggregate_id: String::new(),
            event_type: String::new(),
            key: String::new(),
            payload: String::new(),
        };
        for (index, column) in row.columns_ref().iter().enumerate() {
            let logged = column.name_str();
            let name = match logged.strip_prefix('@') {
                Some(_) => self.columns.get(index).map_or("", String::as_str),
                None => &logged,
            };
            let value = row.as_ref(index);
            match name {
                "id" => event.id = int(value),
                "tenant_id" => event.tenant = text(value),
                "aggregate_type" => event.aggregate_type = text(value),
                "aggregate_id" => event.aggregate_id = text(value),
                "event_type" => event.event_type = text(value),
                "event_key" => event.key = text(value),
                "payload" => event.payload = text(value),
                _ => {}
            }
        }
        if event.id == 0 {
            return Err(RelayError::BinlogEvent(std::io::Error::other("an outbox insert without an id column")));
        }
        Ok(event)
    }
}

fn int(value: Option<&BinlogValue<'_>>) -> i64 {
    match value {
        Some(BinlogValue::Value(Value::Int(n))) => *n,
        Some(BinlogValue::Value(Value::UInt(n))) => *n as i64,
        _ => 0,
    }
}

fn text(value: Option<&BinlogValue<'_>>) -> String {
    match value {
        Some(BinlogValue::Value(Value::Bytes(bytes))) => String::from_utf8_lossy(bytes).into_owned(),
        _ => String::new(),
    }
}

/// Refuses a server whose binlog cannot carry the outbox rows; else its `@@server_id`.
async fn check_server(conn: &mut Conn) -> Result<u32, RelayError> {
    let settings: Option<(i64, String, String, u32)> =
        conn.query_first("SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@server_id").await?;
    match settings {
        Some((1, format, image, server)) if format == "ROW" && image == "FULL" => Ok(server),
        other => Err(RelayError::BinlogNotConfigured(format!(
            "binlog mode needs log_bin=ON, binlog_format=ROW and binlog_row_image=FULL (found {other:?}); \
             configure the server, or use relay = \"poll\""
        ))),
    }
}

/// The outbox rows and the binlog position of one consistent snapshot. MariaDB reports the position of a
/// consistent-snapshot transaction (`binlog_snapshot_*`), which waits for nothing. MySQL does not: there a
/// brief `LOCK TABLES outbox READ` waits for in-flight writers of the outbox (holding new ones back, at most
/// `SNAPSHOT_LOCK_WAIT_S`) so that the binlog's end and the table agree.
async fn outbox_snapshot(conn: &mut Conn) -> Result<(BinlogPosition, Vec<i64>), RelayError> {
    conn.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT").await?;
    let status: Vec<(String, String)> = conn.query("SHOW STATUS LIKE 'binlog_snapshot_%'").await?;
    let value = |name: &str| status.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone());
    let snapshot_end = match (value("binlog_snapshot_file"), value("binlog_snapshot_position")) {
        (Some(file), Some(pos)) if !file.is_empty() => pos.parse().ok().map(|pos| BinlogPosition { file, pos }),
        _ => None,
    };
    if let Some(end) = snapshot_end {
        let ids: Vec<i64> = conn.query("SELECT id FROM outbox ORDER BY id").await?;
        conn.query_drop("COMMIT").await?;
        return Ok((end, ids));
    }
    conn.query_drop("ROLLBACK").await?;
    conn.query_drop(format!("SET SESSION lock_wait_timeout = {SNAPSHOT_LOCK_WAIT_S}")).await?;
    conn.query_drop("LOCK TABLES outbox READ").await?;
    let snapshot = async {
        let end = binlog_end(conn).await?;
        let ids: Vec<i64> = conn.query("SELECT id FROM outbox ORDER BY id").await?;
        Ok::<_, RelayError>((end, ids))
    }
    .await;
    conn.query_drop("UNLOCK TABLES").await?;
    snapshot
}

/// The end of the server's current binlog.
async fn binlog_end(conn: &mut Conn) -> Result<BinlogPosition, RelayError> {
    let status: Option<Row> = conn.query_first("SHOW MASTER STATUS").await?;
    let status =
        status.ok_or_else(|| RelayError::BinlogNotConfigured("SHOW MASTER STATUS is empty: log_bin is off".into()))?;
    let file: Option<String> = status.get(0);
    let pos: Option<u64> = status.get(1);
    match (file, pos) {
        (Some(file), Some(pos)) => Ok(BinlogPosition { file, pos }),
        _ => Err(RelayError::BinlogNotConfigured("SHOW MASTER STATUS did not name a file and position".into())),
    }
}

/// Fails with the recovery steps when the checkpoint's binlog file is gone from the server.
async fn check_retained(conn: &mut Conn, checkpoint: &BinlogPosition) -> Result<(), RelayError> {
    let logs: Vec<Row> = conn.query("SHOW BINARY LOGS").await?;
    if logs.iter().any(|log| log.get::<String, _>(0).as_deref() == Some(checkpoint.file.as_str())) {
        Ok(())
    } else {
        Err(RelayError::BinlogPurged { checkpoint: checkpoint.clone() })
    }
}

/// A stream error, with the server's "cannot read the binlog" turned into one that needs an operator.
fn unreadable(error: mysql_async::Error, at: &BinlogPosition) -> RelayError {
    match error {
        mysql_async::Error::Server(e) if e.code == ER_MASTER_FATAL_ERROR_READING_BINLOG => {
            RelayError::BinlogUnreadable { checkpoint: at.clone(), detail: e.message }
        }
        other => other.into(),
    }
}
