//! What a loaded configuration must satisfy beyond its types — secrets long enough, shares of time within
//! (0, 1] — and why one is refused, naming the setting.

use super::Config;

/// The fewest bytes a shared secret may have: the admin token and the global HS256 secret (a tenant's own
/// HS256 secret has the same floor). 32 bytes is HS256's key size; shorter keys can be brute-forced.
pub const MIN_SECRET_BYTES: usize = 32;

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid configuration: {0}")]
    Parse(#[from] Box<figment::Error>),
    /// An empty secret is what an unset variable in a compose file becomes: it must never match an empty
    /// `Authorization` header or sign tokens anyone can forge.
    #[error(
        "invalid configuration: `{setting}` (STRAND_{env}) is {found}; it needs at least {MIN_SECRET_BYTES} bytes \
         (e.g. `openssl rand -hex 32`), or leave it unset",
        env = setting.to_uppercase(),
        found = if *length == 0 { "set but empty".to_owned() } else { format!("only {length} bytes long") },
    )]
    WeakSecret { setting: &'static str, length: usize },
    #[error(
        "invalid configuration: `{setting}` (STRAND_{env}) is {value}; it is a share of time, above 0 and at most 1",
        env = setting.to_uppercase()
    )]
    NotAShare { setting: &'static str, value: f64 },
}

impl Config {
    /// Refuses a share of time outside (0, 1] (a NaN too), naming the setting.
    pub(super) fn check_shares(&self) -> Result<(), ConfigError> {
        let (setting, value) = ("account_job_share", self.account_job_share);
        match value > 0.0 && value <= 1.0 {
            true => Ok(()),
            false => Err(ConfigError::NotAShare { setting, value }),
        }
    }

    /// Refuses an empty or short admin token or HS256 secret, naming the setting. [`Config::load`] runs it,
    /// and so does every server start, for configurations built in code.
    pub fn check_secrets(&self) -> Result<(), ConfigError> {
        let secrets = [("admin_token", &self.admin_token), ("jwt_hs256_secret", &self.jwt_hs256_secret)];
        for (setting, value) in secrets {
            if let Some(length) = value.as_ref().map(String::len).filter(|&length| length < MIN_SECRET_BYTES) {
                return Err(ConfigError::WeakSecret { setting, length });
            }
        }
        Ok(())
    }
}
