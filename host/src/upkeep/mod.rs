//! Keeping a running deployment healthy, over every part of it: readiness (`/readyz`), the pipeline's lag
//! and parked work, and what is kept of the past (retention). Unlike `ops/` (metrics, traces, logs,
//! supervised tasks: leaves every module may use), these reach into the stores and stages they watch.

pub mod health;
pub mod lag;
pub mod retention;
pub mod tenant_figures;
