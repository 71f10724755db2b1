//! Traps on a follow of user 666 (its conformance samples never follow them), allows every other follow:
//! the host must then take the tenant's failure mode.

use strand_plugin_sdk::{export_relation_policy, Admission, FollowAttempt, RelationPolicy};

pub struct TrapsOn666;

impl RelationPolicy for TrapsOn666 {
    fn admit(attempt: &FollowAttempt) -> Admission {
        assert_ne!(attempt.target, 666, "trapping on purpose");
        Admission::Allow
    }
}

export_relation_policy!(TrapsOn666);
