//! `strand tenant key create|list|revoke`: tenant keys through the admin API (creating and revoking need
//! the platform admin's token; listing works with the tenant's own key too).

use clap::{Args, Subcommand};
use strand::api::admin::{KeyList, KeyRequest};
use strand::config::Config;
use strand::tenancy::keys::IssuedKey;

use crate::plugin::{admin_call, admin_send, base_url, print_json};

#[derive(Subcommand)]
pub enum TenantCommand {
    /// Issue, list and revoke the credentials of a tenant's team.
    #[command(subcommand)]
    Key(KeyCommand),
}

#[derive(Subcommand)]
pub enum KeyCommand {
    /// Issue a key; its secret is printed once and stored nowhere.
    Create {
        #[command(flatten)]
        target: KeyTarget,
        /// What the key is for, e.g. `ci`.
        #[arg(long, default_value = "default")]
        name: String,
    },
    /// The tenant's keys: name, created, last used.
    List {
        #[command(flatten)]
        target: KeyTarget,
    },
    /// Revoke a key: requests with it are refused from now on.
    Revoke {
        #[command(flatten)]
        target: KeyTarget,
        #[arg(long)]
        name: String,
    },
}

#[derive(Args)]
pub struct KeyTarget {
    #[arg(long)]
    tenant: String,
    /// Base URL of a running Strand; defaults to the configured `listen` address.
    #[arg(long)]
    server: Option<String>,
}

impl KeyTarget {
    fn url(&self, config: &Config) -> String {
        format!("{}/admin/v1/tenants/{}/keys", base_url(config, self.server.as_deref()), self.tenant)
    }
}

pub async fn run(command: TenantCommand, config: &Config) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let TenantCommand::Key(command) = command;
    match command {
        KeyCommand::Create { target, name } => {
            let request = http.post(target.url(config)).json(&KeyRequest { name });
            let issued: IssuedKey = admin_call(config, request).await?;
            print_json(&issued)?;
            eprintln!("keep the secret now: it cannot be shown again");
        }
        KeyCommand::List { target } => print_json(&admin_call::<KeyList>(config, http.get(target.url(config))).await?)?,
        KeyCommand::Revoke { target, name } => {
            admin_send(config, http.delete(format!("{}/{name}", target.url(config)))).await?;
            println!("revoked key {name} of tenant {}", target.tenant);
        }
    }
    Ok(())
}
