//! The bundled relation policy, Mastodon's rule: a private account's follows wait for its approval; every
//! other follow begins. A tenant that deploys none gets this rule from the host itself, without a plugin
//! call on its follows; this is the same rule as a plugin, to deploy back or to start a policy from.

use strand_plugin_sdk::{export_relation_policy, Admission, FollowAttempt, RelationPolicy};

pub struct PrivateNeedsApproval;

impl RelationPolicy for PrivateNeedsApproval {
    fn admit(attempt: &FollowAttempt) -> Admission {
        if attempt.target_private {
            Admission::RequireApproval
        } else {
            Admission::Allow
        }
    }
}

export_relation_policy!(PrivateNeedsApproval);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_private_account_requires_approval() {
        let attempt = FollowAttempt {
            follower: 1,
            target: 2,
            followed_back: false,
            target_private: false,
            follower_followings: 0,
            follower_followers: 0,
            target_followers: 0,
            now_ms: 0,
        };
        assert_eq!(PrivateNeedsApproval::admit(&attempt), Admission::Allow);
        let private = FollowAttempt { target_private: true, ..attempt };
        assert_eq!(PrivateNeedsApproval::admit(&private), Admission::RequireApproval);
    }
}
