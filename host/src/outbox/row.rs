//! An outbox row as the relay reads it, from `outbox` or `relay_parked` (which has the same columns).

use serde::{Deserialize, Serialize};
use sqlx::any::AnyRow;
use sqlx::Row;

use super::ChangeEvent;

/// A committed outbox row, as the relay reads it and hands it to the tenant's router.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxRow {
    pub id: i64,
    pub tenant: String,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub event_type: String,
    /// The default message key, `tenant:follower`.
    pub key: String,
    pub payload: String,
    /// The trace of the change that wrote the row, when it was sampled: the relay's publish continues it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// The columns [`OutboxRow::from_row`] reads, in its order (`relay_parked` has them too).
pub const OUTBOX_COLUMNS: &str =
    "id, tenant_id, aggregate_type, aggregate_id, event_type, event_key, payload, traceparent";

impl OutboxRow {
    /// The row the write of `event` commits, as row `id`.
    pub fn published(id: i64, event: &ChangeEvent) -> Self {
        Self {
            id,
            tenant: event.tenant.clone(),
            aggregate_type: super::AGGREGATE_TYPE.to_owned(),
            aggregate_id: event.aggregate_id(),
            event_type: event.event_type.as_str().to_owned(),
            key: event.key(),
            payload: event.payload(),
            traceparent: None,
        }
    }

    /// A row selected with [`OUTBOX_COLUMNS`].
    pub fn from_row(row: &AnyRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            id: row.try_get(0)?,
            tenant: row.try_get(1)?,
            aggregate_type: row.try_get(2)?,
            aggregate_id: row.try_get(3)?,
            event_type: row.try_get(4)?,
            key: row.try_get(5)?,
            payload: row.try_get(6)?,
            traceparent: row.try_get(7)?,
        })
    }
}
