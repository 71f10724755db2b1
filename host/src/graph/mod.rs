//! The truth: the `following` table, written together with its `outbox` row in one transaction, and the
//! reads served straight from it. Everything else in Strand is derived from what this module commits.

pub mod ids;
mod read;
mod write;

pub use ids::{InvalidTenantId, InvalidUserId, TenantId, UserId};
pub use read::{counts, list, relationships, Counts, Direction, ListedUser, Page, PageRequest, Position, Relationship};
pub use write::{set_following, FollowChange, FollowCommand, WriteError};
