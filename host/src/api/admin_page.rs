//! The admin web page (`GET /admin`): one self-contained HTML document over the admin API — tenants, their
//! plugins with every version (deploy, roll back), the relay's and the projections' lag, backfills. It
//! holds no secret: the operator types the admin token, which the page keeps for the browser tab only and
//! sends as the API's bearer token.

use axum::http::header;
use axum::response::IntoResponse;

const PAGE: &str = include_str!("admin_page.html");

pub async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            // Everything the page runs is inline and it talks only to this origin.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'",
            ),
        ],
        PAGE,
    )
}
