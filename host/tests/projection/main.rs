//! Projections of the bus's events, against real databases.

mod effects;
mod follower;
mod worker;
