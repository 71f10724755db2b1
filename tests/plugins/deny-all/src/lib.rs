//! Refuses every write: the policy tests swap in to see the swap take effect. It says so in its log, with
//! markup in the line (a page showing it must escape it).

use strand_plugin_sdk::{export_rate_limiter, log, Decision, RateLimiter, WriteRequest};

pub struct DenyAll;

impl RateLimiter for DenyAll {
    fn decide(request: &WriteRequest) -> Decision {
        log::warn(&format!("<b>denied</b> {} -> {}", request.user, request.target));
        Decision::Deny("deny-all test policy".into())
    }
}

export_rate_limiter!(DenyAll);
