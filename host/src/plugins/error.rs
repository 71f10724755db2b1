//! Why a plugin could not be loaded or a call failed: one type for every plugin kind and call.

use std::time::Duration;

use super::PluginKind;

/// Why a plugin could not be loaded or a call failed.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("not a WebAssembly component: {0}")]
    NotAComponent(String),
    #[error("the component does not implement the {kind} world: {detail}")]
    WrongWorld { kind: PluginKind, detail: String },
    #[error("the plugin did not finish within its {0:?} deadline")]
    Timeout(Duration),
    #[error("the plugin ran out of fuel ({0} units)")]
    OutOfFuel(u64),
    /// The trap as wasmtime reports it, with its wasm backtrace (`{:?}` shows it in logs).
    #[error("the plugin trapped: {0:#}")]
    Trap(#[source] wasmtime::Error),
    #[error("the plugin returned an invalid result: {0}")]
    InvalidOutput(String),
    /// The host, not the plugin, failed: its cause is kept (logged with the whole chain).
    #[error("the plugin host failed: {doing}")]
    Host { doing: &'static str, source: Box<dyn std::error::Error + Send + Sync> },
    /// The tenant's share of the instance pool stayed taken by its other calls for this call's whole
    /// deadline: this call is not made, and the kind's failure policy applies for that tenant alone.
    #[error(
        "tenant {tenant} had {share} plugin calls in flight, its share of the instance pool, for the whole deadline"
    )]
    Busy { tenant: String, share: u32 },
    /// No instance slot came free within the call's deadline: the host is overloaded (every tenant's calls
    /// fill the pool). Not the plugin's doing.
    #[error("no plugin instance slot came free within {0:?}: the host's instance pool is exhausted")]
    PoolExhausted(Duration),
}

impl PluginError {
    /// Whether the plugin's own code caused the failure — what counts towards a canary's or shadow's
    /// automatic rollback. The host failing, its pool being full and the tenant's share being taken are
    /// not the plugin version's doing.
    pub fn is_the_plugins(&self) -> bool {
        matches!(self, Self::Timeout(_) | Self::OutOfFuel(_) | Self::Trap(_) | Self::InvalidOutput(_))
    }

    /// The host failed while `doing` something.
    pub fn host(doing: &'static str, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Host { doing, source: source.into() }
    }
}
