//! Strand's HTTP API against the real server, on SQLite and on a throwaway MariaDB (binlog on).

mod accounts;
mod auth;
mod console;
mod database_outage;
mod import;
mod operations;
mod reads;
mod relations;
mod seed;
mod shutdown;
mod surface;
mod tenant_access;
mod tenant_jwt;
mod write_path;

use sqlx::Row;
use strand::db::Database;

/// The truth about a pair: `(rel_status, version)`, or `None` when no row exists.
pub async fn pair_row(db: &Database, tenant: &str, from: i64, to: i64) -> Option<(i64, i64)> {
    sqlx::query("SELECT rel_status, version FROM following WHERE tenant_id = ? AND from_user_id = ? AND to_user_id = ?")
        .bind(tenant)
        .bind(from)
        .bind(to)
        .fetch_optional(db.reader())
        .await
        .expect("reading following")
        .map(|row| (row.get::<i64, _>(0), row.get::<i64, _>(1)))
}

/// The outbox events written for a pair, oldest first, as their JSON payloads.
pub async fn pair_events(db: &Database, tenant: &str, from: i64, to: i64) -> Vec<serde_json::Value> {
    sqlx::query("SELECT payload FROM outbox WHERE tenant_id = ? AND aggregate_id = ? ORDER BY id")
        .bind(tenant)
        .bind(format!("{from}:{to}"))
        .fetch_all(db.reader())
        .await
        .expect("reading outbox")
        .iter()
        .map(|row| serde_json::from_str(&row.get::<String, _>(0)).expect("outbox payloads are JSON"))
        .collect()
}
