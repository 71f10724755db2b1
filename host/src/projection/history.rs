//! The log a projector that declares history (`Declared::history`: a counter of followers gained, which an
//! unfollow does not lower) is built from: its value depends on every event, which the truth's current
//! state does not hold. The embedded bus keeps the events topic in the database; while retention has pruned
//! none of it, a build replays the tenant's events from the first, in order, through the live path's rule
//! (markers and pair floors: what the replay covers, the live path skips). Kafka's retention is the
//! broker's to decide, so a Kafka deployment never replays: its builds of such a projector count from the
//! build on, and the explicit ones — `strand rebuild`, a rollback — are refused (`needs_history`).

use crate::bus::{EmbeddedBus, Topology};
use crate::db::Database;
use crate::graph::TenantId;
use crate::outbox::ChangeEvent;
use crate::plugins::{ActivePlugin, RelationEvent};

use super::events::relation_event;

/// Messages read per page of a replay (one plugin call and one cache script for the tenant's among them).
const PAGE: u32 = 500;

/// Why a build cannot replay every event from `log` (the embedded bus's; `None` on Kafka), or `None` when
/// it can.
pub async fn cannot_replay(log: Option<&RetainedLog>) -> Result<Option<&'static str>, sqlx::Error> {
    Ok(match log {
        Some(log) if log.whole().await? => None,
        Some(_) => Some("retention has pruned the embedded bus's log"),
        None => Some("Kafka's retention is the broker's, so its topic is not replayed"),
    })
}

/// The embedded bus's events topic, as a history projector's build replays it.
#[derive(Clone)]
pub struct RetainedLog {
    bus: EmbeddedBus,
    topic: String,
}

impl RetainedLog {
    /// The events topic of the embedded bus in `db` — `None` on Kafka (`on_kafka`), which is not replayed.
    pub fn unless_kafka(on_kafka: bool, db: &Database, topology: &Topology) -> Option<Self> {
        (!on_kafka).then(|| Self { bus: EmbeddedBus::new(db.clone()), topic: topology.events_topic() })
    }

    /// Whether the log still holds every event since the first: retention pruned none of it.
    async fn whole(&self) -> Result<bool, sqlx::Error> {
        Ok(self.bus.first(&self.topic).await?.is_none_or(|first| first == 1))
    }

    /// Where the log ends now: a replay stops there, the live path applies what comes after.
    pub(super) async fn end(&self) -> Result<i64, sqlx::Error> {
        self.bus.end(&self.topic).await
    }

    /// The next page after position `after` (up to `end`): `tenant`'s events that `plugin` receives, in
    /// order, and the position the page reached (`end` once there is nothing more). An event that cannot
    /// be decoded is left out with a log line: the live path dead-lettered it.
    pub(super) async fn page(
        &self,
        tenant: &TenantId,
        plugin: &ActivePlugin,
        after: i64,
        end: i64,
    ) -> Result<(Vec<RelationEvent>, i64), sqlx::Error> {
        let messages = self.bus.read(&self.topic, after, PAGE).await?;
        let (mut reached, mut events) = (end, Vec::new());
        for delivered in messages.into_iter().take_while(|d| d.seq <= end) {
            reached = delivered.seq;
            let decoded = serde_json::from_str::<ChangeEvent>(&delivered.message.payload)
                .map_err(|e| e.to_string())
                .and_then(|event| relation_event(&event).map_err(|e| e.to_string()));
            match decoded {
                Ok(event) if event.tenant == tenant.as_str() && plugin.prepared.receives(&event) => events.push(event),
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(seq = delivered.seq, %error, "a replay leaves out an event it cannot read")
                }
            }
        }
        Ok((events, reached))
    }
}
