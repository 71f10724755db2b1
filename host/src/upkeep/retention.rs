//! What the host keeps of the past, and for how long: without it, storage grows with every deploy, admin
//! change and embedded-bus message. Run hourly by every API node (each delete is idempotent, so several
//! nodes may run it):
//! - plugin versions: per slot, the live ones (active, canary, shadow) and the newest
//!   `retention_plugin_versions` others (rollback targets); older ones are deleted, wasm and all;
//! - `audit_log`: entries older than `retention_audit_days`;
//! - the embedded bus's `bus_log`: messages older than `retention_bus_hours` that every subscriber of the
//!   topic has read, always keeping each topic's newest (its sequence continues from it);
//! - `account_jobs`: finished (done or failed) jobs older than `retention_account_job_days`;
//! - the compiled-code cache: files of components no stored version or bundled plugin has, untouched for
//!   a day.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use crate::accounts::JobState;
use crate::db::Database;
use crate::plugins::{PluginRegistry, BUNDLED};
use crate::util::hashing::hex_sha256;
use crate::util::time::now_ms;

/// What is kept.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Versions kept per slot besides the live ones.
    pub plugin_versions: u32,
    pub audit: Duration,
    pub bus: Duration,
    /// How long a finished account job is kept.
    pub account_jobs: Duration,
}

/// How often the retention runs.
pub const EVERY: Duration = Duration::from_secs(3600);
/// How long an unused compiled component stays in the cache.
const UNUSED_COMPILED: Duration = Duration::from_secs(24 * 3600);

/// What one run deleted.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    pub plugin_versions: u64,
    pub audit_entries: u64,
    pub bus_messages: u64,
    pub account_jobs: u64,
    pub compiled_files: u64,
}

impl Retention {
    /// Deletes what is past retention in `db` and in `cache_dir`.
    pub async fn prune(&self, db: &Database, cache_dir: Option<&Path>) -> Result<Pruned, sqlx::Error> {
        let plugin_versions = PluginRegistry::prune_inactive_versions(db, self.plugin_versions).await?;
        let mut pruned = Pruned { plugin_versions, ..Pruned::default() };
        let audit_before = now_ms() - self.audit.as_millis() as i64;
        pruned.audit_entries = sqlx::query("DELETE FROM audit_log WHERE at < ?")
            .bind(audit_before)
            .execute(db.writer())
            .await?
            .rows_affected();
        pruned.bus_messages = self.prune_bus(db).await?;
        let jobs_before = now_ms() - self.account_jobs.as_millis() as i64;
        pruned.account_jobs = sqlx::query("DELETE FROM account_jobs WHERE state <> ? AND updated_at < ?")
            .bind(JobState::Running.as_str())
            .bind(jobs_before)
            .execute(db.writer())
            .await?
            .rows_affected();
        if let Some(dir) = cache_dir {
            pruned.compiled_files = prune_compiled(db, dir).await?;
        }
        Ok(pruned)
    }

    async fn prune_bus(&self, db: &Database) -> Result<u64, sqlx::Error> {
        let before = now_ms() - self.bus.as_millis() as i64;
        let topics: Vec<(String, i64)> =
            sqlx::query_as("SELECT topic, MAX(seq) FROM bus_log GROUP BY topic").fetch_all(db.reader()).await?;
        let mut deleted = 0;
        for (topic, newest) in topics {
            // Read by every subscriber: at or below the lowest position (none subscribed: nothing goes).
            let read: Option<i64> = sqlx::query_scalar("SELECT MIN(seq) FROM bus_positions WHERE topic = ?")
                .bind(&topic)
                .fetch_one(db.reader())
                .await?;
            let Some(read) = read else { continue };
            deleted += sqlx::query("DELETE FROM bus_log WHERE topic = ? AND seq < ? AND seq <= ? AND created_at < ?")
                .bind(&topic)
                .bind(newest)
                .bind(read)
                .bind(before)
                .execute(db.writer())
                .await?
                .rows_affected();
        }
        Ok(deleted)
    }
}

/// Deletes compiled components in `dir` that no stored version nor bundled plugin has, unused for a day.
async fn prune_compiled(db: &Database, dir: &Path) -> Result<u64, sqlx::Error> {
    let stored: Vec<String> = sqlx::query_scalar("SELECT DISTINCT sha256 FROM plugins").fetch_all(db.reader()).await?;
    let mut kept: HashSet<String> = stored.into_iter().collect();
    kept.extend(BUNDLED.iter().map(|b| hex_sha256(b.wasm)));
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(sqlx::Error::Io(e)),
    };
    let mut deleted = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // `{sha256}-{engine}.cwasm`: the component's content address comes first.
        let Some(sha256) = name.strip_suffix(".cwasm").and_then(|n| n.split('-').next()) else { continue };
        let unused = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|at| at.elapsed().unwrap_or_default() > UNUSED_COMPILED);
        if !kept.contains(sha256) && unused {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => deleted += 1,
                Err(error) => {
                    tracing::warn!(file = %entry.path().display(), %error, "cannot delete an unused compiled plugin")
                }
            }
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn old_versions_audit_entries_and_bus_messages_go_and_what_is_live_stays() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(&format!("sqlite://{}/r.db?mode=rwc", dir.path().display()), 1).await.unwrap();
        let now = now_ms();
        for version in 1..=5_i64 {
            let state = if version == 2 { "active" } else { "inactive" };
            sqlx::query(
                "INSERT INTO plugins (tenant_id, kind, name, version, sha256, wasm, state, created_at, readable) \
                 VALUES ('acme', 'projector', 'p', ?, ?, ?, ?, ?, '[]')",
            )
            .bind(version)
            .bind(format!("sha{version}"))
            .bind(vec![0_u8])
            .bind(state)
            .bind(now)
            .execute(db.writer())
            .await
            .unwrap();
        }
        for (at, action) in [(now - 400 * 86_400_000, "deploy"), (now, "rollback")] {
            sqlx::query("INSERT INTO audit_log (at, actor, tenant_id, action, outcome, detail) VALUES (?, 'admin', 'acme', ?, 'ok', '')")
                .bind(at)
                .bind(action)
                .execute(db.writer())
                .await
                .unwrap();
        }
        for (seq, at) in [(1, now - 10 * 86_400_000), (2, now - 9 * 86_400_000), (3, now)] {
            sqlx::query("INSERT INTO bus_log (topic, seq, msg_key, headers, payload, created_at) VALUES ('t', ?, 'k', '[]', '{}', ?)")
                .bind(seq)
                .bind(at)
                .execute(db.writer())
                .await
                .unwrap();
        }
        sqlx::query("INSERT INTO bus_log (topic, seq, msg_key, headers, payload, created_at) VALUES ('old', 7, 'k', '[]', '{}', ?)")
            .bind(now - 30 * 86_400_000)
            .execute(db.writer())
            .await
            .unwrap();
        // Subscribers of `t` read up to 3 and up to 2: messages 1 and 2 are read by both; `old` has none.
        for (consumer, seq) in [("a", 3), ("b", 2)] {
            sqlx::query("INSERT INTO bus_positions (consumer, topic, seq) VALUES (?, 't', ?)")
                .bind(consumer)
                .bind(seq)
                .execute(db.writer())
                .await
                .unwrap();
        }
        // A finished job of long ago, a recent one and a running one of long ago: only the first goes.
        for (state, updated_at) in [("done", 1), ("failed", now_ms()), ("running", 1)] {
            sqlx::query(
                "INSERT INTO account_jobs (tenant_id, user_id, kind, target_user_id, with_followings, state, phase, \
                 done, total, requested_by, error, lease_owner, lease_until, created_at, updated_at) \
                 VALUES ('t', 1, 'delete', NULL, 0, ?, 0, 0, 0, 'admin', NULL, NULL, 0, 1, ?)",
            )
            .bind(state)
            .bind(updated_at)
            .execute(db.writer())
            .await
            .unwrap();
        }
        let retention = Retention {
            plugin_versions: 2,
            audit: Duration::from_secs(365 * 86_400),
            bus: Duration::from_secs(7 * 86_400),
            account_jobs: Duration::from_secs(30 * 86_400),
        };
        let pruned = retention.prune(&db, None).await.unwrap();
        let expected =
            Pruned { plugin_versions: 2, audit_entries: 1, bus_messages: 2, account_jobs: 1, compiled_files: 0 };
        assert_eq!(pruned, expected);
        let versions: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM plugins ORDER BY version").fetch_all(db.reader()).await.unwrap();
        assert_eq!(versions, [2, 4, 5], "the active one and the two newest others");
        let bus: Vec<(String, i64)> =
            sqlx::query_as("SELECT topic, seq FROM bus_log ORDER BY topic, seq").fetch_all(db.reader()).await.unwrap();
        assert_eq!(bus, [("old".to_owned(), 7), ("t".to_owned(), 3)], "each topic keeps its newest");
        assert_eq!(retention.prune(&db, None).await.unwrap(), Pruned::default(), "a second run deletes nothing");
    }
}
