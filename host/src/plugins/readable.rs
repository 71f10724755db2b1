//! What a projector version lets API consumers read: some of its spaces, each with the shape the API serves
//! it as — a counter, a sorted set paged like the follow lists, or a value. Declared at deploy (like a
//! Spin or Shopify manifest, the component's own code stays pure), stored with the version, served by
//! `GET /v1/projections/{plugin}/{space}/{ids}` for the caller's tenant only. Undeclared data stays
//! private to the plugin.

use serde::{Deserialize, Serialize};

use crate::util::str_enum::UnknownName;

crate::str_enum! {
    /// How a declared space is served: what it holds, and so how the API reads it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Shape("shape") {
        /// A number (`counter-add` effects).
        Counter = "counter",
        /// Members (ids) with scores, highest first, paged by cursor or offset (`zset-*` effects).
        SortedSet = "sorted-set",
        /// A text (`value-set` effects).
        Value = "value",
    }
}

/// What a projector version declares at deploy beside its component (like a Spin or Shopify manifest).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Declared {
    /// The spaces the API serves.
    pub readable: Vec<Readable>,
    /// Its spaces depend on the events' history, not only on the truth's current state (a counter of
    /// followers gained, which an unfollow does not lower): they are never built from the truth, but
    /// replayed from the bus's retained log where it holds every event, else counted from the build on
    /// (`projection/build.rs`).
    pub history: bool,
}

/// One space a version serves through the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Readable {
    /// The key space, as the projector names it in its effects (`key.space`).
    pub space: String,
    pub shape: Shape,
}

/// Most spaces one version may declare.
pub const MAX_READABLE: usize = 16;

/// `shape:space[,shape:space…]`, e.g. `counter:friends,sorted-set:friends`; each space once, named like a
/// key space (1 to 64 of `A-Z a-z 0-9 . _ -`).
pub fn parse_declarations(text: &str) -> Result<Vec<Readable>, String> {
    let mut declared: Vec<Readable> = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (shape, space) = part.split_once(':').ok_or_else(|| format!("{part:?} is not shape:space"))?;
        let shape: Shape = shape.parse().map_err(|unknown: UnknownName| unknown.to_string())?;
        let valid = !space.is_empty()
            && space.len() <= 64
            && space.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !valid {
            return Err(format!("space {space:?} is not 1 to 64 characters of A-Z a-z 0-9 . _ -"));
        }
        if declared.iter().any(|d| d.space == space) {
            return Err(format!("space {space:?} is declared twice"));
        }
        declared.push(Readable { space: space.to_owned(), shape });
    }
    if declared.len() > MAX_READABLE {
        return Err(format!("at most {MAX_READABLE} readable spaces per version"));
    }
    Ok(declared)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_parse_and_bad_ones_say_why() {
        let declared = parse_declarations("counter:friends, sorted-set:friend-list").unwrap();
        assert_eq!(declared[1], Readable { space: "friend-list".into(), shape: Shape::SortedSet });
        assert!(parse_declarations("").unwrap().is_empty());
        for bad in ["friends", "gauge:x", "counter:a b", "counter:x,value:x"] {
            assert!(parse_declarations(bad).is_err(), "{bad}");
        }
    }
}
