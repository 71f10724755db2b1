//! The truth: the `following`, `blocks` and `mutes` tables and users' settings, written together with their
//! `outbox` rows in one transaction, and the reads served straight from them. Everything else in Strand is
//! derived from what this module commits.

mod account;
pub mod ids;
pub mod mute_expiry;
mod read;
mod recent;
mod scan;
mod settings;
mod write;

pub use account::{account_state, AccountState};
pub use ids::{InvalidTenantId, InvalidUserId, TenantId, UserId};
pub use read::{
    counts, known_followers, known_followers_count, list, relationships, Counts, Direction, ListedUser, Listing, Page,
    PageRequest, Position, Relationship,
};
pub use recent::{recent_changes, RecentChange};
pub use scan::{
    changed_pairs, every_follow_pair, every_kept_count, held_edges_after, recently_changed_follows, stored_edges_after,
    tenants_with_pairs, FollowPairs, HeldEdge, StoredEdge,
};
pub use settings::{settings, update_settings, Settings};
/// The truth's primitives for the batch writers of `accounts/` and `transfer/`: the rule table's host form,
/// the edge tables' statements, the counts a batch changes.
pub use write::counts::CountChanges;
pub use write::decide::{follow_by_host, PairState};
pub use write::edge::{self, WrittenFollow};
pub use write::{
    change, change_under, Act, FollowContext, FollowDecision, FollowPolicy, PrivateNeedsApproval, RelStatus,
    RelationChange, RelationCommand, WriteError,
};
