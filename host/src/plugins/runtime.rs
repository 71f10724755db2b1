//! One wasmtime `Engine` for every plugin of every tenant, and the sandbox each call runs in.
//!
//! A component is compiled once (cached on disk by its sha256 and the engine's compatibility hash),
//! type-checked once against its world (`*Pre`), then instantiated per batch from the pooling allocator, in
//! a fresh `Store` with the plugin limits: an epoch deadline (wall clock), a memory cap and optional fuel.
//! Calls are async: they run in the caller's task, on a fiber stack from the pool, with no hop to another
//! thread (the hop cost a write more than the policy call itself), yielding at every epoch tick. Whatever a
//! plugin does — loop, allocate, trap, return garbage — ends as a [`PluginError`] for that call.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, StoreLimits};
use wasmtime::{StoreLimitsBuilder, Trap, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::{add_log_to_linker, v0_1, Level, LogHost};
use super::bindings::{projector::ProjectorPre, rate_limiter::RateLimiterPre, router::RouterPre};
use super::error::PluginError;
use super::logs::{CallLog, LogLine};
use super::wasi;
use super::PluginKind;

/// How often the epoch advances; deadlines are rounded up to it.
const EPOCH_TICK: Duration = Duration::from_millis(2);
/// Concurrent plugin instances the pool holds: calls beyond it wait for a slot (up to their deadline).
pub const POOLED_INSTANCES: u32 = 256;
/// The most core instances, memories and tables one component may instantiate. With every call holding
/// one of [`POOLED_INSTANCES`] permits, the pool's totals are these times the permits: a component with
/// hundreds of core modules cannot take the slots other tenants' calls need. JavaScript (StarlingMonkey)
/// and Python (componentize-py) components fit with room to spare.
const MAX_CORE_INSTANCES_PER_COMPONENT: u32 = 16;
const MAX_MEMORIES_PER_COMPONENT: u32 = 2;
const MAX_TABLES_PER_COMPONENT: u32 = 4;

/// What one call may use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PluginLimits {
    /// Wall-clock time for instantiation plus the call.
    pub deadline: Duration,
    /// Linear memory of the instance, in bytes.
    pub memory_bytes: usize,
    /// Fuel (roughly, wasm instructions) per call; `None` leaves only the deadline.
    pub fuel: Option<u64>,
}

impl Default for PluginLimits {
    fn default() -> Self {
        Self { deadline: Duration::from_millis(50), memory_bytes: 16 << 20, fuel: Some(50_000_000) }
    }
}

/// Concurrent calls one tenant may have in flight unless configured otherwise: a quarter of the pool.
pub const DEFAULT_TENANT_SHARE: u32 = POOLED_INSTANCES / 4;

/// A version's limits hold for a call of up to this many inputs; a bigger batch (a backfill page) gets
/// proportionally more time and fuel, within the platform maxima.
pub const INPUTS_PER_LIMIT: usize = 256;

/// Limits asked for at deploy time; each unset one is the configured default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, utoipa::IntoParams)]
pub struct RequestedLimits {
    /// Wall-clock limit of one call, in milliseconds.
    pub deadline_ms: Option<u64>,
    /// Linear-memory limit of one instance, in bytes.
    pub memory_bytes: Option<u64>,
    /// Fuel per call (about one unit per wasm instruction).
    pub fuel: Option<u64>,
}

/// A requested limit above the platform's maximum (or zero).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{limit} = {requested} is not allowed: it must be at least 1 and at most the platform maximum {maximum}")]
pub struct LimitRefused {
    /// `deadline_ms`, `memory_bytes` or `fuel`.
    pub limit: &'static str,
    pub requested: u64,
    pub maximum: u64,
}

/// What a call cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallCost {
    pub elapsed: Duration,
    /// Fuel consumed, when fuel is metered.
    pub fuel: Option<u64>,
}

/// A component checked against its kind's world, ready to instantiate.
#[derive(Clone)]
pub enum PreparedPlugin {
    RateLimiter(Built<RateLimiterPre<PluginState>, v0_1::rate_limiter::RateLimiterPre<PluginState>>),
    Router(Built<RouterPre<PluginState>, v0_1::router::RouterPre<PluginState>>),
    Projector(Built<ProjectorPre<PluginState>, v0_1::projector::ProjectorPre<PluginState>>),
}

/// Which package a component was built against: the host runs both.
#[derive(Clone)]
pub enum Built<Current, V0_1> {
    /// `strand:plugin@0.2.0`.
    Current(Current),
    /// `strand:plugin@0.1.0`, as deployed before 0.2.0.
    V0_1(V0_1),
}

impl<C, O> Built<C, O> {
    fn wit(&self) -> &'static str {
        match self {
            Built::Current(_) => "0.2.0",
            Built::V0_1(_) => "0.1.0",
        }
    }
}

impl PreparedPlugin {
    pub fn kind(&self) -> PluginKind {
        match self {
            PreparedPlugin::RateLimiter(_) => PluginKind::RateLimiter,
            PreparedPlugin::Router(_) => PluginKind::Router,
            PreparedPlugin::Projector(_) => PluginKind::Projector,
        }
    }

    /// The version of the `strand:plugin` package the component was built against.
    pub fn wit_version(&self) -> &'static str {
        match self {
            PreparedPlugin::RateLimiter(built) => built.wit(),
            PreparedPlugin::Router(built) => built.wit(),
            PreparedPlugin::Projector(built) => built.wit(),
        }
    }
}

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

/// A call's result and what the plugin logged on the way (also when it failed).
#[derive(Debug)]
pub struct Called<R> {
    pub result: Result<(R, CallCost), PluginError>,
    pub lines: Vec<LogLine>,
    /// Lines beyond the per-call bound.
    pub dropped: u32,
}

/// The engine, the linker and the compiled-code cache.
pub struct PluginRuntime {
    engine: Engine,
    /// What a version gets unless it asks for other limits.
    limits: PluginLimits,
    /// What no version may exceed (the pool's memory slots are this big).
    maxima: PluginLimits,
    cache_dir: Option<PathBuf>,
    engine_hash: String,
    ticking: Arc<AtomicBool>,
    admission: Admission,
}

/// Who may take an instance slot now: at most `share` calls of one tenant at a time, and at most
/// [`POOLED_INSTANCES`] in all; a call waits for both, within its deadline. So one tenant's plugins —
/// spinning to their deadline, say — hold at most their share (the tenant's further calls wait, then fail
/// as `busy` by its own failure policy), and another tenant's call always finds a slot, or fails as the
/// host's condition, never as a trap of its plugin. A burst of one tenant's quick calls just queues.
struct Admission {
    pool: Arc<tokio::sync::Semaphore>,
    tenants: std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Semaphore>>>,
    share: u32,
}

/// A call's place in its tenant's share and in the pool, given back when dropped.
struct Admitted {
    _tenant: tokio::sync::OwnedSemaphorePermit,
    _pool: tokio::sync::OwnedSemaphorePermit,
}

impl Admission {
    fn new(share: u32) -> Self {
        Self {
            pool: Arc::new(tokio::sync::Semaphore::new(POOLED_INSTANCES as usize)),
            tenants: Default::default(),
            share: share.clamp(1, POOLED_INSTANCES),
        }
    }

    /// Waits, at most `wait`, for a place in `tenant`'s share and then in the pool.
    async fn enter(&self, tenant: &str, wait: Duration) -> Result<Admitted, PluginError> {
        let deadline = tokio::time::Instant::now() + wait;
        let share = {
            let mut tenants = self.tenants.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let share = self.share as usize;
            tenants.entry(tenant.to_owned()).or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(share))).clone()
        };
        let busy = || PluginError::Busy { tenant: tenant.to_owned(), share: self.share };
        let own = match tokio::time::timeout_at(deadline, share.acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            _ => return Err(busy()),
        };
        match tokio::time::timeout_at(deadline, self.pool.clone().acquire_owned()).await {
            Ok(Ok(pool)) => Ok(Admitted { _tenant: own, _pool: pool }),
            _ => {
                metrics::counter!("strand_plugin_pool_exhausted_total").increment(1);
                tracing::error!(tenant, "the plugin instance pool is exhausted; the call takes its failure policy");
                Err(PluginError::PoolExhausted(wait))
            }
        }
    }
}

/// At most how much of a pooled memory or table slot is reset in place rather than given back to the
/// kernel: more than a small plugin touches per call (a Rust rate limiter: its stack top and a few heap
/// pages).
const KEEP_RESIDENT: usize = 4 << 20;

impl PluginRuntime {
    /// A runtime whose versions all run with `limits`. `cache_dir`: where compiled code is kept between
    /// runs; it must be trusted (it is loaded as code).
    pub fn new(limits: PluginLimits, cache_dir: Option<PathBuf>) -> Result<Self, PluginError> {
        Self::bounded(limits, limits, cache_dir)
    }

    /// A runtime whose versions get `defaults` unless deployed with their own limits, up to `maxima`.
    pub fn bounded(
        defaults: PluginLimits,
        maxima: PluginLimits,
        cache_dir: Option<PathBuf>,
    ) -> Result<Self, PluginError> {
        let limits = defaults;
        // The defaults are always allowed: maxima below them are raised to them.
        let maxima = PluginLimits {
            deadline: maxima.deadline.max(limits.deadline),
            memory_bytes: maxima.memory_bytes.max(limits.memory_bytes),
            fuel: match (maxima.fuel, limits.fuel) {
                (Some(maximum), Some(default)) => Some(maximum.max(default)),
                (maximum, default) => maximum.or(default),
            },
        };
        let mut config = Config::new();
        config.wasm_component_model(true).epoch_interruption(true).consume_fuel(maxima.fuel.is_some());
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(POOLED_INSTANCES)
            .total_stacks(POOLED_INSTANCES)
            .max_core_instances_per_component(MAX_CORE_INSTANCES_PER_COMPONENT)
            .max_memories_per_component(MAX_MEMORIES_PER_COMPONENT)
            .max_tables_per_component(MAX_TABLES_PER_COMPONENT)
            .total_core_instances(MAX_CORE_INSTANCES_PER_COMPONENT * POOLED_INSTANCES)
            .total_memories(MAX_MEMORIES_PER_COMPONENT * POOLED_INSTANCES)
            .total_tables(MAX_TABLES_PER_COMPONENT * POOLED_INSTANCES)
            .max_memory_size(maxima.memory_bytes)
            // A slot's pages that the call touched are reset in place (found by the PAGEMAP_SCAN ioctl,
            // Linux ≥ 6.7), up to these sizes, instead of by `madvise`: on a multi-core machine each
            // `madvise` flushes the TLB of every core running the process (an IPI each), which per request
            // (the rate limiter runs once per write) cost more than the plugin call itself.
            .pagemap_scan(Enabled::Auto)
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(KEEP_RESIDENT);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config).map_err(|e| PluginError::host("creating the wasmtime engine", e))?;
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_hash = format!("{:016x}", hasher.finish());
        let ticking = Arc::new(AtomicBool::new(true));
        let (ticker_engine, ticker_flag) = (engine.clone(), ticking.clone());
        std::thread::Builder::new()
            .name("strand-plugin-epoch".into())
            .spawn(move || {
                while ticker_flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    ticker_engine.increment_epoch();
                }
            })
            .map_err(|e| PluginError::host("starting the epoch thread", e))?;
        let admission = Admission::new(DEFAULT_TENANT_SHARE);
        Ok(Self { engine, limits, maxima, cache_dir, engine_hash, ticking, admission })
    }

    /// This runtime with at most `share` concurrent calls per tenant (`plugin_tenant_instances`).
    pub fn with_tenant_share(mut self, share: u32) -> Self {
        self.admission = Admission::new(share);
        self
    }

    /// The limits a version gets when it asks for none.
    pub fn limits(&self) -> PluginLimits {
        self.limits
    }

    /// The limits of a version that asked for `requested`: each unset one the default; refused above the
    /// platform maximum, so a tenant cannot buy itself more of the shared machine than the platform allows.
    pub fn limits_for(&self, requested: RequestedLimits) -> Result<PluginLimits, LimitRefused> {
        let check = |limit, requested: Option<u64>, default: u64, maximum: u64| match requested {
            None => Ok(default),
            Some(value) if value >= 1 && value <= maximum => Ok(value),
            Some(value) => Err(LimitRefused { limit, requested: value, maximum }),
        };
        let max_ms = u64::try_from(self.maxima.deadline.as_millis()).unwrap_or(u64::MAX);
        let default_ms = u64::try_from(self.limits.deadline.as_millis()).unwrap_or(u64::MAX);
        let deadline = check("deadline_ms", requested.deadline_ms, default_ms, max_ms)?;
        let memory = check(
            "memory_bytes",
            requested.memory_bytes,
            self.limits.memory_bytes as u64,
            self.maxima.memory_bytes as u64,
        )?;
        let fuel = match (requested.fuel, self.maxima.fuel) {
            (None, _) => self.limits.fuel,
            (Some(fuel), Some(maximum)) => Some(check("fuel", Some(fuel), 0, maximum)?),
            (Some(fuel), None) => return Err(LimitRefused { limit: "fuel", requested: fuel, maximum: 0 }),
        };
        Ok(PluginLimits { deadline: Duration::from_millis(deadline), memory_bytes: memory as usize, fuel })
    }

    /// `limits` for a call of `inputs` inputs: scaled up for batches beyond [`INPUTS_PER_LIMIT`], capped by
    /// the platform maxima.
    fn for_batch(&self, limits: PluginLimits, inputs: usize) -> PluginLimits {
        let factor = inputs.div_ceil(INPUTS_PER_LIMIT).max(1) as u32;
        PluginLimits {
            deadline: (limits.deadline * factor).min(self.maxima.deadline.max(limits.deadline)),
            fuel: limits.fuel.map(|fuel| {
                let scaled = fuel.saturating_mul(u64::from(factor));
                self.maxima.fuel.map_or(scaled, |maximum| scaled.min(maximum.max(fuel)))
            }),
            ..limits
        }
    }

    /// Compiles `wasm` (or loads it from the cache) and checks it against `kind`'s world.
    pub fn prepare(&self, kind: PluginKind, wasm: &[u8]) -> Result<PreparedPlugin, PluginError> {
        let component = self.compile(wasm)?;
        let mut linker = Linker::<PluginState>::new(&self.engine);
        add_log_to_linker::<PluginState, HasSelf<PluginState>>(&mut linker, |state| state)
            .map_err(|e| PluginError::host("linking the log import", e))?;
        // Also satisfies newer or older 0.2.x imports (semver); an import of anything else is refused here.
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| PluginError::host("linking WASI", e))?;
        let instance_pre = linker
            .instantiate_pre(&component)
            .map_err(|e| PluginError::WrongWorld { kind, detail: format!("{e:#}") })?;
        // A component exports today's interface or 0.1.0's bare function; the error names today's world.
        let wrong_world = |e: wasmtime::Error| PluginError::WrongWorld { kind, detail: format!("{e:#}") };
        Ok(match kind {
            PluginKind::RateLimiter => PreparedPlugin::RateLimiter(match RateLimiterPre::new(instance_pre.clone()) {
                Ok(pre) => Built::Current(pre),
                Err(e) => {
                    Built::V0_1(v0_1::rate_limiter::RateLimiterPre::new(instance_pre).map_err(|_| wrong_world(e))?)
                }
            }),
            PluginKind::Router => PreparedPlugin::Router(match RouterPre::new(instance_pre.clone()) {
                Ok(pre) => Built::Current(pre),
                Err(e) => Built::V0_1(v0_1::router::RouterPre::new(instance_pre).map_err(|_| wrong_world(e))?),
            }),
            PluginKind::Projector => PreparedPlugin::Projector(match ProjectorPre::new(instance_pre.clone()) {
                Ok(pre) => Built::Current(pre),
                Err(e) => Built::V0_1(v0_1::projector::ProjectorPre::new(instance_pre).map_err(|_| wrong_world(e))?),
            }),
        })
    }

    fn compile(&self, wasm: &[u8]) -> Result<Component, PluginError> {
        let not_a_component = |e: wasmtime::Error| PluginError::NotAComponent(format!("{e:#}"));
        let Some(dir) = &self.cache_dir else {
            return Component::new(&self.engine, wasm).map_err(not_a_component);
        };
        let path = dir.join(format!("{}-{}.cwasm", hex_sha256(wasm), self.engine_hash));
        if path.exists() {
            // SAFETY: the cache directory holds only what `serialize` below wrote for this engine build
            // (the file name carries the engine's compatibility hash, and wasmtime re-checks it).
            match unsafe { Component::deserialize_file(&self.engine, &path) } {
                Ok(component) => return Ok(component),
                Err(e) => tracing::warn!(path = %path.display(), error = %e, "unusable compiled plugin; recompiling"),
            }
        }
        let component = Component::new(&self.engine, wasm).map_err(not_a_component)?;
        if let Err(e) = self.store_compiled(&component, dir, &path) {
            // The cache only saves start-up time: a failure to write it is reported, not fatal.
            tracing::warn!(path = %path.display(), error = %e, "cannot cache compiled plugin");
        }
        Ok(component)
    }

    fn store_compiled(&self, component: &Component, dir: &PathBuf, path: &PathBuf) -> io::Result<()> {
        let bytes = component.serialize().map_err(|e| io::Error::other(format!("{e:#}")))?;
        fs::create_dir_all(dir)?;
        let temporary = path.with_extension(format!("tmp.{}", std::process::id()));
        fs::write(&temporary, bytes)?;
        fs::rename(&temporary, path)
    }

    /// Runs `call` of `inputs` inputs against a fresh instance in a fresh store limited by `limits` (a
    /// version's, scaled to the batch). The call runs in the caller's task, on a fiber that yields at every
    /// epoch tick (so a busy plugin shares its worker thread with other tasks) and traps once the deadline
    /// has passed.
    pub(super) async fn run<R>(
        &self,
        limits: PluginLimits,
        tenant: &str,
        inputs: usize,
        call: impl AsyncFnOnce(&mut Store<PluginState>) -> wasmtime::Result<R>,
    ) -> (Result<(R, CallCost), PluginError>, CallLog) {
        let limits = self.for_batch(limits, inputs);
        let _admitted = match self.admission.enter(tenant, limits.deadline).await {
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
        store.epoch_deadline_callback(move |_| {
            if Instant::now() >= deadline {
                Err(Trap::Interrupt.into())
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
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

impl Drop for PluginRuntime {
    fn drop(&mut self) {
        self.ticking.store(false, Ordering::Relaxed);
    }
}

/// The content address plugins are stored and cached under.
pub fn hex_sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}
