//! What the admin API reads of plugins' kept lines: a page of one plugin's lines (every version's), newest
//! first, filtered by level.

use serde::{Deserialize, Serialize};
use sqlx::Row;
use utoipa::{IntoParams, ToSchema};

use super::{level_named, LogLine};
use crate::db::Database;
use crate::plugins::PluginKind;
use crate::util::time::rfc3339_millis;

/// Most lines one page holds.
pub const MAX_PAGE: u32 = 500;

/// One kept line, as the admin API pages it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LogEntry {
    pub id: i64,
    pub at: String,
    pub version: i64,
    #[serde(flatten)]
    pub line: LogLine,
}

/// A page of one plugin's lines.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LogPage {
    /// Newest first; oldest first when asked for lines `after` an id (to follow the log).
    pub entries: Vec<LogEntry>,
    /// Pass as `before` for the next (older) page; `null` at the end.
    pub next_before: Option<i64>,
}

/// Which lines to page.
#[derive(Debug, Default, Deserialize, IntoParams)]
pub struct LogQuery {
    /// Lines older than this id, newest first.
    pub before: Option<i64>,
    /// Lines newer than this id, oldest first (what `strand plugin logs --follow` asks for).
    pub after: Option<i64>,
    /// At most this many (default 100, at most 500).
    pub limit: Option<u32>,
}

/// A page of what `tenant`'s plugin `kind/name` logged (every version's).
pub async fn page(
    db: &Database,
    tenant: &str,
    kind: PluginKind,
    name: &str,
    query: &LogQuery,
) -> Result<LogPage, sqlx::Error> {
    let limit = query.limit.unwrap_or(100).clamp(1, MAX_PAGE);
    let (range, order) = match query.after {
        Some(_) => ("id > ?", "ASC"),
        None => ("id < ?", "DESC"),
    };
    let sql = format!(
        "SELECT id, at, version, level, input, message FROM plugin_logs \
         WHERE tenant_id = ? AND kind = ? AND name = ? AND {range} ORDER BY id {order} LIMIT ?"
    );
    let rows = sqlx::query(&sql)
        .bind(tenant)
        .bind(kind.as_str())
        .bind(name)
        .bind(query.after.or(query.before).unwrap_or(i64::MAX))
        .bind(i64::from(limit) + 1)
        .fetch_all(db.reader())
        .await?;
    let mut entries = rows
        .iter()
        .map(|row| {
            let level: String = row.try_get(3)?;
            let level = level_named(&level).ok_or_else(|| sqlx::Error::Decode(format!("level {level:?}").into()))?;
            Ok(LogEntry {
                id: row.try_get(0)?,
                at: rfc3339_millis(row.try_get(1)?),
                version: row.try_get(2)?,
                line: LogLine { level, input: row.try_get(4)?, message: row.try_get(5)? },
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    let more = entries.len() > limit as usize;
    entries.truncate(limit as usize);
    let next_before = if more && query.after.is_none() { entries.last().map(|e| e.id) } else { None };
    Ok(LogPage { entries, next_before })
}
