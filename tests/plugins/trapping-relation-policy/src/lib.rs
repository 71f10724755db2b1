//! Traps on a follow of user 666 and spins until its deadline on a follow of user 667 (its conformance
//! samples never follow either), allows every other follow: the host must then take the tenant's failure
//! mode, and a spinning policy must hold up no other tenant's writes.

use strand_plugin_sdk::{export_relation_policy, Admission, FollowAttempt, RelationPolicy};

pub struct TrapsOn666;

impl RelationPolicy for TrapsOn666 {
    fn admit(attempt: &FollowAttempt) -> Admission {
        assert_ne!(attempt.target, 666, "trapping on purpose");
        if attempt.target == 667 {
            // Until the host's deadline stops it.
            loop {
                std::hint::black_box(attempt.target);
            }
        }
        Admission::Allow
    }
}

export_relation_policy!(TrapsOn666);
