//! The relations beside follows, as Mastodon's API has them: blocks, mutes, follow requests (of private
//! accounts), removing a follower, the caller's settings, and known followers. Every write answers the
//! caller's relationship with the other user afterwards.

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Caller;
use super::params::{encode_cursor, ApiJson, ApiQuery, PageParams, UserIdPath};
use super::problem::{ApiError, Problem};
use super::v1::RelationshipView;
use super::write::{rate_limit, write_relation};
use super::AppState;
use crate::graph::{self, Act, Direction, Listing, Page, Settings, UserId};
use crate::plugins::WriteKind;
use crate::util::time::{now_ms, rfc3339_millis};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Blocks, mutes, follow requests, removing a follower, settings and known followers.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(block, unblock))
        .routes(routes!(blocks))
        .routes(routes!(mute, unmute))
        .routes(routes!(mutes))
        .routes(routes!(follow_requests))
        .routes(routes!(outgoing_follow_requests))
        .routes(routes!(authorize))
        .routes(routes!(reject))
        .routes(routes!(remove_follower))
        .routes(routes!(settings, set_settings))
        .routes(routes!(known_followers))
        .routes(routes!(known_followers_count))
}

/// The longest a mute may last before it must be given without an end (about ten years).
const MAX_MUTE_SECONDS: u64 = 315_360_000;

/// What a relation write did, and how the two relate afterwards.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RelationWriteResponse {
    /// Whether this call changed anything (false on a repeat: calls are idempotent).
    pub changed: bool,
    pub relationship: RelationshipView,
}

/// A user in a list of blocks, mutes or follow requests.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RelatedUserView {
    pub user_id: i64,
    /// When the block, mute or request began (RFC 3339).
    pub since: String,
    /// When a mute ends (RFC 3339); absent: never, or not a mute.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// A page of blocks, mutes or follow requests, newest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RelatedUsersResponse {
    pub items: Vec<RelatedUserView>,
    /// Pass as `cursor` to read the next page; null on the last page.
    pub next_cursor: Option<String>,
    pub has_more: bool,
}

impl From<Page> for RelatedUsersResponse {
    fn from(page: Page) -> Self {
        let next_cursor = match page.has_more {
            true => page.resume_after.as_ref().or(page.items.last()).map(encode_cursor),
            false => None,
        };
        let items = page
            .items
            .iter()
            .map(|u| RelatedUserView {
                user_id: u.user_id,
                since: rfc3339_millis(u.followed_at_ms),
                expires_at: u.expires_at_ms.map(rfc3339_millis),
            })
            .collect();
        Self { items, next_cursor, has_more: page.has_more }
    }
}

/// Does `act` to `target` as `caller`, and answers how the two relate afterwards.
async fn write(
    state: &AppState,
    caller: &Caller,
    act: Act,
    target: UserId,
) -> Result<Json<RelationWriteResponse>, ApiError> {
    let change = write_relation(state, caller, act, target).await?;
    let relationship = graph::relationships(&state.db, &caller.tenant, caller.user, &[target]).await?;
    let relationship = relationship.into_iter().next().expect("one relationship per requested user").into();
    Ok(Json(RelationWriteResponse { changed: change.changed, relationship }))
}

/// Block `user_id`: ends the follows and pending requests between the two, both ways, and refuses new
/// ones while the block holds. Unblocking restores nothing.
#[utoipa::path(put, path = "/v1/me/blocks/{user_id}", tag = "relations",
    params(("user_id" = i64, Path, description = "The user to block")),
    responses((status = 200, body = RelationWriteResponse), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 422, description = "Self-block (`self_relation`)", body = Problem), (status = 429, body = Problem),
        (status = 503, body = Problem)),
    security(("bearer" = [])))]
pub async fn block(
    State(state): State<AppState>,
    caller: Caller,
    UserIdPath(target): UserIdPath,
) -> Result<Json<RelationWriteResponse>, ApiError> {
    write(&state, &caller, Act::Block, target).await
}

/// Unblock `user_id`.
#[utoipa::path(delete, path = "/v1/me/blocks/{user_id}", tag = "relations",
    params(("user_id" = i64, Path, description = "The user to unblock")),
    responses((status = 200, body = RelationWriteResponse), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 422, description = "Self-unblock (`self_relation`)", body = Problem), (status = 429, body = Problem),
        (status = 503, body = Problem)),
    security(("bearer" = [])))]
pub async fn unblock(
    State(state): State<AppState>,
    caller: Caller,
    UserIdPath(target): UserIdPath,
) -> Result<Json<RelationWriteResponse>, ApiError> {
    write(&state, &caller, Act::Unblock, target).await
}

/// How a mute is asked for (Mastodon's parameters). Both are optional; an empty body is a mute for good,
/// notifications included.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MuteRequest {
    /// Seconds until the mute ends by itself; absent or 0: never.
    #[schema(maximum = 315_360_000)]
    pub duration: Option<u64>,
    /// Whether notifications from the user are muted too (default true).
    pub notifications: Option<bool>,
}

/// Mute `user_id` (private to the caller: the muted user never sees it). Muting again changes the end or
/// the notifications flag.
#[utoipa::path(put, path = "/v1/me/mutes/{user_id}", tag = "relations",
    params(("user_id" = i64, Path, description = "The user to mute")),
    request_body(content = Option<MuteRequest>, content_type = "application/json"),
    responses((status = 200, body = RelationWriteResponse), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 422, description = "Self-mute (`self_relation`)", body = Problem), (status = 429, body = Problem),
        (status = 503, body = Problem)),
    security(("bearer" = [])))]
pub async fn mute(
    State(state): State<AppState>,
    caller: Caller,
    UserIdPath(target): UserIdPath,
    body: Bytes,
) -> Result<Json<RelationWriteResponse>, ApiError> {
    let request: MuteRequest = if body.is_empty() {
        MuteRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(ApiError::InvalidJson)?
    };
    let seconds = request.duration.filter(|&s| s > 0);
    if seconds.is_some_and(|s| s > MAX_MUTE_SECONDS) {
        return Err(ApiError::MuteTooLong { max_seconds: MAX_MUTE_SECONDS });
    }
    let expires_at_ms = seconds.map(|s| now_ms() + (s as i64) * 1000);
    let act = Act::Mute { expires_at_ms, notifications: request.notifications.unwrap_or(true) };
    write(&state, &caller, act, target).await
}

/// Unmute `user_id`.
#[utoipa::path(delete, path = "/v1/me/mutes/{user_id}", tag = "relations",
    params(("user_id" = i64, Path, description = "The user to unmute")),
    responses((status = 200, body = RelationWriteResponse), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 422, description = "Self-unmute (`self_relation`)", body = Problem), (status = 429, body = Problem),
        (status = 503, body = Problem)),
    security(("bearer" = [])))]
pub async fn unmute(
    State(state): State<AppState>,
    caller: Caller,
    UserIdPath(target): UserIdPath,
) -> Result<Json<RelationWriteResponse>, ApiError> {
    write(&state, &caller, Act::Unmute, target).await
}

/// Accept `user_id`'s pending follow request: their follow begins. Nothing pending: nothing changes.
#[utoipa::path(post, path = "/v1/me/follow_requests/{user_id}/authorize", tag = "relations",
    params(("user_id" = i64, Path, description = "The requester")),
    responses((status = 200, body = RelationWriteResponse), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 422, body = Problem), (status = 429, body = Problem),
        (status = 503, body = Problem)),
    security(("bearer" = [])))]
pub async fn authorize(
    State(state): State<AppState>,
    caller: Caller,
    UserIdPath(target): UserIdPath,
) -> Result<Json<RelationWriteResponse>, ApiError> {
    write(&state, &caller, Act::Authorize, target).await
}

/// Turn `user_id`'s pending follow request down. Nothing pending: nothing changes.
#[utoipa::path(post, path = "/v1/me/follow_requests/{user_id}/reject", tag = "relations",
    params(("user_id" = i64, Path, description = "The requester")),
    responses((status = 200, body = RelationWriteResponse), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 422, body = Problem), (status = 429, body = Problem),
        (status = 503, body = Problem)),
    security(("bearer" = [])))]
pub async fn reject(
    State(state): State<AppState>,
    caller: Caller,
    UserIdPath(target): UserIdPath,
) -> Result<Json<RelationWriteResponse>, ApiError> {
    write(&state, &caller, Act::Reject, target).await
}

/// Remove `user_id` from the caller's followers (a soft block: they may follow again).
#[utoipa::path(delete, path = "/v1/me/followers/{user_id}", tag = "relations",
    params(("user_id" = i64, Path, description = "The follower to remove")),
    responses((status = 200, body = RelationWriteResponse), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 422, body = Problem), (status = 429, body = Problem),
        (status = 503, body = Problem)),
    security(("bearer" = [])))]
pub async fn remove_follower(
    State(state): State<AppState>,
    caller: Caller,
    UserIdPath(target): UserIdPath,
) -> Result<Json<RelationWriteResponse>, ApiError> {
    write(&state, &caller, Act::RemoveFollower, target).await
}

async fn own_list(
    state: &AppState,
    caller: &Caller,
    listing: Listing,
    params: &PageParams,
) -> Result<Json<RelatedUsersResponse>, ApiError> {
    let page = graph::list(&state.db, &caller.tenant, caller.user, listing, params.to_request()?).await?;
    Ok(Json(page.into()))
}

/// Whom the caller blocks, newest first.
#[utoipa::path(get, path = "/v1/me/blocks", tag = "relations", params(PageParams),
    responses((status = 200, body = RelatedUsersResponse), (status = 400, body = Problem), (status = 401, body = Problem)),
    security(("bearer" = [])))]
pub async fn blocks(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(params): ApiQuery<PageParams>,
) -> Result<Json<RelatedUsersResponse>, ApiError> {
    own_list(&state, &caller, Listing::Blocks, &params).await
}

/// Whom the caller mutes, newest first (mutes past their end are gone).
#[utoipa::path(get, path = "/v1/me/mutes", tag = "relations", params(PageParams),
    responses((status = 200, body = RelatedUsersResponse), (status = 400, body = Problem), (status = 401, body = Problem)),
    security(("bearer" = [])))]
pub async fn mutes(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(params): ApiQuery<PageParams>,
) -> Result<Json<RelatedUsersResponse>, ApiError> {
    own_list(&state, &caller, Listing::Mutes, &params).await
}

/// Pending follow requests the caller received, newest first.
#[utoipa::path(get, path = "/v1/me/follow_requests", tag = "relations", params(PageParams),
    responses((status = 200, body = RelatedUsersResponse), (status = 400, body = Problem), (status = 401, body = Problem)),
    security(("bearer" = [])))]
pub async fn follow_requests(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(params): ApiQuery<PageParams>,
) -> Result<Json<RelatedUsersResponse>, ApiError> {
    own_list(&state, &caller, Listing::Requests(Direction::Followers), &params).await
}

/// Pending follow requests the caller sent, newest first.
#[utoipa::path(get, path = "/v1/me/follow_requests/outgoing", tag = "relations", params(PageParams),
    responses((status = 200, body = RelatedUsersResponse), (status = 400, body = Problem), (status = 401, body = Problem)),
    security(("bearer" = [])))]
pub async fn outgoing_follow_requests(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(params): ApiQuery<PageParams>,
) -> Result<Json<RelatedUsersResponse>, ApiError> {
    own_list(&state, &caller, Listing::Requests(Direction::Following), &params).await
}

/// A user's own settings.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettingsView {
    /// Follows of a private account are requests until it authorizes them. Turning it off authorizes
    /// every pending request.
    pub private: bool,
}

/// The caller's settings.
#[utoipa::path(get, path = "/v1/me/settings", tag = "relations",
    responses((status = 200, body = SettingsView), (status = 401, body = Problem)),
    security(("bearer" = [])))]
pub async fn settings(State(state): State<AppState>, caller: Caller) -> Result<Json<SettingsView>, ApiError> {
    let settings = graph::settings(&state.db, &caller.tenant, caller.user).await?;
    Ok(Json(SettingsView { private: settings.private }))
}

/// Save the caller's settings.
#[utoipa::path(put, path = "/v1/me/settings", tag = "relations",
    request_body = SettingsView,
    responses((status = 200, body = SettingsView), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 429, body = Problem), (status = 503, body = Problem)),
    security(("bearer" = [])))]
pub async fn set_settings(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(view): ApiJson<SettingsView>,
) -> Result<Json<SettingsView>, ApiError> {
    // Going public authorizes every pending request: a write like any other, asked as a follow.
    rate_limit(&state, &caller, WriteKind::Settings, caller.user).await?;
    graph::update_settings(&state.db, &caller.tenant, caller.user, Settings { private: view.private }).await?;
    Ok(Json(view))
}

/// How many known followers there are.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct KnownFollowersCount {
    /// The users the caller follows who follow `id`, in all.
    pub total: i64,
}

/// The users the caller follows who follow `id` (Mastodon's familiar followers, Bluesky's known
/// followers), by when the caller followed them, newest first. A page walks at most 250 of the caller's
/// follows, whatever `id`'s follower count: it may hold fewer than `limit` (none, even) with `has_more` and a
/// cursor to walk on. How many there are in all is `…/known_followers/count`'s.
#[utoipa::path(get, path = "/v1/users/{id}/known_followers", tag = "read",
    params(("id" = i64, Path, description = "Whose followers"), PageParams),
    responses((status = 200, body = RelatedUsersResponse), (status = 400, body = Problem), (status = 401, body = Problem)),
    security(("bearer" = [])))]
pub async fn known_followers(
    State(state): State<AppState>,
    caller: Caller,
    UserIdPath(user): UserIdPath,
    ApiQuery(params): ApiQuery<PageParams>,
) -> Result<Json<RelatedUsersResponse>, ApiError> {
    let page = graph::known_followers(&state.db, &caller.tenant, caller.user, user, params.to_request()?).await?;
    Ok(Json(page.into()))
}

/// How many users the caller follows who follow `id`: one probe per follow of the caller's, asked apart
/// from the pages so that a client showing no total pays for none.
#[utoipa::path(get, path = "/v1/users/{id}/known_followers/count", tag = "read",
    params(("id" = i64, Path, description = "Whose followers")),
    responses((status = 200, body = KnownFollowersCount), (status = 400, body = Problem), (status = 401, body = Problem)),
    security(("bearer" = [])))]
pub async fn known_followers_count(
    State(state): State<AppState>,
    caller: Caller,
    UserIdPath(user): UserIdPath,
) -> Result<Json<KnownFollowersCount>, ApiError> {
    let total = graph::known_followers_count(&state.db, &caller.tenant, caller.user, user).await?;
    Ok(Json(KnownFollowersCount { total }))
}
