//! Import of an existing graph into a tenant, streamed line by line (a 10 M-edge graph is never held in
//! memory): NDJSON as the tenant export writes it, or CSV of follows.
//!
//! Follows go in batches (`merge.rs`: the rules of a single follow, no bus event per edge) and the
//! `follower` table is kept in each batch's transaction; blocks and mutes go one by one through the ordinary
//! write path, with their events (a block ends follows both ways, as it would live). Merge semantics: an edge
//! that holds is kept, so importing the same graph twice changes nothing the second time. However the import
//! ends, the tenant's projector spaces are built again from the truth (`transfer::marks`).

use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde::Serialize;
use tokio::task::JoinHandle;
use utoipa::ToSchema;

use super::export::EdgeLine;
use super::marks;
use super::merge::{self, ImportedFollow, Outcome};
use crate::db::{held, is_lock_conflict, Database};
use crate::graph::{change, Act, RelationCommand, TenantId, UserId, WriteError};
use crate::projection::follower;
use crate::util::time::now_ms;

/// Follows per batch: one transaction, three statements.
pub const BATCH: usize = 5000;
/// How often a batch that lost a lock race with live writers is tried again.
const MAX_ATTEMPTS: u32 = 8;
/// The longest line read (an edge is well under 200 bytes).
pub const MAX_LINE: usize = 4096;

crate::str_enum! {
    /// How an imported graph is written.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum ImportFormat("import format") {
        /// One `{"relation", "from", "to", "at_ms"[, "requested", "expires_at_ms"]}` per line: the tenant
        /// export's format.
        #[default]
        Ndjson = "ndjson",
        /// `from,to[,at_ms]` follows, one per line; a first line that is not numbers is a header.
        Csv = "csv",
    }
}

/// What an import did, by outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize, ToSchema)]
pub struct ImportReport {
    /// Lines read (blank ones and a CSV header not counted).
    pub lines: u64,
    /// Follows that began.
    pub followed: u64,
    /// Follows that began as pending requests (the source said so, or the target is private).
    pub requested: u64,
    /// Edges that already held (a second import of the same graph keeps every one).
    pub kept: u64,
    /// Follows refused by a block between the two.
    pub blocked: u64,
    /// Edges refused because an account is suspended or deleted.
    pub inactive: u64,
    /// Blocks and mutes that began.
    pub blocks: u64,
    pub mutes: u64,
}

/// Why an import stopped. What was imported before stays (a batch is whole or absent), and running the
/// import again completes it.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("line {line}: {reason}")]
    Invalid { line: u64, reason: String },
    #[error("reading the graph failed")]
    Read(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Another import of the tenant is running: one at a time (`transfer::marks`).
    #[error("an import of this tenant is running; one at a time")]
    Running,
    /// The import's mark ran out (nothing arrived for the lease's length) and was recovered.
    #[error("the import stalled past its lease and was stopped")]
    Lost,
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
    /// A batch's task ended without an answer (it panicked): the batch is absent, as after a crash.
    #[error("an import batch stopped: {0}")]
    Stopped(#[from] tokio::task::JoinError),
}

/// Imports the graph `body` holds into `tenant`, line by line as it arrives, under the tenant's import mark
/// (`transfer::marks::begin`, which the caller took): what it did, and how it ended — a report also when
/// it stopped half-way (every batch before the stop is in).
pub async fn import<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
    db: Database,
    tenant: TenantId,
    format: ImportFormat,
    body: impl Stream<Item = Result<Bytes, E>>,
) -> (ImportReport, Result<(), ImportError>) {
    let mut importer = Importer::new(db, tenant, format);
    let result = importer.read(body).await;
    (importer.report, result)
}

impl Importer {
    /// Reads `body` to its end; on a bad line, what came before it is written first.
    async fn read<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
        &mut self,
        body: impl Stream<Item = Result<Bytes, E>>,
    ) -> Result<(), ImportError> {
        let read = self.lines_of(body).await;
        if matches!(read, Err(ImportError::Invalid { .. } | ImportError::Read(_))) {
            // Every line before the bad one is in: fixed, the import runs again from the start.
            self.flush().await?;
        }
        read?;
        self.flush().await
    }

    async fn lines_of<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
        &mut self,
        body: impl Stream<Item = Result<Bytes, E>>,
    ) -> Result<(), ImportError> {
        let too_long = |line| ImportError::Invalid { line, reason: format!("longer than {MAX_LINE} bytes") };
        let mut pending: Vec<u8> = Vec::new();
        let mut body = std::pin::pin!(body);
        while let Some(chunk) = body.next().await {
            pending.extend_from_slice(&chunk.map_err(|e| ImportError::Read(e.into()))?);
            let mut start = 0;
            while let Some(end) = pending[start..].iter().position(|&b| b == b'\n') {
                if end > MAX_LINE {
                    return Err(too_long(self.lines + 1));
                }
                self.line(&pending[start..start + end]).await?;
                start += end + 1;
            }
            pending.drain(..start);
            if pending.len() > MAX_LINE {
                return Err(too_long(self.lines + 1));
            }
        }
        if !pending.is_empty() {
            self.line(&pending).await?;
        }
        Ok(())
    }
}

/// One parsed line.
enum Line {
    Follow(ImportedFollow),
    /// A block or a mute: `act` by `from` on `to`.
    Other {
        act: Act,
        from: UserId,
        to: UserId,
        at_ms: i64,
    },
}

/// Parses `text` (one line, without its newline) as `format`; `None`: nothing to import on it (blank, or a
/// CSV header on the first line).
fn parse(format: ImportFormat, number: u64, text: &str, now: i64) -> Result<Option<Line>, ImportError> {
    let invalid = |reason: String| ImportError::Invalid { line: number, reason };
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let edge = match format {
        ImportFormat::Ndjson => serde_json::from_str::<EdgeLine>(text).map_err(|e| invalid(e.to_string()))?,
        ImportFormat::Csv => {
            let fields: Vec<&str> = text.split(',').map(str::trim).collect();
            let numbers: Result<Vec<i64>, _> = fields.iter().map(|f| f.parse::<i64>()).collect();
            match (numbers, fields.len()) {
                (Ok(n), 2 | 3) => EdgeLine {
                    relation: "follow".to_owned(),
                    from: n[0],
                    to: n[1],
                    at_ms: n.get(2).copied(),
                    expires_at_ms: None,
                    requested: false,
                },
                (Err(_), _) if number == 1 => return Ok(None),
                _ => return Err(invalid("a CSV line is `from,to[,at_ms]`, integers".to_owned())),
            }
        }
    };
    let user = |id: i64| UserId::try_from(id).map_err(|e| invalid(e.to_string()));
    let (from, to, at_ms) = (user(edge.from)?, user(edge.to)?, edge.at_ms.unwrap_or(now));
    if from == to {
        return Err(invalid(format!("user {from} cannot {} themselves", edge.relation)));
    }
    let act = match edge.relation.as_str() {
        "follow" => return Ok(Some(Line::Follow(ImportedFollow { from, to, at_ms, requested: edge.requested }))),
        "block" => Act::Block,
        "mute" => Act::Mute { expires_at_ms: edge.expires_at_ms, notifications: true },
        other => return Err(invalid(format!("unknown relation {other:?} (follow, block or mute)"))),
    };
    Ok(Some(Line::Other { act, from, to, at_ms }))
}

/// An import in progress: lines in, batches out. A full batch is written while the next one is read (the
/// database and this process work at once), one batch at a time, in order.
struct Importer {
    db: Database,
    tenant: TenantId,
    format: ImportFormat,
    now: i64,
    lines: u64,
    batch: Vec<ImportedFollow>,
    /// The batch being written, if any.
    writing: Option<JoinHandle<Result<Vec<Outcome>, ImportError>>>,
    report: ImportReport,
}

impl Importer {
    fn new(db: Database, tenant: TenantId, format: ImportFormat) -> Self {
        let (now, batch) = (now_ms(), Vec::with_capacity(BATCH));
        Self { db, tenant, format, now, lines: 0, batch, writing: None, report: ImportReport::default() }
    }

    /// Imports the next line (without its newline); a full batch is sent to be written.
    async fn line(&mut self, bytes: &[u8]) -> Result<(), ImportError> {
        self.lines += 1;
        let parsed = std::str::from_utf8(bytes)
            .map_err(|_| ImportError::Invalid { line: self.lines, reason: "not UTF-8".to_owned() })
            .and_then(|text| parse(self.format, self.lines, text, self.now));
        let Some(line) = parsed? else { return Ok(()) };
        self.report.lines += 1;
        match line {
            Line::Follow(follow) => {
                self.batch.push(follow);
                if self.batch.len() >= BATCH {
                    self.send().await?;
                }
            }
            Line::Other { act, from, to, at_ms } => {
                // In the source's order: the follows before it are in before a block ends them.
                self.flush().await?;
                let command = RelationCommand { tenant: &self.tenant, actor: from, subject: to, act, at_ms };
                match change(&self.db, command).await {
                    Ok(done) if !done.changed => self.report.kept += 1,
                    Ok(_) if act == Act::Block => self.report.blocks += 1,
                    Ok(_) => self.report.mutes += 1,
                    Err(WriteError::AccountDeleted | WriteError::AccountSuspended) => self.report.inactive += 1,
                    Err(other) => return Err(other.into()),
                }
            }
        }
        Ok(())
    }

    /// Writes every line read so far, and waits until it is in.
    async fn flush(&mut self) -> Result<(), ImportError> {
        self.send().await?;
        self.landed().await
    }

    /// Starts writing the batch read so far, rendered while the batch before it is written, once that one
    /// is in.
    async fn send(&mut self) -> Result<(), ImportError> {
        if self.batch.is_empty() {
            return self.landed().await;
        }
        let lines = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        let batch = merge::Batch::new(self.db.kind(), self.tenant.clone(), lines, self.now);
        self.landed().await?;
        self.writing = Some(tokio::spawn(write_with_retries(self.db.clone(), batch)));
        Ok(())
    }

    /// Waits for the batch being written, and counts what it did.
    async fn landed(&mut self) -> Result<(), ImportError> {
        let Some(writing) = self.writing.take() else { return Ok(()) };
        for outcome in writing.await?? {
            let count = match outcome {
                Outcome::Followed => &mut self.report.followed,
                Outcome::Requested => &mut self.report.requested,
                Outcome::Kept => &mut self.report.kept,
                Outcome::Blocked => &mut self.report.blocked,
                Outcome::Inactive => &mut self.report.inactive,
            };
            *count += 1;
        }
        Ok(())
    }
}

/// Writes `batch`, trying it again while it loses lock races with live writers.
async fn write_with_retries(db: Database, batch: merge::Batch) -> Result<Vec<Outcome>, ImportError> {
    let mut attempt = 1;
    loop {
        match write_batch(&db, &batch).await {
            Err(ImportError::Database(e)) if attempt < MAX_ATTEMPTS && is_lock_conflict(&e) => {
                tracing::debug!(tenant = %batch.tenant(), attempt, error = %e, "an import batch lost a lock race; retrying");
                tokio::time::sleep(Duration::from_millis(5u64 << attempt)).await;
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// `batch` into the truth and the `follower` table, with the import's mark renewed, in one transaction.
async fn write_batch(db: &Database, batch: &merge::Batch) -> Result<Vec<Outcome>, ImportError> {
    let (kind, tenant) = (db.kind(), batch.tenant());
    let mut tx = db.writer().begin().await?;
    held::holding("an import batch's transaction", async {
        if !marks::renew(&mut tx, tenant).await? {
            return Err(ImportError::Lost);
        }
        let (outcomes, written) = merge::follows(&mut tx, kind, batch).await?;
        follower::apply_imported(&mut tx, kind, tenant, &written).await?;
        tx.commit().await?;
        Ok(outcomes)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(format: ImportFormat, number: u64, text: &str) -> Result<Option<Line>, ImportError> {
        parse(format, number, text, 7)
    }

    #[test]
    fn csv_takes_a_header_pairs_and_times() {
        assert!(parsed(ImportFormat::Csv, 1, "from,to,at_ms").unwrap().is_none());
        let Some(Line::Follow(follow)) = parsed(ImportFormat::Csv, 2, "3, 4").unwrap() else { panic!("a follow") };
        assert_eq!((follow.from.get(), follow.to.get(), follow.at_ms), (3, 4, 7), "no time: the import's");
        let Some(Line::Follow(follow)) = parsed(ImportFormat::Csv, 2, "3,4,99").unwrap() else { panic!() };
        assert_eq!(follow.at_ms, 99);
        assert!(matches!(parsed(ImportFormat::Csv, 2, "from,to"), Err(ImportError::Invalid { line: 2, .. })));
        assert!(matches!(parsed(ImportFormat::Csv, 3, "3"), Err(ImportError::Invalid { line: 3, .. })));
    }

    #[test]
    fn ndjson_reads_the_exports_lines() {
        let line = r#"{"relation":"follow","from":1,"to":2,"at_ms":5,"requested":true}"#;
        let Some(Line::Follow(follow)) = parsed(ImportFormat::Ndjson, 1, line).unwrap() else { panic!() };
        assert!(follow.requested);
        let mute = r#"{"relation":"mute","from":1,"to":2,"expires_at_ms":9}"#;
        let Some(Line::Other { act, .. }) = parsed(ImportFormat::Ndjson, 1, mute).unwrap() else { panic!() };
        assert_eq!(act, Act::Mute { expires_at_ms: Some(9), notifications: true });
        assert!(parsed(ImportFormat::Ndjson, 1, "  ").unwrap().is_none());
    }

    #[test]
    fn bad_lines_are_named() {
        for bad in [r#"{"from":1,"to":1}"#, r#"{"from":0,"to":1}"#, r#"{"relation":"like","from":1,"to":2}"#, "{"] {
            assert!(matches!(parsed(ImportFormat::Ndjson, 4, bad), Err(ImportError::Invalid { line: 4, .. })), "{bad}");
        }
    }
}
