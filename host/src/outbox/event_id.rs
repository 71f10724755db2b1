//! The name of one change of one pair, `tenant:from:to:version`. A pair's version grows by one with each
//! real change, so the name is unique forever: consumers dedupe by it (the cache's applied-event markers),
//! and a backfill's snapshot of a pair at version v carries the very name of the bus event it stands for.

use std::fmt;

/// One change of one pair: what its `event_id` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventId<'a> {
    pub tenant: &'a str,
    pub from: i64,
    pub to: i64,
    pub version: i64,
}

impl fmt::Display for EventId<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}:{}", self.tenant, self.from, self.to, self.version)
    }
}

impl<'a> EventId<'a> {
    /// `text` read back; `None` unless it is `tenant:from:to:version` (tenant ids have no `:`).
    pub fn parse(text: &'a str) -> Option<Self> {
        let mut parts = text.split(':');
        let (tenant, from, to, version) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || tenant.is_empty() {
            return None;
        }
        Some(Self { tenant, from: from.parse().ok()?, to: to.parse().ok()?, version: version.parse().ok()? })
    }
}

#[cfg(test)]
mod tests {
    use super::EventId;

    #[test]
    fn an_event_id_reads_back_as_written_and_nothing_else_does() {
        let id = EventId { tenant: "acme", from: 1, to: -2, version: 3 };
        assert_eq!(id.to_string(), "acme:1:-2:3");
        assert_eq!(EventId::parse("acme:1:-2:3"), Some(id));
        for bad in ["", "acme:1:2", "acme:1:2:3:4", ":1:2:3", "acme:x:2:3"] {
            assert_eq!(EventId::parse(bad), None, "{bad:?}");
        }
    }
}
