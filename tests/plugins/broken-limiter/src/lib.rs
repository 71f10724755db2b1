//! Traps on every request: conformance must refuse it at upload.

use strand_plugin_sdk::{export_rate_limiter, Decision, RateLimiter, WriteRequest};

pub struct Broken;

impl RateLimiter for Broken {
    fn decide(_: &WriteRequest) -> Decision {
        panic!("broken on purpose")
    }
}

export_rate_limiter!(Broken);
