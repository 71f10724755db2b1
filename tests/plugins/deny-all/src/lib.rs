//! Refuses every write: the policy tests swap in to see the swap take effect.

use strand_plugin_sdk::{export_rate_limiter, Decision, RateLimiter, WriteRequest};

pub struct DenyAll;

impl RateLimiter for DenyAll {
    fn decide(_: &WriteRequest) -> Decision {
        Decision::Deny("deny-all test policy".into())
    }
}

export_rate_limiter!(DenyAll);
