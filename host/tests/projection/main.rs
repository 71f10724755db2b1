//! Projections of the bus's events, against real databases.

mod follower;
mod worker;
