//! The relay and the embedded bus against real databases.

mod binlog;
mod bus;
mod faults;
mod kafka;
mod leader;
mod poll;
