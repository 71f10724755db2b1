//! Example relation policy, Mastodon's following cap: anyone may follow up to 7 500 accounts; beyond that,
//! up to 1.1 × their own followers. A follow over the cap is refused with `following_cap` (the client reads
//! `policy.following_cap`); a private account's follows still wait for its approval.

use strand_plugin_sdk::{export_relation_policy, Admission, FollowAttempt, Refusal, RelationPolicy};

/// Follows anyone may have, whatever their followers.
pub const FLOOR: i64 = 7_500;

pub struct FollowingCap;

/// The most accounts one with `followers` followers may follow.
pub fn cap(followers: i64) -> i64 {
    FLOOR.max(followers.saturating_mul(11) / 10)
}

impl RelationPolicy for FollowingCap {
    fn admit(attempt: &FollowAttempt) -> Admission {
        let cap = cap(attempt.follower_followers);
        if attempt.follower_followings >= cap {
            return Admission::Refuse(Refusal {
                code: "following_cap".into(),
                reason: format!(
                    "you follow {} accounts, the most you may follow now is {cap}",
                    attempt.follower_followings
                ),
            });
        }
        if attempt.target_private {
            Admission::RequireApproval
        } else {
            Admission::Allow
        }
    }
}

export_relation_policy!(FollowingCap);

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(followings: i64, followers: i64) -> FollowAttempt {
        FollowAttempt {
            follower: 1,
            target: 2,
            followed_back: false,
            target_private: false,
            follower_followings: followings,
            follower_followers: followers,
            target_followers: 0,
            now_ms: 0,
        }
    }

    #[test]
    fn the_cap_is_7500_then_grows_with_followers() {
        assert_eq!(FollowingCap::admit(&attempt(7_499, 0)), Admission::Allow);
        assert!(matches!(FollowingCap::admit(&attempt(7_500, 0)), Admission::Refuse(r) if r.code == "following_cap"));
        assert_eq!(FollowingCap::admit(&attempt(10_000, 10_000)), Admission::Allow);
        assert!(matches!(FollowingCap::admit(&attempt(11_000, 10_000)), Admission::Refuse(_)));
    }
}
