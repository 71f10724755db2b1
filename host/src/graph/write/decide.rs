//! The rules of every relation write, decided once for both databases from the edges read under lock: which
//! edges change, to what, and the event each change commits. Pure, so every rule is unit-tested here.
//!
//! Mastodon's semantics: a block ends the follows and pending requests both ways and refuses new ones while
//! it holds (unblocking restores nothing); a follow of an account whose approval is required is a pending
//! request until the account authorizes or rejects it; a requester withdraws with the ordinary unfollow.

use super::command::{Act, FollowContext, FollowDecision, RelationChange, RelationCommand, WriteError};
use super::counts::FollowCounts;
use super::edge::{Edge, EdgeRow, RelStatus};
use crate::graph::{AccountState, TenantId, UserId};
use crate::outbox::{ChangeEvent, Changed, EventType};
use crate::util::time::rfc3339_millis;

/// The edges a command read (missing rows read as `RelStatus::None` at version 0) and what else its rules need.
#[derive(Debug, Clone, Default)]
pub struct Found {
    pub edges: Vec<(Edge, EdgeRow)>,
    /// Whether the subject's account is private.
    pub subject_private: bool,
    /// Both accounts' states, when the command reads them ([`RelationCommand::reads_accounts`]).
    pub actor_state: AccountState,
    pub subject_state: AccountState,
    /// Both users' follow counts, when a plugin policy decides the follow.
    pub actor_counts: FollowCounts,
    pub subject_counts: FollowCounts,
    /// A follow's relation policy's answer, when [`needs_admission`] asked it.
    pub admission: FollowDecision,
}

impl Found {
    pub fn row(&self, edge: Edge) -> EdgeRow {
        self.edges.iter().find(|(e, _)| *e == edge).map(|(_, row)| *row).unwrap_or_default()
    }
}

/// One edge's new state and the event that records it.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub edge: Edge,
    pub row: EdgeRow,
    pub event: ChangeEvent,
}

/// What a command does: its changes, in the order their events are published, and what the actor sees.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub changes: Vec<Change>,
    pub outcome: RelationChange,
    /// A block or unblock: the blocker's follow edge and its new `blocked` flag.
    pub block_flag: Option<(Edge, bool)>,
    /// Follow edges a suspension hid that this act ends for good (their `hidden` flag is cleared).
    pub unhidden: Vec<Edge>,
}

/// What a bulk path (an import's batch, a move) read of a follow's pair: the follow edge's status, version
/// and block flag (whether its follower blocks its target), and the reverse edge's block flag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PairState {
    pub status: RelStatus,
    pub version: i64,
    pub blocked: bool,
    pub blocked_back: bool,
}

/// A follow `from → to` decided by [`decide`] under the host's rule — approval where `approval` says (a
/// private target, or a source's pending request); a tenant's relation policy is not asked —, from what a
/// bulk path read: the pair's new status, `None` when it stays as it is, or why it is refused. The bulk
/// paths write set-based, but decide by this one rule table.
pub fn follow_by_host(
    tenant: &TenantId,
    (from, to): (UserId, UserId),
    pair: PairState,
    states: [AccountState; 2],
    approval: bool,
) -> Result<Option<RelStatus>, WriteError> {
    let command = RelationCommand::follow(tenant, from, to);
    let row = |status, version, blocked| EdgeRow { status, version, blocked, ..EdgeRow::default() };
    let found = Found {
        edges: vec![
            (Edge::follow(from, to), row(pair.status, pair.version, pair.blocked)),
            (Edge::follow(to, from), row(RelStatus::None, 0, pair.blocked_back)),
        ],
        subject_private: approval,
        actor_state: states[0],
        subject_state: states[1],
        admission: if approval { FollowDecision::RequireApproval } else { FollowDecision::Allow },
        ..Found::default()
    };
    Ok(decide(&command, &found)?.changes.first().map(|change| change.row.status))
}

/// Whether `command` is a follow that would change its pair (no block, not followed already): only then is
/// its relation policy asked.
pub fn needs_admission(command: &RelationCommand<'_>, found: &Found) -> bool {
    let (a, s) = (command.actor, command.subject);
    command.act == Act::Follow
        && account_refusal(command, found).is_none()
        && !blocked(command, found)
        && found.row(Edge::follow(a, s)).status != RelStatus::Active
}

/// What a follow's relation policy is given, from what the follow `found`.
pub fn follow_context(command: &RelationCommand<'_>, found: &Found) -> FollowContext {
    let (follower, target) = (command.actor, command.subject);
    FollowContext {
        follower,
        target,
        followed_back: found.row(Edge::follow(target, follower)).status == RelStatus::Active,
        target_private: found.subject_private,
        follower_followings: found.actor_counts.followings,
        follower_followers: found.actor_counts.followers,
        target_followers: found.subject_counts.followers,
    }
}

/// Why the accounts' states refuse `command`: no relation begins with a deleted account, no follow with a
/// suspended one (a block or a mute of it still may).
fn account_refusal(command: &RelationCommand<'_>, found: &Found) -> Option<WriteError> {
    if !command.reads_accounts() {
        return None;
    }
    let states = [found.actor_state, found.subject_state];
    if states.contains(&AccountState::Deleted) {
        Some(WriteError::AccountDeleted)
    } else if matches!(command.act, Act::Follow | Act::Authorize) && states.contains(&AccountState::Suspended) {
        Some(WriteError::AccountSuspended)
    } else {
        None
    }
}

/// Whether either user blocks the other, as the flags on the pair's follow rows say.
fn blocked(command: &RelationCommand<'_>, found: &Found) -> bool {
    let (a, s) = (command.actor, command.subject);
    found.row(Edge::follow(a, s)).blocked || found.row(Edge::follow(s, a)).blocked
}

/// Decides `command` on what it `found`: `Err` when it is refused (nothing changes).
pub fn decide(command: &RelationCommand<'_>, found: &Found) -> Result<Decision, WriteError> {
    command.refuse_oneself()?;
    if let Some(refused) = account_refusal(command, found) {
        return Err(refused);
    }
    let mut plan = Plan { command, found, changes: Vec::new() };
    let mut block_flag = None;
    let (a, s) = (command.actor, command.subject);
    let (outgoing, incoming) = (Edge::follow(a, s), Edge::follow(s, a));
    // An act that ends follows ends the ones a suspension hid too: a restore does not bring them back.
    let ended: &[Edge] = match command.act {
        Act::Unfollow => &[outgoing],
        Act::Reject | Act::RemoveFollower => &[incoming],
        Act::Block => &[outgoing, incoming],
        _ => &[],
    };
    let unhidden = ended.iter().copied().filter(|edge| found.row(*edge).hidden != RelStatus::None).collect();
    match command.act {
        Act::Follow => {
            if blocked(command, found) {
                return Err(WriteError::Blocked);
            }
            match (found.row(outgoing).status, &found.admission) {
                (RelStatus::Active, _) => {}
                (_, FollowDecision::Refuse { code, reason }) => {
                    return Err(WriteError::Refused { code: code.clone(), reason: reason.clone() })
                }
                // A request stays pending while approval is required; once the account no longer requires it
                // (it turned public meanwhile), asking again is the follow.
                (RelStatus::Requested, FollowDecision::RequireApproval) => {}
                (_, FollowDecision::RequireApproval) => {
                    plan.set(outgoing, RelStatus::Requested, EventType::FollowRequested)
                }
                (_, FollowDecision::Allow) => plan.set(outgoing, RelStatus::Active, EventType::Follow),
            }
        }
        Act::Unfollow => match found.row(outgoing).status {
            RelStatus::Active => plan.set(outgoing, RelStatus::None, EventType::Unfollow),
            RelStatus::Requested => plan.set(outgoing, RelStatus::None, EventType::FollowRequestWithdrawn),
            _ => {}
        },
        Act::Authorize if found.row(incoming).status == RelStatus::Requested => {
            plan.set(incoming, RelStatus::Active, EventType::Follow)
        }
        Act::Reject if found.row(incoming).status == RelStatus::Requested => {
            plan.set(incoming, RelStatus::None, EventType::FollowRequestRejected)
        }
        Act::RemoveFollower if found.row(incoming).status == RelStatus::Active => {
            plan.set(incoming, RelStatus::None, EventType::Unfollow)
        }
        Act::Authorize | Act::Reject | Act::RemoveFollower => {}
        Act::Block => {
            match found.row(outgoing).status {
                RelStatus::Active => plan.set(outgoing, RelStatus::None, EventType::Unfollow),
                RelStatus::Requested => plan.set(outgoing, RelStatus::None, EventType::FollowRequestWithdrawn),
                _ => {}
            }
            match found.row(incoming).status {
                RelStatus::Active => plan.set(incoming, RelStatus::None, EventType::Unfollow),
                RelStatus::Requested => plan.set(incoming, RelStatus::None, EventType::FollowRequestRejected),
                _ => {}
            }
            if found.row(Edge::block(a, s)).status != RelStatus::Active {
                plan.set(Edge::block(a, s), RelStatus::Active, EventType::Block);
            }
            // Set whenever it is not (also under a block that was already there): a flag a node older than
            // the flag left unset heals with the next block.
            if !found.row(outgoing).blocked {
                block_flag = Some((outgoing, true));
            }
        }
        Act::Unblock => {
            if found.row(Edge::block(a, s)).status == RelStatus::Active {
                plan.set(Edge::block(a, s), RelStatus::None, EventType::Unblock);
            }
            if found.row(outgoing).blocked {
                block_flag = Some((outgoing, false));
            }
        }
        Act::Mute { expires_at_ms, notifications } => {
            let mute = Edge::mute(a, s);
            let current = found.row(mute);
            let same = current.holds(command.at_ms)
                && current.expires_at == expires_at_ms
                && current.notifications == notifications;
            if !same {
                plan.set_mute(mute, current, expires_at_ms, notifications);
            }
        }
        Act::Unmute if found.row(Edge::mute(a, s)).status == RelStatus::Active => {
            plan.set(Edge::mute(a, s), RelStatus::None, EventType::Unmute)
        }
        Act::Unmute => {}
        Act::ExpireMute => {
            let mute = found.row(Edge::mute(a, s));
            if mute.status == RelStatus::Active && !mute.holds(command.at_ms) {
                plan.set(Edge::mute(a, s), RelStatus::None, EventType::Unmute)
            }
        }
    }
    let after = plan.current(outgoing);
    let outcome = RelationChange {
        changed: !plan.changes.is_empty(),
        following: after.status == RelStatus::Active,
        requested: after.status == RelStatus::Requested,
        version: after.version,
    };
    Ok(Decision { changes: plan.changes, outcome, block_flag, unhidden })
}

/// The changes decided so far: each sees the ones before it (a block's second unfollow knows the first
/// ended the reverse follow).
struct Plan<'c, 'f> {
    command: &'c RelationCommand<'c>,
    found: &'f Found,
    changes: Vec<Change>,
}

impl Plan<'_, '_> {
    fn current(&self, edge: Edge) -> EdgeRow {
        self.changes.iter().rev().find(|c| c.edge == edge).map_or_else(|| self.found.row(edge), |c| c.row)
    }

    /// `edge` moves to `status` (a new follow or request begins now; an ending keeps its start).
    fn set(&mut self, edge: Edge, status: RelStatus, event_type: EventType) {
        let current = self.current(edge);
        let created_at = if status == RelStatus::None { current.created_at } else { self.command.at_ms };
        let row = EdgeRow { status, version: current.version + 1, created_at, ..EdgeRow::default() };
        self.push(edge, row, event_type);
    }

    fn set_mute(&mut self, edge: Edge, current: EdgeRow, expires_at: Option<i64>, notifications: bool) {
        let at = self.command.at_ms;
        let created_at = if current.holds(at) { current.created_at } else { at };
        let row = EdgeRow {
            status: RelStatus::Active,
            version: current.version + 1,
            created_at,
            expires_at,
            notifications,
            ..EdgeRow::default()
        };
        self.push(edge, row, EventType::Mute);
    }

    fn push(&mut self, edge: Edge, row: EdgeRow, event_type: EventType) {
        let tenant = self.command.tenant.as_str();
        let (from, to) = (edge.from.get(), edge.to.get());
        let followed_back = edge.relation == crate::outbox::Relation::Follow
            && self.current(Edge::follow(edge.to, edge.from)).status == RelStatus::Active;
        let at = self.command.at_ms;
        let mut event = ChangeEvent::new(Changed {
            tenant,
            event_type,
            from,
            to,
            version: row.version,
            at_ms: at,
            followed_back,
            actor: self.command.actor.get(),
        });
        if event_type == EventType::Mute {
            event.expires_at = row.expires_at.map(rfc3339_millis);
            event.notifications = Some(row.notifications);
        }
        self.changes.push(Change { edge, row, event });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{TenantId, UserId};

    fn user(id: i64) -> UserId {
        id.to_string().parse().unwrap()
    }

    fn command(tenant: &TenantId, act: Act) -> RelationCommand<'_> {
        RelationCommand { tenant, actor: user(1), subject: user(2), act, at_ms: 1_000 }
    }

    fn row(status: RelStatus, version: i64) -> EdgeRow {
        EdgeRow { status, version, created_at: 10, ..EdgeRow::default() }
    }

    fn events(decision: &Decision) -> Vec<(EventType, i64, i64, i64)> {
        decision.changes.iter().map(|c| (c.event.event_type, c.event.from, c.event.to, c.event.version)).collect()
    }

    #[test]
    fn a_follow_of_a_private_account_is_a_request_and_a_repeat_changes_nothing() {
        let tenant: TenantId = "acme".parse().unwrap();
        let private = Found { admission: FollowDecision::RequireApproval, ..Found::default() };
        let decided = decide(&command(&tenant, Act::Follow), &private).unwrap();
        assert_eq!(events(&decided), [(EventType::FollowRequested, 1, 2, 1)]);
        assert_eq!(decided.outcome, RelationChange { changed: true, following: false, requested: true, version: 1 });
        let pending = Found {
            edges: vec![(Edge::follow(user(1), user(2)), row(RelStatus::Requested, 1))],
            admission: FollowDecision::RequireApproval,
            ..Found::default()
        };
        assert!(decide(&command(&tenant, Act::Follow), &pending).unwrap().changes.is_empty());
        // The account turned public: asking again follows.
        let public = Found { admission: FollowDecision::Allow, ..pending.clone() };
        assert_eq!(events(&decide(&command(&tenant, Act::Follow), &public).unwrap()), [(EventType::Follow, 1, 2, 2)]);
        let refused =
            Found { admission: FollowDecision::Refuse { code: "cap".into(), reason: "too many".into() }, ..pending };
        assert!(
            matches!(decide(&command(&tenant, Act::Follow), &refused), Err(WriteError::Refused { code, .. }) if code == "cap")
        );
    }

    #[test]
    fn a_block_either_way_refuses_a_follow_and_a_block_ends_everything_between_the_two() {
        let tenant: TenantId = "acme".parse().unwrap();
        for blocker in [Edge::follow(user(1), user(2)), Edge::follow(user(2), user(1))] {
            let flagged = EdgeRow { blocked: true, ..row(RelStatus::None, 0) };
            let found = Found { edges: vec![(blocker, flagged)], ..Found::default() };
            assert!(matches!(decide(&command(&tenant, Act::Follow), &found), Err(WriteError::Blocked)));
        }
        let found = Found {
            edges: vec![
                (Edge::follow(user(1), user(2)), row(RelStatus::Active, 3)),
                (Edge::follow(user(2), user(1)), row(RelStatus::Requested, 5)),
            ],
            ..Found::default()
        };
        let decided = decide(&command(&tenant, Act::Block), &found).unwrap();
        assert_eq!(
            events(&decided),
            [(EventType::Unfollow, 1, 2, 4), (EventType::FollowRequestRejected, 2, 1, 6), (EventType::Block, 1, 2, 1)]
        );
        assert!(decided.changes.iter().all(|c| c.event.actor == Some(1)));
        assert_eq!(decided.block_flag, Some((Edge::follow(user(1), user(2)), true)));
        assert_eq!(decided.changes[2].event.event_id, "acme:block:1:2:1");
        // Blocking again changes nothing; unblocking restores nothing.
        let flagged = EdgeRow { blocked: true, ..row(RelStatus::None, 0) };
        let blocked = Found {
            edges: vec![
                (Edge::block(user(1), user(2)), row(RelStatus::Active, 1)),
                (Edge::follow(user(1), user(2)), flagged),
            ],
            ..Found::default()
        };
        let again = decide(&command(&tenant, Act::Block), &blocked).unwrap();
        assert!(again.changes.is_empty() && again.block_flag.is_none());
        let unblocked = decide(&command(&tenant, Act::Unblock), &blocked).unwrap();
        assert_eq!(events(&unblocked), [(EventType::Unblock, 1, 2, 2)]);
        assert_eq!(unblocked.block_flag, Some((Edge::follow(user(1), user(2)), false)));
    }

    #[test]
    fn a_flag_left_stale_by_an_older_node_heals_with_the_next_block_or_unblock() {
        let tenant: TenantId = "acme".parse().unwrap();
        let (outgoing, block) = (Edge::follow(user(1), user(2)), Edge::block(user(1), user(2)));
        let unflagged = Found { edges: vec![(block, row(RelStatus::Active, 1))], ..Found::default() };
        let blocked = decide(&command(&tenant, Act::Block), &unflagged).unwrap();
        assert_eq!((blocked.changes.len(), blocked.block_flag), (0, Some((outgoing, true))));
        let stale = Found {
            edges: vec![
                (block, row(RelStatus::None, 2)),
                (outgoing, EdgeRow { blocked: true, ..row(RelStatus::None, 0) }),
            ],
            ..Found::default()
        };
        let unblocked = decide(&command(&tenant, Act::Unblock), &stale).unwrap();
        assert_eq!((unblocked.changes.len(), unblocked.block_flag), (0, Some((outgoing, false))));
    }

    #[test]
    fn the_target_acts_on_the_incoming_edge_and_the_event_names_it() {
        let tenant: TenantId = "acme".parse().unwrap();
        let requested =
            Found { edges: vec![(Edge::follow(user(2), user(1)), row(RelStatus::Requested, 1))], ..Found::default() };
        let authorized = decide(&command(&tenant, Act::Authorize), &requested).unwrap();
        assert_eq!(events(&authorized), [(EventType::Follow, 2, 1, 2)]);
        assert_eq!(authorized.changes[0].event.actor, Some(1));
        assert_eq!(authorized.changes[0].row.created_at, 1_000, "the follow begins when authorized");
        assert_eq!(
            events(&decide(&command(&tenant, Act::Reject), &requested).unwrap()),
            [(EventType::FollowRequestRejected, 2, 1, 2)]
        );
        assert!(decide(&command(&tenant, Act::RemoveFollower), &requested).unwrap().changes.is_empty());
        let follower = Found {
            edges: vec![
                (Edge::follow(user(2), user(1)), row(RelStatus::Active, 4)),
                (Edge::follow(user(1), user(2)), row(RelStatus::Active, 1)),
            ],
            ..Found::default()
        };
        let removed = decide(&command(&tenant, Act::RemoveFollower), &follower).unwrap();
        assert_eq!(events(&removed), [(EventType::Unfollow, 2, 1, 5)]);
        assert!(removed.changes[0].event.followed_back);
        assert!(decide(&command(&tenant, Act::Authorize), &follower).unwrap().changes.is_empty());
    }

    #[test]
    fn a_mute_changes_when_its_end_or_flag_does_and_an_expired_one_is_new() {
        let tenant: TenantId = "acme".parse().unwrap();
        let mute = |expires_at_ms, notifications| command(&tenant, Act::Mute { expires_at_ms, notifications });
        let first = decide(&mute(Some(5_000), true), &Found::default()).unwrap();
        assert_eq!(events(&first), [(EventType::Mute, 1, 2, 1)]);
        assert_eq!(first.changes[0].event.event_id, "acme:mute:1:2:1");
        assert_eq!(first.changes[0].event.notifications, Some(true));
        let held = Found { edges: vec![(Edge::mute(user(1), user(2)), first.changes[0].row)], ..Found::default() };
        assert!(decide(&mute(Some(5_000), true), &held).unwrap().changes.is_empty());
        assert_eq!(decide(&mute(None, true), &held).unwrap().changes[0].row.created_at, 1_000);
        let expired = Found {
            edges: vec![(Edge::mute(user(1), user(2)), EdgeRow { expires_at: Some(500), ..row(RelStatus::Active, 1) })],
            ..Found::default()
        };
        assert_eq!(decide(&mute(Some(500), false), &expired).unwrap().changes.len(), 1);
        assert!(matches!(
            decide(&RelationCommand { subject: user(1), ..mute(None, false) }, &Found::default()),
            Err(WriteError::SelfRelation(_))
        ));
    }

    #[test]
    fn the_host_ends_only_a_mute_whose_time_ran_out() {
        let tenant: TenantId = "acme".parse().unwrap();
        let expire = command(&tenant, Act::ExpireMute);
        let mute_until = |end| Found {
            edges: vec![(Edge::mute(user(1), user(2)), EdgeRow { expires_at: end, ..row(RelStatus::Active, 3) })],
            ..Found::default()
        };
        assert_eq!(events(&decide(&expire, &mute_until(Some(900))).unwrap()), [(EventType::Unmute, 1, 2, 4)]);
        assert!(decide(&expire, &mute_until(Some(5_000))).unwrap().changes.is_empty(), "muted again meanwhile");
        assert!(decide(&expire, &mute_until(None)).unwrap().changes.is_empty(), "a mute for good");
        assert!(decide(&expire, &Found::default()).unwrap().changes.is_empty(), "unmuted meanwhile");
    }
}
