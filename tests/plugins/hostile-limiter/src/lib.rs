//! Behaves on conformance samples (targets 101..=108), then misbehaves on chosen targets:
//! 666 loops forever, 667 traps, 668 allocates until memory runs out, 669 answers a 1 MiB reason, and
//! charges buckets the host cannot carry out: 670 refills at 1e-300 tokens a second (its wait would not fit
//! any clock), 671 costs more than the bucket holds, 672 refills at NaN. On 673 it needs 24 MiB of memory,
//! more than the default limit, and then allows. From 10000 up it traps on every twentieth target (5%).

use std::hint::black_box;

use strand_plugin_sdk::{export_rate_limiter, Decision, RateLimiter, WriteRequest};

pub struct Hostile;

impl RateLimiter for Hostile {
    fn decide(request: &WriteRequest) -> Decision {
        match request.target {
            666 => {
                let mut spins = 0u64;
                loop {
                    spins = black_box(spins.wrapping_add(1));
                }
            }
            667 => {
                strand_plugin_sdk::log::error("about to trap");
                panic!("hostile plugin traps on purpose")
            }
            668 => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(black_box(vec![1u8; 1 << 20]));
                }
            }
            669 => Decision::Deny("x".repeat(1 << 20)),
            670 => Decision::charge("evil", 10, 1e-300, 1),
            671 => Decision::charge("evil", 1, 1.0, 2),
            672 => Decision::charge("evil", 10, f64::NAN, 1),
            673 => {
                let needed = black_box(vec![7u8; 24 << 20]);
                if needed.iter().step_by(4096).all(|b| *b == 7) {
                    Decision::Allow
                } else {
                    Decision::Deny("memory".into())
                }
            }
            t if t >= 10_000 && t % 20 == 0 => panic!("hostile plugin traps on 5% of targets"),
            _ => Decision::Allow,
        }
    }
}

export_rate_limiter!(Hostile);
