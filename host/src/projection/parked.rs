//! A projector's parked events: a tenant's bus events that could not be applied in their batch without
//! holding the other tenants back — its plugin failed on them or ran past the tenant's time budget, or its
//! space is being built from the truth. They are kept in `projection_parked` before the batch's position is
//! committed (so nothing is lost), retried with backoff, and dead-lettered after [`MAX_ATTEMPTS`] failed
//! tries. Applying them late is exact: counter adds count once per event id, other effects keep each pair's
//! newest version, and a build's floors skip what its snapshot covered.

use sqlx::Row;

use crate::db::Database;
use crate::ops::metrics::PROJECTION_PARKED_EVENTS;
use crate::outbox::ChangeEvent;
use crate::util::parking::kept_reason;
use crate::util::time::now_ms;

/// Tries after which a parked event is dead-lettered.
pub const MAX_ATTEMPTS: i64 = 5;
/// Most parked events retried at once.
const RETRY_BATCH: i64 = 256;

/// One parked event.
#[derive(Debug, Clone)]
pub struct ParkedEvent {
    pub id: i64,
    pub event: ChangeEvent,
    /// The event as it came on the bus.
    pub payload: String,
    /// Failed tries so far.
    pub attempts: i64,
}

/// The parked events of one projection.
#[derive(Clone)]
pub struct Parked {
    db: Database,
    projection: String,
}

impl Parked {
    pub fn new(db: Database, projection: String) -> Self {
        Self { db, projection }
    }

    /// Keeps `events` of `tenant` (one batch's, in bus order) for later, with why.
    pub async fn park(&self, tenant: &str, events: &[&ChangeEvent], reason: &str) -> Result<(), sqlx::Error> {
        if events.is_empty() {
            return Ok(());
        }
        let reason = kept_reason(reason);
        let mut insert = sqlx::QueryBuilder::new(
            "INSERT INTO projection_parked (projection, tenant_id, event_id, payload, parked_at, attempts, reason) ",
        );
        let payloads: Vec<String> = events
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<_, _>>()
            .map_err(|e| sqlx::Error::Encode(e.into()))?;
        let parked_at = now_ms();
        insert.push_values(events.iter().zip(payloads), |mut row, (event, payload)| {
            row.push_bind(self.projection.clone())
                .push_bind(tenant.to_owned())
                .push_bind(event.event_id.clone())
                .push_bind(payload)
                .push_bind(parked_at)
                .push_bind(0_i64)
                .push_bind(reason.clone());
        });
        insert.build().execute(self.db.writer()).await?;
        metrics::counter!(PROJECTION_PARKED_EVENTS.name, "projection" => self.projection.clone())
            .increment(events.len() as u64);
        Ok(())
    }

    /// `tenant`'s oldest parked events.
    pub async fn oldest(&self, tenant: &str) -> Result<Vec<ParkedEvent>, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT id, payload, attempts FROM projection_parked \
             WHERE projection = ? AND tenant_id = ? ORDER BY id LIMIT ?",
        )
        .bind(&self.projection)
        .bind(tenant)
        .bind(RETRY_BATCH)
        .fetch_all(self.db.reader())
        .await?;
        rows.iter()
            .map(|row| {
                let payload: String = row.try_get(1)?;
                Ok(ParkedEvent {
                    id: row.try_get(0)?,
                    event: serde_json::from_str(&payload).map_err(|e| sqlx::Error::Decode(e.into()))?,
                    payload,
                    attempts: row.try_get(2)?,
                })
            })
            .collect()
    }

    /// Forgets parked events: applied, or dead-lettered.
    pub async fn remove(&self, ids: &[i64]) -> Result<(), sqlx::Error> {
        for chunk in ids.chunks(256) {
            let list = chunk.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
            sqlx::query(&format!("DELETE FROM projection_parked WHERE id IN ({list})"))
                .execute(self.db.writer())
                .await?;
        }
        Ok(())
    }

    /// Counts a failed try of parked events, with why.
    pub async fn failed(&self, ids: &[i64], reason: &str) -> Result<(), sqlx::Error> {
        let reason = kept_reason(reason);
        for chunk in ids.chunks(256) {
            let list = chunk.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
            sqlx::query(&format!(
                "UPDATE projection_parked SET attempts = attempts + 1, reason = ? WHERE id IN ({list})"
            ))
            .bind(&reason)
            .execute(self.db.writer())
            .await?;
        }
        Ok(())
    }

    /// The tenants with parked events (after a restart: whose events are to be retried).
    pub async fn tenants(&self) -> Result<Vec<String>, sqlx::Error> {
        sqlx::query_scalar("SELECT DISTINCT tenant_id FROM projection_parked WHERE projection = ?")
            .bind(&self.projection)
            .fetch_all(self.db.reader())
            .await
    }
}
