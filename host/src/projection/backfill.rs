//! Backfill: the truth replayed as snapshot events — every edge of a tenant, page by page, as an event at
//! its current version — which `build.rs` applies to a projector's space under the space's build lock.
//! Per-pair floors (see `cache`) make the snapshot and the bus meet without a gap or a double count, whatever
//! the bus still retains: a bus event the snapshot covers is skipped, a later one applies (writes go on
//! meanwhile: they are later versions, or new pairs, and wait in the bus). Pages need no common snapshot:
//! each pair's row is consistent on its own. Rows at version 0 (a block's flag on a pair never followed)
//! are no state of the pair and are left out.

use crate::db::Database;
use crate::graph::{changed_pairs, recently_changed_follows, stored_edges_after, RelStatus, StoredEdge, TenantId};
use crate::outbox::{EventId, EventType, Relation};
use crate::plugins::RelationEvent;

/// Pairs per page: one plugin call and one cache script each, so a tenant's build holds the shared Redis and
/// its plugin instance no longer than a couple of live batches do.
const PAGE: i64 = 500;

/// A tenant's edges in the truth, read page by page in `(from, to)` order: the follow edges (follows and
/// requests), then — for a relation projector, which receives every kind — blocks, then mutes.
pub struct Snapshot<'a> {
    db: &'a Database,
    tenant: &'a TenantId,
    /// The tables still to read, the one being read first.
    edges: Vec<Relation>,
    /// Whether pending requests are snapshot as such (for a relation projector), or as no follow.
    every_kind: bool,
    after: (i64, i64),
    /// Edges when the snapshot started (writes go on meanwhile).
    pub total: u64,
}

impl<'a> Snapshot<'a> {
    /// A snapshot of the follow edges, and of every edge when `every_kind`.
    pub async fn start(db: &'a Database, tenant: &'a TenantId, every_kind: bool) -> Result<Self, sqlx::Error> {
        let edges =
            if every_kind { vec![Relation::Follow, Relation::Block, Relation::Mute] } else { vec![Relation::Follow] };
        let mut total = 0;
        for relation in &edges {
            total += changed_pairs(db, tenant, *relation).await?;
        }
        Ok(Self { db, tenant, edges, every_kind, after: (i64::MIN, i64::MIN), total })
    }

    /// The next page of snapshot events; empty once every edge was read.
    pub async fn next_page(&mut self) -> Result<Vec<RelationEvent>, sqlx::Error> {
        while let Some(&relation) = self.edges.first() {
            let page = stored_edges_after(self.db, self.tenant, relation, self.after, PAGE).await?;
            let Some(last) = page.last() else {
                self.edges.remove(0);
                self.after = (i64::MIN, i64::MIN);
                continue;
            };
            self.after = (last.from, last.to);
            return Ok(page.iter().map(|edge| snapshot_event(self.tenant, relation, self.every_kind, edge)).collect());
        }
        Ok(Vec::new())
    }
}

/// The `last` pairs of `tenant` changed most recently, newest first, as snapshot events (pending requests as
/// such when `every_kind`): the real inputs `strand plugin test --replay` runs a candidate on.
pub async fn recent_changes(
    db: &Database,
    tenant: &TenantId,
    last: u32,
    every_kind: bool,
) -> Result<Vec<RelationEvent>, sqlx::Error> {
    let edges = recently_changed_follows(db, tenant, last).await?;
    Ok(edges.iter().map(|edge| snapshot_event(tenant, Relation::Follow, every_kind, edge)).collect())
}

/// The event that brings a projection to the state of `edge`: the kind that leaves the edge so (an ended
/// edge: the kind that ends it, which only raises floors). A pending request is a `follow-requested` for a
/// relation projector (`every_kind`); for the others, which are handed follows only, no follow: an
/// `unfollow`.
fn snapshot_event(tenant: &TenantId, relation: Relation, every_kind: bool, edge: &StoredEdge) -> RelationEvent {
    let requested = every_kind && edge.status == RelStatus::Requested;
    let holds = edge.status == RelStatus::Active || requested;
    let event_type = match (relation, edge.status == RelStatus::Active) {
        (Relation::Follow, true) => EventType::Follow,
        (Relation::Follow, false) if requested => EventType::FollowRequested,
        (Relation::Follow, false) => EventType::Unfollow,
        (Relation::Block, true) => EventType::Block,
        (Relation::Block, false) => EventType::Unblock,
        (Relation::Mute, true) => EventType::Mute,
        (Relation::Mute, false) => EventType::Unmute,
    };
    let (from, to, version) = (edge.from, edge.to, edge.version);
    RelationEvent {
        event_id: EventId { tenant: tenant.as_str(), relation, from, to, version }.to_string(),
        tenant: tenant.to_string(),
        kind: event_type.into(),
        follower: from,
        followee: to,
        version,
        occurred_at_ms: if holds { edge.created_at_ms } else { edge.updated_at_ms },
        followed_back: edge.followed_back,
        actor: None,
        expires_at_ms: edge.expires_at_ms,
        notifications: edge.notifications,
    }
}
