//! The one definition of what the host's API reads from projectors: which projectors' spaces serve
//! `/v1/…/counts` and the follow lists, and the names of the counters and sorted sets in them. The host and
//! the bundled projectors both use these constants, so the two cannot drift apart, and the host reserves
//! the projector names: no tenant can deploy a replacement that the API would then serve.
#![no_std]

/// The projector whose counters the API serves as counts.
pub const FOLLOW_COUNTS: &str = "follow-counts";
/// The projector whose sorted sets the API serves as follow lists.
pub const FOLLOW_LISTS: &str = "follow-lists";
/// Projector names a tenant may not deploy: the API serves their spaces.
pub const SERVED_PROJECTORS: [&str; 2] = [FOLLOW_COUNTS, FOLLOW_LISTS];

/// Counter of a user's followings (`c.followings:{user}` in [`FOLLOW_COUNTS`]).
pub const FOLLOWINGS: &str = "followings";
/// Counter of a user's followers (`c.followers:{user}` in [`FOLLOW_COUNTS`]), and the sorted set of them
/// (`z.followers:{user}` in [`FOLLOW_LISTS`]).
pub const FOLLOWERS: &str = "followers";
/// Sorted set of the users a user follows (`z.following:{user}` in [`FOLLOW_LISTS`]); score = follow time.
pub const FOLLOWING: &str = "following";
