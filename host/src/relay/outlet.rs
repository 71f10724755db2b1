//! What both relay modes do with a batch of committed outbox rows: route each tenant's rows through its
//! router plugin and publish the messages, holding no database connection, then delete the rows in the
//! caller's transaction — so the rows leave the outbox exactly when their publication is settled, and no
//! router or broker is waited on while a connection is held (`db::held`).
//!
//! One tenant cannot stop the relay for the others. A tenant whose router runs past its time budget, or
//! whose destination the broker refuses (a topic Kafka will not create, an ACL, a quota, a message too
//! large), has its rows *parked*: moved from the outbox into `relay_parked` in the same transaction, and
//! every later row of that tenant after them, so its order holds. The other tenants' rows of the batch are
//! published and deleted as usual. Parked rows are retried in id order ([`Outlet::retry_due`]) with
//! backoff until published — a router past its budget again is replaced by the default route — counted in `strand_relay_parked_rows{tenant}` and listed by the
//! admin API.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::{Acquire, AnyConnection, Executor};
use tracing::{Instrument, Span};

use super::{publish_spans, to_messages, RelayError, TopicRefused};
use crate::bus::{is_refusal, EmbeddedBus, KafkaBus, Message, Publisher, Sending, Topology};
use crate::db::{held, Database};
use crate::graph::TenantId;
use crate::ops::metrics::{RELAY_LAG_SECONDS, RELAY_PARKED_ROWS, RELAY_PARKED_ROWS_TOTAL, RELAY_PUBLISHED};
use crate::ops::observability::{causes, seconds_since};
use crate::outbox::{OutboxRow, OUTBOX_COLUMNS};
use crate::plugins::{route_by_default, route_or_default, PluginRegistry};
use crate::util::parking::{kept_reason, Pace, Parking};
use crate::util::side_by_side::{SideBySide, OUTPACED_AFTER};
use crate::util::time::now_ms;

/// Most outbox rows deleted in one round trip.
const DELETE_CHUNK: usize = 256;
/// How long a tenant's routers may take for its rows of one batch unless configured otherwise.
pub const DEFAULT_ROUTER_BUDGET: Duration = Duration::from_millis(250);
/// Most parked rows of a tenant retried at once.
const RETRY_BATCH: i64 = 256;
/// A parked tenant's rows are tried at once, then after a second, doubling up to five minutes; the table is
/// read again every 30 s (what another relay parked, or a parking whose transaction committed after a retry
/// found the tenant's rows gone).
const PACE: Pace = Pace {
    wait_first: false,
    backoff: Duration::from_secs(1),
    at_most: Duration::from_secs(300),
    reload: Duration::from_secs(30),
};

/// Where routed outbox rows go.
pub struct Outlet {
    plugins: Arc<PluginRegistry>,
    publisher: Publisher,
    topology: Topology,
    router_budget: Duration,
    /// Tenants with parked rows, and when each is tried again.
    parked: Parking<TenantId>,
    /// Parked tenants whose routers ran past the budget on a retry too: the rest of their parked rows go
    /// out by the default route without asking them again (each ask held the relay a whole budget).
    overran: Mutex<HashSet<TenantId>>,
}

impl Outlet {
    pub fn new(plugins: Arc<PluginRegistry>, publisher: Publisher, topology: Topology) -> Self {
        let (router_budget, parked) = (DEFAULT_ROUTER_BUDGET, Parking::new(PACE));
        Self { plugins, publisher, topology, router_budget, parked, overran: Mutex::default() }
    }

    /// This outlet giving each tenant's routers `budget` per batch (`relay_tenant_budget_ms`).
    pub fn with_router_budget(mut self, budget: Duration) -> Self {
        self.router_budget = budget;
        self
    }

    /// Publishes `events` (in outbox order) and deletes their rows: [`Outlet::dispatch`], then
    /// [`Outlet::acknowledge`], then [`Outlet::settle`] in a transaction of its own — for a caller with
    /// nothing to overlap. No connection is held until the bus has answered.
    pub async fn publish(&self, db: &Database, events: Vec<OutboxRow>) -> Result<(), RelayError> {
        let acknowledged = self.acknowledge(vec![self.dispatch(events).await?]).await?;
        let mut conn = db.writer().acquire().await?;
        held::holding("the relay's transaction", async {
            let mut tx = conn.begin().await?;
            self.settle(&mut tx, acknowledged).await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    /// Routes `events` (in outbox order) and, to Kafka, hands the messages to the producer without waiting
    /// for the broker — so a relay can read and route the next batch while these are on their way.
    pub async fn dispatch(&self, events: Vec<OutboxRow>) -> Result<Dispatched, RelayError> {
        let occurred_at = events.last().map(|newest| newest.change.occurred_at.clone());
        let mut to_park = HashMap::new();
        let spans = publish_spans(&events);
        let routed = self.route(&events, PastBudget::Park, &mut to_park, &spans).await?;
        let (messages, row_of): (Vec<Message>, Vec<usize>) = routed.into_iter().unzip();
        let on_its_way = match &self.publisher {
            Publisher::Embedded(bus) => InFlight::ToAppend(bus.clone(), messages),
            Publisher::Kafka(kafka) => InFlight::Sent(kafka.clone(), kafka.send(&messages).await?, messages),
        };
        Ok(Dispatched { rows: events, row_of, to_park, occurred_at, on_its_way, _spans: spans })
    }

    /// Waits, holding no database connection, until Kafka has answered for every message of `batches` (in
    /// dispatch order): the rows whose messages it refused are to be parked. Fails whole when the bus
    /// failed for everyone (down, slow). Embedded batches pass as they are (appended when settled).
    pub async fn acknowledge(&self, mut batches: Vec<Dispatched>) -> Result<Acknowledged, RelayError> {
        for batch in &mut batches {
            batch.on_its_way = match std::mem::replace(&mut batch.on_its_way, InFlight::Answered) {
                InFlight::Sent(kafka, sending, messages) => {
                    for (row, refused) in self.acknowledged(&kafka, sending, &messages, &batch.row_of).await? {
                        batch.to_park.entry(row).or_insert(causes(&refused));
                    }
                    InFlight::Answered
                }
                waiting => waiting,
            };
        }
        Ok(Acknowledged(batches))
    }

    /// Settles acknowledged batches within `tx`, with no wait on anything but the database: Kafka has
    /// acknowledged every message (at least once: a crash before `tx` commits publishes them again), into
    /// the embedded bus they are appended in `tx` (exactly once); then their rows are deleted — the rows of
    /// a tenant whose destination was refused, or that was parked already, are moved to `relay_parked`.
    /// Fails with `Contended` when some row was already gone — another relay published it — so the caller
    /// rolls back instead of publishing twice.
    pub async fn settle(&self, tx: &mut AnyConnection, batches: Acknowledged) -> Result<(), RelayError> {
        let (mut ids, mut parking) = (Vec::new(), Vec::new());
        let mut occurred_at = None;
        // A row whose messages the bus took (sent to Kafka, or appended here) is published: never parked
        // after the fact (it would go out twice). The rows behind a parked one were parked when dispatched.
        for mut batch in batches.0 {
            if let InFlight::ToAppend(bus, messages) = batch.on_its_way {
                bus.append(tx, &messages).await?;
            }
            for (index, row) in batch.rows.into_iter().enumerate() {
                ids.push(row.id);
                if let Some(reason) = batch.to_park.remove(&index) {
                    parking.push((row, reason));
                }
            }
            occurred_at = batch.occurred_at.or(occurred_at);
        }
        for (row, reason) in &parking {
            park(tx, row, reason).await?;
        }
        delete_rows(tx, "outbox", &ids).await?;
        metrics::counter!(RELAY_PUBLISHED.name).increment((ids.len() - parking.len()) as u64);
        if let Some(lag) = occurred_at.as_deref().and_then(seconds_since) {
            // From the newest row's commit to its publication.
            metrics::gauge!(RELAY_LAG_SECONDS.name).set(lag);
        }
        for (row, reason) in &parking {
            tracing::warn!(tenant = %row.tenant, outbox_id = row.id, %reason, "parked an outbox row; the tenant's rows are retried with backoff");
            metrics::counter!(RELAY_PARKED_ROWS_TOTAL.name, "tenant" => row.tenant.to_string()).increment(1);
            self.parked.park(row.tenant.clone());
        }
        Ok(())
    }

    /// Waits for Kafka's answer to every message sent: the rows whose messages it refused, with why.
    async fn acknowledged(
        &self,
        kafka: &KafkaBus,
        sending: Sending,
        messages: &[Message],
        row_of: &[usize],
    ) -> Result<HashMap<usize, TopicRefused>, RelayError> {
        let mut refused = HashMap::new();
        let events_topic = self.topology.events_topic();
        let outcomes = kafka.acknowledged(sending).await;
        let shared = |index: &usize| messages[*index].topic == events_topic;
        // The broker took the shared topic's messages of this batch: what failed is about the other topics.
        let broker_works = (0..outcomes.len()).filter(shared).any(|i| outcomes[i].is_ok());
        for (index, outcome) in outcomes.into_iter().enumerate() {
            let Err(error) = outcome else { continue };
            if shared(&index) || !(is_refusal(&error) || broker_works) {
                return Err(error.into());
            }
            refused.entry(row_of[index]).or_insert(TopicRefused { topic: messages[index].topic.clone(), error });
        }
        Ok(refused)
    }

    /// Routes each tenant's events with its own router, keeping outbox order within the tenant (one key
    /// never spans tenants, so per-key order holds): the messages, each with its row's index. The tenants
    /// are routed side by side; on the live path a tenant parked already, whose routers take longer than the
    /// budget, or still run [`OUTPACED_AFTER`] after the rest of the batch was routed, has its rows' indexes
    /// put in `to_park` (retrying parked rows, it is routed by the default router instead). A tenant's
    /// router call is traced in the `relay.publish` span of its first traced row.
    async fn route(
        &self,
        events: &[OutboxRow],
        past_budget: PastBudget,
        to_park: &mut HashMap<usize, String>,
        spans: &HashMap<usize, Span>,
    ) -> Result<Vec<(Message, usize)>, RelayError> {
        let mut by_tenant: BTreeMap<&TenantId, Vec<usize>> = BTreeMap::new();
        for (index, event) in events.iter().enumerate() {
            by_tenant.entry(&event.tenant).or_default().push(index);
        }
        let side_by_side = SideBySide::default();
        let routed = by_tenant.into_iter().map(|(tenant, indexes)| {
            let side_by_side = &side_by_side;
            async move {
                if past_budget == PastBudget::Park && self.parked.is_parked(tenant) {
                    return Ok((indexes, TenantRouted::Parked("an earlier row of the tenant is parked".to_owned())));
                }
                let outpaced = side_by_side.outpaced();
                let routed = self.route_tenant(events, tenant, &indexes, past_budget, spans, outpaced).await;
                side_by_side.finished();
                routed.map(|routed| (indexes, routed))
            }
        });
        let mut messages = Vec::new();
        for routed in futures::future::join_all(routed).await {
            match routed? {
                (_, TenantRouted::Messages(routed)) => messages.extend(routed),
                (indexes, TenantRouted::Parked(reason)) => {
                    // Parked from now on: the batches dispatched after this one, before it settles (the
                    // binlog relay's pipeline), park the tenant's rows too instead of sending them first.
                    self.parked.park(events[indexes[0]].tenant.clone());
                    to_park.extend(indexes.iter().map(|&i| (i, reason.clone())));
                }
            }
        }
        Ok(messages)
    }

    /// Routes `tenant`'s rows of `events` (at `indexes`) with its routers, as [`Outlet::route`] says (a
    /// tenant parked already is not asked).
    async fn route_tenant(
        &self,
        events: &[OutboxRow],
        tenant: &TenantId,
        indexes: &[usize],
        past_budget: PastBudget,
        spans: &HashMap<usize, Span>,
        outpaced: impl Future<Output = ()>,
    ) -> Result<TenantRouted, RelayError> {
        let batch: Vec<OutboxRow> = indexes.iter().map(|&i| events[i].clone()).collect();
        let traced_in = indexes.iter().find_map(|index| spans.get(index)).cloned().unwrap_or_else(Span::none);
        let overran = || self.overran.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let routed = if past_budget == PastBudget::DefaultRoute && overran().contains(tenant) {
            route_by_default(&self.plugins, tenant, batch).await?
        } else {
            let routing = route_or_default(&self.plugins, tenant, batch.clone()).instrument(traced_in);
            let within_budget = tokio::time::timeout(self.router_budget, routing);
            let routed = match past_budget {
                PastBudget::Park => tokio::select! {
                    routed = within_budget => routed.map_err(|_| format!("the tenant's routers took longer than the relay's {:?} budget", self.router_budget)),
                    () = outpaced => Err(format!("the tenant's routers ran {OUTPACED_AFTER:?} past the rest of the batch")),
                },
                PastBudget::DefaultRoute => within_budget.await.map_err(|_| String::new()),
            };
            match (routed, past_budget) {
                (Ok(routed), _) => routed?,
                (Err(_), PastBudget::DefaultRoute) => {
                    tracing::warn!(%tenant, "parked rows routed by the default router: the tenant's ran past the budget again (and are not asked again until its parked rows are out)");
                    overran().insert(tenant.clone());
                    route_by_default(&self.plugins, tenant, batch).await?
                }
                (Err(reason), PastBudget::Park) => return Ok(TenantRouted::Parked(reason)),
            }
        };
        let mut messages = Vec::new();
        for ((&index, destinations), version) in indexes.iter().zip(&routed.destinations).zip(&routed.router_versions) {
            let event = &events[index];
            messages.extend(
                to_messages(event, destinations, *version, &self.topology, spans.get(&index))
                    .into_iter()
                    .map(|m| (m, index)),
            );
        }
        Ok(TenantRouted::Messages(messages))
    }

    /// Retries the parked rows of one due tenant, if any: its oldest, in id order, published and deleted in
    /// one transaction; a tenant with none left is no longer parked. A failure waits twice as long as the
    /// one before (up to five minutes: [`PACE`]). The relay calls it between its own batches — never beside them: the
    /// embedded bus has one writer per topic, and only the leading relay publishes — so a slow router or a
    /// refusing broker costs the tenant it belongs to one retry per backoff. Every [`Pace::reload`] (and
    /// first) the parked tenants are read from the table: what a relay before this one parked.
    pub async fn retry_due(&self, db: &Database) {
        if self.parked.reload_due() {
            match parked_tenants(db).await {
                Ok(tenants) => {
                    tenants.into_iter().for_each(|tenant| self.parked.park(tenant));
                    self.parked.reloaded();
                }

                Err(e) => tracing::error!(error = %e, "cannot read the parked tenants; trying again"),
            }
        }
        let Some((tenant, _)) = self.parked.due(|_| true).into_iter().next() else { return };
        match self.retry_tenant(db, &tenant).await {
            Ok(0) => {
                self.parked.drained(&tenant);
                self.overran.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&tenant);
                metrics::gauge!(RELAY_PARKED_ROWS.name, "tenant" => tenant.to_string()).set(0.0);
                tracing::info!(%tenant, "every parked row of the tenant is published");
            }
            Ok(published) => {
                tracing::info!(%tenant, published, "published parked rows");
                self.parked.retry_now(&tenant);
            }
            Err(e) => {
                let error = crate::ops::observability::causes(&e);
                let retry_in = self.parked.failed(&tenant);
                tracing::warn!(%tenant, %error, ?retry_in, "parked rows still cannot be published");
            }
        }
    }

    /// Publishes and deletes `tenant`'s oldest parked rows; how many (0: none were left). Routing and
    /// Kafka's acknowledgements happen before the deleting transaction opens: a slow router holds no
    /// database connection (SQLite has one writer).
    async fn retry_tenant(&self, db: &Database, tenant: &TenantId) -> Result<usize, RelayError> {
        let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM relay_parked WHERE tenant_id = ?")
            .bind(tenant.as_str())
            .fetch_one(db.reader())
            .await?;
        metrics::gauge!(RELAY_PARKED_ROWS.name, "tenant" => tenant.to_string()).set(left as f64);
        let select = format!("SELECT {OUTBOX_COLUMNS} FROM relay_parked WHERE tenant_id = ? ORDER BY id LIMIT ?");
        let rows = sqlx::query(&select).bind(tenant.as_str()).bind(RETRY_BATCH).fetch_all(db.reader()).await?;
        let events = super::outbox_rows(&rows)?;
        if events.is_empty() {
            return Ok(0);
        }
        let mut unused = HashMap::new();
        let spans = publish_spans(&events);
        let routed = self.route(&events, PastBudget::DefaultRoute, &mut unused, &spans).await?;
        let (messages, row_of): (Vec<Message>, Vec<usize>) = routed.into_iter().unzip();
        let to_append = match &self.publisher {
            Publisher::Embedded(bus) => Some(bus.clone()),
            Publisher::Kafka(kafka) => {
                let sending = kafka.send(&messages).await?;
                if let Some((_, refused)) =
                    self.acknowledged(kafka, sending, &messages, &row_of).await?.into_iter().next()
                {
                    return Err(RelayError::StillRefused(refused));
                }
                None
            }
        };
        let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
        let mut conn = db.writer().acquire().await?;
        held::holding("the relay's transaction", async {
            let mut tx = conn.begin().await?;
            if let Some(bus) = to_append {
                bus.append(&mut tx, &messages).await?;
            }
            delete_rows(&mut tx, "relay_parked", &ids).await?;
            tx.commit().await?;
            Ok::<_, RelayError>(())
        })
        .await?;
        metrics::counter!(RELAY_PUBLISHED.name).increment(ids.len() as u64);
        Ok(ids.len())
    }
}

/// Moves `row` from the outbox into `relay_parked` (the caller deletes it from the outbox).
async fn park(tx: &mut AnyConnection, row: &OutboxRow, reason: &str) -> Result<(), sqlx::Error> {
    sqlx::query(&format!(
        "INSERT INTO relay_parked ({OUTBOX_COLUMNS}, created_at, parked_at, reason) \
         SELECT {OUTBOX_COLUMNS}, created_at, ?, ? FROM outbox WHERE id = ?"
    ))
    .bind(now_ms())
    .bind(kept_reason(reason))
    .bind(row.id)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Deletes exactly the rows `ids` of `table` (`outbox` or `relay_parked`); `Contended` when some were
/// already gone. One primary-key delete per row — an `IN (…)` list covering most of a small table is
/// planned as a scan, and a DELETE waits on every row it examines, including uncommitted rows of long
/// transactions it must not touch — but a chunk of them per round trip (the ids are integers the table
/// gave us).
async fn delete_rows(tx: &mut AnyConnection, table: &'static str, ids: &[i64]) -> Result<(), RelayError> {
    let mut deleted = 0;
    for chunk in ids.chunks(DELETE_CHUNK) {
        let deletes: String = chunk.iter().map(|id| format!("DELETE FROM {table} WHERE id = {id};")).collect();
        // A bare string runs as a text-protocol query: several statements in one round trip.
        deleted += (&mut *tx).execute(deletes.as_str()).await?.rows_affected();
    }
    if deleted != ids.len() as u64 {
        return Err(RelayError::Contended { read: ids.len(), deleted });
    }
    Ok(())
}

/// The tenants with parked rows (a tenant id that is not one is logged and left: it holds no other tenant).
async fn parked_tenants(db: &Database) -> Result<Vec<TenantId>, sqlx::Error> {
    let tenants: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT tenant_id FROM relay_parked").fetch_all(db.reader()).await?;
    let parsed = tenants.into_iter().filter_map(|tenant| match tenant.parse() {
        Ok(tenant) => Some(tenant),
        Err(error) => {
            tracing::error!(%error, "relay_parked holds rows of an invalid tenant id; they are left there");
            None
        }
    });
    Ok(parsed.collect())
}

/// How one tenant's rows of a batch were routed.
enum TenantRouted {
    /// Each message with its row's index.
    Messages(Vec<(Message, usize)>),
    /// Set aside, with why.
    Parked(String),
}

/// What becomes of a tenant's rows whose routers run past the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PastBudget {
    /// Parked (the live path: the batch goes on without them).
    Park,
    /// Routed by the bundled default router (a retry of parked rows: they go out, in order).
    DefaultRoute,
}

/// Routed outbox rows on their way to the bus, not yet settled.
pub struct Dispatched {
    rows: Vec<OutboxRow>,
    /// For each message, the index of its row in `rows`.
    row_of: Vec<usize>,
    /// Rows parked before they were sent (their tenant is parked, or its routers ran past the budget).
    to_park: HashMap<usize, String>,
    /// When the newest row's change committed (its payload's `occurred_at`), for the lag gauge.
    occurred_at: Option<String>,
    on_its_way: InFlight,
    /// The traced rows' `relay.publish` spans, ended when the batch is settled.
    _spans: HashMap<usize, Span>,
}

enum InFlight {
    /// Messages for the embedded bus, appended in the settling transaction.
    ToAppend(EmbeddedBus, Vec<Message>),
    /// Messages handed to the Kafka producer (kept to name a refused one's topic).
    Sent(Arc<KafkaBus>, Sending, Vec<Message>),
    /// Kafka answered for every message (the refused ones' rows are in `to_park`).
    Answered,
}

/// Dispatched batches the bus has answered for ([`Outlet::acknowledge`]): all that is left is the
/// database's part ([`Outlet::settle`]).
pub struct Acknowledged(Vec<Dispatched>);
