//! The `strand` command: serve the API, migrate the database, mint a development token, build, test and
//! deploy plugins.

mod account;
mod build;
mod import;
mod plugin;
mod progress_bar;
mod replay;
mod scaffold;
mod tenant;

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::{Parser, Subcommand};
use strand::api::{hs256_secret, mint_hs256, MintClaims};
use strand::app::{migrate, run_rebuild, run_reconcile, run_relay, run_workers, Server};
use strand::config::{Config, RelayMode};
use strand::db::SchemaState;
use strand::graph::{TenantId, UserId};

#[derive(Parser)]
#[command(name = "strand", version, about = "The follow graph as a service")]
struct Cli {
    /// Configuration file; `STRAND_<KEY>` environment variables override it. A missing file is fine.
    #[arg(long, env = "STRAND_CONFIG", default_value = "config.toml", global = true)]
    config: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (the embedded SQLite default when nothing is configured).
    Serve,
    /// Bring the database's schema up to this release, once per release before its nodes roll out (with
    /// `migrate_on_start = false` on the nodes): the previous release keeps running on the result.
    Migrate,
    /// Print a signed HS256 token for development and tests, using the secret `serve` uses.
    Token {
        /// The caller's user id.
        #[arg(long)]
        sub: UserId,
        /// The caller's tenant (defaults to `default_tenant`).
        #[arg(long)]
        tenant: Option<TenantId>,
        /// Lifetime in seconds.
        #[arg(long, default_value_t = 3600)]
        ttl: u64,
    },
    /// Run the CDC relay alone (outbox → router plugin → bus), e.g. with `relay = "off"` on the API nodes.
    Relay {
        /// `binlog` or `poll`; defaults to the configured `relay` (`poll` where that is `off`).
        #[arg(long)]
        mode: Option<RelayMode>,
        /// Drop the binlog checkpoint first: the recovery when its binlog file was purged. Lossless: the
        /// outbox is published, then the binlog is followed from its end.
        #[arg(long)]
        reset_checkpoint: bool,
    },
    /// Run the projection workers alone (bus → follower table), e.g. with `workers = false` on API nodes.
    Worker,
    /// Derive a projection again from the truth: `follower`, or a projector plugin's name (needs
    /// redis_url). Workers may keep running: a space's events wait while it is built.
    Rebuild { projection: String },
    /// Compare the truth with the follower table, the counters and a sample of list caches; exits 1 with a
    /// report when they differ.
    Reconcile {
        /// How many users' list caches to compare (an even sample).
        #[arg(long, default_value_t = 100)]
        sample_lists: usize,
    },
    /// Build, test, deploy, list and roll back WASM plugins.
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Tenant keys: the credentials of a tenant's team for the admin API.
    #[command(subcommand)]
    Tenant(tenant::TenantCommand),
    /// Delete (erase), suspend, restore or move an account: a background job on the serving nodes.
    #[command(subcommand)]
    Account(account::AccountCommand),
    /// Import a graph into a tenant (an NDJSON or CSV file, or the seed system's MySQL table): edges that
    /// hold are kept, blocks and private accounts respected; the tenant's projections are built again.
    Import(import::ImportArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let config = Config::load(&cli.config)?;
    let telemetry = strand::ops::telemetry::install(&config.trace_export(), cli.command.role())?;
    let result = run(cli.command, config).await;
    telemetry.shutdown();
    result
}

impl Command {
    /// The process's role, as its traces name it.
    fn role(&self) -> &'static str {
        match self {
            Command::Serve => "serve",
            Command::Relay { .. } => "relay",
            Command::Worker => "worker",
            _ => "cli",
        }
    }
}

async fn run(command: Command, config: Config) -> anyhow::Result<()> {
    match command {
        Command::Serve => {
            let server = Server::build(&config).await?;
            server.run_until(shutdown_signal()).await.context("serving HTTP")?;
        }
        Command::Migrate => match migrate(&config).await? {
            SchemaState::Current => println!("the schema is up to date with this release"),
            SchemaState::NewerCompatible { found } => {
                println!("the schema is newer (migration {found}) and runs with this release: nothing to do")
            }
        },
        Command::Token { sub, tenant, ttl } => {
            let secret = hs256_secret(&config)?;
            let expires = SystemTime::now() + Duration::from_secs(ttl);
            let claims = MintClaims {
                sub: sub.to_string(),
                tenant: tenant.map_or_else(|| config.default_tenant.clone(), |t| t.to_string()),
                exp: expires.duration_since(UNIX_EPOCH)?.as_secs(),
                iss: config.jwt_issuer.clone(),
                aud: config.jwt_audience.clone(),
            };
            println!("{}", mint_hs256(&secret, &claims));
        }
        Command::Relay { mode, reset_checkpoint } => {
            let mut config = config;
            config.relay = match (mode, config.relay) {
                (Some(mode), _) => mode,
                (None, RelayMode::Off) => RelayMode::Poll,
                (None, configured) => configured,
            };
            run_relay(&config, reset_checkpoint, shutdown_signal()).await?
        }
        Command::Worker => run_workers(&config, shutdown_signal()).await?,
        Command::Rebuild { projection } => {
            let done = run_rebuild(&config, &projection, progress_bar::draw).await?;
            eprintln!();
            println!("rebuilt {projection}: {done} pairs");
        }
        Command::Reconcile { sample_lists } => {
            let report = run_reconcile(&config, sample_lists).await?;
            print!("{report}");
            if !report.is_clean() {
                std::process::exit(1);
            }
        }
        Command::Plugin(command) => plugin::run(command, &config).await?,
        Command::Tenant(command) => tenant::run(command, &config).await?,
        Command::Account(command) => account::run(command, &config).await?,
        Command::Import(args) => import::run(args, &config).await?,
    }
    Ok(())
}

/// Completes on Ctrl-C or SIGTERM, so the server drains in-flight requests before exiting.
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the server");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        result = tokio::signal::ctrl_c() => {
            if let Err(e) = result {
                tracing::error!(error = %e, "cannot listen for Ctrl-C");
                std::future::pending::<()>().await;
            }
        }
        () = terminate => {}
    }
    tracing::info!("shutting down: draining in-flight requests");
}
