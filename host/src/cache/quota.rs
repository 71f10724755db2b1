//! What one tenant's space may hold ([`Quota`]) and what it holds ([`Usage`]), counted alike by both
//! backends as they write it.

use super::Space;

/// How much one tenant's space of a deployed projector version may hold: Redis and this process are shared
/// by every tenant, so none may fill them. Measured as the space is written (see [`Usage`]); bundled
/// versions' spaces — the platform's own code, bounded by the truth — are not limited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Data keys (counters, sorted sets, values).
    pub keys: u64,
    /// Bytes of keys, values and members, as [`Usage`] counts them.
    pub bytes: u64,
    /// Members of one sorted set (adds capped at or below it are always within it).
    pub members: u64,
}

impl Default for Quota {
    fn default() -> Self {
        Self { keys: 1_000_000, bytes: 256 << 20, members: 1_000_000 }
    }
}

impl Quota {
    /// No limit: the bundled versions' spaces.
    pub const UNLIMITED: Quota = Quota { keys: u64::MAX, bytes: u64::MAX, members: u64::MAX };

    /// The quota of `space`.
    pub(super) fn of(&self, space: Space<'_>) -> Quota {
        if space.version == 0 {
            Self::UNLIMITED
        } else {
            *self
        }
    }

    /// Whether it limits a space's keys or bytes at all: an unlimited space's usage is never read.
    pub(super) fn limits_size(&self) -> bool {
        self.keys != u64::MAX || self.bytes != u64::MAX
    }

    /// What `usage` has reached of this quota, if anything: then no batch applies to the space.
    pub(super) fn reached(&self, usage: Usage) -> Option<Exceeded> {
        // Counts are never below zero but for a lost write; `u64::MAX` (no quota) is never reached.
        let (keys, bytes) = (usage.keys.max(0) as u64, usage.bytes.max(0) as u64);
        if keys >= self.keys {
            Some(Exceeded::Keys(self.keys))
        } else if bytes >= self.bytes {
            Some(Exceeded::Bytes(self.bytes))
        } else {
            None
        }
    }
}

/// Which part of a [`Quota`] a batch met, with its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    Keys(u64),
    Bytes(u64),
    Members(u64),
}

impl std::fmt::Display for Exceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exceeded::Keys(most) => write!(f, "the space holds its quota of {most} keys"),
            Exceeded::Bytes(most) => write!(f, "the space holds its quota of {most} bytes"),
            Exceeded::Members(most) => write!(f, "a sorted set would pass its quota of {most} members"),
        }
    }
}

/// What a space holds, kept by both backends as effects write it, in two counters per shard: a data key
/// counts its name's bytes, a counter 8 more, a value its text's, a sorted-set member [`MEMBER_BYTES`].
/// Keys that expire are counted until the space is built again (it is cleared first).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub keys: i64,
    pub bytes: i64,
}

impl Usage {
    /// The usage that the counts read at [`Space::usage_keys`] tell.
    pub(super) fn sum(counts: &[Option<String>]) -> Usage {
        let count = |text: &Option<String>| text.as_deref().and_then(|t| t.parse::<i64>().ok()).unwrap_or(0);
        counts.chunks(2).fold(Usage::default(), |usage, shard| Usage {
            keys: usage.keys + count(&shard[0]),
            bytes: usage.bytes + shard.get(1).map_or(0, count),
        })
    }
}

/// What a sorted-set member counts towards a space's bytes: its fixed-width id and its score.
pub(super) const MEMBER_BYTES: i64 = 28;
/// What a counter's number counts towards a space's bytes.
pub(super) const COUNTER_BYTES: i64 = 8;
