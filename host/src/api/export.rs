//! A user's export of their own lists (data portability), streamed from the truth page by page, so a
//! celebrity's million followers are never held in memory. A failure mid-stream ends the body early (the status was sent already): a client sees a
//! truncated file, never a wrong one.

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::auth::Caller;
use super::params::{ApiPath, ApiQuery};
use super::problem::{ApiError, Problem};
use super::AppState;
use crate::graph::{Direction, Listing};
use crate::transfer::export::{user_list, Format};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// A user's own export.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(export_list))
}

#[derive(Deserialize)]
pub struct ListPath {
    list: String,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FormatParams {
    /// `csv` (the default) or `json`.
    #[serde(default)]
    format: Format,
}

/// The caller's `following`, `followers`, `blocks` or `mutes`, whole, newest first, as CSV (`user_id,since`,
/// and `expires_at` for mutes) or a JSON array.
#[utoipa::path(get, path = "/v1/me/export/{list}", tag = "relations",
    params(("list" = String, Path, description = "following, followers, blocks or mutes"), FormatParams),
    responses((status = 200, description = "the list, streamed", content_type = "text/csv"),
        (status = 400, body = Problem), (status = 401, body = Problem)),
    security(("bearer" = [])))]
pub async fn export_list(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(path): ApiPath<ListPath>,
    ApiQuery(params): ApiQuery<FormatParams>,
) -> Result<Response, ApiError> {
    let listing = match path.list.as_str() {
        "following" => Listing::Follows(Direction::Following),
        "followers" => Listing::Follows(Direction::Followers),
        "blocks" => Listing::Blocks,
        "mutes" => Listing::Mutes,
        _ => return Err(ApiError::UnknownExport),
    };
    let content_type = match params.format {
        Format::Csv => "text/csv; charset=utf-8",
        Format::Json => "application/json",
    };
    let filename = format!("attachment; filename=\"{}.{}\"", path.list, params.format);
    let body = Body::from_stream(user_list(state.db.clone(), caller.tenant, caller.user, listing, params.format));
    Ok(([(header::CONTENT_TYPE, content_type.to_owned()), (header::CONTENT_DISPOSITION, filename)], body)
        .into_response())
}
