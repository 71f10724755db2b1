//! Time as Strand records it: epoch milliseconds, and the one text form every API and event shows.

use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{DateTime, SecondsFormat};

/// Wall-clock time in epoch milliseconds: the time a write records and lists are ordered by.
pub fn now_ms() -> i64 {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).expect("the clock is after 1970");
    i64::try_from(since_epoch.as_millis()).expect("milliseconds since 1970 fit in i64")
}

/// Formats epoch milliseconds the way every Strand API and event does.
pub fn rfc3339_millis(ms: i64) -> String {
    match DateTime::from_timestamp_millis(ms) {
        Some(time) => time.to_rfc3339_opts(SecondsFormat::Millis, true),
        // Only reachable past the year 262143; say so rather than invent a time.
        None => format!("out-of-range:{ms}"),
    }
}
