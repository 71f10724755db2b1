//! From binlog events to committed transactions' outbox rows. Two halves: [`Step::of`] says what one event
//! means here (it needs the server's event and the table map), and [`TransactionReader`] is the pure state
//! machine over those steps — which rows are committed, in commit order, and where the last complete
//! transaction ends (the only safe place to resume) — unit-tested without a server.

use mysql_async::binlog::events::{Event, EventData, RowsEventData, TableMapEvent};
use mysql_async::binlog::row::BinlogRow;
use mysql_async::binlog::value::BinlogValue;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Value};

use super::super::checkpoint::BinlogPosition;
use super::super::RelayError;
use crate::outbox::{OutboxRow, StoredRow};

/// MariaDB's GTID event (the start of an event group when `@mariadb_slave_capability` is 4).
const MARIADB_GTID_EVENT: u8 = 162;
/// MariaDB's GTID flag for an event group without BEGIN/COMMIT (a DDL statement).
const MARIADB_GTID_STANDALONE: u8 = 1;

/// What one binlog event means to the reader.
#[derive(Debug)]
pub(super) enum Step {
    /// MariaDB's GTID: an event group starts, a transaction unless `standalone` (a DDL statement).
    GroupStart {
        standalone: bool,
    },
    /// The server moved on to the binlog file named.
    Rotate(String),
    /// Rows inserted into the outbox.
    Inserted(Vec<OutboxRow>),
    Begin,
    /// A commit (`XID` or `COMMIT`) ending at the binlog offset.
    Commit(u64),
    Rollback(u64),
    /// Any other statement, ending at the binlog offset: it commits itself unless a transaction is open.
    Statement(u64),
    /// Nothing the reader needs (other tables' rows, table maps, heartbeats).
    Other,
}

impl Step {
    /// What `event` means, with `table_map` the stream's table maps by id.
    pub(super) fn of<'s>(
        event: &Event,
        table: &OutboxTable,
        table_map: impl Fn(u64) -> Option<&'s TableMapEvent<'static>>,
    ) -> Result<Self, RelayError> {
        let header = event.header();
        if header.event_type_raw() == MARIADB_GTID_EVENT {
            // seq_no (8 bytes), domain_id (4), flags (1)
            let flags = event.data().get(12).copied().unwrap_or(MARIADB_GTID_STANDALONE);
            return Ok(Step::GroupStart { standalone: flags & MARIADB_GTID_STANDALONE != 0 });
        }
        let end = u64::from(header.log_pos());
        Ok(match event.read_data().map_err(RelayError::BinlogEvent)? {
            // The rotate the server sends first (header position 0) names the file requested; MariaDB leaves
            // checksum bytes on its name, so only real rotates (at the end of a file) are taken.
            Some(EventData::RotateEvent(rotate)) if header.log_pos() != 0 => Step::Rotate(rotate.name().into_owned()),
            Some(EventData::RowsEvent(
                rows @ (RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_)),
            )) => match table_map(rows.table_id()).filter(|map| table.is(map)) {
                Some(map) => Step::Inserted(
                    rows.rows(map)
                        .map(|row| table.row(row.map_err(RelayError::BinlogEvent)?.1))
                        .collect::<Result<_, _>>()?,
                ),
                None => Step::Other,
            },
            Some(EventData::XidEvent(_)) => Step::Commit(end),
            Some(EventData::QueryEvent(query)) => match query.query_raw() {
                b"BEGIN" => Step::Begin,
                b"COMMIT" => Step::Commit(end),
                b"ROLLBACK" => Step::Rollback(end),
                _ => Step::Statement(end),
            },
            _ => Step::Other,
        })
    }
}

/// Committed transactions' outbox rows, read step by step.
pub(super) struct TransactionReader {
    file: String,
    in_transaction: bool,
    /// Outbox rows of the transaction being read.
    pending: Vec<OutboxRow>,
    /// Outbox rows of committed transactions, in commit order, not yet published.
    pub(super) ready: Vec<OutboxRow>,
    /// The end of the last committed transaction read.
    pub(super) committed: BinlogPosition,
}

impl TransactionReader {
    pub(super) fn new(start: BinlogPosition) -> Self {
        Self {
            file: start.file.clone(),
            in_transaction: false,
            pending: Vec::new(),
            ready: Vec::new(),
            committed: start,
        }
    }

    pub(super) fn apply(&mut self, step: Step) {
        match step {
            Step::GroupStart { standalone } => self.in_transaction = !standalone,
            Step::Rotate(file) => self.file = file,
            Step::Inserted(mut rows) => self.pending.append(&mut rows),
            Step::Begin => self.in_transaction = true,
            Step::Commit(end) => self.commit(end),
            Step::Rollback(end) => {
                self.pending.clear();
                self.commit(end);
            }
            // A statement that commits itself (DDL); inside a transaction (SAVEPOINT …) it ends nothing.
            Step::Statement(end) if !self.in_transaction => self.commit(end),
            Step::Statement(_) | Step::Other => {}
        }
    }

    fn commit(&mut self, end: u64) {
        self.ready.append(&mut self.pending);
        self.in_transaction = false;
        self.committed = BinlogPosition { file: self.file.clone(), pos: end };
    }
}

/// Which binlog rows are the outbox's, and how its columns are named.
pub(super) struct OutboxTable {
    schema: String,
    /// Column names by position, for servers that do not log them (`binlog_row_metadata` other than FULL).
    columns: Vec<String>,
}

impl OutboxTable {
    pub(super) async fn describe(conn: &mut Conn) -> Result<Self, RelayError> {
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

    fn is(&self, map: &TableMapEvent<'_>) -> bool {
        map.table_name_raw() == b"outbox" && map.database_name_raw() == self.schema.as_bytes()
    }

    fn row(&self, row: Option<BinlogRow>) -> Result<OutboxRow, RelayError> {
        let row = row.ok_or_else(|| RelayError::BinlogEvent(std::io::Error::other("an insert without its row")))?;
        let logged = row.columns_ref().iter().map(|column| column.name_str().into_owned());
        self.decode(logged.enumerate().map(|(index, name)| (name, row.as_ref(index))))
    }

    /// The outbox row of an insert's `(logged column name, value)` pairs, in column order. A server that
    /// does not log names calls them `@1`, `@2` …: those are named by position.
    fn decode<'v>(
        &self,
        columns: impl Iterator<Item = (String, Option<&'v BinlogValue<'v>>)>,
    ) -> Result<OutboxRow, RelayError> {
        let mut event = StoredRow::default();
        for (index, (logged, value)) in columns.enumerate() {
            let name = match logged.strip_prefix('@') {
                Some(_) => self.columns.get(index).map_or("", String::as_str),
                None => &logged,
            };
            match name {
                "id" => event.id = int(value),
                "tenant_id" => event.tenant = text(value),
                "aggregate_type" => event.aggregate_type = text(value),
                "aggregate_id" => event.aggregate_id = text(value),
                "event_type" => event.event_type = text(value),
                "event_key" => event.key = text(value),
                "payload" => event.payload = text(value),
                "traceparent" => event.traceparent = Some(text(value)).filter(|t| !t.is_empty()),
                _ => {}
            }
        }
        if event.id == 0 {
            return Err(RelayError::BinlogEvent(std::io::Error::other("an outbox insert without an id column")));
        }
        Ok(OutboxRow::try_from(event)?)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64) -> OutboxRow {
        let acme = "acme".parse().unwrap();
        OutboxRow::published(id, &acme, (&crate::plugins::sample_events()[0]).into())
    }

    fn at(file: &str, pos: u64) -> BinlogPosition {
        BinlogPosition { file: file.into(), pos }
    }

    fn read(steps: impl IntoIterator<Item = Step>) -> TransactionReader {
        let mut reader = TransactionReader::new(at("bin.000001", 4));
        steps.into_iter().for_each(|step| reader.apply(step));
        reader
    }

    fn ids(reader: &TransactionReader) -> Vec<i64> {
        reader.ready.iter().map(|row| row.id).collect()
    }

    #[test]
    fn rows_are_ready_only_once_their_transaction_commits() {
        let open = read([Step::Begin, Step::Inserted(vec![row(1), row(2)]), Step::Other]);
        assert!(open.ready.is_empty());
        assert_eq!(open.committed, at("bin.000001", 4), "no transaction ended: the checkpoint stays");

        let committed =
            read([Step::Begin, Step::Inserted(vec![row(1)]), Step::Inserted(vec![row(2)]), Step::Commit(90)]);
        assert_eq!(ids(&committed), [1, 2]);
        assert_eq!(committed.committed, at("bin.000001", 90));
    }

    #[test]
    fn a_rolled_back_transaction_publishes_nothing_but_moves_the_position() {
        let reader = read([
            Step::Begin,
            Step::Inserted(vec![row(1)]),
            Step::Commit(50),
            Step::Begin,
            Step::Inserted(vec![row(2)]),
            Step::Rollback(80),
        ]);
        assert_eq!(ids(&reader), [1]);
        assert_eq!(reader.committed, at("bin.000001", 80));
    }

    #[test]
    fn a_statement_commits_itself_only_outside_a_transaction() {
        // A SAVEPOINT inside a transaction ends nothing.
        let inside = read([Step::Begin, Step::Inserted(vec![row(1)]), Step::Statement(60)]);
        assert!(inside.ready.is_empty());
        assert_eq!(inside.committed, at("bin.000001", 4));
        // A DDL statement (MariaDB marks its group standalone) is a transaction of its own.
        let ddl = read([Step::GroupStart { standalone: true }, Step::Statement(70)]);
        assert_eq!(ddl.committed, at("bin.000001", 70));
        // A MariaDB group that is a transaction opens one without BEGIN.
        let group = read([Step::GroupStart { standalone: false }, Step::Inserted(vec![row(3)]), Step::Statement(75)]);
        assert!(group.ready.is_empty());
    }

    #[test]
    fn commits_are_kept_in_order_across_a_rotate() {
        let reader = read([
            Step::Begin,
            Step::Inserted(vec![row(1)]),
            Step::Commit(100),
            Step::Rotate("bin.000002".into()),
            Step::Begin,
            Step::Inserted(vec![row(2)]),
            Step::Commit(30),
        ]);
        assert_eq!(ids(&reader), [1, 2]);
        assert_eq!(reader.committed, at("bin.000002", 30), "the position names the file it is in");
    }

    fn table(columns: &[&str]) -> OutboxTable {
        OutboxTable { schema: "strand".into(), columns: columns.iter().map(|&c| c.to_owned()).collect() }
    }

    #[test]
    fn an_insert_is_decoded_by_logged_names_or_by_position() {
        let written = row(7);
        let values = [
            BinlogValue::Value(Value::Int(7)),
            BinlogValue::Value(Value::Bytes(b"acme".to_vec())),
            BinlogValue::Value(Value::Bytes(b"follow".to_vec())),
            BinlogValue::Value(Value::Bytes(written.payload.clone().into_bytes())),
        ];
        let columns = ["id", "tenant_id", "event_type", "payload"];
        let by_name = table(&[]).decode(columns.map(String::from).into_iter().zip(values.iter().map(Some))).unwrap();
        assert_eq!((by_name.id, by_name.tenant.as_str(), &by_name.change), (7, "acme", &written.change));

        let unnamed = ["@1", "@2", "@3", "@4"].map(String::from);
        let by_position = table(&columns).decode(unnamed.into_iter().zip(values.iter().map(Some))).unwrap();
        assert_eq!(by_position, by_name);
    }

    #[test]
    fn a_corrupt_insert_stops_the_relay_naming_its_row() {
        let values = [BinlogValue::Value(Value::Int(7)), BinlogValue::Value(Value::Bytes(b"acme".to_vec()))];
        let columns = ["id", "tenant_id"].map(String::from);
        let refused = table(&[]).decode(columns.into_iter().zip(values.iter().map(Some))).unwrap_err();
        assert!(matches!(&refused, RelayError::CorruptOutbox(corrupt) if corrupt.id == 7), "{refused}");
    }

    #[test]
    fn an_insert_without_an_id_is_refused() {
        let values = [BinlogValue::Value(Value::Bytes(b"acme".to_vec()))];
        let decoded = table(&[]).decode([("tenant_id".to_owned(), values.first())].into_iter());
        assert!(matches!(decoded, Err(RelayError::BinlogEvent(_))));
    }
}
