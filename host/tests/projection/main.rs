//! Projections of the bus's events, against real databases.

mod backfill;
mod effects;
mod follower;
mod worker;
