//! Export, streamed page by page from the truth (a user with a million followers is never held in memory):
//! one of a user's lists as CSV or JSON (data portability, as Mastodon's exports), and a whole tenant's
//! graph as NDJSON — the format `strand import` reads back.

use bytes::Bytes;
use futures::stream::{self, Stream, StreamExt};
use serde::Serialize;

use crate::db::Database;
use crate::graph::{held_edges_after, list, Listing, PageRequest, Position, TenantId, UserId};
use crate::outbox::Relation;
use crate::util::time::rfc3339_millis;

/// Entries read per page.
const PAGE: u32 = 1000;

crate::str_enum! {
    /// How a user's list is written.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum Format("export format") {
        /// `user_id,since[,expires_at]` with a header line.
        #[default]
        Csv = "csv",
        /// One JSON array of `{"user_id", "since"[, "expires_at"]}`.
        Json = "json",
    }
}

/// One entry of an exported list.
#[derive(Serialize)]
struct Entry {
    user_id: i64,
    since: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at: Option<String>,
}

/// `user`'s `listing` (newest first) as `format`, page by page.
pub fn user_list(
    db: Database,
    tenant: TenantId,
    user: UserId,
    listing: Listing,
    format: Format,
) -> impl Stream<Item = Result<Bytes, sqlx::Error>> + Send {
    let mutes = listing == Listing::Mutes;
    let opening = match (format, mutes) {
        (Format::Csv, false) => "user_id,since\n",
        (Format::Csv, true) => "user_id,since,expires_at\n",
        (Format::Json, _) => "[",
    };
    let start = Some((Position::Start, true));
    let pages = stream::try_unfold(start, move |state| {
        let (db, tenant) = (db.clone(), tenant.clone());
        async move {
            let Some((position, first)) = state else { return Ok(None) };
            let page = list(&db, &tenant, user, listing, PageRequest { position, limit: PAGE }).await?;
            let mut out = String::new();
            for (i, item) in page.items.iter().enumerate() {
                let entry = Entry {
                    user_id: item.user_id,
                    since: rfc3339_millis(item.followed_at_ms),
                    expires_at: item.expires_at_ms.map(rfc3339_millis),
                };
                match format {
                    Format::Csv if mutes => out.push_str(&format!(
                        "{},{},{}\n",
                        entry.user_id,
                        entry.since,
                        entry.expires_at.unwrap_or_default()
                    )),
                    Format::Csv => out.push_str(&format!("{},{}\n", entry.user_id, entry.since)),
                    Format::Json => {
                        if !(first && i == 0) {
                            out.push(',');
                        }
                        out.push_str(&serde_json::to_string(&entry).map_err(|e| sqlx::Error::Decode(e.into()))?);
                    }
                }
            }
            let next = match page.items.last() {
                Some(last) if page.has_more => {
                    Some((Position::After { followed_at_ms: last.followed_at_ms, user_id: last.user_id }, false))
                }
                _ => None,
            };
            Ok(Some((Bytes::from(out), next)))
        }
    });
    let closing = stream::iter((format == Format::Json).then(|| Ok(Bytes::from_static(b"]\n"))));
    stream::once(async move { Ok(Bytes::from_static(opening.as_bytes())) }).chain(pages).chain(closing)
}

/// One edge of a tenant's graph in its NDJSON export (and import).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct EdgeLine {
    /// `follow` (the default), `block` or `mute`.
    #[serde(default = "follow")]
    pub relation: String,
    pub from: i64,
    pub to: i64,
    /// When it began, epoch ms (a follow's `followed_at`); the time of the import when missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<i64>,
    /// A mute's end, epoch ms (none: for good).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    /// A pending follow request rather than a follow.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requested: bool,
}

fn follow() -> String {
    "follow".to_owned()
}

/// Every edge of `tenant` that holds — follows, pending requests, blocks, unexpired mutes — as NDJSON, in
/// primary-key order, page by page.
pub fn tenant_edges(db: Database, tenant: TenantId) -> impl Stream<Item = Result<Bytes, sqlx::Error>> + Send {
    let relations = [Relation::Follow, Relation::Block, Relation::Mute];
    stream::try_unfold(Some((0usize, 0i64, 0i64)), move |state| {
        let (db, tenant) = (db.clone(), tenant.clone());
        async move {
            let Some((index, from, to)) = state else { return Ok(None) };
            let relation = relations[index];
            let rows = held_edges_after(&db, &tenant, relation, (from, to), PAGE).await?;
            let mut out = String::new();
            let mut last = (from, to);
            for edge in &rows {
                let line = EdgeLine {
                    relation: relation.as_str().to_owned(),
                    from: edge.from,
                    to: edge.to,
                    at_ms: Some(edge.at_ms),
                    expires_at_ms: edge.expires_at_ms,
                    requested: edge.requested,
                };
                last = (line.from, line.to);
                out.push_str(&serde_json::to_string(&line).map_err(|e| sqlx::Error::Decode(e.into()))?);
                out.push('\n');
            }
            let next = if rows.len() as u32 == PAGE {
                Some((index, last.0, last.1))
            } else if index + 1 < relations.len() {
                Some((index + 1, 0, 0))
            } else {
                None
            };
            Ok(Some((Bytes::from(out), next)))
        }
    })
}
