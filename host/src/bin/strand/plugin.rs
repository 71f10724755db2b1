//! `strand plugin …`: the plugin author's loop — build, test locally, deploy (at once, as a canary or as a
//! shadow), compare a shadow with the active version, promote or abort, list, roll back.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{progress_bar, scaffold};
use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use serde::de::DeserializeOwned;
use serde::Serialize;
use strand::api::admin::{DeployResponse, PluginList, ProjectionList, RollbackRequest};
use strand::api::Problem;
use strand::bus::Topology;
use strand::config::Config;
use strand::plugins::logs::{level_name, LogEntry, LogPage};
use strand::plugins::{
    sample_attempts, sample_events_for, sample_outbox_events, sample_requests, sample_tenant, CallCost, Called,
    PluginKind, PluginRuntime, PreparedPlugin, MAX_LINES_PER_CALL,
};
use strand::plugins::{LogLine, PluginVersion};
use strand::projection::progress::BackfillState;
use strand::projection::spaces::SpaceDiff;

#[derive(Subcommand)]
pub enum PluginCommand {
    /// Create a plugin project in DIR/NAME, outside any Strand checkout: a working example of the kind, its
    /// unit test, and the SDK and WIT this binary runs (pinned). Then `strand plugin build` in it.
    New {
        name: String,
        /// rate-limiter, router, projector or relation-policy.
        #[arg(long)]
        kind: PluginKind,
        /// The directory to create the project in.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// rust (any kind), js (rate-limiter) or python (projector).
        #[arg(long, value_enum, default_value = "rust")]
        lang: scaffold::Lang,
        /// A relation projector (Rust): its projection sees blocks, mutes, follow requests and who is muted
        /// or blocked, not only follows. Deployed as a projector all the same.
        #[arg(long)]
        relations: bool,
    },
    /// Write the WIT package (`strand.wit`) into DIR, for wit-bindgen, jco or componentize-py.
    Wit {
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Build the plugin crate in DIR as a WASM component (installs the wasm32-wasip2 target if missing).
    Build {
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Run a component locally, within the configured limits, and print its output and cost.
    Test {
        /// rate-limiter, router, projector or relation-policy.
        #[arg(long)]
        kind: PluginKind,
        /// JSON array of inputs for the kind's world (one example per kind: docs/reference/
        /// plugin-input-KIND.json); the conformance samples when omitted.
        #[arg(long, conflicts_with = "replay")]
        input: Option<PathBuf>,
        /// Run the component beside the tenant's active version (or the bundled one) on the tenant's
        /// recent real inputs, read from the configured database, and print where their outputs differ
        /// and what both cost.
        #[arg(long, requires = "tenant")]
        replay: bool,
        #[arg(long)]
        tenant: Option<String>,
        /// The plugin's name (`default` for rate-limiter, router and relation-policy).
        #[arg(long, default_value = "default")]
        name: String,
        /// How many of the tenant's most recent changes to replay.
        #[arg(long, default_value_t = 1000)]
        last: u32,
        wasm: PathBuf,
    },
    /// Upload a component as the next version of a tenant's plugin and make it active; for a projector,
    /// then follow the build of its data from the truth with a progress bar.
    Deploy {
        #[command(flatten)]
        slot: SlotArgs,
        wasm: PathBuf,
        /// This version's wall-clock limit per call, in milliseconds (default: `plugin_deadline_ms`).
        #[arg(long)]
        deadline_ms: Option<u64>,
        /// This version's memory limit, in bytes (default: `plugin_memory_bytes`).
        #[arg(long)]
        memory_bytes: Option<u64>,
        /// This version's fuel per call (default: `plugin_fuel`).
        #[arg(long)]
        fuel: Option<u64>,
        /// Deploy a rate limiter, router or relation policy as a canary for this percent (0-99) of the
        /// users or message keys, beside the active version; then `promote` or `abort`.
        #[arg(long, conflicts_with = "shadow")]
        canary: Option<u8>,
        /// Deploy a projector as a shadow: built from the truth and fed every event in a space of its own,
        /// serving no reads; then `diff`, and `promote` (reads switch without a rebuild) or `abort`.
        #[arg(long)]
        shadow: bool,
        /// A projector's spaces the API serves at `/v1/projections/{name}/{space}/{ids}`, as
        /// `shape:space[,…]` (shapes: counter, sorted-set, value), e.g. `counter:friends,sorted-set:friends`.
        #[arg(long)]
        readable: Option<String>,
        /// A projector whose spaces depend on the events' history, not only the truth's current state (a
        /// counter of followers gained): replayed from the embedded bus's log while it is whole, else
        /// counted from the build on — never built from the truth.
        #[arg(long)]
        history: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// List a tenant's plugin versions.
    List {
        #[arg(long)]
        tenant: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Make a kept version active again (a projector's data is then built again, followed like a deploy).
    Rollback {
        #[command(flatten)]
        slot: SlotArgs,
        #[arg(long)]
        version: i64,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Compare a projector's running shadow with its active version: keys per kind, keys in one only, and
    /// the values of a sample of keys.
    Diff {
        #[command(flatten)]
        slot: SlotArgs,
        /// How many keys present in both to compare the values of.
        #[arg(long, default_value_t = 100)]
        sample: usize,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Make the running canary or shadow the active version, for all of the traffic.
    Promote {
        #[command(flatten)]
        slot: SlotArgs,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Stop the running canary or shadow: all of the traffic to the active version again.
    Abort {
        #[command(flatten)]
        slot: SlotArgs,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Print what a plugin logged (every version's; traps with their wasm backtrace), oldest first; the
    /// plugin's text is escaped, so it cannot drive the terminal.
    Logs {
        #[command(flatten)]
        slot: SlotArgs,
        /// How many of the newest lines to print first.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Keep printing new lines as they are kept (until interrupted).
        #[arg(long)]
        follow: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

#[derive(Args)]
pub struct SlotArgs {
    #[arg(long)]
    tenant: String,
    /// rate-limiter, router, projector or relation-policy.
    #[arg(long)]
    kind: PluginKind,
    /// `default` for rate-limiter, router and relation-policy; the projection's name for a projector.
    #[arg(long, default_value = "default")]
    name: String,
}

#[derive(Args)]
pub struct AdminArgs {
    /// Base URL of a running Strand; defaults to the configured `listen` address.
    #[arg(long)]
    server: Option<String>,
    /// Return once the version is active, without following a projector's build.
    #[arg(long)]
    no_wait: bool,
}

/// How long a deploy waits for a worker to start building a projector version before giving up.
const BUILD_START_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a deploy checks the build's progress.
const BUILD_POLL: Duration = Duration::from_millis(250);

pub async fn run(command: PluginCommand, config: &Config) -> anyhow::Result<()> {
    match command {
        PluginCommand::New { name, kind, dir, lang, relations } => {
            let root = scaffold::new_project(&dir, &name, kind, lang, relations)?;
            println!("{}", root.display());
            eprintln!("created; `strand plugin build {}` builds the component", root.display());
            Ok(())
        }
        PluginCommand::Wit { dir } => {
            println!("{}", scaffold::write_wit(&dir)?.display());
            Ok(())
        }
        PluginCommand::Build { dir } => crate::build::build(&dir),
        PluginCommand::Test { kind, replay: true, tenant: Some(tenant), name, last, wasm, .. } => {
            let bytes = std::fs::read(&wasm).with_context(|| format!("reading {}", wasm.display()))?;
            crate::replay::replay(config, &tenant, kind, &name, last, &bytes).await
        }
        PluginCommand::Test { kind, input, wasm, .. } => test(config, kind, input.as_deref(), &wasm).await,
        PluginCommand::Deploy {
            slot,
            wasm,
            deadline_ms,
            memory_bytes,
            fuel,
            canary,
            shadow,
            readable,
            history,
            admin,
        } => {
            let bytes = std::fs::read(&wasm).with_context(|| format!("reading {}", wasm.display()))?;
            let url = format!("{}/plugins/{}/{}", tenant_url(config, &admin, &slot.tenant), slot.kind, slot.name);
            let canary = canary.map(u64::from);
            let query: Vec<(&str, u64)> =
                [("deadline_ms", deadline_ms), ("memory_bytes", memory_bytes), ("fuel", fuel), ("canary", canary)]
                    .into_iter()
                    .filter_map(|(name, value)| Some((name, value?)))
                    .collect();
            let mut request =
                reqwest::Client::new().put(url).query(&query).header("content-type", "application/wasm").body(bytes);
            for (flag, set) in [("shadow", shadow), ("history", history)] {
                if set {
                    request = request.query(&[(flag, "true")]);
                }
            }
            if let Some(readable) = &readable {
                request = request.query(&[("readable", readable)]);
            }
            let deployed: DeployResponse = admin_call(config, request).await?;
            print_json(&deployed)?;
            follow_build(config, &admin, &slot, deployed.plugin.version).await
        }
        PluginCommand::List { tenant, admin } => {
            let url = format!("{}/plugins", tenant_url(config, &admin, &tenant));
            print_json(&admin_call::<PluginList>(config, reqwest::Client::new().get(url)).await?)
        }
        PluginCommand::Rollback { slot, version, admin } => {
            let base = tenant_url(config, &admin, &slot.tenant);
            let url = format!("{base}/plugins/{}/{}/rollback", slot.kind, slot.name);
            let request = reqwest::Client::new().post(url).json(&RollbackRequest { version });
            print_json(&admin_call::<PluginVersion>(config, request).await?)?;
            follow_build(config, &admin, &slot, version).await
        }
        PluginCommand::Diff { slot, sample, admin } => {
            let base = tenant_url(config, &admin, &slot.tenant);
            let url = format!("{base}/plugins/{}/{}/diff", slot.kind, slot.name);
            let request = reqwest::Client::new().get(url).query(&[("sample", sample)]);
            print_json(&admin_call::<SpaceDiff>(config, request).await?)
        }
        PluginCommand::Logs { slot, limit, follow, admin } => {
            let base = tenant_url(config, &admin, &slot.tenant);
            let url = format!("{base}/plugins/{}/{}/logs", slot.kind, slot.name);
            let newest = reqwest::Client::new().get(&url).query(&[("limit", limit)]);
            let mut entries = admin_call::<LogPage>(config, newest).await?.entries;
            entries.reverse();
            let mut last = 0;
            loop {
                for entry in &entries {
                    print_log_entry(entry);
                    last = last.max(entry.id);
                }
                if !follow {
                    return Ok(());
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                let newer = reqwest::Client::new().get(&url).query(&[("after", last), ("limit", 500)]);
                entries = admin_call::<LogPage>(config, newer).await?.entries;
            }
        }
        PluginCommand::Promote { slot, admin } => {
            let promoted: PluginVersion = admin_call(config, rollout_step(config, &slot, &admin, "promote")).await?;
            print_json(&promoted)?;
            println!("promote: done");
            Ok(())
        }
        PluginCommand::Abort { slot, admin } => {
            admin_send(config, rollout_step(config, &slot, &admin, "abort")).await?;
            println!("abort: done");
            Ok(())
        }
    }
}

/// The request that promotes or aborts (`step`) the slot's canary or shadow.
fn rollout_step(config: &Config, slot: &SlotArgs, admin: &AdminArgs, step: &str) -> reqwest::RequestBuilder {
    let url = format!("{}/plugins/{}/{}/{step}", tenant_url(config, admin, &slot.tenant), slot.kind, slot.name);
    reqwest::Client::new().post(url)
}

/// For a projector, draws the progress of `version`'s build for the slot's tenant (recorded by the worker
/// running it, read from the admin API) until it is complete.
async fn follow_build(config: &Config, admin: &AdminArgs, slot: &SlotArgs, version: i64) -> anyhow::Result<()> {
    if slot.kind != PluginKind::Projector || admin.no_wait {
        return Ok(());
    }
    let url = format!("{}/admin/v1/projections", server_url(config, admin));
    let projection = Topology::projector_projection(&slot.name);
    let asked = Instant::now();
    loop {
        let progress: ProjectionList = admin_call(config, reqwest::Client::new().get(&url)).await?;
        let record = progress
            .backfills
            .into_iter()
            .find(|b| b.projection == projection && b.tenant == slot.tenant && b.plugin_version == version);
        match record {
            Some(record) => {
                let count = |n: i64| u64::try_from(n).unwrap_or(0);
                progress_bar::draw(&slot.tenant, count(record.done), count(record.total));
                if record.state == BackfillState::Complete {
                    eprintln!();
                    println!("{projection} version {version} is built for {}", slot.tenant);
                    return Ok(());
                }
            }
            None if asked.elapsed() > BUILD_START_TIMEOUT => bail!(
                "no worker started building {projection} version {version} for {} within {BUILD_START_TIMEOUT:?}: \
                 are projection workers running (`strand worker`, or `strand serve` with workers = true)?",
                slot.tenant
            ),
            None => {}
        }
        tokio::time::sleep(BUILD_POLL).await;
    }
}

async fn test(config: &Config, kind: PluginKind, input: Option<&Path>, wasm: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(wasm).with_context(|| format!("reading {}", wasm.display()))?;
    let runtime = PluginRuntime::new(config.plugin_limits(), None)?;
    let plugin = runtime.prepare(kind, &bytes)?;
    let limits = runtime.limits();
    match &plugin {
        PreparedPlugin::RateLimiter(_) => {
            report(runtime.decide(&plugin, limits, &inputs(input, sample_requests)?).await)
        }
        PreparedPlugin::Router(_) => {
            report(runtime.route(&plugin, limits, &inputs(input, || sample_outbox_events(&sample_tenant()))?).await)
        }
        PreparedPlugin::Projector(_) | PreparedPlugin::RelationProjector(_) => {
            report(runtime.project(&plugin, limits, &inputs(input, || sample_events_for(&plugin))?).await)
        }
        PreparedPlugin::RelationPolicy(_) => {
            report(runtime.admit(&plugin, limits, &inputs(input, sample_attempts)?).await)
        }
    }
}

/// Prints what the plugin logged (to stderr, escaped), then its output and cost, or fails with its error.
fn report<R: Serialize>(called: Called<R>) -> anyhow::Result<()> {
    for line in &called.lines {
        let input = line.input.as_deref().map(|i| format!(" [{i}]")).unwrap_or_default();
        eprintln!("plugin {:?}{input}: {}", line.level, line.message.escape_debug());
    }
    if called.dropped > 0 {
        eprintln!("plugin: {} more lines dropped (at most {MAX_LINES_PER_CALL} per call)", called.dropped);
    }
    let (output, cost) = called.result?;
    print_report(&serde_json::to_value(output)?, &cost)
}

fn inputs<T: DeserializeOwned + Serialize>(
    file: Option<&Path>,
    samples: impl FnOnce() -> Vec<T>,
) -> anyhow::Result<Vec<T>> {
    match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            serde_json::from_str(&text).with_context(|| format!("{} is not a JSON array of inputs", path.display()))
        }
        None => Ok(samples()),
    }
}

/// One kept line: time, version, level, the input it is about, and the plugin's text escaped.
fn print_log_entry(entry: &LogEntry) {
    let LogLine { level, input, message } = &entry.line;
    let input = input.as_deref().map(|i| format!(" [{}]", i.escape_debug())).unwrap_or_default();
    println!("{} v{} {:<5}{input} {}", entry.at, entry.version, level_name(*level), message.escape_debug());
}

fn print_report(output: &serde_json::Value, cost: &CallCost) -> anyhow::Result<()> {
    let report = serde_json::json!({
        "output": output,
        "elapsed_micros": cost.elapsed.as_micros() as u64,
        "fuel": cost.fuel,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

fn server_url(config: &Config, admin: &AdminArgs) -> String {
    base_url(config, admin.server.as_deref())
}

/// `server`, else the configured `listen` address, as a base URL.
pub fn base_url(config: &Config, server: Option<&str>) -> String {
    let server = server.map_or_else(|| format!("http://{}", config.listen), str::to_owned);
    server.trim_end_matches('/').to_owned()
}

fn tenant_url(config: &Config, admin: &AdminArgs, tenant: &str) -> String {
    format!("{}/admin/v1/tenants/{tenant}", server_url(config, admin))
}

/// Sends an admin request with the tenant key (`tenant_key`) if one is set, else the admin token, and
/// decodes its answer as the API's own response type.
pub async fn admin_call<T: DeserializeOwned>(config: &Config, request: reqwest::RequestBuilder) -> anyhow::Result<T> {
    let text = admin_send(config, request).await?;
    serde_json::from_str(&text).with_context(|| format!("the admin API answered what this CLI cannot read: {text}"))
}

/// Sends an admin request (see [`admin_call`]); its answer's body, when it succeeded, else the problem's
/// detail as the error.
pub async fn admin_send(config: &Config, request: reqwest::RequestBuilder) -> anyhow::Result<String> {
    let token = config.tenant_key.as_deref().or(config.admin_token.as_deref()).context(
        "set STRAND_TENANT_KEY (a tenant key) or STRAND_ADMIN_TOKEN (the platform admin's token) to call the admin API",
    )?;
    let response = request.bearer_auth(token).send().await.context("calling the admin API")?;
    let status = response.status();
    let text = response.text().await.context("reading the admin API's answer")?;
    if !status.is_success() {
        match serde_json::from_str::<Problem>(&text) {
            Ok(problem) => bail!("{status}: {} ({})", problem.detail, problem.code),
            Err(_) => bail!("{status}: {text}"),
        }
    }
    Ok(text)
}

pub fn print_json(body: &impl Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(body)?);
    Ok(())
}
