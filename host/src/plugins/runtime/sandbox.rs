//! The sandbox one call runs in: a fresh `Store` with the version's memory cap, fuel and epoch deadline,
//! an empty WASI, and the call's log — in the caller's task, on a pooled fiber stack.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tracing::Instrument;
use wasmtime::component::ResourceTable;
use wasmtime::{Store, StoreLimits, StoreLimitsBuilder, Trap, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::super::bindings::{v0_2, v0_3, Level, LogHost};
use super::super::error::PluginError;
use super::super::logs::{CallLog, LogLine};
use super::super::wasi;
use super::super::PluginKind;
use super::{CallCost, PluginLimits, PluginRuntime};
use crate::ops::metrics::PLUGIN_PAUSED;
use crate::ops::telemetry::{self, TARGET};

/// Per-call store data: the limiter, the call's log lines and an empty WASI. Plugins get no other host
/// state.
pub struct PluginState {
    limits: StoreLimits,
    log: CallLog,
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl LogHost for PluginState {
    fn log(&mut self, level: Level, input: Option<u32>, message: String) {
        self.log.push(level, input, message);
    }
}

/// A 0.3.0 component's `log` import: the same records, answered as today's.
impl v0_3::LogHost for PluginState {
    fn log(&mut self, level: v0_3::Level, input: Option<u32>, message: String) {
        LogHost::log(self, level.into(), input, message);
    }
}

/// A 0.2.0 component's `log` import, likewise.
impl v0_2::LogHost for PluginState {
    fn log(&mut self, level: v0_2::Level, input: Option<u32>, message: String) {
        LogHost::log(self, level.into(), input, message);
    }
}

/// A call's result and what the plugin logged on the way (also when it failed).
#[derive(Debug)]
pub struct Called<R> {
    pub result: Result<(R, CallCost), PluginError>,
    pub lines: Vec<LogLine>,
    /// Lines beyond the per-call bound.
    pub dropped: u32,
}

impl PluginRuntime {
    /// Runs `call` of `inputs` inputs against a fresh instance in a fresh store limited by `limits` (a
    /// version's, scaled to the batch). The call runs in the caller's task, on a fiber that yields at every
    /// epoch tick (so a busy plugin shares its worker thread with other tasks) — paused there while its
    /// tenant is past its share of the cores ([`super::running_time`]) — and traps once the deadline has
    /// passed.
    /// Inside a traced change the call is a `plugin.call` span of it.
    pub(in crate::plugins) async fn run<R>(
        &self,
        limits: PluginLimits,
        tenant: &str,
        kind: PluginKind,
        inputs: usize,
        call: impl AsyncFnOnce(&mut Store<PluginState>) -> wasmtime::Result<R>,
    ) -> (Result<(R, CallCost), PluginError>, CallLog) {
        crate::db::held::forbid_wait("a plugin call");
        let span = telemetry::inner_span(
            || tracing::info_span!(target: TARGET, "plugin.call", tenant, kind = kind.as_str(), inputs),
        );
        self.run_untraced(limits, tenant, kind, inputs, call).instrument(span).await
    }

    async fn run_untraced<R>(
        &self,
        limits: PluginLimits,
        tenant: &str,
        kind: PluginKind,
        inputs: usize,
        call: impl AsyncFnOnce(&mut Store<PluginState>) -> wasmtime::Result<R>,
    ) -> (Result<(R, CallCost), PluginError>, CallLog) {
        let limits = self.for_batch(limits, inputs);
        let _admitted = match self.admission.enter(tenant, kind, limits.deadline).await {
            Ok(admitted) => admitted,
            Err(refused) => return (Err(refused), CallLog::default()),
        };
        let store_limits =
            StoreLimitsBuilder::new().memory_size(limits.memory_bytes).trap_on_grow_failure(true).build();
        let state = PluginState {
            limits: store_limits,
            log: CallLog::default(),
            wasi: wasi::empty(),
            table: ResourceTable::new(),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limits);
        // With metering on (a platform maximum of fuel), a version without fuel of its own gets the maximum.
        let fuel = self.maxima.fuel.map(|maximum| limits.fuel.unwrap_or(maximum));
        if let Some(fuel) = fuel {
            if let Err(e) = store.set_fuel(fuel) {
                return (Err(PluginError::host("setting the fuel", e)), CallLog::default());
            }
        }
        let started = Instant::now();
        let deadline = started + limits.deadline;
        let (running, tenant_name, resumed) =
            (self.running_time.clone(), tenant.to_owned(), Arc::new(Mutex::new(started)));
        store.epoch_deadline_callback(move |_| {
            let now = Instant::now();
            let ran = now.saturating_duration_since(*resumed.lock().unwrap_or_else(PoisonError::into_inner));
            let pause = running.charge(&tenant_name, ran, now);
            // Paused past its deadline, the call would only time out later: it times out now.
            if now + pause >= deadline {
                return Err(Trap::Interrupt.into());
            }
            let (resumed, tenant) = (resumed.clone(), tenant_name.clone());
            Ok(UpdateDeadline::YieldCustom(
                1,
                Box::pin(async move {
                    if pause.is_zero() {
                        tokio::task::yield_now().await;
                    } else {
                        metrics::counter!(PLUGIN_PAUSED.name, "tenant" => tenant, "kind" => kind.as_str())
                            .increment(pause.as_micros() as u64);
                        tokio::time::sleep(pause).await;
                    }
                    *resumed.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
                }),
            ))
        });
        store.set_epoch_deadline(1);
        let result = call(&mut store).await;
        let consumed = fuel.map(|total| total - store.get_fuel().unwrap_or(total));
        let cost = CallCost { elapsed: started.elapsed(), fuel: consumed };
        let result = match result {
            Ok(value) => Ok((value, cost)),
            Err(e) => Err(match e.downcast_ref::<Trap>() {
                Some(Trap::Interrupt) => PluginError::Timeout(limits.deadline),
                Some(Trap::OutOfFuel) => PluginError::OutOfFuel(fuel.unwrap_or_default()),
                _ => PluginError::Trap(e),
            }),
        };
        (result, store.into_data().log)
    }
}
