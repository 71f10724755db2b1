//! As big as the JavaScript and Python components the platform must take (tens of MiB): 20 MiB of
//! initialised data the policy reads, so it needs more memory than the default limit too. Allows a write
//! when the table says so (it always does).

use std::hint::black_box;

use strand_plugin_sdk::{export_rate_limiter, Decision, RateLimiter, WriteRequest};

const SIZE: usize = 20 << 20;
/// Not zero, so it is stored in the component rather than zero-initialised at start.
static TABLE: [u8; SIZE] = [1; SIZE];

pub struct Big;

impl RateLimiter for Big {
    fn decide(request: &WriteRequest) -> Decision {
        let index = request.target.unsigned_abs() as usize % SIZE;
        if black_box(&TABLE)[index] == 1 {
            Decision::Allow
        } else {
            Decision::Deny("table".into())
        }
    }
}

export_rate_limiter!(Big);
