//! Accounts over their whole life: deletion (erasure), suspension and restore, and moving an account, each a
//! background job over every relation of the account (`job.rs` what is stored and how one starts, `steps.rs`
//! the kinds and what each does, `runner.rs` who runs it, `pace.rs` how fast). Every edge a job changes is an ordinary change with its
//! event, so every projection converges exactly; import and export of whole graphs are `transfer`'s.

mod edges;
mod job;
mod pace;
mod rules;
mod runner;
mod steps;

pub use job::{get, list, start, Job, JobRequest, JobState, StartError};
pub use runner::JobRunner;
pub use steps::JobKind;
