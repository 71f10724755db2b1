//! An outbox row as the relay reads it, from `outbox` or `relay_parked` (which has the same columns), or
//! from the binlog's insert of it: checked once where it is read — its tenant, its event type, its payload
//! decoded — so the relay routes, publishes and measures it without parsing anything again.

use serde::{Deserialize, Serialize};
use sqlx::any::AnyRow;
use sqlx::Row;

use super::{ChangeEvent, EventType};
use crate::graph::TenantId;

/// A committed outbox row, as the relay reads it and hands it to the tenant's router.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "StoredRow")]
pub struct OutboxRow {
    pub id: i64,
    pub tenant: TenantId,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub event_type: EventType,
    /// The default message key, `tenant:follower`.
    pub key: String,
    /// As stored: what is published, byte for byte.
    pub payload: String,
    /// The trace of the change that wrote the row, when it was sampled: the relay's publish continues it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The payload decoded: its event id and version go into the messages' headers, its commit time into
    /// the relay's lag.
    #[serde(skip_serializing)]
    pub change: ChangeEvent,
}

/// An outbox row's columns as stored (or as `strand plugin test --input` gives them), not yet checked.
#[derive(Debug, Default, Deserialize)]
pub struct StoredRow {
    pub id: i64,
    pub tenant: String,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub event_type: String,
    pub key: String,
    pub payload: String,
    #[serde(default)]
    pub traceparent: Option<String>,
}

/// A stored row the relay cannot publish: it names no valid tenant or event type, its payload is not an
/// event, or not one of that tenant and type. Never skipped: the batch holding it fails and is tried again
/// (each failure logged with the row's id) until an operator repairs the row; a corrupt parked row holds up
/// only its own tenant's parked rows.
#[derive(Debug, thiserror::Error)]
#[error("outbox row {id} is corrupt")]
pub struct CorruptRow {
    pub id: i64,
    #[source]
    pub cause: Box<dyn std::error::Error + Send + Sync>,
}

impl TryFrom<StoredRow> for OutboxRow {
    type Error = CorruptRow;

    fn try_from(stored: StoredRow) -> Result<Self, CorruptRow> {
        let id = stored.id;
        let corrupt = |cause: Box<dyn std::error::Error + Send + Sync>| CorruptRow { id, cause };
        let tenant = stored.tenant.parse().map_err(|e: crate::graph::InvalidTenantId| corrupt(e.into()))?;
        let event_type =
            stored.event_type.parse().map_err(|e: crate::util::str_enum::UnknownName| corrupt(e.into()))?;
        let change: ChangeEvent = serde_json::from_str(&stored.payload).map_err(|e| corrupt(e.into()))?;
        if change.tenant != stored.tenant || change.event_type != event_type {
            let row = format!("tenant {}, {}", stored.tenant, stored.event_type);
            let said = format!("its payload is of tenant {}, {}; the row says {row}", change.tenant, change.event_type);
            return Err(corrupt(said.into()));
        }
        Ok(Self {
            id: stored.id,
            tenant,
            aggregate_type: stored.aggregate_type,
            aggregate_id: stored.aggregate_id,
            event_type,
            key: stored.key,
            payload: stored.payload,
            traceparent: stored.traceparent,
            change,
        })
    }
}

/// The columns [`StoredRow::from_row`] reads, in its order (`relay_parked` has them too).
pub const OUTBOX_COLUMNS: &str =
    "id, tenant_id, aggregate_type, aggregate_id, event_type, event_key, payload, traceparent";

impl OutboxRow {
    /// The row `tenant`'s write of `event` commits, as row `id` (what replays and samples hand a router).
    pub fn published(id: i64, tenant: &TenantId, mut event: ChangeEvent) -> Self {
        event.tenant = tenant.to_string();
        Self {
            id,
            tenant: tenant.clone(),
            aggregate_type: super::AGGREGATE_TYPE.to_owned(),
            aggregate_id: event.aggregate_id(),
            event_type: event.event_type,
            key: event.key(),
            payload: event.payload(),
            traceparent: None,
            change: event,
        }
    }
}

impl StoredRow {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(tenant: &str, event_type: &str, payload: String) -> StoredRow {
        StoredRow { id: 9, tenant: tenant.into(), event_type: event_type.into(), payload, ..StoredRow::default() }
    }

    #[test]
    fn a_row_is_checked_once_against_its_own_payload() {
        let acme: TenantId = "acme".parse().unwrap();
        let written = OutboxRow::published(9, &acme, (&crate::plugins::sample_events()[0]).into());
        let read = OutboxRow::try_from(stored("acme", "follow", written.payload.clone())).unwrap();
        assert_eq!((read.tenant, read.event_type, read.change), (acme, EventType::Follow, written.change));

        for (tenant, event_type, payload) in [
            ("globex", "follow", written.payload.clone()),
            ("acme", "unfollow", written.payload.clone()),
            ("acme", "follow", "{}".to_owned()),
            ("acme", "followed", written.payload.clone()),
            ("no tenant", "follow", written.payload.clone()),
        ] {
            let refused = OutboxRow::try_from(stored(tenant, event_type, payload)).unwrap_err();
            assert_eq!(refused.id, 9, "{refused}");
        }
    }
}
