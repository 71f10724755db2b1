//! The schema across releases: migrating it (one explicit step, `strand migrate`, or a node started with
//! `migrate_on_start`), and checking at every start that this release can run on the schema it finds —
//! also a newer one, when the release that migrated it recorded that it stays readable and writable by this
//! one (expand/contract: a release's migrations only add; what they make obsolete is dropped a release
//! later). So a rollback, or an old pod rescheduled mid-rollout, starts; a release too old for the schema
//! refuses by name.
//!
//! The record is a row of `strand_schema`, created beside sqlx's `_sqlx_migrations` rather than by a
//! migration: a release from before it must still find only the migrations it knows.

use std::collections::BTreeSet;

use sqlx::migrate::Migrator;

use super::{Database, DatabaseError, DatabaseKind, LOCK_OF_THIS_DATABASE};

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("../migrations/sqlite");
static MYSQL_MIGRATIONS: Migrator = sqlx::migrate!("../migrations/mysql");

/// The oldest release (by the newest migration it knows) that can run on this release's schema: raise it to
/// this release's newest migration when a migration of this release stops the previous one from working
/// (a contract step); leave it where an added migration keeps the previous release working (expand).
const COMPATIBLE_SINCE: [(DatabaseKind, i64); 2] = [(DatabaseKind::MySql, 28), (DatabaseKind::Sqlite, 25)];

/// Why this release cannot run on the schema it found.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error(
        "the database's schema lacks this release's migration {missing} (and any after it): run `strand migrate` \
         with this release first (or start one node with migrate_on_start = true)"
    )]
    Behind { missing: i64 },
    #[error(
        "the database's schema is at migration {found}, newer than this release's {known}, and the release that \
         migrated it runs with releases from migration {since} on: run a newer release"
    )]
    TooOld { found: i64, known: i64, since: i64 },
    #[error("the database has no Strand schema: run `strand migrate` (or `strand serve` with migrate_on_start)")]
    Empty,
    #[error("cannot read the schema's version: {0}")]
    Read(#[source] sqlx::Error),
}

/// Where a database's schema stands against this release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaState {
    /// Every migration this release knows, and no other.
    Current,
    /// Newer than this release, and recorded as compatible with it.
    NewerCompatible { found: i64 },
}

impl Database {
    fn migrator(&self) -> &'static Migrator {
        match self.kind {
            DatabaseKind::Sqlite => &SQLITE_MIGRATIONS,
            DatabaseKind::MySql => &MYSQL_MIGRATIONS,
        }
    }

    /// Applies this release's pending migrations and records which releases may run on the result; a newer
    /// schema that is compatible with this release is left as it is. On MySQL under a lock of this
    /// database: every node started with `migrate_on_start` migrates, and those starting together would
    /// otherwise race.
    pub async fn migrate(&self) -> Result<SchemaState, DatabaseError> {
        let mut conn = self.write.acquire().await.map_err(DatabaseError::Connect)?;
        if self.kind == DatabaseKind::MySql {
            sqlx::query(&format!("SELECT GET_LOCK({LOCK_OF_THIS_DATABASE}, 300)"))
                .bind("strand-migrations")
                .execute(&mut *conn)
                .await
                .map_err(DatabaseError::Connect)?;
        }
        let migrated = self.migrate_on(&mut conn).await;
        if self.kind == DatabaseKind::MySql {
            let released = sqlx::query(&format!("SELECT RELEASE_LOCK({LOCK_OF_THIS_DATABASE})"))
                .bind("strand-migrations")
                .execute(&mut *conn)
                .await;
            released.map_err(DatabaseError::Connect)?;
        }
        migrated
    }

    async fn migrate_on(&self, conn: &mut sqlx::AnyConnection) -> Result<SchemaState, DatabaseError> {
        let known = known_versions(self.migrator());
        let applied = applied_versions(&mut *conn).await.map_err(SchemaError::Read)?;
        if applied.iter().any(|version| !known.contains(version)) {
            // Newer than this release: its migrations are not this release's to run.
            return Ok(judge(&known, &applied, compatible_since(&mut *conn).await?)?);
        }
        self.migrator().run(&mut *conn).await?;
        let since = COMPATIBLE_SINCE.iter().find(|(kind, _)| *kind == self.kind).map(|(_, since)| *since);
        record_compatible_since(&mut *conn, self.kind, since.unwrap_or(i64::MAX))
            .await
            .map_err(DatabaseError::Connect)?;
        Ok(SchemaState::Current)
    }

    /// Whether this release can run on the schema as it is, without changing it.
    pub async fn check_schema(&self) -> Result<SchemaState, DatabaseError> {
        let mut conn = self.read.acquire().await.map_err(DatabaseError::Connect)?;
        let known = known_versions(self.migrator());
        let applied = applied_versions(&mut conn).await.map_err(SchemaError::Read)?;
        let since = compatible_since(&mut conn).await?;
        Ok(judge(&known, &applied, since)?)
    }
}

fn known_versions(migrator: &Migrator) -> BTreeSet<i64> {
    migrator.iter().map(|migration| migration.version).collect()
}

/// The migrations applied successfully; none when sqlx's table is missing (a database never migrated).
async fn applied_versions(conn: &mut sqlx::AnyConnection) -> Result<BTreeSet<i64>, sqlx::Error> {
    let applied = sqlx::query_scalar::<_, i64>("SELECT version FROM _sqlx_migrations WHERE success = TRUE")
        .fetch_all(&mut *conn)
        .await;
    match applied {
        Ok(versions) => Ok(versions.into_iter().collect()),
        Err(e) if is_missing_table(&e) => Ok(BTreeSet::new()),
        Err(e) => Err(e),
    }
}

/// What the release that migrated the database recorded; `None` when no release recorded it (every
/// release before the record: compatible with none but itself).
async fn compatible_since(conn: &mut sqlx::AnyConnection) -> Result<Option<i64>, SchemaError> {
    let since = sqlx::query_scalar::<_, i64>("SELECT compatible_since FROM strand_schema WHERE id = 1")
        .fetch_optional(&mut *conn)
        .await;
    match since {
        Ok(since) => Ok(since),
        Err(e) if is_missing_table(&e) => Ok(None),
        Err(e) => Err(SchemaError::Read(e)),
    }
}

/// One statement, not a delete and an insert: SQLite has no migration lock, so two processes migrating at
/// once would interleave them (the second insert failing on the key), and a reader between the two would
/// find no record.
async fn record_compatible_since(
    conn: &mut sqlx::AnyConnection,
    kind: DatabaseKind,
    since: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query("CREATE TABLE IF NOT EXISTS strand_schema (id INTEGER PRIMARY KEY, compatible_since BIGINT NOT NULL)")
        .execute(&mut *conn)
        .await?;
    sqlx::query(&kind.upsert("strand_schema", &["id", "compatible_since"], &["id"]))
        .bind(1_i64)
        .bind(since)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

fn is_missing_table(error: &sqlx::Error) -> bool {
    // MySQL 1146 (SQLSTATE 42S02); SQLite's "no such table".
    error
        .as_database_error()
        .is_some_and(|e| e.code().as_deref() == Some("42S02") || e.message().contains("no such table"))
}

/// Whether a release that knows the migrations `known` can run on a schema with `applied`, which the
/// release that migrated it recorded as compatible with releases from migration `since` on.
fn judge(known: &BTreeSet<i64>, applied: &BTreeSet<i64>, since: Option<i64>) -> Result<SchemaState, SchemaError> {
    if applied.is_empty() {
        return Err(SchemaError::Empty);
    }
    if let Some(missing) = known.iter().find(|version| !applied.contains(version)) {
        return Err(SchemaError::Behind { missing: *missing });
    }
    let (found, newest_known) = (*applied.last().expect("not empty"), known.last().copied().unwrap_or(0));
    if found <= newest_known {
        return Ok(SchemaState::Current);
    }
    match since {
        Some(since) if since <= newest_known => Ok(SchemaState::NewerCompatible { found }),
        since => Err(SchemaError::TooOld { found, known: newest_known, since: since.unwrap_or(found) }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn versions(range: std::ops::RangeInclusive<i64>) -> BTreeSet<i64> {
        range.collect()
    }

    #[test]
    fn a_release_runs_on_its_own_schema_and_on_a_newer_one_recorded_as_compatible() {
        let known = versions(1..=28);
        assert_eq!(judge(&known, &versions(1..=28), Some(28)).unwrap(), SchemaState::Current);
        assert_eq!(judge(&known, &versions(1..=28), None).unwrap(), SchemaState::Current, "before the record");
        assert_eq!(judge(&known, &versions(1..=30), Some(27)).unwrap(), SchemaState::NewerCompatible { found: 30 });
        assert_eq!(judge(&known, &versions(1..=30), Some(28)).unwrap(), SchemaState::NewerCompatible { found: 30 });
    }

    #[test]
    fn a_release_refuses_a_schema_behind_it_one_too_new_for_it_and_none_at_all() {
        let known = versions(1..=28);
        assert!(matches!(judge(&known, &versions(1..=27), Some(27)), Err(SchemaError::Behind { missing: 28 })));
        let too_new = judge(&known, &versions(1..=30), Some(29)).unwrap_err();
        assert!(matches!(too_new, SchemaError::TooOld { found: 30, known: 28, since: 29 }), "{too_new}");
        assert!(too_new.to_string().contains("run a newer release"), "{too_new}");
        let unrecorded = judge(&known, &versions(1..=30), None).unwrap_err();
        assert!(matches!(unrecorded, SchemaError::TooOld { since: 30, .. }), "{unrecorded}");
        assert!(matches!(judge(&known, &BTreeSet::new(), None), Err(SchemaError::Empty)));
    }

    #[test]
    fn the_record_names_a_migration_this_release_ships() {
        for (kind, since) in COMPATIBLE_SINCE {
            let migrator = match kind {
                DatabaseKind::MySql => &MYSQL_MIGRATIONS,
                DatabaseKind::Sqlite => &SQLITE_MIGRATIONS,
            };
            let known = known_versions(migrator);
            assert!(known.contains(&since), "{kind:?}: {since} is none of {known:?}");
        }
    }
}
