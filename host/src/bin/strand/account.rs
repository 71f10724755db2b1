//! `strand account delete|suspend|restore|move|show`: account jobs through the admin API (the platform
//! admin's token or the tenant's key), followed with a progress bar until they end (`--detach`: not).

use std::time::Duration;

use clap::{Args, Subcommand};
use strand::accounts::{Job, JobState};
use strand::config::Config;

use crate::plugin::{admin_call, base_url, print_json};
use crate::progress_bar;

#[derive(Subcommand)]
pub enum AccountCommand {
    /// Erase the account: every relation both ways ends (each with its event), then its rows go; no relation
    /// with it begins again.
    Delete(Target),
    /// Hide the account's follows and requests both ways (each ends with its event), restorably.
    Suspend(Target),
    /// Bring back what the account's suspension hid.
    Restore(Target),
    /// Move the account's followers to another account (requests where it is private; none where a block
    /// holds).
    Move {
        #[command(flatten)]
        target: Target,
        /// The destination account.
        #[arg(long)]
        to: String,
        /// The destination follows whom the account followed, too (and those follows end).
        #[arg(long)]
        with_followings: bool,
    },
    /// The account's state and its newest jobs.
    Show(Target),
}

#[derive(Args)]
pub struct Target {
    #[arg(long)]
    tenant: String,
    #[arg(long)]
    user: String,
    /// Base URL of a running Strand; defaults to the configured `listen` address.
    #[arg(long)]
    server: Option<String>,
    /// Print the started job and return, instead of following it to its end.
    #[arg(long)]
    detach: bool,
}

impl Target {
    fn base(&self, config: &Config) -> String {
        format!("{}/admin/v1/tenants/{}", base_url(config, self.server.as_deref()), self.tenant)
    }
}

pub async fn run(command: AccountCommand, config: &Config) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let (target, body) = match command {
        AccountCommand::Show(target) => {
            let url = format!("{}/accounts/{}", target.base(config), target.user);
            return print_json(&admin_call::<serde_json::Value>(config, http.get(url)).await?);
        }
        AccountCommand::Delete(target) => (target, serde_json::json!({"kind": "delete"})),
        AccountCommand::Suspend(target) => (target, serde_json::json!({"kind": "suspend"})),
        AccountCommand::Restore(target) => (target, serde_json::json!({"kind": "restore"})),
        AccountCommand::Move { target, to, with_followings } => {
            (target, serde_json::json!({"kind": "move", "to": to, "with_followings": with_followings}))
        }
    };
    let url = format!("{}/accounts/{}/jobs", target.base(config), target.user);
    let mut job: Job = admin_call(config, http.post(url).json(&body)).await?;
    if target.detach {
        return print_json(&job);
    }
    let url = format!("{}/jobs/{}", target.base(config), job.id);
    while !job.finished() {
        progress_bar::draw(job.kind.as_str(), job.done.max(0) as u64, job.total.max(0) as u64);
        tokio::time::sleep(Duration::from_millis(250)).await;
        job = admin_call(config, http.get(&url)).await?;
    }
    progress_bar::draw(job.kind.as_str(), job.done.max(0) as u64, job.total.max(0) as u64);
    eprintln!();
    print_json(&job)?;
    if job.state == JobState::Failed {
        anyhow::bail!("job {} failed: {}", job.id, job.error.unwrap_or_default());
    }
    Ok(())
}
