//! Whole graphs in and out of a tenant: export (a user's lists, a tenant's edges) and import.

pub mod export;
pub mod import;
pub mod marks;
pub mod merge;
