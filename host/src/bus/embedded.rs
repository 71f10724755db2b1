//! The embedded bus: a log table per database (`bus_log`) and consumer positions (`bus_positions`).
//!
//! Appends happen inside the caller's transaction — the relay appends and deletes the outbox rows it
//! published in one commit, so on the embedded default every event enters the bus exactly once. Each topic
//! has one writer (the relay; a projection's worker for its dead-letter topic), so `seq` order is commit
//! order and `seq > position` never skips a row.

use sqlx::{Acquire, AnyConnection, Row};

use super::Message;
use crate::db::Database;
use crate::util::time::now_ms;

/// Messages appended in one INSERT: six values each, well within SQLite's limit of bound parameters.
const ROWS_PER_INSERT: usize = 128;

/// A message read back with its position in its topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub seq: i64,
    pub message: Message,
}

/// The database-backed bus.
#[derive(Clone)]
pub struct EmbeddedBus {
    db: Database,
}

impl EmbeddedBus {
    pub fn new(db: Database) -> Self {
        Self { db }
    }

    /// Appends `messages` in a transaction of their own.
    pub async fn append_alone(&self, messages: &[Message]) -> Result<(), sqlx::Error> {
        let mut conn = self.db.writer().acquire().await?;
        let mut tx = conn.begin().await?;
        self.append(&mut tx, messages).await?;
        tx.commit().await
    }

    /// Appends `messages`, in order, on `tx` (a connection inside a transaction); they become visible when
    /// it commits.
    pub async fn append(&self, tx: &mut AnyConnection, messages: &[Message]) -> Result<(), sqlx::Error> {
        let created_at = now_ms();
        // Each topic's messages, in order, follow its current end (its one writer is this transaction),
        // in multi-row inserts: one round trip per `ROWS_PER_INSERT` messages, not one per message.
        let mut by_topic: Vec<(&str, Vec<&Message>)> = Vec::new();
        for message in messages {
            match by_topic.iter_mut().find(|(topic, _)| *topic == message.topic) {
                Some((_, batch)) => batch.push(message),
                None => by_topic.push((&message.topic, vec![message])),
            }
        }
        for (topic, batch) in by_topic {
            let end: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM bus_log WHERE topic = ?")
                .bind(topic)
                .fetch_one(&mut *tx)
                .await?;
            for (chunk_index, chunk) in batch.chunks(ROWS_PER_INSERT).enumerate() {
                let rows = vec!["(?, ?, ?, ?, ?, ?)"; chunk.len()].join(", ");
                let sql =
                    format!("INSERT INTO bus_log (topic, seq, msg_key, headers, payload, created_at) VALUES {rows}");
                let mut insert = sqlx::query(&sql);
                for (index, message) in chunk.iter().enumerate() {
                    let seq = end + (chunk_index * ROWS_PER_INSERT + index) as i64 + 1;
                    let headers = serde_json::to_string(&message.headers).expect("string pairs always serialise");
                    insert = insert
                        .bind(topic)
                        .bind(seq)
                        .bind(&message.key)
                        .bind(headers)
                        .bind(&message.payload)
                        .bind(created_at);
                }
                insert.execute(&mut *tx).await?;
            }
        }
        Ok(())
    }

    /// Up to `limit` messages of `topic` after position `after` (0: from the start), in order.
    pub async fn read(&self, topic: &str, after: i64, limit: u32) -> Result<Vec<Delivered>, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT seq, msg_key, headers, payload FROM bus_log WHERE topic = ? AND seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(topic)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(self.db.reader())
        .await?;
        rows.iter()
            .map(|row| {
                let headers: String = row.try_get(2)?;
                Ok(Delivered {
                    seq: row.try_get(0)?,
                    message: Message {
                        topic: topic.to_owned(),
                        key: row.try_get(1)?,
                        headers: serde_json::from_str(&headers).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
                        payload: row.try_get(3)?,
                    },
                })
            })
            .collect()
    }

    /// Where `consumer` is in `topic` (0 before its first commit).
    pub async fn position(&self, consumer: &str, topic: &str) -> Result<i64, sqlx::Error> {
        let seq: Option<i64> = sqlx::query_scalar("SELECT seq FROM bus_positions WHERE consumer = ? AND topic = ?")
            .bind(consumer)
            .bind(topic)
            .fetch_optional(self.db.reader())
            .await?;
        Ok(seq.unwrap_or(0))
    }

    /// The last sequence number of `topic` (0 while it is empty).
    pub async fn end(&self, topic: &str) -> Result<i64, sqlx::Error> {
        sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM bus_log WHERE topic = ?")
            .bind(topic)
            .fetch_one(self.db.reader())
            .await
    }

    /// The first sequence number `topic` still holds (`None` while it is empty): 1 until retention prunes it.
    pub async fn first(&self, topic: &str) -> Result<Option<i64>, sqlx::Error> {
        sqlx::query_scalar("SELECT MIN(seq) FROM bus_log WHERE topic = ?").bind(topic).fetch_one(self.db.reader()).await
    }

    /// Records that `consumer` has durably handled `topic` up to `seq`.
    pub async fn commit(&self, consumer: &str, topic: &str, seq: i64) -> Result<(), sqlx::Error> {
        let mut tx = self.db.writer().begin().await?;
        sqlx::query("DELETE FROM bus_positions WHERE consumer = ? AND topic = ?")
            .bind(consumer)
            .bind(topic)
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO bus_positions (consumer, topic, seq) VALUES (?, ?, ?)")
            .bind(consumer)
            .bind(topic)
            .bind(seq)
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    }
}
