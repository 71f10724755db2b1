//! Small helpers with no home of their own in the data flow, used across it.

pub mod backoff;
pub mod hashing;
pub mod parking;
pub mod side_by_side;
pub mod str_enum;
pub mod time;
pub mod token_bucket;
