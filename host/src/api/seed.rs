//! The seed-compatible surface (`/api/v1/relation/*`), so clients of the seed's relation module switch to
//! Strand without changes. Same shapes as the seed; the seed's bugs fixed: a repeated follow changes
//! nothing (and never double counts), a self-follow is refused with 422.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::params::{encode_cursor, parse_user_id, ApiQuery, PageParams};
use super::problem::{ApiError, Problem};
use super::write::write_relation;
use super::AppState;
use crate::graph::{self, Act, Direction};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The seed systems' routes, kept for their clients.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(follow))
        .routes(routes!(unfollow))
        .routes(routes!(status))
        .routes(routes!(following))
        .routes(routes!(followers))
        .routes(routes!(counter))
}

/// Response header carrying the cursor of the next page, since the seed's lists are bare arrays.
pub const NEXT_CURSOR_HEADER: &str = "x-next-cursor";

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TargetParams {
    /// The other user.
    #[serde(rename = "toUserId")]
    pub to_user_id: String,
}

/// Follow `toUserId`. Answers a bare `true` once the caller follows them (also on a repeat), `false` when
/// they are a private account and the caller's follow request is pending.
#[utoipa::path(post, path = "/api/v1/relation/follow", tag = "seed", params(TargetParams),
    responses((status = 200, body = bool, content_type = "application/json"), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, description = "A block between the two (`blocked`)", body = Problem),
        (status = 422, body = Problem), (status = 429, body = Problem)),
    security(("bearer" = [])))]
pub async fn follow(
    state: State<AppState>,
    caller: Caller,
    params: ApiQuery<TargetParams>,
) -> Result<Json<bool>, ApiError> {
    set_following(state, caller, params, Act::Follow).await
}

/// Unfollow `toUserId` (or withdraw a pending follow request). Answers a bare `true` once the caller no
/// longer follows them.
#[utoipa::path(post, path = "/api/v1/relation/unfollow", tag = "seed", params(TargetParams),
    responses((status = 200, body = bool, content_type = "application/json"), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 422, body = Problem), (status = 429, body = Problem)),
    security(("bearer" = [])))]
pub async fn unfollow(
    state: State<AppState>,
    caller: Caller,
    params: ApiQuery<TargetParams>,
) -> Result<Json<bool>, ApiError> {
    set_following(state, caller, params, Act::Unfollow).await
}

async fn set_following(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(params): ApiQuery<TargetParams>,
    act: Act,
) -> Result<Json<bool>, ApiError> {
    let target = parse_user_id(&params.to_user_id)?;
    let change = write_relation(&state, &caller, act, target).await?;
    Ok(Json(act == Act::Unfollow || change.following))
}

/// The seed's relationship status.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SeedStatus {
    pub following: bool,
    pub followed_by: bool,
    pub mutual: bool,
}

/// How the caller and `toUserId` relate.
#[utoipa::path(get, path = "/api/v1/relation/status", tag = "seed", params(TargetParams),
    responses((status = 200, body = SeedStatus), (status = 400, body = Problem), (status = 401, body = Problem)),
    security(("bearer" = [])))]
pub async fn status(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(params): ApiQuery<TargetParams>,
) -> Result<Json<SeedStatus>, ApiError> {
    let target = parse_user_id(&params.to_user_id)?;
    let found = graph::relationships(&state.db, &caller.tenant, caller.user, &[target]).await?;
    let r = found.into_iter().next().expect("one relationship per requested user");
    Ok(Json(SeedStatus { following: r.following, followed_by: r.followed_by, mutual: r.following && r.followed_by }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SeedListParams {
    /// Whose list.
    #[serde(rename = "userId")]
    pub user_id: String,
    /// 1 to 100, default 20.
    pub limit: Option<u32>,
    /// The `X-Next-Cursor` of the previous page.
    pub cursor: Option<String>,
    /// Entries to skip (instead of a cursor).
    pub offset: Option<u64>,
}

/// An entry of the seed's lists.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SeedUser {
    pub id: i64,
}

/// Whom `userId` follows, newest first; the next page's cursor is in the `X-Next-Cursor` header.
#[utoipa::path(get, path = "/api/v1/relation/following", tag = "seed", params(SeedListParams),
    responses((status = 200, body = Vec<SeedUser>), (status = 400, body = Problem), (status = 401, body = Problem)),
    security(("bearer" = [])))]
pub async fn following(
    state: State<AppState>,
    caller: Caller,
    params: ApiQuery<SeedListParams>,
) -> Result<(HeaderMap, Json<Vec<SeedUser>>), ApiError> {
    list(state, caller, params, Direction::Following).await
}

/// Who follows `userId`, newest first; the next page's cursor is in the `X-Next-Cursor` header.
#[utoipa::path(get, path = "/api/v1/relation/followers", tag = "seed", params(SeedListParams),
    responses((status = 200, body = Vec<SeedUser>), (status = 400, body = Problem), (status = 401, body = Problem)),
    security(("bearer" = [])))]
pub async fn followers(
    state: State<AppState>,
    caller: Caller,
    params: ApiQuery<SeedListParams>,
) -> Result<(HeaderMap, Json<Vec<SeedUser>>), ApiError> {
    list(state, caller, params, Direction::Followers).await
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(params): ApiQuery<SeedListParams>,
    direction: Direction,
) -> Result<(HeaderMap, Json<Vec<SeedUser>>), ApiError> {
    let user = parse_user_id(&params.user_id)?;
    // Not `#[serde(flatten)]`: serde_urlencoded then sees every value as a string and refuses numbers.
    let paging = PageParams { limit: params.limit, cursor: params.cursor, offset: params.offset };
    let page = state.reads.list(&state.db, &caller.tenant, user, direction, paging.to_request()?).await?;
    let mut headers = HeaderMap::new();
    if let Some(last) = page.items.last().filter(|_| page.has_more) {
        let cursor = encode_cursor(last).parse().expect("a base64url cursor is a valid header value");
        headers.insert(NEXT_CURSOR_HEADER, cursor);
    }
    Ok((headers, Json(page.items.iter().map(|u| SeedUser { id: u.user_id }).collect())))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SeedUserParams {
    /// Whose counters.
    #[serde(rename = "userId")]
    pub user_id: String,
}

/// The seed's counter shape; post counters belong to other services and are always 0 here.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SeedCounter {
    pub followings: i64,
    pub followers: i64,
    pub posts: i64,
    pub liked_posts: i64,
    pub faved_posts: i64,
}

/// Following and follower counts of `userId`.
#[utoipa::path(get, path = "/api/v1/relation/counter", tag = "seed", params(SeedUserParams),
    responses((status = 200, body = SeedCounter), (status = 400, body = Problem), (status = 401, body = Problem)),
    security(("bearer" = [])))]
pub async fn counter(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(params): ApiQuery<SeedUserParams>,
) -> Result<Json<SeedCounter>, ApiError> {
    let user = parse_user_id(&params.user_id)?;
    let counts = state.reads.counts(&state.db, &caller.tenant, &[user]).await?;
    let c = counts.into_iter().next().expect("one count per requested user");
    Ok(Json(SeedCounter { followings: c.followings, followers: c.followers, posts: 0, liked_posts: 0, faved_posts: 0 }))
}
