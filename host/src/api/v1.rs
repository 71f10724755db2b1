//! The `/v1` API: follow and unfollow as the caller, and reads of the caller's tenant's graph.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::params::{encode_cursor, parse_user_ids, ApiQuery, PageParams, UserIdPath};
use super::problem::{ApiError, Problem};
use super::write::write_relation;
use super::AppState;
use crate::graph::{self, Act, Direction, Page};
use crate::util::time::rfc3339_millis;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The follow API (`/v1/me/following`, relationships, lists, counts).
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(follow, unfollow))
        .routes(routes!(relationships))
        .routes(routes!(following))
        .routes(routes!(followers))
        .routes(routes!(user_counts))
        .routes(routes!(batch_counts))
}

/// Outcome of a follow or unfollow.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct FollowResponse {
    pub user_id: i64,
    /// Whether the caller follows `user_id` after the call.
    pub following: bool,
    /// Whether the caller's follow request to `user_id` is pending after the call (a private account).
    pub requested: bool,
    /// Whether this call changed anything (false on a repeat: calls are idempotent).
    pub changed: bool,
}

/// Follow `user_id` as the caller; of a private account, request to (pending until it authorizes).
#[utoipa::path(put, path = "/v1/me/following/{user_id}", tag = "write",
    params(("user_id" = i64, Path, description = "The user to follow")),
    responses((status = 200, body = FollowResponse), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, description = "A block between the two (`blocked`)", body = Problem),
        (status = 422, description = "Self-follow", body = Problem), (status = 429, body = Problem),
        (status = 503, body = Problem)),
    security(("bearer" = [])))]
pub async fn follow(
    state: State<AppState>,
    caller: Caller,
    target: UserIdPath,
) -> Result<Json<FollowResponse>, ApiError> {
    set_following(state, caller, target, Act::Follow).await
}

/// Stop following `user_id` as the caller, or withdraw a pending follow request.
#[utoipa::path(delete, path = "/v1/me/following/{user_id}", tag = "write",
    params(("user_id" = i64, Path, description = "The user to unfollow")),
    responses((status = 200, body = FollowResponse), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 422, description = "Self-unfollow", body = Problem), (status = 429, body = Problem),
        (status = 503, body = Problem)),
    security(("bearer" = [])))]
pub async fn unfollow(
    state: State<AppState>,
    caller: Caller,
    target: UserIdPath,
) -> Result<Json<FollowResponse>, ApiError> {
    set_following(state, caller, target, Act::Unfollow).await
}

async fn set_following(
    State(state): State<AppState>,
    caller: Caller,
    UserIdPath(target): UserIdPath,
    act: Act,
) -> Result<Json<FollowResponse>, ApiError> {
    let change = write_relation(&state, &caller, act, target).await?;
    Ok(Json(FollowResponse {
        user_id: target.get(),
        following: change.following,
        requested: change.requested,
        changed: change.changed,
    }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UserIdsParams {
    /// Comma-separated user ids, 1 to 100 (spaces around them are allowed).
    #[param(pattern = r"^[1-9][0-9]{0,17}(,[1-9][0-9]{0,17}){0,99}$")]
    pub user_ids: String,
}

/// How the caller and one other user relate (Mastodon's `Relationship`, in part).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RelationshipView {
    pub user_id: i64,
    /// The caller follows `user_id`.
    pub following: bool,
    /// `user_id` follows the caller.
    pub followed_by: bool,
    /// Both.
    pub mutual: bool,
    /// The caller's follow request to `user_id` is pending.
    pub requested: bool,
    /// `user_id`'s follow request to the caller is pending.
    pub requested_by: bool,
    /// The caller blocks `user_id`.
    pub blocking: bool,
    /// `user_id` blocks the caller.
    pub blocked_by: bool,
    /// The caller mutes `user_id` (whether `user_id` mutes the caller is never shown).
    pub muting: bool,
    /// When the caller's mute ends (RFC 3339); null: never, or not muting.
    pub muting_expires_at: Option<String>,
    /// Whether the caller's mute also hides notifications.
    pub muting_notifications: bool,
}

impl From<graph::Relationship> for RelationshipView {
    fn from(r: graph::Relationship) -> Self {
        Self {
            user_id: r.user_id,
            following: r.following,
            followed_by: r.followed_by,
            mutual: r.following && r.followed_by,
            requested: r.requested,
            requested_by: r.requested_by,
            blocking: r.blocking,
            blocked_by: r.blocked_by,
            muting: r.muting,
            muting_expires_at: r.muting_expires_at_ms.map(rfc3339_millis),
            muting_notifications: r.muting_notifications,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RelationshipsResponse {
    pub relationships: Vec<RelationshipView>,
}

/// Relationship status between the caller and up to 100 users.
#[utoipa::path(get, path = "/v1/me/relationships", tag = "read", params(UserIdsParams),
    responses((status = 200, body = RelationshipsResponse), (status = 400, body = Problem), (status = 401, body = Problem)),
    security(("bearer" = [])))]
pub async fn relationships(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(params): ApiQuery<UserIdsParams>,
) -> Result<Json<RelationshipsResponse>, ApiError> {
    let others = parse_user_ids(&params.user_ids)?;
    let found = graph::relationships(&state.db, &caller.tenant, caller.user, &others).await?;
    Ok(Json(RelationshipsResponse { relationships: found.into_iter().map(Into::into).collect() }))
}

/// A user in a list, with when the follow happened.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ListedUserView {
    pub user_id: i64,
    /// RFC 3339 time of the (latest) follow.
    pub followed_at: String,
}

/// A page of a follow list, newest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ListResponse {
    pub items: Vec<ListedUserView>,
    /// Pass as `cursor` to read the next page; null on the last page.
    pub next_cursor: Option<String>,
    pub has_more: bool,
}

impl From<Page> for ListResponse {
    fn from(page: Page) -> Self {
        let next_cursor = if page.has_more { page.items.last().map(encode_cursor) } else { None };
        let items = page
            .items
            .iter()
            .map(|u| ListedUserView { user_id: u.user_id, followed_at: rfc3339_millis(u.followed_at_ms) })
            .collect();
        Self { items, next_cursor, has_more: page.has_more }
    }
}

/// Whom `id` follows.
#[utoipa::path(get, path = "/v1/users/{id}/following", tag = "read",
    params(("id" = i64, Path, description = "Whose list"), PageParams),
    responses((status = 200, body = ListResponse), (status = 400, body = Problem), (status = 401, body = Problem)),
    security(("bearer" = [])))]
pub async fn following(
    state: State<AppState>,
    caller: Caller,
    user: UserIdPath,
    params: ApiQuery<PageParams>,
) -> Result<Json<ListResponse>, ApiError> {
    list(state, caller, user, params, Direction::Following).await
}

/// Who follows `id`.
#[utoipa::path(get, path = "/v1/users/{id}/followers", tag = "read",
    params(("id" = i64, Path, description = "Whose list"), PageParams),
    responses((status = 200, body = ListResponse), (status = 400, body = Problem), (status = 401, body = Problem)),
    security(("bearer" = [])))]
pub async fn followers(
    state: State<AppState>,
    caller: Caller,
    user: UserIdPath,
    params: ApiQuery<PageParams>,
) -> Result<Json<ListResponse>, ApiError> {
    list(state, caller, user, params, Direction::Followers).await
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    UserIdPath(user): UserIdPath,
    ApiQuery(params): ApiQuery<PageParams>,
    direction: Direction,
) -> Result<Json<ListResponse>, ApiError> {
    let page = state.reads.list(&state.db, &caller.tenant, user, direction, params.to_request()?).await?;
    Ok(Json(page.into()))
}

/// How many users a user follows and is followed by.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CountsView {
    pub user_id: i64,
    pub followings: i64,
    pub followers: i64,
}

impl From<graph::Counts> for CountsView {
    fn from(c: graph::Counts) -> Self {
        Self { user_id: c.user_id, followings: c.followings, followers: c.followers }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CountsResponse {
    pub counts: Vec<CountsView>,
}

/// Counts of one user.
#[utoipa::path(get, path = "/v1/users/{id}/counts", tag = "read",
    params(("id" = i64, Path, description = "Whose counts")),
    responses((status = 200, body = CountsView), (status = 400, body = Problem), (status = 401, body = Problem)),
    security(("bearer" = [])))]
pub async fn user_counts(
    State(state): State<AppState>,
    caller: Caller,
    UserIdPath(user): UserIdPath,
) -> Result<Json<CountsView>, ApiError> {
    let counts = state.reads.counts(&state.db, &caller.tenant, &[user]).await?;
    let counts = counts.into_iter().next().expect("one count per requested user");
    Ok(Json(counts.into()))
}

/// Counts of up to 100 users.
#[utoipa::path(get, path = "/v1/counts", tag = "read", params(UserIdsParams),
    responses((status = 200, body = CountsResponse), (status = 400, body = Problem), (status = 401, body = Problem)),
    security(("bearer" = [])))]
pub async fn batch_counts(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(params): ApiQuery<UserIdsParams>,
) -> Result<Json<CountsResponse>, ApiError> {
    let users = parse_user_ids(&params.user_ids)?;
    let counts = state.reads.counts(&state.db, &caller.tenant, &users).await?;
    Ok(Json(CountsResponse { counts: counts.into_iter().map(Into::into).collect() }))
}
