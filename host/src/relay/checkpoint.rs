//! The binlog-mode relay's durable position: one row of `relay_checkpoint`, advanced in the transaction that
//! deletes the published outbox rows, so "covered by the checkpoint" and "gone from the outbox" are one fact.
//!
//! A file and offset mean something only on the server that wrote that binlog, so the row also names the
//! server (`@@server_id`). The row replicates with the data: after a failover the new primary holds a
//! checkpoint of the old one's binlog, and an outbox of exactly the rows that checkpoint did not cover —
//! which is what the relay resumes from there (see `binlog.rs`).

use std::fmt;

use sqlx::{AnyConnection, Row};

use crate::db::Database;
use crate::ops::metrics::{RELAY_BINLOG_FILE, RELAY_BINLOG_POSITION};
use crate::util::time::now_ms;

/// The name of the outbox relay's checkpoint row.
const NAME: &str = "outbox";

/// A place in the server's binlog: the file and the byte offset of the next event to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinlogPosition {
    pub file: String,
    pub pos: u64,
}

/// How far (in bytes of one binlog file) the position may move past the saved checkpoint before it is
/// worth saving on its own.
const WORTH_SAVING: u64 = 1 << 20;

impl BinlogPosition {
    /// Whether this position is in a later file than `saved`, or a mebibyte or more past it.
    pub fn far_ahead_of(&self, saved: &BinlogPosition) -> bool {
        self.file != saved.file || self.pos >= saved.pos + WORTH_SAVING
    }
}

impl fmt::Display for BinlogPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.pos)
    }
}

/// A saved checkpoint: the position, and the server whose binlog it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    pub position: BinlogPosition,
    /// `@@server_id` of the server that wrote the binlog; `None` for a checkpoint saved before it was kept.
    pub server_id: Option<u32>,
}

/// Reads, writes and forgets the checkpoint.
pub struct Checkpoint;

impl Checkpoint {
    /// Where the relay resumes; `None` before its first start (or after a reset).
    pub async fn load(db: &Database) -> Result<Option<Saved>, sqlx::Error> {
        let row = sqlx::query("SELECT binlog_file, binlog_pos, server_id FROM relay_checkpoint WHERE name = ?")
            .bind(NAME)
            .fetch_optional(db.writer())
            .await?;
        row.map(|row| {
            let position = BinlogPosition { file: row.try_get(0)?, pos: row.try_get::<i64, _>(1)? as u64 };
            let server_id = row.try_get::<Option<i64>, _>(2)?.map(|id| id as u32);
            Ok(Saved { position, server_id })
        })
        .transpose()
    }

    /// Moves the checkpoint to `position` in the binlog of server `server_id`, within the caller's
    /// transaction.
    pub async fn save(tx: &mut AnyConnection, position: &BinlogPosition, server_id: u32) -> Result<(), sqlx::Error> {
        sqlx::query(
            "INSERT INTO relay_checkpoint (name, binlog_file, binlog_pos, server_id, updated_at) \
             VALUES (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE binlog_file = VALUES(binlog_file), \
             binlog_pos = VALUES(binlog_pos), server_id = VALUES(server_id), updated_at = VALUES(updated_at)",
        )
        .bind(NAME)
        .bind(&position.file)
        .bind(position.pos as i64)
        .bind(i64::from(server_id))
        .bind(now_ms())
        .execute(tx)
        .await?;
        // The file's sequence number and the offset in it: the relay's binlog position.
        let file_index = position.file.rsplit('.').next().and_then(|n| n.parse::<f64>().ok()).unwrap_or(0.0);
        metrics::gauge!(RELAY_BINLOG_FILE.name).set(file_index);
        metrics::gauge!(RELAY_BINLOG_POSITION.name).set(position.pos as f64);
        Ok(())
    }

    /// Drops the checkpoint: the next binlog-mode start publishes what is left in the outbox and follows
    /// the binlog from its end. Lossless, because rows leave the outbox only with a checkpoint past them.
    pub async fn forget(db: &Database) -> Result<(), sqlx::Error> {
        sqlx::query("DELETE FROM relay_checkpoint WHERE name = ?").bind(NAME).execute(db.writer()).await?;
        Ok(())
    }
}
