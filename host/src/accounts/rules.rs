//! What an account job's batch does to one follow edge, as pure rules beside the SQL that applies them
//! (`edges.rs`): the event a change carries, and whether a suspension's hidden edge comes back. An account
//! leaving ends its edges whatever they are; an edge coming back is a follow beginning again, so it is
//! checked against the one rule table (`graph::follow_by_host`) by the tests below.

use crate::graph::{AccountState, RelStatus};
use crate::outbox::EventType;

/// Which of the account's edges: those pointing at it (its followers, who block or mute it) or its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Incoming,
    Outgoing,
}

/// The event of an edge on `side` of the account going from `was` to `now`: a follow or request beginning
/// (a restore), or ending — a request to the account as its target's answer, one of its own as withdrawn.
pub fn event_of(was: RelStatus, now: RelStatus, side: Side) -> EventType {
    match (was, now, side) {
        (_, RelStatus::Active, _) => EventType::Follow,
        (_, RelStatus::Requested, _) => EventType::FollowRequested,
        (RelStatus::Active, _, _) => EventType::Unfollow,
        (_, _, Side::Incoming) => EventType::FollowRequestRejected,
        (_, _, Side::Outgoing) => EventType::FollowRequestWithdrawn,
    }
}

/// What a hidden edge (`hidden`: what it was when the suspension hid it) becomes when the account is
/// restored, its other end in `counterpart` state: what it was, while the other end is active (an edge
/// between two suspended accounts comes back with the second one's restore). A block between the two never
/// meets a hidden edge: a block clears `hidden`.
pub fn restored(hidden: RelStatus, counterpart: AccountState) -> Option<RelStatus> {
    (counterpart == AccountState::Active && hidden != RelStatus::None).then_some(hidden)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{follow_by_host, PairState, TenantId, UserId};

    const STATES: [AccountState; 3] = [AccountState::Active, AccountState::Suspended, AccountState::Deleted];

    #[test]
    fn a_restored_edge_is_the_follow_the_rule_table_lets_begin_again() {
        let tenant: TenantId = "acme".parse().unwrap();
        let (account, counterpart) = (UserId::try_from(1).unwrap(), UserId::try_from(2).unwrap());
        for hidden in [RelStatus::Active, RelStatus::Requested] {
            for state in STATES {
                for (from, to, states) in [
                    (account, counterpart, [AccountState::Active, state]),
                    (counterpart, account, [state, AccountState::Active]),
                ] {
                    // The pair as the suspension left it: ended, at some version, no block either way.
                    let pair = PairState { status: RelStatus::None, version: 3, blocked: false, blocked_back: false };
                    let by_rule = follow_by_host(&tenant, (from, to), pair, states, hidden == RelStatus::Requested);
                    assert_eq!(restored(hidden, state), by_rule.ok().flatten(), "{hidden:?}, other end {state:?}");
                }
            }
        }
    }

    #[test]
    fn a_restore_brings_back_what_the_events_of_a_live_follow_would_say() {
        for side in [Side::Incoming, Side::Outgoing] {
            assert_eq!(event_of(RelStatus::None, RelStatus::Active, side), EventType::Follow);
            assert_eq!(event_of(RelStatus::None, RelStatus::Requested, side), EventType::FollowRequested);
            assert_eq!(event_of(RelStatus::Active, RelStatus::None, side), EventType::Unfollow);
        }
        assert_eq!(event_of(RelStatus::Requested, RelStatus::None, Side::Incoming), EventType::FollowRequestRejected);
        assert_eq!(event_of(RelStatus::Requested, RelStatus::None, Side::Outgoing), EventType::FollowRequestWithdrawn);
    }
}
