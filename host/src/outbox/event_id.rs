//! The name of one change of one edge: `tenant:from:to:version` for a follow's pair (requests are states of
//! that pair), `tenant:block:from:to:version` and `tenant:mute:from:to:version` for the others. An edge's
//! version grows by one with each real change, so the name is unique forever: consumers dedupe by it (the
//! cache's applied-event markers), and a backfill's snapshot of a pair at version v carries the very name of
//! the bus event it stands for.

use std::fmt;

use super::Relation;

/// One change of one edge: what its `event_id` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventId<'a> {
    pub tenant: &'a str,
    pub relation: Relation,
    pub from: i64,
    pub to: i64,
    pub version: i64,
}

impl fmt::Display for EventId<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.relation {
            Relation::Follow => write!(f, "{}:{}:{}:{}", self.tenant, self.from, self.to, self.version),
            other => write!(f, "{}:{other}:{}:{}:{}", self.tenant, self.from, self.to, self.version),
        }
    }
}

impl<'a> EventId<'a> {
    /// The name of a follow's pair at `version`.
    pub fn follow(tenant: &'a str, from: i64, to: i64, version: i64) -> Self {
        Self { tenant, relation: Relation::Follow, from, to, version }
    }

    /// `text` read back; `None` unless it is one of the forms above (tenant ids have no `:`).
    pub fn parse(text: &'a str) -> Option<Self> {
        let parts: Vec<&str> = text.split(':').collect();
        let (tenant, relation, numbers) = match parts.as_slice() {
            [tenant, numbers @ ..] if numbers.len() == 3 => (*tenant, Relation::Follow, numbers),
            [tenant, relation, numbers @ ..] if numbers.len() == 3 => match relation.parse() {
                Ok(Relation::Follow) | Err(_) => return None,
                Ok(relation) => (*tenant, relation, numbers),
            },
            _ => return None,
        };
        if tenant.is_empty() {
            return None;
        }
        let [from, to, version] = [numbers[0], numbers[1], numbers[2]].map(|n| n.parse::<i64>().ok());
        Some(Self { tenant, relation, from: from?, to: to?, version: version? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_id_reads_back_as_written_and_nothing_else_does() {
        let id = EventId::follow("acme", 1, -2, 3);
        assert_eq!(id.to_string(), "acme:1:-2:3");
        assert_eq!(EventId::parse("acme:1:-2:3"), Some(id));
        let block = EventId { relation: Relation::Block, ..id };
        assert_eq!(block.to_string(), "acme:block:1:-2:3");
        assert_eq!(EventId::parse("acme:block:1:-2:3"), Some(block));
        for bad in ["", "acme:1:2", "acme:1:2:3:4", ":1:2:3", "acme:x:2:3", "acme:follow:1:2:3", "acme:bloc:1:2:3"] {
            assert_eq!(EventId::parse(bad), None, "{bad:?}");
        }
    }
}
