//! Where the configuration's values come from: the file, whose sections stand for flat keys, and the
//! `STRAND_*` environment variables, kept as strings.

use figment::providers::Env;
use figment::value::{Dict, Map, Value};
use figment::{Metadata, Profile, Provider};

/// The sections a configuration file may group keys in; each is the prefix of its keys.
pub const SECTIONS: [&str; 10] =
    ["database", "jwt", "redis", "plugin", "rollout", "relay", "kafka", "projection", "retention", "tracing"];

/// A file's sections read as the flat keys they stand for: `[kafka] brokers` is `kafka_brokers`, `[relay]
/// mode` is `relay`. A key set both flat and in its section is an error naming it.
pub(super) struct Sectioned<P>(pub(super) P);

impl<P: Provider> Provider for Sectioned<P> {
    fn metadata(&self) -> Metadata {
        self.0.metadata()
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let mut profiles = self.0.data()?;
        for dict in profiles.values_mut() {
            let mut flat = Dict::new();
            for (key, value) in std::mem::take(dict) {
                let entries = match value {
                    Value::Dict(_, section) if SECTIONS.contains(&key.as_str()) => section
                        .into_iter()
                        .map(|(name, value)| match (key.as_str(), name.as_str()) {
                            ("relay", "mode") => ("relay".to_owned(), value),
                            _ => (format!("{key}_{name}"), value),
                        })
                        .collect(),
                    value => vec![(key, value)],
                };
                for (key, value) in entries {
                    if flat.contains_key(&key) {
                        return Err(figment::Error::from(format!("`{key}` is set twice: flat and in its section")));
                    }
                    flat.insert(key, value);
                }
            }
            *dict = flat;
        }
        Ok(profiles)
    }
}

/// `STRAND_<KEY>` variables, kept as strings: figment's own `Env` would turn `STRAND_JWT_HS256_SECRET=12345`
/// into a number and refuse it; `extract_lossy` still reads "8080" into a numeric field.
pub(super) struct StrandEnv;

impl Provider for StrandEnv {
    fn metadata(&self) -> Metadata {
        Metadata::named("STRAND_* environment variables")
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let vars = Env::prefixed("STRAND_").ignore(&["config", "log"]);
        let dict = vars.iter().map(|(key, value)| (key.as_str().to_lowercase(), Value::from(value))).collect();
        Ok(Profile::Default.collect(dict))
    }
}
