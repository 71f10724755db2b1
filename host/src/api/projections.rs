//! `GET /v1/projections/{plugin}/{space}/{ids}`: a space a projector version declared readable, of the
//! caller's tenant only, from the cache. It is served only once a build completed it for the version
//! serving the tenant — while it is built, `503 projection_building` says how far the build is, never a
//! partial answer; undeclared spaces and projectors the tenant does not have are `404 not_found`.

use axum::extract::State;
use axum::Json;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Caller;
use super::params::{ApiPath, ApiQuery, PageParams};
use super::problem::{ApiError, Problem};
use super::AppState;
use crate::bus::Topology;
use crate::cache::{member, PageStart, Space};
use crate::graph::Position;
use crate::plugins::{PluginKind, Shape};
use crate::projection::progress;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// A projector's declared spaces.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(read))
}

/// Most ids in one key (as the plugin contract allows).
const MAX_IDS: usize = 8;

#[derive(Debug, Deserialize)]
pub struct ProjectionPath {
    plugin: String,
    space: String,
    ids: String,
}

/// A declared space's data for one key, in the shape the projector declared.
#[derive(Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "shape", rename_all = "kebab-case")]
pub enum ProjectionRead {
    /// 0 when the key was never counted.
    Counter { value: i64 },
    /// `null` when the key holds no value.
    Value { value: Option<String> },
    /// Highest score first (ties: highest member first), paged like the follow lists; `total`: how many
    /// members the whole set holds (a mutual-follows count, say).
    SortedSet { items: Vec<ScoredMember>, next_cursor: Option<String>, has_more: bool, total: u64 },
}

#[derive(Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ScoredMember {
    pub member: i64,
    pub score: f64,
}

/// Read a projector's declared space for the key `ids` of the caller's tenant.
#[utoipa::path(get, path = "/v1/projections/{plugin}/{space}/{ids}", tag = "read",
    params(("plugin" = String, Path, description = "The projector's name"),
        ("space" = String, Path, description = "A space the projector's version declared readable"),
        ("ids" = String, Path, description = "The key's ids, comma-separated, e.g. `42` or `42,7`",
            pattern = r"^-?[0-9]{1,19}(,-?[0-9]{1,19}){0,7}$"),
        PageParams),
    responses((status = 200, body = ProjectionRead), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 404, description = "No such projector for the tenant, or the space is not declared readable",
            body = Problem),
        (status = 503, description = "`projection_building`: the space is being built; or the cache is down",
            body = Problem)),
    security(("bearer" = [])))]
pub async fn read(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(path): ApiPath<ProjectionPath>,
    ApiQuery(page): ApiQuery<PageParams>,
) -> Result<Json<ProjectionRead>, ApiError> {
    let not_found = || ApiError::NoSuchSpace { plugin: path.plugin.clone(), space: path.space.clone() };
    let plugin = state.plugins.active(&caller.tenant, PluginKind::Projector, &path.plugin).ok_or_else(not_found)?;
    let shape = plugin.readable.iter().find(|r| r.space == path.space).ok_or_else(not_found)?.shape;
    let ids = parse_ids(&path.ids)?;
    let space = Space { tenant: caller.tenant.as_str(), plugin: &plugin.name, version: plugin.version };
    if state.cache.built_by(space).await?.as_deref() != Some(plugin.sha256.as_str()) {
        return Err(building(&state, &caller, &plugin.name, plugin.version).await);
    }
    let read = match shape {
        Shape::Counter => {
            let text = state.cache.texts(&[space.counter(&path.space, ids)]).await?.remove(0);
            ProjectionRead::Counter { value: text.and_then(|t| t.parse().ok()).unwrap_or(0) }
        }
        Shape::Value => {
            ProjectionRead::Value { value: state.cache.texts(&[space.value(&path.space, ids)]).await?.remove(0) }
        }
        Shape::SortedSet => sorted_set_page(&state, &space.sorted_set(&path.space, ids), &page).await?,
    };
    Ok(Json(read))
}

/// One page of a sorted set: `limit`, with an `offset` or a `cursor` this endpoint issued.
async fn sorted_set_page(state: &AppState, key: &str, page: &PageParams) -> Result<ProjectionRead, ApiError> {
    // Limit and offset are checked as for the follow lists; the cursor is this endpoint's own.
    let plain = PageParams { limit: page.limit, cursor: None, offset: page.offset };
    let request = plain.to_request()?;
    let after = page.cursor.as_deref().filter(|c| !c.is_empty()).map(decode_cursor).transpose()?;
    let cursor_member;
    let from = match (after, request.position) {
        (Some(_), Position::Offset(_)) => return Err(ApiError::CursorAndOffset),
        (Some((score, id)), _) => {
            cursor_member = member(id);
            PageStart::After(score, &cursor_member)
        }
        (None, Position::Offset(offset)) => PageStart::Rank(usize::try_from(offset).unwrap_or(usize::MAX)),
        (None, _) => PageStart::Rank(0),
    };
    let limit = request.limit as usize;
    let mut items: Vec<ScoredMember> = state
        .cache
        .descending(key, from, limit + 1)
        .await?
        .into_iter()
        .filter_map(|(m, score)| Some(ScoredMember { member: m.parse().ok()?, score }))
        .collect();
    let has_more = items.len() > limit;
    items.truncate(limit);
    let next_cursor = items.last().filter(|_| has_more).map(encode_cursor);
    let total = state.cache.cardinality(key).await?;
    Ok(ProjectionRead::SortedSet { items, next_cursor, has_more, total })
}

/// The key's ids: 1 to [`MAX_IDS`] integers.
fn parse_ids(raw: &str) -> Result<Vec<i64>, ApiError> {
    let invalid = || ApiError::InvalidIds { max: MAX_IDS };
    let ids =
        raw.split(',').map(|id| id.trim().parse::<i64>()).collect::<Result<Vec<_>, _>>().map_err(|_| invalid())?;
    if ids.is_empty() || ids.len() > MAX_IDS {
        return Err(invalid());
    }
    Ok(ids)
}

fn encode_cursor(last: &ScoredMember) -> String {
    URL_SAFE_NO_PAD.encode(format!("z1:{}:{}", last.score, last.member))
}

fn decode_cursor(cursor: &str) -> Result<(f64, i64), ApiError> {
    let invalid = || ApiError::InvalidCursor;
    let text = URL_SAFE_NO_PAD.decode(cursor).ok().and_then(|b| String::from_utf8(b).ok()).ok_or_else(invalid)?;
    let mut parts = text.split(':');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("z1"), Some(score), Some(id), None) => {
            let score: f64 = score.parse().map_err(|_| invalid())?;
            Ok((score.is_finite().then_some(score).ok_or_else(invalid)?, id.parse().map_err(|_| invalid())?))
        }
        _ => Err(invalid()),
    }
}

/// `503 projection_building`, with how far the build recorded for the tenant has come.
async fn building(state: &AppState, caller: &Caller, plugin: &str, version: i64) -> ApiError {
    let projection = Topology::projector_projection(plugin);
    let progress = match progress::all(&state.db).await {
        Ok(recorded) => match recorded
            .into_iter()
            .find(|b| b.projection == projection && b.tenant == caller.tenant.as_str() && b.plugin_version == version)
        {
            Some(b) => format!("{} of {} pairs replayed", b.done, b.total),
            None => "not started yet".to_owned(),
        },
        // The answer is a 503 either way; only its detail is poorer.
        Err(error) => {
            tracing::warn!(%error, "cannot read backfill progress for a projection_building answer");
            "progress unknown (the database did not answer)".to_owned()
        }
    };
    ApiError::ProjectionBuilding { plugin: plugin.to_owned(), version, progress }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_ids_are_bounded() {
        let last = ScoredMember { member: -7, score: 1.5e12 };
        assert_eq!(decode_cursor(&encode_cursor(&last)).unwrap(), (1.5e12, -7));
        assert_eq!(decode_cursor("djE6MTox").unwrap_err().code(), "invalid_cursor");
        assert_eq!(parse_ids("42,7").unwrap(), vec![42, 7]);
        for bad in ["", "x", "1,,2", "1,2,3,4,5,6,7,8,9"] {
            assert_eq!(parse_ids(bad).unwrap_err().code(), "invalid_ids", "{bad}");
        }
    }
}
