//! The rule of the house, enforced: no plugin call, Redis command, Kafka send or HTTP wait while a task
//! holds a database transaction or a writer connection. A wait on another service inside one holds the
//! connection (SQLite's only writer; one of MySQL's shared pool) and the transaction's row locks for as long
//! as that service takes — one tenant's spinning plugin or slow broker then stalls every tenant's writes.
//!
//! Code holding a connection runs inside [`holding`]; every wait on another service first calls
//! [`forbid_wait`]. A debug build (every test) panics there, so a path that breaks the rule fails its
//! tests; a release build logs the violation and counts it in `strand_held_connection_waits_total`.

use std::future::Future;

use crate::ops::metrics::HELD_CONNECTION_WAITS;

tokio::task_local! {
    /// What the task holds (a transaction, a writer connection), while it holds it.
    static HOLDING: &'static str;
}

/// Runs `work` marked as holding `what`; a task spawned from it starts holding nothing.
pub async fn holding<F: Future>(what: &'static str, work: F) -> F::Output {
    HOLDING.scope(what, work).await
}

/// Called before every wait on another service (`on`: a plugin call, Redis, Kafka): a violation of the
/// rule when the task holds a connection.
pub fn forbid_wait(on: &'static str) {
    let Ok(held) = HOLDING.try_with(|held| *held) else { return };
    if cfg!(debug_assertions) {
        panic!("a wait on {on} while holding {held}: no plugin call, Redis, Kafka or HTTP wait inside a transaction");
    }
    tracing::error!(on, held, "a wait on another service while holding a database connection");
    metrics::counter!(HELD_CONNECTION_WAITS.name, "on" => on).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_outside_a_transaction_is_allowed() {
        forbid_wait("a plugin call");
        holding("a transaction", async {}).await;
        forbid_wait("a plugin call");
    }

    #[tokio::test]
    #[should_panic(expected = "a wait on a plugin call while holding a transaction")]
    async fn a_wait_inside_a_transaction_fails_the_test() {
        holding("a transaction", async { forbid_wait("a plugin call") }).await;
    }

    #[tokio::test]
    async fn a_spawned_task_holds_nothing() {
        let spawned = holding("a transaction", async { tokio::spawn(async { forbid_wait("Redis") }).await }).await;
        spawned.expect("the spawned task may wait");
    }
}
