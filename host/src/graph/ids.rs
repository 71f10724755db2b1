//! The ids every request and event carries: a tenant, and a user of it. Checked once, at the edge.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A user of a tenant. Always positive: zero and negative ids are refused at the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "i64", into = "i64")]
pub struct UserId(i64);

impl UserId {
    pub fn get(self) -> i64 {
        self.0
    }
}

/// Why a user id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a user id is a positive integer (1 to 9223372036854775807), got {0:?}")]
pub struct InvalidUserId(pub String);

impl TryFrom<i64> for UserId {
    type Error = InvalidUserId;
    fn try_from(value: i64) -> Result<Self, Self::Error> {
        if value > 0 {
            Ok(Self(value))
        } else {
            Err(InvalidUserId(value.to_string()))
        }
    }
}

impl From<UserId> for i64 {
    fn from(id: UserId) -> i64 {
        id.0
    }
}

impl FromStr for UserId {
    type Err = InvalidUserId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // Only plain decimal digits: "+5", " 5" and "5.0" are not ids.
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(InvalidUserId(s.to_owned()));
        }
        s.parse::<i64>().ok().and_then(|v| UserId::try_from(v).ok()).ok_or_else(|| InvalidUserId(s.to_owned()))
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An app hosted by this Strand. Every row and every read is scoped by it; nothing crosses tenants.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct TenantId(String);

/// Why a tenant id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a tenant id is 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' or '-', got {0:?}")]
pub struct InvalidTenantId(pub String);

impl TenantId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for TenantId {
    type Err = InvalidTenantId;
    /// The alphabet is narrow because tenant ids become parts of message keys and cache keys (`tenant:…`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let valid = (1..=64).contains(&s.len())
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if valid {
            Ok(Self(s.to_owned()))
        } else {
            Err(InvalidTenantId(s.to_owned()))
        }
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_ids_are_positive_decimal_integers() {
        assert_eq!("42".parse::<UserId>().map(UserId::get), Ok(42));
        for bad in ["0", "-1", "abc", "", "+5", " 5", "5.0", "9223372036854775808"] {
            assert!(bad.parse::<UserId>().is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn tenant_ids_are_key_safe() {
        assert!("acme-app_1.prod".parse::<TenantId>().is_ok());
        for bad in ["", "a:b", "a b", &"x".repeat(65)] {
            assert!(bad.parse::<TenantId>().is_err(), "{bad:?} must be refused");
        }
    }
}
