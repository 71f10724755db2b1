//! The console (`GET /admin`): one HTML document, one stylesheet and a few ES modules over the admin API —
//! the pipeline's last hour, tenants and their plugins and rollouts, a user's relations, account jobs,
//! imports and exports, the audit log. It holds no secret: the operator types the admin token or a tenant
//! key, which the page keeps for the browser tab only and sends as the API's bearer token. Every asset is
//! compiled in, so the console is served wherever the API is, with no build step and no CDN.

use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::problem::ApiError;

/// The document and its assets: (name under `/admin/assets/`, content type, content).
const ASSETS: [(&str, &str, &str); 8] = [
    ("console.css", "text/css; charset=utf-8", include_str!("console.css")),
    ("console.js", "text/javascript; charset=utf-8", include_str!("console.js")),
    ("shared.js", "text/javascript; charset=utf-8", include_str!("shared.js")),
    ("overview.js", "text/javascript; charset=utf-8", include_str!("overview.js")),
    ("tenants.js", "text/javascript; charset=utf-8", include_str!("tenants.js")),
    ("users.js", "text/javascript; charset=utf-8", include_str!("users.js")),
    ("jobs.js", "text/javascript; charset=utf-8", include_str!("jobs.js")),
    ("audit.js", "text/javascript; charset=utf-8", include_str!("audit.js")),
];

/// Only this origin's own files run or style the page, and it talks only to this origin: text a tenant
/// controls is set as text, and even markup slipped in could run nothing.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
     base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

pub async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        include_str!("index.html"),
    )
}

pub async fn asset(Path(name): Path<String>) -> Result<Response, ApiError> {
    let (_, content_type, content) = ASSETS.iter().find(|(asset, _, _)| *asset == name).ok_or(ApiError::NoSuchRoute)?;
    let headers = [(header::CONTENT_TYPE, *content_type), (header::X_CONTENT_TYPE_OPTIONS, "nosniff")];
    Ok((headers, *content).into_response())
}
