//! An import's mark in the truth (`tenant_imports`): one import at a time per tenant, and served reads brought
//! back to the truth whatever ends it. Imported follows write no events, so a tenant's projector spaces are
//! built again from the truth when the import ends — on success, on a bad line, on a dropped connection (the
//! import runs in a task of its own, which the request's end does not cancel) — and, when the process was
//! killed, by whichever node finds the mark's lease run out ([`recover_abandoned`]).
//!
//! Each batch renews the lease in its own transaction; a stream that sends nothing for [`LEASE`] loses its
//! mark and stops (`ImportError::Lost`).

use std::time::Duration;

use sqlx::{Any, Transaction};

use crate::cache::Cache;
use crate::db::Database;
use crate::graph::TenantId;
use crate::plugins::PluginRegistry;
use crate::projection::build_again;
use crate::tenancy::audit::{self, AuditAction, AuditOutcome, AuditRecord};
use crate::util::time::now_ms;

/// How long a mark holds without a batch renewing it.
pub const LEASE: Duration = Duration::from_secs(300);
/// How often a serving node looks for abandoned imports.
pub const RECOVER_EVERY: Duration = Duration::from_secs(30);

fn lease_ms() -> i64 {
    i64::try_from(LEASE.as_millis()).unwrap_or(i64::MAX)
}

/// Marks `tenant` as importing; `Ok(false)` when another import holds a live mark there. A mark whose lease
/// ran out (its process died) is taken over: the import that starts now ends by building the spaces.
pub async fn begin(db: &Database, tenant: &TenantId) -> Result<bool, sqlx::Error> {
    let now = now_ms();
    let taken_over = sqlx::query(
        "UPDATE tenant_imports SET started_at = ?, lease_until = ? WHERE tenant_id = ? AND lease_until < ?",
    )
    .bind(now)
    .bind(now + lease_ms())
    .bind(tenant.as_str())
    .bind(now)
    .execute(db.writer())
    .await?;
    if taken_over.rows_affected() == 1 {
        return Ok(true);
    }
    let inserted = sqlx::query("INSERT INTO tenant_imports (tenant_id, started_at, lease_until) VALUES (?, ?, ?)")
        .bind(tenant.as_str())
        .bind(now)
        .bind(now + lease_ms())
        .execute(db.writer())
        .await;
    match inserted {
        Ok(_) => Ok(true),
        Err(e) if e.as_database_error().is_some_and(|e| e.is_unique_violation()) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Renews `tenant`'s mark within a batch's transaction; `Ok(false)` when the mark is gone (its lease ran out
/// and another node recovered the tenant): the import must stop.
pub async fn renew(tx: &mut Transaction<'_, Any>, tenant: &TenantId) -> Result<bool, sqlx::Error> {
    let renewed = sqlx::query("UPDATE tenant_imports SET lease_until = ? WHERE tenant_id = ?")
        .bind(now_ms() + lease_ms())
        .bind(tenant.as_str())
        .execute(&mut **tx)
        .await?;
    Ok(renewed.rows_affected() == 1)
}

/// Ends an import of `tenant`, however it ended: the spaces are built again from the truth (cleared; the
/// workers build them; those of versions that declare history are kept), then the mark goes. A failure leaves the mark for [`recover_abandoned`].
pub async fn end(db: &Database, cache: &Cache, registry: &PluginRegistry, tenant: &TenantId) -> Result<(), EndError> {
    build_again(cache, registry, tenant).await?;
    // The kept spaces of the embedded default no longer hold for this tenant: kept again, cleared.
    if let Cache::Memory(memory) = cache {
        crate::projection::kept::keep(db, memory).await?;
    }
    sqlx::query("DELETE FROM tenant_imports WHERE tenant_id = ?").bind(tenant.as_str()).execute(db.writer()).await?;
    Ok(())
}

/// Why an ended import's spaces could not be built again (the mark stays, and is recovered later).
#[derive(Debug, thiserror::Error)]
pub enum EndError {
    #[error("the tenant's spaces could not be cleared")]
    Cache(#[from] crate::cache::CacheError),
    #[error("the import's mark could not be removed")]
    Database(#[from] sqlx::Error),
}

/// Ends every import whose lease ran out (its process was killed, or it lost its database): the tenant's
/// spaces are built again and the host records it in the audit log. Returns how many.
pub async fn recover_abandoned(db: &Database, cache: &Cache, registry: &PluginRegistry) -> Result<usize, EndError> {
    let abandoned: Vec<String> = sqlx::query_scalar("SELECT tenant_id FROM tenant_imports WHERE lease_until < ?")
        .bind(now_ms())
        .fetch_all(db.reader())
        .await?;
    let mut recovered = 0;
    for tenant in abandoned {
        let Ok(tenant) = tenant.parse::<TenantId>() else { continue };
        // One tenant's failure (its build lock held, say) leaves the others' recovery to go on.
        if let Err(e) = end(db, cache, registry, &tenant).await {
            let error = crate::ops::observability::causes(&e);
            tracing::error!(%tenant, %error, "cannot end an abandoned import; trying again at the next sweep");
            continue;
        }
        tracing::warn!(%tenant, "an import ended without finishing; its spaces are built again from the truth");
        let record = AuditRecord {
            actor: "host".to_owned(),
            tenant: tenant.to_string(),
            action: AuditAction::Import,
            slot: None,
            version: None,
            sha256: None,
            outcome: AuditOutcome::Refused,
            detail: "abandoned: its process stopped mid-way; the spaces are built again from the truth".to_owned(),
        };
        audit::record(db, record).await?;
        recovered += 1;
    }
    Ok(recovered)
}
