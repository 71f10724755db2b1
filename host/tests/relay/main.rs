//! The relay and the embedded bus against real databases.

mod bus;
mod poll;
