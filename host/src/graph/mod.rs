//! The truth: the `following`, `blocks` and `mutes` tables and users' settings, written together with their
//! `outbox` rows in one transaction, and the reads served straight from them. Everything else in Strand is
//! derived from what this module commits.

mod account;
pub mod ids;
pub mod mute_expiry;
mod read;
mod settings;
mod write;

pub use account::{account_state, AccountState};
pub use ids::{InvalidTenantId, InvalidUserId, TenantId, UserId};
pub use read::{
    counts, held_edges_after, known_followers, list, relationships, tenants_with_pairs, Counts, Direction, HeldEdge,
    KnownFollowers, ListedUser, Listing, Page, PageRequest, Position, Relationship,
};
pub use settings::{settings, update_settings, Settings};
pub use write::{bulk, import};
pub use write::{
    change, change_under, Act, FollowContext, FollowDecision, FollowPolicy, PrivateNeedsApproval, RelationChange,
    RelationCommand, WriteError,
};
