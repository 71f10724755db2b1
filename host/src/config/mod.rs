//! One typed configuration, read from `config.toml` and overridden by `STRAND_<KEY>` environment variables.
//!
//! The file may group related keys in sections (see [`SECTIONS`]): `[kafka] brokers = …` is the key
//! `kafka_brokers`, overridden by `STRAND_KAFKA_BROKERS`; `[relay] mode` is the key `relay`. Each key is
//! set once, flat or in its section.
//!
//! Every key is optional: with nothing configured Strand runs on the embedded default (an SQLite file in the
//! working directory and a development JWT secret kept beside it), so a newcomer's first command serves.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::providers::{Format, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

pub use self::checks::{ConfigError, MIN_SECRET_BYTES};
pub use self::sources::SECTIONS;
use self::sources::{Sectioned, StrandEnv};

use crate::cache::Quota;

mod checks;
mod sources;

/// The database the embedded default uses: a file in the working directory, created when missing.
pub const EMBEDDED_DATABASE_URL: &str = "sqlite://strand.db?mode=rwc";

/// Strand's configuration. The doc comment of each field is the user's reference: `docs/reference/
/// configuration.md` is generated from them and from the defaults (serialised, hence `Serialize`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address the HTTP API listens on.
    pub listen: SocketAddr,
    /// `sqlite://FILE` (embedded default) or `mysql://user:pass@host:port/db` (MySQL ≥ 8, MariaDB ≥ 10.6).
    pub database_url: String,
    /// Upper bound of pooled database connections.
    pub database_max_connections: u32,
    /// Whether `serve`, `relay` and `worker` apply pending migrations at start (the embedded default's first
    /// command serves). Off: they only check that this release can run on the schema they find, and a
    /// deployment migrates by one explicit step, `strand migrate`, before rolling a release out.
    pub migrate_on_start: bool,
    /// HS256 secret for verifying (and, in development, minting) JWTs.
    pub jwt_hs256_secret: Option<String>,
    /// PEM file with an RSA (RS256) or EC P-256 (ES256) public key for verifying JWTs.
    pub jwt_public_key_file: Option<PathBuf>,
    /// When set, tokens must carry this `iss`.
    pub jwt_issuer: Option<String>,
    /// When set, tokens must carry this `aud`.
    pub jwt_audience: Option<String>,
    /// Tenant of tokens that carry no `tenant` claim.
    pub default_tenant: String,
    /// Requests with a larger body are refused with 413.
    pub max_body_bytes: usize,
    /// Where the development JWT secret is kept when no key is configured (embedded SQLite only).
    pub dev_key_file: PathBuf,
    /// `redis://HOST:PORT` for token buckets and projector data, or several comma-separated seeds of a Redis
    /// Cluster; unset: in-process buckets and cache.
    pub redis_url: Option<String>,
    /// Bearer token of the admin API (`/admin/v1/…`); unset: the admin API is disabled.
    pub admin_token: Option<String>,
    /// The CLI's credential for the admin API when it acts for one tenant's team: a tenant key (`stk_…`),
    /// sent instead of `admin_token`. The server does not read it.
    pub tenant_key: Option<String>,
    /// Directory for compiled plugin code, reused across restarts; must be trusted (it is loaded as code).
    pub plugin_cache_dir: Option<PathBuf>,
    /// Wall-clock limit of one plugin call, in milliseconds.
    pub plugin_deadline_ms: u64,
    /// Linear-memory limit of one plugin instance, in bytes.
    pub plugin_memory_bytes: usize,
    /// Fuel (about one unit per wasm instruction) per plugin call; 0 turns metering off.
    pub plugin_fuel: u64,
    /// Platform maxima a version may be deployed with (`?deadline_ms=&memory_bytes=&fuel=`): a tenant
    /// cannot ask for more. The pool reserves address space for `plugin_max_memory_bytes` per instance.
    pub plugin_max_deadline_ms: u64,
    pub plugin_max_memory_bytes: usize,
    /// 0: no fuel metering at all (then versions cannot ask for fuel either).
    pub plugin_max_fuel: u64,
    /// Plugin calls one tenant may have in flight at once, of the node's 256 instance slots: a tenant's
    /// plugins that spin to their deadline hold at most this many; its further calls wait (within their
    /// deadline), then fail by its own kind's failure policy (`busy`), never another tenant's.
    pub plugin_tenant_instances: u32,
    /// Of the node's cores, the share one tenant's plugins may keep busy (all its calls of every kind
    /// together, once past a 200 ms burst): a tenant whose plugins spin is paused, so the host's pipeline
    /// and the other tenants always find a core.
    pub plugin_tenant_cpu_share: f64,
    /// How long an uploaded component may take to compile, in milliseconds; slower ones are refused
    /// (`422 compile_too_slow`). Compiles run outside the registry's lock, one per tenant at a time.
    pub plugin_compile_budget_ms: u64,
    /// Projector names one tenant may have deployed: each is a worker and a consumer group reading the
    /// whole events topic on every worker node.
    pub plugin_max_projectors: usize,
    /// A canary is rolled back automatically when, over a window of `rollout_window_ms` with at least
    /// `rollout_min_calls` canary calls, its failure rate exceeds the stable version's by more than this.
    pub rollout_max_excess_failure_rate: f64,
    pub rollout_min_calls: u64,
    pub rollout_window_ms: u64,
    /// Largest plugin upload accepted by the admin API, in bytes (JavaScript and Python components are
    /// several MiB to tens of MiB).
    pub max_plugin_bytes: usize,
    /// How often, in milliseconds, a node re-reads deployed plugins and tenant settings, so changes made
    /// through another node's admin API take effect here too.
    pub refresh_ms: u64,
    /// The most edges an account job (deletion, suspension, restore, move) changes per transaction beside live
    /// writes (the runner takes fewer when a batch would add more to their p99 than it may: half their quiet
    /// p99, at least 5 ms; four times as many while its node has served no live write for a 4 s window): a
    /// live write that meets a batch waits about as long as it runs.
    pub account_job_batch: u32,
    /// The most share of its node's time an account job works, above 0 and at most 1: after a batch that
    /// took `t` it rests `t·(1/share − 1)`, the share chosen by the runner within this as the live writes'
    /// latency allows (`accounts/pace.rs`), so a celebrity's deletion leaves room for the tenant's live writes
    /// and for the projections that follow the job's events.
    pub account_job_share: f64,
    /// The most account jobs one tenant runs at once: a tenant cannot fill every node's runner with its own.
    pub account_jobs_per_tenant: u32,
    /// How the outbox reaches the bus: `binlog` (follow the MySQL/MariaDB binlog), `poll` (read, publish
    /// and delete outbox rows; any database) or `off` (run `strand relay` elsewhere). `strand serve` runs
    /// the relay in-process unless it is `off`.
    pub relay: RelayMode,
    /// The replica server id the binlog relay registers with; unique among the server's replicas. Every
    /// relay of one database may share it (only the lock holder streams).
    pub relay_server_id: u32,
    /// Whether `strand serve` also runs the projection workers in-process (else run `strand worker`).
    pub workers: bool,
    /// A stable, unique name for this worker process among the deployment's workers (e.g. the pod name of a
    /// StatefulSet): Kafka static group membership, so a restarted worker takes its partitions back at once.
    /// Unset: dynamic membership (a restart waits for the old member's session to time out).
    pub worker_id: Option<String>,
    /// Where every command serves `/healthz` and `/metrics` without a token (unset: `strand serve` has
    /// `/metrics` on `listen` for the admin token only; `relay` and `worker` serve nothing).
    pub operations_listen: Option<SocketAddr>,
    /// Prefix of every topic Strand publishes to: the default route of a follow is `{prefix}following`.
    pub topic_prefix: String,
    /// Plugin versions kept per slot besides the live ones (rollback targets); older ones are deleted.
    pub retention_plugin_versions: u32,
    /// Days the audit log is kept.
    pub retention_audit_days: u64,
    /// Hours the embedded bus keeps a message (each topic's newest is always kept).
    pub retention_bus_hours: u64,
    /// How long finished (done or failed) account jobs are kept, in days.
    pub retention_account_job_days: u64,
    /// How long one tenant's events of a batch may take through a projector, in milliseconds; past it (or
    /// when its plugin fails on them, or its space is being built) they are parked and retried beside the
    /// worker, so no tenant's projector holds the others' events back.
    pub projection_tenant_budget_ms: u64,
    /// Quota of each tenant's space of a deployed projector version, in the cache every tenant shares: data
    /// keys, bytes (of keys, values and members), and members of one sorted set. A space at its quota takes
    /// no more: the tenant's events are parked, then dead-lettered (`GET /admin/v1/tenants/{t}/parked` says
    /// why). Bundled projectors' spaces are not limited.
    pub projection_space_keys: u64,
    pub projection_space_bytes: u64,
    pub projection_set_members: u64,
    /// How long the relay waits before polling again once the outbox is empty, in milliseconds.
    pub relay_idle_ms: u64,
    /// How long one tenant's routers may take for its rows of one relay batch, in milliseconds; past it
    /// that tenant's rows are parked and retried beside the relay, so no tenant's router caps the others'.
    pub relay_tenant_budget_ms: u64,
    /// `host:port[,host:port…]` of the Kafka cluster; unset: the embedded bus in the database.
    pub kafka_brokers: Option<String>,
    /// Partitions of topics the relay creates.
    pub kafka_partitions: i32,
    /// Replication factor of topics the relay creates.
    pub kafka_replication: i32,
    /// librdkafka properties for every Kafka client (e.g. `security.protocol`, `sasl.mechanism`,
    /// `ssl.ca.location`); a value `env:NAME` is read from the environment variable `NAME`.
    pub kafka_options: std::collections::BTreeMap<String, String>,
    /// Where traces are exported over OTLP/HTTP (a collector's base URL, e.g. `http://otel-collector:4318`);
    /// unset: no traces, at no cost.
    pub tracing_otlp_endpoint: Option<String>,
    /// The share of new traces kept (0 to 1); a request continuing a caller's trace keeps its decision.
    pub tracing_sample_ratio: f64,
    /// The most traces a process keeps per second that begin in it or continue another process's: a
    /// caller's sampled `traceparent` cannot turn the ratio into every request.
    pub tracing_max_traces_per_second: u32,
    /// The service name traces carry, with the process's role appended (`strand-serve`, `strand-relay`…).
    pub tracing_service_name: String,
}

/// How the outbox reaches the bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RelayMode {
    Binlog,
    Poll,
    Off,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            database_url: EMBEDDED_DATABASE_URL.to_owned(),
            database_max_connections: 16,
            migrate_on_start: true,
            jwt_hs256_secret: None,
            jwt_public_key_file: None,
            jwt_issuer: None,
            jwt_audience: None,
            default_tenant: "default".to_owned(),
            max_body_bytes: 64 * 1024,
            dev_key_file: PathBuf::from("strand-dev.key"),
            redis_url: None,
            admin_token: None,
            tenant_key: None,
            plugin_cache_dir: Some(PathBuf::from("strand-plugin-cache")),
            plugin_deadline_ms: 50,
            plugin_memory_bytes: 16 << 20,
            plugin_fuel: 50_000_000,
            plugin_max_deadline_ms: 2_000,
            plugin_max_memory_bytes: 256 << 20,
            plugin_max_fuel: 5_000_000_000,
            plugin_tenant_instances: crate::plugins::DEFAULT_TENANT_SHARE,
            plugin_tenant_cpu_share: crate::plugins::DEFAULT_TENANT_CPU_SHARE,
            plugin_compile_budget_ms: crate::plugins::DEFAULT_COMPILE_BUDGET.as_millis() as u64,
            plugin_max_projectors: crate::plugins::DEFAULT_MAX_PROJECTORS,
            rollout_max_excess_failure_rate: 0.05,
            rollout_min_calls: 20,
            rollout_window_ms: 60_000,
            max_plugin_bytes: 64 << 20,
            refresh_ms: 2000,
            account_job_batch: 500,
            account_job_share: 1.0,
            account_jobs_per_tenant: 4,
            relay: RelayMode::Poll,
            relay_server_id: 424_242,
            workers: true,
            operations_listen: None,
            worker_id: None,
            topic_prefix: "strand.".to_owned(),
            relay_idle_ms: 100,
            projection_tenant_budget_ms: crate::projection::DEFAULT_TENANT_BUDGET.as_millis() as u64,
            projection_space_keys: Quota::default().keys,
            projection_space_bytes: Quota::default().bytes,
            projection_set_members: Quota::default().members,
            retention_plugin_versions: 10,
            retention_audit_days: 365,
            retention_bus_hours: 7 * 24,
            retention_account_job_days: 30,
            relay_tenant_budget_ms: crate::relay::DEFAULT_ROUTER_BUDGET.as_millis() as u64,
            kafka_brokers: None,
            kafka_partitions: 3,
            kafka_replication: 1,
            kafka_options: Default::default(),
            tracing_otlp_endpoint: None,
            tracing_sample_ratio: 0.01,
            tracing_max_traces_per_second: 100,
            tracing_service_name: "strand".to_owned(),
        }
    }
}

impl Config {
    /// Loads `file` (skipped when absent) and then `STRAND_*` variables, which win.
    pub fn load(file: &Path) -> Result<Self, ConfigError> {
        Figment::new()
            .merge(Sectioned(Toml::file(file)))
            .merge(StrandEnv)
            .extract_lossy::<Self>()
            .map_err(|e| ConfigError::Parse(Box::new(e)))
            .and_then(|config| config.check_secrets().map(|()| config))
            .and_then(|config| config.check_shares().map(|()| config))
    }

    /// How often a node re-reads plugins and tenant settings (and looks for new projectors); at least 100 ms.
    pub fn refresh_every(&self) -> Duration {
        Duration::from_millis(self.refresh_ms.max(100))
    }

    /// The sandbox a plugin version runs in unless it was deployed with limits of its own.
    pub fn plugin_limits(&self) -> crate::plugins::PluginLimits {
        crate::plugins::PluginLimits {
            deadline: std::time::Duration::from_millis(self.plugin_deadline_ms),
            memory_bytes: self.plugin_memory_bytes,
            fuel: (self.plugin_fuel > 0).then_some(self.plugin_fuel),
        }
    }

    /// When a canary is rolled back by the host.
    pub fn rollback_policy(&self) -> crate::plugins::rollout::RollbackPolicy {
        crate::plugins::rollout::RollbackPolicy {
            max_excess_failure_rate: self.rollout_max_excess_failure_rate,
            min_calls: self.rollout_min_calls,
            window: std::time::Duration::from_millis(self.rollout_window_ms),
        }
    }

    /// The quota of each tenant's space of a deployed projector version.
    pub fn projector_quota(&self) -> Quota {
        Quota {
            keys: self.projection_space_keys,
            bytes: self.projection_space_bytes,
            members: self.projection_set_members,
        }
    }

    /// The most any version may be deployed with.
    pub fn plugin_maxima(&self) -> crate::plugins::PluginLimits {
        crate::plugins::PluginLimits {
            deadline: std::time::Duration::from_millis(self.plugin_max_deadline_ms),
            memory_bytes: self.plugin_max_memory_bytes,
            fuel: (self.plugin_max_fuel > 0).then_some(self.plugin_max_fuel),
        }
    }

    /// The Kafka cluster every client of this process uses, if one is configured.
    pub fn kafka(&self) -> Result<Option<crate::bus::KafkaConnection>, crate::bus::KafkaOptionsError> {
        self.kafka_brokers
            .as_deref()
            .map(|brokers| crate::bus::KafkaConnection::new(brokers, &self.kafka_options))
            .transpose()
    }

    /// Where and how much this process exports traces (`[tracing]`).
    pub fn trace_export(&self) -> crate::ops::telemetry::TraceExport {
        crate::ops::telemetry::TraceExport {
            endpoint: self.tracing_otlp_endpoint.clone(),
            sample_ratio: self.tracing_sample_ratio,
            max_traces_per_second: self.tracing_max_traces_per_second,
            service_name: self.tracing_service_name.clone(),
        }
    }

    /// What the host keeps of the past (`[retention]`).
    pub fn retention(&self) -> crate::upkeep::retention::Retention {
        crate::upkeep::retention::Retention {
            plugin_versions: self.retention_plugin_versions,
            audit: Duration::from_secs(self.retention_audit_days.saturating_mul(86_400)),
            bus: Duration::from_secs(self.retention_bus_hours.saturating_mul(3600)),
            account_jobs: Duration::from_secs(self.retention_account_job_days.saturating_mul(86_400)),
        }
    }

    /// True when the database is the embedded SQLite file rather than a server.
    pub fn is_embedded(&self) -> bool {
        self.database_url.starts_with("sqlite:")
    }
}

#[cfg(test)]
// figment's `Jail` fixes the closure's error type; its size is not ours to choose.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;

    #[test]
    fn env_overrides_file_and_numeric_strings_stay_strings() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("strand.toml", "listen = \"127.0.0.1:9000\"\ndefault_tenant = \"acme\"")?;
            jail.set_env("STRAND_LISTEN", "127.0.0.1:9100");
            jail.set_env("STRAND_JWT_HS256_SECRET", "12345678901234567890123456789012");
            jail.set_env("STRAND_MAX_BODY_BYTES", "1024");
            let config = Config::load(Path::new("strand.toml")).expect("config loads");
            assert_eq!(config.listen.port(), 9100);
            assert_eq!(config.default_tenant, "acme");
            assert_eq!(config.jwt_hs256_secret.as_deref(), Some("12345678901234567890123456789012"));
            assert_eq!(config.max_body_bytes, 1024);
            Ok(())
        });
    }

    #[test]
    fn a_job_share_outside_zero_to_one_is_refused_by_name() {
        for share in ["0", "1.5", "-1"] {
            figment::Jail::expect_with(|jail| {
                jail.set_env("STRAND_ACCOUNT_JOB_SHARE", share);
                let refused = Config::load(Path::new("missing.toml")).expect_err(share);
                assert!(refused.to_string().contains("`account_job_share`"), "{refused}");
                Ok(())
            });
        }
    }

    #[test]
    fn nothing_configured_is_the_embedded_default() {
        figment::Jail::expect_with(|_| {
            let config = Config::load(Path::new("missing.toml")).expect("config loads");
            assert!(config.is_embedded());
            assert_eq!(config.listen.port(), 8080);
            Ok(())
        });
    }

    #[test]
    fn every_key_the_shipped_config_toml_documents_is_known_and_parses() {
        let is_key = |key: &str| key.chars().all(|c| c.is_ascii_lowercase() || c == '_');
        // `# key = value` lines, and the `# [section]` headers they belong to.
        let documented: Vec<&str> = include_str!("../../../config.toml")
            .lines()
            .filter_map(|line| line.strip_prefix("# "))
            .filter(|line| {
                line.split_once(" = ").is_some_and(|(key, _)| is_key(key))
                    || line.strip_prefix('[').and_then(|l| l.strip_suffix(']')).is_some_and(|s| SECTIONS.contains(&s))
            })
            .map(|line| line.split("  #").next().unwrap_or(line))
            .collect();
        assert!(documented.len() >= 15, "found only {documented:?}");
        figment::Jail::expect_with(|jail| {
            jail.create_file("strand.toml", &documented.join("\n"))?;
            let config = Config::load(Path::new("strand.toml")).expect("every documented key loads");
            assert_eq!(config.admin_token.as_deref(), Some("change-me-to-32-or-more-random-bytes"));
            Ok(())
        });
    }

    #[test]
    fn kafka_options_are_a_table_of_librdkafka_properties() {
        figment::Jail::expect_with(|jail| {
            let file = "kafka_brokers = \"k:9093\"\n[kafka_options]\n\"security.protocol\" = \"SASL_SSL\"\n";
            jail.create_file("strand.toml", file)?;
            let config = Config::load(Path::new("strand.toml")).expect("config loads");
            assert_eq!(config.kafka_options.get("security.protocol").map(String::as_str), Some("SASL_SSL"));
            let connection = config.kafka().expect("resolved").expect("configured");
            assert_eq!(connection.client_config().get("security.protocol"), Some("SASL_SSL"));
            Ok(())
        });
    }

    #[test]
    fn sections_stand_for_their_flat_keys_and_env_still_overrides() {
        figment::Jail::expect_with(|jail| {
            let file = "listen = \"127.0.0.1:9000\"\n[relay]\nmode = \"off\"\nidle_ms = 7\n\
                        [kafka]\nbrokers = \"k:9093\"\npartitions = 6\n[kafka.options]\n\"security.protocol\" = \"SSL\"\n";
            jail.create_file("strand.toml", file)?;
            jail.set_env("STRAND_KAFKA_PARTITIONS", "12");
            let config = Config::load(Path::new("strand.toml")).expect("config loads");
            assert_eq!((config.relay, config.relay_idle_ms), (RelayMode::Off, 7));
            assert_eq!(config.kafka_brokers.as_deref(), Some("k:9093"));
            assert_eq!(config.kafka_partitions, 12, "the environment wins over a section");
            assert_eq!(config.kafka_options.get("security.protocol").map(String::as_str), Some("SSL"));
            Ok(())
        });
    }

    #[test]
    fn a_key_set_flat_and_in_its_section_is_refused_by_name() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("strand.toml", "kafka_brokers = \"a:1\"\n[kafka]\nbrokers = \"b:2\"\n")?;
            let error = Config::load(Path::new("strand.toml")).expect_err("refused").to_string();
            assert!(error.contains("kafka_brokers"), "{error}");
            Ok(())
        });
    }

    #[test]
    fn empty_or_short_secrets_are_refused_by_name() {
        for (variable, value, expected) in [
            ("STRAND_ADMIN_TOKEN", "", "`admin_token` (STRAND_ADMIN_TOKEN) is set but empty"),
            ("STRAND_ADMIN_TOKEN", "change-me", "`admin_token` (STRAND_ADMIN_TOKEN) is only 9 bytes long"),
            ("STRAND_JWT_HS256_SECRET", "", "`jwt_hs256_secret` (STRAND_JWT_HS256_SECRET) is set but empty"),
            ("STRAND_JWT_HS256_SECRET", "short", "`jwt_hs256_secret` (STRAND_JWT_HS256_SECRET) is only 5 bytes"),
        ] {
            figment::Jail::expect_with(|jail| {
                jail.set_env(variable, value);
                let error = Config::load(Path::new("missing.toml")).expect_err("refused").to_string();
                assert!(error.contains(expected), "{variable}={value:?}: {error}");
                Ok(())
            });
        }
        let long_enough = Config { admin_token: Some("x".repeat(MIN_SECRET_BYTES)), ..Config::default() };
        assert!(long_enough.check_secrets().is_ok());
    }

    #[test]
    fn unknown_keys_are_rejected() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("strand.toml", "databse_url = \"mysql://x\"")?;
            assert!(Config::load(Path::new("strand.toml")).is_err());
            Ok(())
        });
    }
}
