//! The connection to the database of record, for both kinds Strand runs on.
//!
//! Both kinds go through sqlx's `Any` driver so that SQL is written once; where the dialects differ, it
//! asks [`DatabaseKind`]'s methods in `dialect.rs`. SQLite gets a single-connection writer pool: SQLite allows one
//! writer at a time anyway, and serialising in the pool turns lock upgrades (`SQLITE_BUSY`) into queueing.

mod dialect;
pub mod held;
mod schema;

pub use schema::{SchemaError, SchemaState};

use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Connection, Executor};

/// A pooled MySQL connection used within this long is handed out without a ping (HikariCP's "alive bypass
/// window"): sqlx pings every connection when it comes back to the pool, and a ping on every acquire too
/// would make a two-round-trip follow four. One idle for longer is pinged first, so a server that went away
/// meanwhile costs no request.
const PING_WHEN_IDLE_FOR: Duration = Duration::from_millis(500);

/// Which SQL dialect the database of record speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatabaseKind {
    Sqlite,
    MySql,
}

/// Why the database could not be opened or migrated.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    /// Only the URL's scheme is kept: the rest may hold a password.
    #[error("unsupported database URL scheme {0:?}: use sqlite://FILE or mysql://USER:PASS@HOST:PORT/DB")]
    UnsupportedUrl(String),
    #[error("cannot connect to the database: {0}")]
    Connect(#[source] sqlx::Error),
    #[error("cannot apply migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error(transparent)]
    Schema(#[from] SchemaError),
}

/// The SQL for a MySQL user lock's name (bound as `?`) scoped to the connection's database: the server's
/// user locks are server-wide, so two deployments (or tests) on databases of one server would otherwise
/// share a relay's leadership and wait on each other's migrations. The database's name is hashed to keep
/// within the server's 64 characters.
pub const LOCK_OF_THIS_DATABASE: &str = "CONCAT(?, '.', MD5(DATABASE()))";

/// Pools for reading and writing the database of record (the same pool on MySQL).
#[derive(Debug, Clone)]
pub struct Database {
    kind: DatabaseKind,
    read: AnyPool,
    write: AnyPool,
}

impl Database {
    /// Opens the database at `url` (an SQLite file is created when missing, as a newcomer expects of an
    /// embedded database) and brings its schema up to date: `strand migrate`, a node started with
    /// `migrate_on_start`, tests.
    pub async fn open(url: &str, max_connections: u32) -> Result<Self, DatabaseError> {
        let database = Self::connect(url, max_connections, true).await?;
        let state = database.migrate().await?;
        if let SchemaState::NewerCompatible { found } = state {
            tracing::info!(found, "the schema is newer than this release and recorded as compatible with it");
        }
        Ok(database)
    }

    /// Opens the existing database at `url` without changing its schema, once this release can run on it:
    /// every node of a deployment that migrates by `strand migrate`, and the maintenance commands.
    pub async fn open_existing(url: &str, max_connections: u32) -> Result<Self, DatabaseError> {
        let database = Self::connect(url, max_connections, false).await?;
        if let SchemaState::NewerCompatible { found } = database.check_schema().await? {
            tracing::info!(found, "the schema is newer than this release and recorded as compatible with it");
        }
        Ok(database)
    }

    async fn connect(url: &str, max_connections: u32, create: bool) -> Result<Self, DatabaseError> {
        sqlx::any::install_default_drivers();
        let kind = if url.starts_with("sqlite:") {
            DatabaseKind::Sqlite
        } else if url.starts_with("mysql:") || url.starts_with("mariadb:") {
            DatabaseKind::MySql
        } else {
            let scheme = url.split_once(':').map_or("(none)", |(scheme, _)| scheme);
            return Err(DatabaseError::UnsupportedUrl(scheme.chars().take(32).collect()));
        };
        Ok(match kind {
            DatabaseKind::Sqlite => {
                let url = if url.contains("mode=") || !create {
                    url.to_owned()
                } else {
                    format!("{url}{}mode=rwc", if url.contains('?') { '&' } else { '?' })
                };
                let options: AnyConnectOptions = url.parse().map_err(DatabaseError::Connect)?;
                let write = sqlite_pool(1).connect_with(options.clone()).await.map_err(DatabaseError::Connect)?;
                let read = sqlite_pool(max_connections).connect_with(options).await.map_err(DatabaseError::Connect)?;
                Self { kind, read, write }
            }
            DatabaseKind::MySql => {
                let url = url.replacen("mariadb:", "mysql:", 1);
                let pool = AnyPoolOptions::new()
                    .max_connections(max_connections)
                    .acquire_timeout(Duration::from_secs(5))
                    .test_before_acquire(false)
                    .before_acquire(|conn, meta| {
                        Box::pin(async move {
                            if meta.idle_for >= PING_WHEN_IDLE_FOR {
                                conn.ping().await?;
                            }
                            Ok(true)
                        })
                    })
                    .connect(&url)
                    .await
                    .map_err(DatabaseError::Connect)?;
                Self { kind, read: pool.clone(), write: pool }
            }
        })
    }

    pub fn kind(&self) -> DatabaseKind {
        self.kind
    }

    /// The pool for reads; on SQLite several readers run beside the one writer (WAL).
    pub fn reader(&self) -> &AnyPool {
        &self.read
    }

    /// The pool for transactions that write.
    pub fn writer(&self) -> &AnyPool {
        &self.write
    }

    /// Closes both pools, waiting for connections in use to be returned.
    pub async fn close(&self) {
        self.write.close().await;
        self.read.close().await;
    }
}

fn sqlite_pool(max_connections: u32) -> AnyPoolOptions {
    AnyPoolOptions::new().max_connections(max_connections).acquire_timeout(Duration::from_secs(30)).after_connect(
        |conn, _| {
            Box::pin(async move {
                // WAL lets readers proceed while the writer commits; NORMAL is durable across process crashes.
                conn.execute("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 10000;")
                    .await?;
                Ok(())
            })
        },
    )
}

/// Deadlock (MySQL 1213, SQLSTATE 40001), lock wait time-out (1205) or a busy SQLite: safe to retry whole.
pub fn is_lock_conflict(error: &sqlx::Error) -> bool {
    let Some(db_error) = error.as_database_error() else {
        return false;
    };
    let code = db_error.code();
    let message = db_error.message();
    matches!(code.as_deref(), Some("40001") | Some("5") | Some("517"))
        || message.contains("Lock wait timeout")
        || message.contains("database is locked")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_mistyped_url_is_refused_without_its_password() {
        let refused = Database::open("postgres://strand:hunter2@db.internal/strand", 1).await.unwrap_err();
        let message = refused.to_string();
        assert!(message.contains("\"postgres\""), "{message}");
        assert!(!message.contains("hunter2") && !message.contains("db.internal"), "{message}");
    }
}
