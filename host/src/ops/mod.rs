//! Running the service, beside the data flow — leaves every module may use: supervised background tasks,
//! metrics and error chains, logs and traces, and the bounds on what the host records of tenants' activity.
//! What watches the stages themselves (readiness, lag, retention) is `upkeep/`.

pub mod bounded;
pub mod history;
pub mod live_writes;
pub mod metrics;
pub mod observability;
pub mod sample;
pub mod tasks;
pub mod telemetry;
