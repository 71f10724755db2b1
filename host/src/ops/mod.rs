//! Running the service, beside the data flow: supervised background tasks, readiness, the pipeline's lag,
//! metrics and error chains, logs and traces, what is kept of the past (retention) and the bounds on what the host records
//! of tenants' activity.

pub mod bounded;
pub mod health;
pub mod lag;
pub mod metrics;
pub mod observability;
pub mod retention;
pub mod sample;
pub mod tasks;
pub mod telemetry;
