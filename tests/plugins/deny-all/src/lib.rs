//! Refuses every write, naming which (`strand:plugin@0.4.0` tells a limiter): the policy tests swap it in to
//! see the swap take effect. It says so in its log, with markup in the line (a page showing it must escape
//! it).

use strand_plugin_sdk::{export_rate_limiter, log, Decision, RateLimiter, WriteKind, WriteRequest};

pub struct DenyAll;

impl RateLimiter for DenyAll {
    fn decide(request: &WriteRequest) -> Decision {
        log::warn(&format!("<b>denied</b> {} -> {}", request.user, request.target));
        let write = match request.write {
            WriteKind::Follow => "follow",
            WriteKind::Unfollow => "unfollow",
            WriteKind::Authorize => "authorize",
            WriteKind::Reject => "reject",
            WriteKind::RemoveFollower => "remove-follower",
            WriteKind::Block => "block",
            WriteKind::Unblock => "unblock",
            WriteKind::Mute => "mute",
            WriteKind::Unmute => "unmute",
            WriteKind::Settings => "settings",
        };
        Decision::Deny(format!("deny-all test policy: {write}"))
    }
}

export_rate_limiter!(DenyAll);
