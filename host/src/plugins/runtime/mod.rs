//! One wasmtime `Engine` for every plugin of every tenant, and the sandbox each call runs in.
//!
//! A component is compiled once (cached on disk by its sha256 and the engine's compatibility hash),
//! type-checked once against its world (`*Pre`), then instantiated per batch from the pooling allocator, in
//! a fresh `Store` with the plugin limits: an epoch deadline (wall clock), a memory cap and optional fuel.
//! Calls are async: they run in the caller's task, on a fiber stack from the pool, with no hop to another
//! thread (the hop cost a write more than the policy call itself), yielding at every epoch tick — and
//! paused there while its tenant is past its share of the cores (`running_time.rs`). Whatever a
//! plugin does — loop, allocate, trap, return garbage — ends as a [`PluginError`] for that call.

mod admission;
mod compile_cache;
mod limits;
mod prepared;
mod running_time;
mod sandbox;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use self::admission::Admission;
pub use self::limits::{CallCost, LimitRefused, PluginLimits, RequestedLimits, DEFAULT_TENANT_SHARE, INPUTS_PER_LIMIT};
pub use self::prepared::{Built, PreparedPlugin, Since0_3};
use self::running_time::RunningTime;
pub use self::running_time::DEFAULT_TENANT_CPU_SHARE;
pub use self::sandbox::{Called, PluginState};
use super::bindings::relation_policy::RelationPolicyPre;
use super::bindings::relation_projector::RelationProjectorPre;
use super::bindings::{add_log_to_linker, v0_1, v0_2, v0_3};
use super::bindings::{projector::ProjectorPre, rate_limiter::RateLimiterPre, router::RouterPre};
use super::error::PluginError;
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
    running_time: Arc<RunningTime>,
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
        let running_time = Arc::new(RunningTime::new(DEFAULT_TENANT_CPU_SHARE));
        Ok(Self { engine, limits, maxima, cache_dir, engine_hash, ticking, admission, running_time })
    }

    /// This runtime with at most `share` concurrent calls per tenant (`plugin_tenant_instances`).
    pub fn with_tenant_share(mut self, share: u32) -> Self {
        self.admission = Admission::new(share);
        self
    }

    /// This runtime letting each tenant's plugins run at most `share` of the machine's cores
    /// (`plugin_tenant_cpu_share`).
    pub fn with_tenant_cpu_share(mut self, share: f64) -> Self {
        self.running_time = Arc::new(RunningTime::new(share));
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
        v0_3::add_log_to_linker::<PluginState, HasSelf<PluginState>>(&mut linker, |state| state)
            .map_err(|e| PluginError::host("linking the 0.3.0 log import", e))?;
        v0_2::add_log_to_linker::<PluginState, HasSelf<PluginState>>(&mut linker, |state| state)
            .map_err(|e| PluginError::host("linking the 0.2.0 log import", e))?;
        // Also satisfies newer or older 0.2.x imports (semver); an import of anything else is refused here.
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| PluginError::host("linking WASI", e))?;
        let instance_pre = linker
            .instantiate_pre(&component)
            .map_err(|e| PluginError::WrongWorld { kind, detail: format!("{e:#}") })?;
        let wrong_world = |e: wasmtime::Error| PluginError::WrongWorld { kind, detail: format!("{e:#}") };
        // Today's package first, then the older ones; the error names today's world.
        macro_rules! built {
            ($current:expr, $v0_3:expr, $v0_2:expr, $v0_1:expr) => {
                match $current(instance_pre.clone()) {
                    Ok(pre) => Built::Current(pre),
                    Err(e) => match $v0_3(instance_pre.clone()) {
                        Ok(pre) => Built::V0_3(pre),
                        Err(_) => match $v0_2(instance_pre.clone()) {
                            Ok(pre) => Built::V0_2(pre),
                            Err(_) => Built::V0_1($v0_1(instance_pre).map_err(|_| wrong_world(e))?),
                        },
                    },
                }
            };
        }
        macro_rules! since_0_3 {
            ($current:expr, $v0_3:expr) => {
                match $current(instance_pre.clone()) {
                    Ok(pre) => Ok(Since0_3::Current(pre)),
                    Err(e) => $v0_3(instance_pre.clone()).map(Since0_3::V0_3).map_err(|_| e),
                }
            };
        }
        Ok(match kind {
            PluginKind::RateLimiter => PreparedPlugin::RateLimiter(built!(
                RateLimiterPre::new,
                v0_3::rate_limiter::RateLimiterPre::new,
                v0_2::rate_limiter::RateLimiterPre::new,
                v0_1::rate_limiter::RateLimiterPre::new
            )),
            PluginKind::Router => PreparedPlugin::Router(built!(
                RouterPre::new,
                v0_3::router::RouterPre::new,
                v0_2::router::RouterPre::new,
                v0_1::router::RouterPre::new
            )),
            PluginKind::Projector => {
                match since_0_3!(RelationProjectorPre::new, v0_3::relation_projector::RelationProjectorPre::new) {
                    Ok(pre) => PreparedPlugin::RelationProjector(pre),
                    Err(_) => PreparedPlugin::Projector(built!(
                        ProjectorPre::new,
                        v0_3::projector::ProjectorPre::new,
                        v0_2::projector::ProjectorPre::new,
                        v0_1::projector::ProjectorPre::new
                    )),
                }
            }
            PluginKind::RelationPolicy => PreparedPlugin::RelationPolicy(
                since_0_3!(RelationPolicyPre::new, v0_3::relation_policy::RelationPolicyPre::new)
                    .map_err(wrong_world)?,
            ),
        })
    }
}

impl Drop for PluginRuntime {
    fn drop(&mut self) {
        self.ticking.store(false, Ordering::Relaxed);
    }
}
