//! A tenant's whole graph out and in: the NDJSON export (streamed from the truth page by page) and the
//! import of a graph (`transfer::import`).

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::*;
use crate::api::params::{ApiPath as Path, ApiQuery as Query};
use crate::api::problem::{ApiError, Problem};
use crate::api::AppState;
use crate::tenancy::audit::{self, AuditAction, AuditOutcome, AuditRecord};
use crate::transfer::export::tenant_edges;
use crate::transfer::import::{import, ImportError, ImportFormat, ImportReport};
use crate::transfer::marks;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// A tenant's export (its import has routes of its own: no body limit).
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(export_tenant))
}

/// A tenant's import: a graph's size has no bound, so it is read line by line as it arrives, never whole
/// (no body limit).
pub fn import_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(import_graph))
}

/// Every edge of the tenant that holds (follows, pending requests, blocks, unexpired mutes) as NDJSON, one
/// `{"relation", "from", "to", "at_ms"[, "requested", "expires_at_ms"]}` per line: what `strand import`
/// reads back.
#[utoipa::path(get, path = "/admin/v1/tenants/{tenant}/export", tag = "admin", params(("tenant" = String, Path)),
    responses((status = 200, description = "the graph, streamed", content_type = "application/x-ndjson"),
        (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("admin" = [])))]
pub async fn export_tenant(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<TenantPath>,
) -> Result<Response, ApiError> {
    let tenant = operator.reach(&path.tenant)?;
    let body = Body::from_stream(tenant_edges(state.db.clone(), tenant));
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

#[derive(Deserialize)]
pub struct ImportParams {
    /// `ndjson` or `csv`; by default CSV when the body's type is `text/csv`, else NDJSON.
    format: Option<String>,
}

/// Imports a graph into the tenant, streamed: NDJSON as the export writes it (follows, pending requests,
/// blocks, mutes), or CSV lines `from,to[,at_ms]` of follows. An edge that holds is kept, so a second run
/// changes nothing; blocks and suspended or deleted accounts refuse follows, a private target gets a request.
/// Answers once every line is in the truth; the tenant's projector spaces are then built again from it by
/// the workers (reads use the database meanwhile) — also when it stops half-way: a bad line stops the
/// import there (what came before stays; running it again completes it). One import at a time per tenant
/// (409 `import_running`); its start and its outcome (with what was imported) are in the audit log.
#[utoipa::path(post, path = "/admin/v1/tenants/{tenant}/import", tag = "admin",
    params(("tenant" = String, Path), ("format" = Option<String>, Query)),
    request_body(content((String = "application/x-ndjson"), (String = "text/csv"))),
    responses((status = 200, body = ImportReport), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 409, body = Problem)),
    security(("admin" = [])))]
pub async fn import_graph(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<TenantPath>,
    Query(params): Query<ImportParams>,
    headers: HeaderMap,
    body: Body,
) -> Result<axum::Json<ImportReport>, ApiError> {
    let tenant = operator.reach(&path.tenant)?;
    let format = match params.format.as_deref() {
        Some(format) => format.parse().map_err(ApiError::InvalidImportFormat),
        None if headers.get(header::CONTENT_TYPE).is_some_and(|t| t.as_bytes().starts_with(b"text/csv")) => {
            Ok(ImportFormat::Csv)
        }
        None => Ok(ImportFormat::Ndjson),
    };
    let began = match format {
        Ok(_) if !marks::begin(&state.db, &tenant).await? => Err(ImportError::Running.into()),
        Ok(format) => Ok(format),
        Err(e) => Err(e),
    };
    let started = Change { detail: "started".to_owned(), ..Change::of(AuditAction::Import) };
    let format = audited(&state, &operator, &tenant, started, began).await?;
    // Its own task: a dropped connection ends the body (a read error), never the spaces' build or the audit.
    let actor = operator.actor();
    let run = tokio::spawn(async move {
        let (report, result) = import(state.db.clone(), tenant.clone(), format, body.into_data_stream()).await;
        if let Err(e) = marks::end(&state.db, &state.cache, &state.plugins, &tenant).await {
            let error = crate::ops::observability::causes(&e);
            tracing::error!(%tenant, %error, "cannot build the imported tenant's spaces; a serving node retries");
        }
        let result = result.map_err(ApiError::from);
        let imported = serde_json::to_string(&report).unwrap_or_default();
        let (outcome, detail) = match &result {
            Ok(()) => (AuditOutcome::Ok, imported),
            Err(e) => {
                (AuditOutcome::Refused, format!("{}: {}; imported before it stopped: {imported}", e.code(), e.detail()))
            }
        };
        let record = AuditRecord {
            actor,
            tenant: tenant.to_string(),
            action: AuditAction::Import,
            slot: None,
            version: None,
            sha256: None,
            outcome,
            detail,
        };
        audit::record(&state.db, record).await?;
        result.map(|()| report)
    });
    let ended = run.await.unwrap_or_else(|e| {
        let panic = e.try_into_panic().unwrap_or_else(|_| Box::new("the import's task was cancelled"));
        Err(ApiError::panicked(panic))
    });
    ended.map(axum::Json)
}
