//! What the binlog relay asks the server beside the stream: whether its binlog can carry the outbox, a
//! consistent snapshot of the outbox with the binlog position it matches, whether a checkpoint's file is
//! still kept, and which stream errors need an operator.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};

use super::super::checkpoint::BinlogPosition;
use super::super::RelayError;

/// How long a first start on MySQL waits for in-flight outbox writers before it gives up and retries.
const SNAPSHOT_LOCK_WAIT_S: u32 = 5;
/// The server's "cannot read binlog" error (e.g. the requested file was purged).
const ER_MASTER_FATAL_ERROR_READING_BINLOG: u16 = 1236;

/// Refuses a server whose binlog cannot carry the outbox rows; else its `@@server_id`.
pub(super) async fn check_server(conn: &mut Conn) -> Result<u32, RelayError> {
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
pub(super) async fn outbox_snapshot(conn: &mut Conn) -> Result<(BinlogPosition, Vec<i64>), RelayError> {
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
pub(super) async fn check_retained(conn: &mut Conn, checkpoint: &BinlogPosition) -> Result<(), RelayError> {
    let logs: Vec<Row> = conn.query("SHOW BINARY LOGS").await?;
    if logs.iter().any(|log| log.get::<String, _>(0).as_deref() == Some(checkpoint.file.as_str())) {
        Ok(())
    } else {
        Err(RelayError::BinlogPurged { checkpoint: checkpoint.clone() })
    }
}

/// A stream error, with the server's "cannot read the binlog" turned into one that needs an operator.
pub(super) fn unreadable(error: mysql_async::Error, at: &BinlogPosition) -> RelayError {
    match error {
        mysql_async::Error::Server(e) if e.code == ER_MASTER_FATAL_ERROR_READING_BINLOG => {
            RelayError::BinlogUnreadable { checkpoint: at.clone(), detail: e.message }
        }
        other => other.into(),
    }
}
