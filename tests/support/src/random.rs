//! The randomness of the suites that pick at random (fault injection, the model): one small deterministic
//! generator whose seed is printed with every run and can be fed back, so a failing run replays.

/// A xorshift generator seeded from the environment variable its suite names, else at random.
pub struct Random(u64);

impl Random {
    /// Seeded from `variable` (e.g. `STRAND_TEST_FAULT_SEED`) when it holds a number, else from the OS; the seed
    /// is printed as `variable=seed`, which is how a failing run is replayed.
    pub fn seeded(variable: &str) -> Self {
        let seed = std::env::var(variable)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or_else(|| getrandom::u64().expect("the OS's randomness"));
        println!("{variable}={seed}  (set it to replay this run)");
        Self(seed | 1)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}
