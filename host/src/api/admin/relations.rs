//! A user's relations as support staff see them (their first question): the account's state and privacy,
//! its counts as the API serves them, how it relates to another user, its lists page by page, and its
//! newest relations with their state now — read for the user, without the user's token.

use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::*;
use crate::api::params::{parse_user_id, ApiPath as Path, ApiQuery as Query, PageParams};
use crate::api::problem::{ApiError, Problem};
use crate::api::relations::RelatedUsersResponse;
use crate::api::v1::{CountsView, RelationshipView};
use crate::api::AppState;
use crate::graph::{self, AccountState, Direction, Listing, RecentChange, RelStatus, UserId};
use crate::util::time::rfc3339_millis;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// How many latest changes the lookup shows.
const RECENT: u32 = 20;

/// A user's relations: the lookup and its lists.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(relations)).routes(routes!(relation_list))
}

#[derive(Deserialize)]
pub struct UserPath {
    tenant: String,
    user: String,
}

#[derive(Deserialize)]
pub struct UserListPath {
    tenant: String,
    user: String,
    list: UserList,
}

crate::str_enum! {
    /// A list around a user.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum UserList("list") {
        Following = "following",
        Followers = "followers",
        /// Follow requests the user received and has not answered.
        Requests = "requests",
        /// Follow requests the user sent that wait for an answer.
        OutgoingRequests = "outgoing_requests",
        Blocks = "blocks",
        Mutes = "mutes",
    }
}

impl UserList {
    fn listing(self) -> Listing {
        match self {
            UserList::Following => Listing::Follows(Direction::Following),
            UserList::Followers => Listing::Follows(Direction::Followers),
            UserList::Requests => Listing::Requests(Direction::Followers),
            UserList::OutgoingRequests => Listing::Requests(Direction::Following),
            UserList::Blocks => Listing::Blocks,
            UserList::Mutes => Listing::Mutes,
        }
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct WithParams {
    /// Another user: the answer says how the two relate, as the user would see it.
    pub with: Option<String>,
}

/// A user as support staff look them up.
#[derive(Debug, Serialize, ToSchema)]
pub struct UserRelations {
    pub user_id: i64,
    pub state: AccountState,
    /// Follows of the user are requests until the user authorizes them.
    pub private: bool,
    /// As `GET /v1/users/{id}/counts` serves them.
    pub counts: CountsView,
    /// How the user relates to `with`, if asked.
    pub relationship: Option<RelationshipView>,
    /// The pairs around the user whose edge began most recently (see `graph::recent_changes`), by their
    /// last change, newest first.
    pub recent: Vec<RecentChangeView>,
}

/// One pair's latest change.
#[derive(Debug, Serialize, ToSchema)]
pub struct RecentChangeView {
    /// `follow`, `block` or `mute`.
    pub relation: String,
    pub from: i64,
    pub to: i64,
    /// `active`, `requested`, or `ended`.
    pub state: &'static str,
    /// How many changes the pair has seen.
    pub version: i64,
    /// When it last changed (RFC 3339).
    pub at: String,
}

impl From<RecentChange> for RecentChangeView {
    fn from(change: RecentChange) -> Self {
        let state = match change.status {
            RelStatus::Active => "active",
            RelStatus::Requested => "requested",
            RelStatus::None => "ended",
        };
        Self {
            relation: change.relation.to_string(),
            from: change.from,
            to: change.to,
            state,
            version: change.version,
            at: rfc3339_millis(change.updated_at_ms),
        }
    }
}

/// A user's state, privacy, counts (as the API serves them), relationship with `with`, and its 20 newest
/// relations (follows either way, blocks, mutes) with their state now.
#[utoipa::path(get, path = "/admin/v1/tenants/{tenant}/accounts/{user}/relations", tag = "admin",
    params(("tenant" = String, Path), ("user" = String, Path), WithParams),
    responses((status = 200, body = UserRelations), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem)),
    security(("admin" = [])))]
pub async fn relations(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<UserPath>,
    Query(params): Query<WithParams>,
) -> Result<axum::Json<UserRelations>, ApiError> {
    let tenant = operator.reach(&path.tenant)?;
    let user = parse_user_id(&path.user)?;
    let with: Option<UserId> = params.with.as_deref().filter(|w| !w.is_empty()).map(parse_user_id).transpose()?;
    let counts = state.reads.counts(&state.db, &tenant, &[user]).await?;
    let relationship = match with {
        Some(other) => graph::relationships(&state.db, &tenant, user, &[other]).await?.pop().map(Into::into),
        None => None,
    };
    let recent = graph::recent_changes(&state.db, &tenant, user, RECENT).await?;
    Ok(axum::Json(UserRelations {
        user_id: user.get(),
        state: graph::account_state(&state.db, &tenant, user).await?,
        private: graph::settings(&state.db, &tenant, user).await?.private,
        counts: counts.into_iter().next().expect("one count per requested user").into(),
        relationship,
        recent: recent.into_iter().map(Into::into).collect(),
    }))
}

/// A page of one of the user's lists (`following`, `followers`, `requests`, `outgoing_requests`, `blocks`,
/// `mutes`), newest first, from the truth.
#[utoipa::path(get, path = "/admin/v1/tenants/{tenant}/accounts/{user}/relations/{list}", tag = "admin",
    params(("tenant" = String, Path), ("user" = String, Path), ("list" = inline(UserList), Path), PageParams),
    responses((status = 200, body = RelatedUsersResponse), (status = 400, body = Problem),
        (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("admin" = [])))]
pub async fn relation_list(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<UserListPath>,
    Query(params): Query<PageParams>,
) -> Result<axum::Json<RelatedUsersResponse>, ApiError> {
    let tenant = operator.reach(&path.tenant)?;
    let user = parse_user_id(&path.user)?;
    let page = graph::list(&state.db, &tenant, user, path.list.listing(), params.to_request()?).await?;
    Ok(axum::Json(page.into()))
}
