//! The embedded default's spaces kept across restarts. The in-process cache is stored in the database
//! every [`KEEP_EVERY`] and at shutdown, beside each projector's position on the embedded bus at that
//! moment; the next start takes the spaces back and rewinds each projector's subscriber to its kept
//! position, so the events since are applied again (exactly once in result: counters by event id, state by
//! pair version). Without it every restart built each space again from the truth, and a projector whose
//! value depends on history — a counter of followers gained, which an unfollow does not lower — lost it.
//!
//! Left out (built from the truth after a restart instead): a tenant's space of a projector while it has
//! parked events there (they sit behind the kept positions, and a retry may apply them after the copy), and
//! at start every space of a tenant whose import had not ended (the import writes no events).

use std::sync::Arc;
use std::time::Duration;

use sqlx::Row;

use crate::cache::MemoryCache;
use crate::db::{held, Database};
use crate::graph::TenantId;
use crate::util::time::now_ms;

/// How often the spaces are kept while serving (a SIGKILL loses at most this much of the kept state;
/// the events since are still on the bus and applied again).
pub const KEEP_EVERY: Duration = Duration::from_secs(30);
/// The prefix of the `bus_positions` rows that hold a snapshot's positions: retention keeps the bus's
/// messages after them, as it does for any subscriber.
const KEPT: &str = "kept:";
/// The subscribers whose data is in the cache: the projector projections (`projector.{name}`).
const CACHED_SUBSCRIBERS: &str = "projector.%";

/// What was kept: the snapshot's size in bytes, and how many subscribers' positions.
#[derive(Debug, Default, PartialEq)]
pub struct Kept {
    pub bytes: usize,
    pub positions: usize,
}

/// One keep at a time in this process: an older copy never commits over a newer one (a periodic keep that
/// copied before an import cleared its tenant's spaces, committing after the import's own keep).
static KEEPING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Stores `cache`'s spaces and the positions they cover, replacing the previous snapshot.
pub async fn keep(db: &Database, cache: &Arc<MemoryCache>) -> Result<Kept, sqlx::Error> {
    let _one_at_a_time = KEEPING.lock().await;
    // The positions first: the spaces copied after them hold at least every event those name.
    let positions = positions(db, CACHED_SUBSCRIBERS).await?;
    // Then the spaces with parked events (read after the positions: one parked later is behind them).
    let parked: Vec<(String, String)> = sqlx::query("SELECT DISTINCT tenant_id, projection FROM projection_parked")
        .fetch_all(db.reader())
        .await?
        .iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
        .collect::<Result<_, sqlx::Error>>()?;
    let leave_out: Vec<String> = parked
        .iter()
        .filter_map(|(tenant, projection)| Some(format!("{{{tenant}:{}@", projection.strip_prefix("projector.")?)))
        .collect();
    // Copied under the cache's lock, on a blocking thread (the scripts wait for the copy; async tasks
    // that do not use the cache go on).
    let copied = cache.clone();
    let snapshot = tokio::task::spawn_blocking(move || copied.snapshot(&leave_out))
        .await
        .map_err(|stopped| sqlx::Error::Io(std::io::Error::other(stopped)))?;
    let kept = Kept { bytes: snapshot.len(), positions: positions.len() };
    held::holding("the kept spaces' transaction", async {
        let mut tx = db.writer().begin().await?;
        sqlx::query("DELETE FROM kept_spaces").execute(&mut *tx).await?;
        sqlx::query("INSERT INTO kept_spaces (id, snapshot, kept_at) VALUES (1, ?, ?)")
            .bind(snapshot)
            .bind(now_ms())
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM bus_positions WHERE consumer LIKE ?")
            .bind(format!("{KEPT}%"))
            .execute(&mut *tx)
            .await?;
        for (consumer, topic, seq) in &positions {
            sqlx::query("INSERT INTO bus_positions (consumer, topic, seq) VALUES (?, ?, ?)")
                .bind(format!("{KEPT}{consumer}"))
                .bind(topic)
                .bind(seq)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await
    })
    .await?;
    Ok(kept)
}

/// Takes the kept spaces back into `cache` (at start, before any worker reads the bus) and rewinds each
/// projector's subscriber to the position they cover; whether there were spaces to take back. A snapshot
/// this build cannot read is logged and left: the spaces are then built from the truth, as before.
pub async fn restore(db: &Database, cache: &MemoryCache) -> Result<bool, sqlx::Error> {
    let snapshot: Option<Vec<u8>> =
        sqlx::query_scalar("SELECT snapshot FROM kept_spaces WHERE id = 1").fetch_optional(db.reader()).await?;
    let Some(snapshot) = snapshot else { return Ok(false) };
    let leave_out: Vec<String> = importing(db).await?.iter().map(|tenant| format!("{{{tenant}:")).collect();
    if let Err(error) = cache.restore(&snapshot, &leave_out) {
        tracing::warn!(%error, "the kept spaces cannot be read; they are built from the truth");
        return Ok(false);
    }
    let kept = positions(db, &format!("{KEPT}%")).await?;
    for (consumer, topic, seq) in &kept {
        let subscriber = consumer.strip_prefix(KEPT).unwrap_or(consumer);
        sqlx::query("UPDATE bus_positions SET seq = ? WHERE consumer = ? AND topic = ? AND seq > ?")
            .bind(seq)
            .bind(subscriber)
            .bind(topic)
            .bind(seq)
            .execute(db.writer())
            .await?;
    }
    tracing::info!(bytes = snapshot.len(), subscribers = kept.len(), "the kept spaces are taken back");
    Ok(true)
}

/// The embedded-bus positions `(consumer, topic, seq)` of the consumers named `LIKE` `named`.
async fn positions(db: &Database, named: &str) -> Result<Vec<(String, String, i64)>, sqlx::Error> {
    sqlx::query_as("SELECT consumer, topic, seq FROM bus_positions WHERE consumer LIKE ?")
        .bind(named)
        .fetch_all(db.reader())
        .await
}

/// Drops what was kept (a node that keeps nothing: Redis or Kafka configured, or no workers), so an old
/// snapshot never comes back and its positions hold back no retention of the embedded bus.
pub async fn forget(db: &Database) -> Result<(), sqlx::Error> {
    let mut tx = db.writer().begin().await?;
    sqlx::query("DELETE FROM kept_spaces").execute(&mut *tx).await?;
    sqlx::query("DELETE FROM bus_positions WHERE consumer LIKE ?").bind(format!("{KEPT}%")).execute(&mut *tx).await?;
    tx.commit().await
}

/// How often a build waiting for a tenant's import looks whether it ended.
const IMPORT_POLL: Duration = Duration::from_secs(1);

/// The tenants an import is writing into (their marks in `tenant_imports`, `transfer::marks`): their spaces
/// are cleared and built once the import ends, so none is built or kept meanwhile.
pub(super) async fn importing(db: &Database) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT tenant_id FROM tenant_imports").fetch_all(db.reader()).await
}

/// Returns once no import is writing into `tenant`: a build started by the tenant's live events during an
/// import waits for it (the import's end clears the spaces, and one build from the whole truth follows).
pub(super) async fn after_import(db: &Database, tenant: &TenantId) -> Result<(), sqlx::Error> {
    while importing(db).await?.iter().any(|importing| importing == tenant.as_str()) {
        tokio::time::sleep(IMPORT_POLL).await;
    }
    Ok(())
}
