//! Request parameters shared by the v1 and seed-compatible routes, validated into domain types.
//!
//! Rejections become problem+json through [`ApiError`], so a bad id or limit is a 400 with a stable code.

use std::collections::HashSet;

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Deserialize;

use super::problem::ApiError;
use crate::graph::{ListedUser, PageRequest, Position, UserId};

/// How many ids a batch read takes at most.
pub const MAX_BATCH: usize = 100;
/// Page size limits of list reads.
pub const MAX_LIMIT: u32 = 100;
pub const DEFAULT_LIMIT: u32 = 20;
/// The deepest offset a page may start at: skipping costs work in proportion (in the database, and in the
/// cache's ranks), so deeper pages are the cursor's job, which costs the same at any depth.
pub const MAX_OFFSET: u64 = 10_000;

/// `Query<T>` whose rejection is problem+json.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

/// `Path<T>` whose rejection is problem+json.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);

/// `Json<T>` whose rejection is problem+json.
#[derive(axum::extract::FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);

/// The `{user_id}` segment of a route, a positive integer.
pub struct UserIdPath(pub UserId);

impl<S: Send + Sync> FromRequestParts<S> for UserIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state).await?;
        parse_user_id(&raw).map(UserIdPath)
    }
}

pub fn parse_user_id(raw: &str) -> Result<UserId, ApiError> {
    Ok(raw.parse()?)
}

/// A comma-separated list of 1 to [`MAX_BATCH`] user ids, duplicates dropped, order kept.
pub fn parse_user_ids(raw: &str) -> Result<Vec<UserId>, ApiError> {
    let mut seen = HashSet::new();
    let mut ids = Vec::new();
    for part in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let id = parse_user_id(part)?;
        if seen.insert(id) {
            ids.push(id);
        }
    }
    if ids.is_empty() {
        return Err(ApiError::NoUserIds);
    }
    if ids.len() > MAX_BATCH {
        return Err(ApiError::TooManyUserIds { max: MAX_BATCH });
    }
    Ok(ids)
}

/// Paging parameters of list reads: `limit` with either an opaque `cursor` or an `offset`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageParams {
    /// 1 to 100, default 20.
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Entries to skip (instead of a cursor).
    pub offset: Option<u64>,
}

impl PageParams {
    pub fn to_request(&self) -> Result<PageRequest, ApiError> {
        let limit = self.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ApiError::InvalidLimit { max: MAX_LIMIT });
        }
        let position = match (self.cursor.as_deref().filter(|c| !c.is_empty()), self.offset) {
            (Some(_), Some(_)) => return Err(ApiError::CursorAndOffset),
            (Some(cursor), None) => decode_cursor(cursor)?,
            (None, Some(offset)) if offset > MAX_OFFSET => return Err(ApiError::OffsetTooLarge { max: MAX_OFFSET }),
            (None, Some(offset)) => Position::Offset(offset),
            (None, None) => Position::Start,
        };
        Ok(PageRequest { position, limit })
    }
}

/// The cursor that continues after `last`; opaque to clients so its format can change.
pub fn encode_cursor(last: &ListedUser) -> String {
    URL_SAFE_NO_PAD.encode(format!("v1:{}:{}", last.followed_at_ms, last.user_id))
}

fn decode_cursor(cursor: &str) -> Result<Position, ApiError> {
    let invalid = || ApiError::InvalidCursor;
    let text = URL_SAFE_NO_PAD.decode(cursor).ok().and_then(|b| String::from_utf8(b).ok()).ok_or_else(invalid)?;
    let mut parts = text.split(':');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("v1"), Some(at), Some(user), None) => Ok(Position::After {
            followed_at_ms: at.parse().map_err(|_| invalid())?,
            user_id: user.parse().map_err(|_| invalid())?,
        }),
        _ => Err(invalid()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let last = ListedUser { user_id: 7, followed_at_ms: 1_700_000_000_123, expires_at_ms: None };
        let params = PageParams { cursor: Some(encode_cursor(&last)), ..Default::default() };
        assert_eq!(
            params.to_request().unwrap().position,
            Position::After { followed_at_ms: 1_700_000_000_123, user_id: 7 }
        );
        for bad in ["x", "djE6YQ", "!!!"] {
            let params = PageParams { cursor: Some(bad.into()), ..Default::default() };
            assert_eq!(params.to_request().unwrap_err().code(), "invalid_cursor");
        }
    }

    #[test]
    fn batches_are_bounded_and_deduplicated() {
        let ids = parse_user_ids("3, 2,3").unwrap();
        assert_eq!(ids.iter().map(|i| i.get()).collect::<Vec<_>>(), vec![3, 2]);
        let many = (1..=101).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
        assert_eq!(parse_user_ids(&many).unwrap_err().code(), "too_many_user_ids");
        assert_eq!(parse_user_ids("").unwrap_err().code(), "invalid_user_ids");
        assert_eq!(parse_user_ids("1,x").unwrap_err().code(), "invalid_user_id");
    }
}
