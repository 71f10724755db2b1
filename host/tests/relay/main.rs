//! The relay and the embedded bus against real databases.

mod binlog;
mod bus;
mod kafka;
mod leader;
mod poll;
