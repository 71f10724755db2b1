//! The bundled rate-limit policy: the seed's numbers, a 100-token burst refilled at 1 token per second, per
//! user and per action (follows and unfollows have separate buckets, so unfollowing is limited too). Every
//! relation write is charged by its `action`: a block or a mute takes from the follow bucket, an unblock or
//! an unmute from the unfollow bucket (the README's table).

use strand_plugin_sdk::{export_rate_limiter, Action, Decision, RateLimiter, WriteRequest};

pub const CAPACITY: u32 = 100;
pub const REFILL_PER_SECOND: f64 = 1.0;

pub struct SeedPolicy;

impl RateLimiter for SeedPolicy {
    fn decide(request: &WriteRequest) -> Decision {
        let action = match request.action {
            Action::Follow => "follow",
            Action::Unfollow => "unfollow",
        };
        Decision::charge(format!("{action}:{}", request.user), CAPACITY, REFILL_PER_SECOND, 1)
    }
}

export_rate_limiter!(SeedPolicy);

#[cfg(test)]
mod tests {
    use super::*;
    use strand_plugin_sdk::{Bucket, WriteKind};

    fn request(action: Action) -> WriteRequest {
        let write = if action == Action::Follow { WriteKind::Block } else { WriteKind::Unmute };
        WriteRequest { user: 7, action, write, target: 8, now_ms: 0 }
    }

    #[test]
    fn follows_and_unfollows_charge_their_own_per_user_bucket() {
        let follow = Bucket { key: "follow:7".into(), capacity: 100, refill_per_second: 1.0, cost: 1 };
        assert!(matches!(SeedPolicy::decide(&request(Action::Follow)), Decision::Charge(b) if b == follow));
        assert!(matches!(SeedPolicy::decide(&request(Action::Unfollow)), Decision::Charge(b) if b.key == "unfollow:7"));
    }
}
