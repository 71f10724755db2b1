//! The HTTP API: routes, authentication, parameters and problem+json errors, and the OpenAPI document
//! generated from the handlers themselves (so it cannot miss a route).

pub mod admin;
mod admin_page;
mod auth;
mod export;
mod operations;
mod params;
mod problem;
mod projections;
mod relations;
mod seed;
mod v1;
mod write;

pub use auth::{hs256_secret, mint_hs256, AuthSetupError, Authenticator, Caller, MintClaims};
pub use problem::{status_of, ApiError, Problem};
pub use relations::{KnownFollowersCount, RelatedUsersResponse, RelationWriteResponse, SettingsView};
pub use seed::NEXT_CURSOR_HEADER;
pub use v1::{CountsResponse, CountsView, FollowResponse, ListResponse, RelationshipsResponse};

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header::CONTENT_LENGTH;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use tower_http::catch_panic::CatchPanicLayer;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::RefOr;
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;

use crate::cache::Cache;
use crate::db::Database;
use crate::ops::{observability, telemetry};
use crate::plugins::PluginRegistry;
use crate::projection::{CachedReads, RetainedLog};
use crate::ratelimit::RateLimiting;
use crate::relation_policy::RelationPolicies;
use crate::tenancy::settings::TenantSettings;
use crate::upkeep::health::Readiness;
use crate::upkeep::lag::LagProbe;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub db: Database,
    pub auth: Arc<Authenticator>,
    pub rate_limiting: Arc<RateLimiting>,
    pub relation_policies: Arc<RelationPolicies>,
    pub plugins: Arc<PluginRegistry>,
    pub tenants: Arc<TenantSettings>,
    /// Counts and lists from the projections when complete, else the database.
    pub reads: Arc<CachedReads>,
    /// Where projectors' spaces live: dropped when their version retires, compared by `plugin diff`.
    pub cache: Cache,
    /// What `/readyz` checks.
    pub readiness: Arc<Readiness>,
    /// The relay's and the projections' backlog, for the admin page.
    pub lag: Arc<LagProbe>,
    /// `None`: the admin API is disabled.
    pub admin_token: Option<Arc<str>>,
    pub max_body_bytes: usize,
    pub max_plugin_bytes: usize,
    /// The most account jobs one tenant runs at once.
    pub account_jobs_per_tenant: u32,
    /// The embedded bus's log, which a rollback onto a projector that declares history replays (`None` on
    /// Kafka).
    pub retained_log: Option<RetainedLog>,
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Strand", description = "The follow graph as a service."),
    modifiers(&BearerAuth),
    components(schemas(Problem))
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let scheme = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).bearer_format("JWT").build();
        components.add_security_scheme("bearer", SecurityScheme::Http(scheme));
        let admin = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).description(Some("STRAND_ADMIN_TOKEN")).build();
        components.add_security_scheme("admin", SecurityScheme::Http(admin));
    }
}

/// The whole HTTP surface, with `/openapi.json` describing it.
pub fn router(state: AppState) -> Router {
    let api = OpenApiRouter::new()
        .merge(v1::routes())
        .merge(relations::routes())
        .merge(export::routes())
        .merge(projections::routes())
        .merge(seed::routes())
        .layer(middleware::from_fn_with_state(state.max_body_bytes, refuse_declared_over))
        .layer(DefaultBodyLimit::max(state.max_body_bytes));
    let admin = admin::routes()
        .layer(middleware::from_fn_with_state(state.max_plugin_bytes, refuse_declared_over))
        .layer(DefaultBodyLimit::max(state.max_plugin_bytes));
    let import = admin::import_routes();
    let operations = operations::routes();
    let (router, mut openapi) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(api)
        .merge(admin)
        .merge(import)
        .merge(operations)
        .split_for_parts();
    admin_refusals_documented(&mut openapi);
    errors_as_problems(&mut openapi);
    let openapi = Arc::new(openapi);
    let router = router
        .route("/openapi.json", axum::routing::get(move || async move { Json(openapi.as_ref().clone()) }))
        .route("/admin", axum::routing::get(admin_page::page))
        .route("/admin/assets/{name}", axum::routing::get(admin_page::asset))
        .route_layer(middleware::from_fn(observability::time_requests));
    // Traced requests: layered only when traces are exported, so with tracing off a request pays nothing.
    let router =
        if telemetry::enabled() { router.route_layer(middleware::from_fn(telemetry::trace_requests)) } else { router };
    router
        .fallback(|| async { ApiError::NoSuchRoute })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(catch_panics())
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state)
}

/// Documents on every admin operation the refusals its extractors give before any handler logic: 400 (a
/// malformed tenant, slot, parameter or body), 401 (no or a wrong credential) and 403 (`admin_disabled`
/// without `admin_token`, `forbidden` for another tenant's key).
fn admin_refusals_documented(openapi: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    let problem = || ContentBuilder::new().schema(Some(Ref::from_schema_name("Problem"))).build();
    for (path, item) in openapi.paths.paths.iter_mut() {
        if !path.starts_with("/admin/") {
            continue;
        }
        let operations = [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
        for operation in operations.into_iter().flatten() {
            for (status, description) in [
                ("400", "A malformed tenant id, plugin slot, parameter or body"),
                ("401", "No credential, or not the admin token nor a live tenant key"),
                ("403", "The admin API is disabled (`admin_disabled`), or the key is another tenant's (`forbidden`)"),
            ] {
                let refusal = ResponseBuilder::new().description(description).content("application/json", problem());
                operation.responses.responses.entry(status.to_owned()).or_insert_with(|| RefOr::T(refusal.build()));
            }
        }
    }
}

/// Documents every error answer as what it is, `application/problem+json` (the handlers' annotations name
/// the body, `Problem`, and utoipa files it under `application/json`).
fn errors_as_problems(openapi: &mut utoipa::openapi::OpenApi) {
    for item in openapi.paths.paths.values_mut() {
        let operations = [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
        for operation in operations.into_iter().flatten() {
            for (status, response) in operation.responses.responses.iter_mut() {
                let (RefOr::T(response), false) = (response, status.starts_with(['1', '2', '3'])) else { continue };
                if let Some(content) = response.content.shift_remove("application/json") {
                    response.content.insert("application/problem+json".to_owned(), content);
                }
            }
        }
    }
}

/// A panic in a handler becomes a 500 `internal_error` problem, logged with its message, and the
/// connection and the process serve on ([`ApiError::panicked`]).
fn catch_panics() -> CatchPanicLayer<fn(Box<dyn std::any::Any + Send + 'static>) -> Response> {
    CatchPanicLayer::custom(|panic| ApiError::panicked(panic).into_response())
}

/// `/healthz` and `/metrics` alone, on `operations_listen`: the processes without the API (`strand relay`,
/// `strand worker`), and `strand serve` when it is set.
pub fn operations_router() -> Router {
    Router::new()
        .route("/healthz", axum::routing::get(operations::healthz))
        .route("/metrics", axum::routing::get(operations::metrics))
        .fallback(|| async { ApiError::NoSuchRoute })
}

/// Refuses a declared-too-large body up front, as problem+json, before any handler runs. (Bodies of
/// undeclared length are cut by `DefaultBodyLimit` in the extractors.)
async fn refuse_declared_over(State(limit): State<usize>, request: Request, next: Next) -> Response {
    let declared =
        request.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok());
    match declared {
        Some(length) if length > limit => ApiError::PayloadTooLarge(limit).into_response(),
        _ => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_handler_answers_a_500_problem_and_the_server_serves_on() {
        let app = Router::new()
            .route("/boom", axum::routing::get(|| async { panic!("a handler bug") as &'static str }))
            .route("/fine", axum::routing::get(|| async { "fine" }))
            .layer(catch_panics());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = reqwest::Client::new();
        for _ in 0..3 {
            let reply = client.get(format!("{base}/boom")).send().await.expect("an answer, not a dropped connection");
            assert_eq!(reply.status(), 500);
            assert_eq!(reply.headers()["content-type"], "application/problem+json");
            let problem: serde_json::Value = reply.json().await.unwrap();
            assert_eq!(problem["code"], "internal_error");
            assert_eq!(client.get(format!("{base}/fine")).send().await.unwrap().status(), 200);
        }
    }
}
