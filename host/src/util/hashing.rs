//! Content addresses and stored secrets' digests.

use sha2::{Digest, Sha256};

/// SHA-256 in hex: the content address plugins are stored and cached under, and what is kept of a tenant
/// key's secret.
pub fn hex_sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}
