//! One active relay per MySQL database: the leader holds `GET_LOCK` on a dedicated connection. The server
//! releases the lock when that connection dies — with the process — so a standby relay takes over from a
//! crashed leader without any timeout of ours. (SQLite has one writer anyway.)

use std::time::Duration;

use sqlx::{Acquire, AnyConnection, Connection};

use crate::db::{Database, LOCK_OF_THIS_DATABASE};
use crate::ops::metrics::RELAY_ACTIVE;

/// How long the leader's lock check may take before the link is taken for lost (a busy server can take
/// seconds to answer; a lock dropped too eagerly makes relays flap).
const ATTEMPT: Duration = Duration::from_secs(5);

/// Holding the relay lock of a database.
pub struct Leadership {
    conn: AnyConnection,
    name: String,
}

impl Leadership {
    /// Takes the lock if it is free (no waiting in the server: the caller's backoff paces a standby, and a
    /// statement blocked for seconds would be logged as slow on every attempt).
    pub async fn try_acquire(db: &Database, name: &str) -> Result<Option<Self>, sqlx::Error> {
        // A connection of its own, outside the pool: the lock lives exactly as long as it does.
        let mut conn = db.writer().acquire().await?.detach();
        let got: Option<i64> = sqlx::query_scalar(&format!("SELECT GET_LOCK({LOCK_OF_THIS_DATABASE}, 0)"))
            .bind(name)
            .fetch_one(conn.acquire().await?)
            .await?;
        if got == Some(1) {
            Ok(Some(Self { conn, name: name.to_owned() }))
        } else {
            conn.close().await?;
            Ok(None)
        }
    }

    /// Whether this connection still holds the lock (false after a lost connection or a server restart,
    /// and when the server does not answer within `ATTEMPT`: a silent link is taken for lost).
    pub async fn still_held(&mut self) -> bool {
        let sql = format!("SELECT IS_USED_LOCK({LOCK_OF_THIS_DATABASE}) = CONNECTION_ID()");
        let owner = sqlx::query_scalar::<_, Option<i64>>(&sql).bind(&self.name).fetch_one(&mut self.conn);
        matches!(tokio::time::timeout(ATTEMPT, owner).await, Ok(Ok(Some(1))))
    }

    /// Makes sure `held` is a live lock `name` before a batch, taking it when free: [`Lead::Standby`]
    /// while another relay leads (or the lock cannot be checked), so the caller stands by and asks again
    /// later; [`Lead::Taken`] when this call took it — also when a lock lost since the last call was taken
    /// again, since another relay may have led in between. The answer is the gauge `strand_relay_active`
    /// (1 on the one relay that publishes).
    pub async fn keep(db: &Database, name: &str, held: &mut Option<Leadership>) -> Lead {
        let lead = Self::check_or_take(db, name, held).await;
        metrics::gauge!(RELAY_ACTIVE.name).set(if lead == Lead::Standby { 0.0 } else { 1.0 });
        lead
    }

    async fn check_or_take(db: &Database, name: &str, held: &mut Option<Leadership>) -> Lead {
        if let Some(leadership) = held {
            if leadership.still_held().await {
                return Lead::Kept;
            }
            tracing::error!("lost the relay lock (connection or server lost); standing by");
            *held = None;
        }
        match Self::try_acquire(db, name).await {
            Ok(Some(leadership)) => {
                tracing::info!("this relay is now the active one");
                *held = Some(leadership);
                Lead::Taken
            }
            Ok(None) => Lead::Standby,
            Err(e) => {
                tracing::error!(error = %e, "cannot take the relay lock; retrying");
                Lead::Standby
            }
        }
    }
}

/// Where a relay stands after [`Leadership::keep`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lead {
    /// Another relay leads, or the lock cannot be checked.
    Standby,
    /// This relay led before the call and still does.
    Kept,
    /// This relay took the lock in this call: what another relay did meanwhile must be accounted for.
    Taken,
}

/// The `GET_LOCK` name every relay of a database competes for, whatever its mode (scoped to the database
/// by [`LOCK_OF_THIS_DATABASE`]).
pub const RELAY_LOCK: &str = "strand-relay";
