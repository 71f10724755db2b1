//! How every Kafka client of Strand is configured — the relay's producer and topic admin, the workers'
//! consumer groups, the lag probe, the readiness check: the brokers plus the operator's librdkafka
//! properties (`kafka_options`: TLS, SASL, timeouts…, as Vector's `librdkafka_options`), to which each
//! client adds only what it needs. A property librdkafka does not know fails the first client, at start-up,
//! with its name. A value `env:NAME` is read from the environment variable `NAME`, so secrets stay out of
//! the file.

use std::collections::BTreeMap;

use rdkafka::config::ClientConfig;

/// The cluster and how to reach it.
#[derive(Debug, Clone)]
pub struct KafkaConnection {
    brokers: String,
    options: BTreeMap<String, String>,
}

/// Why `kafka_options` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KafkaOptionsError {
    #[error("kafka_options.\"{property}\" names the environment variable {variable}, which is not set")]
    MissingVariable { property: String, variable: String },
    #[error("kafka_options.\"bootstrap.servers\": set kafka_brokers instead")]
    Brokers,
}

impl KafkaConnection {
    /// `brokers` with `options`, their `env:NAME` values read from the environment.
    pub fn new(brokers: &str, options: &BTreeMap<String, String>) -> Result<Self, KafkaOptionsError> {
        let mut resolved = BTreeMap::new();
        for (property, value) in options {
            if property == "bootstrap.servers" {
                return Err(KafkaOptionsError::Brokers);
            }
            let value = match value.strip_prefix("env:") {
                Some(variable) => std::env::var(variable).map_err(|_| KafkaOptionsError::MissingVariable {
                    property: property.clone(),
                    variable: variable.to_owned(),
                })?,
                None => value.clone(),
            };
            resolved.insert(property.clone(), value);
        }
        Ok(Self { brokers: brokers.to_owned(), options: resolved })
    }

    /// A client's configuration: the brokers and the operator's options; the caller adds its own settings.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.brokers);
        for (property, value) in &self.options {
            config.set(property, value);
        }
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::producer::BaseProducer;

    #[test]
    fn options_reach_the_client_and_an_unknown_property_is_named() {
        let options = BTreeMap::from([("security.protocol".to_owned(), "SASL_SSL".to_owned())]);
        let connection = KafkaConnection::new("127.0.0.1:9", &options).unwrap();
        assert_eq!(connection.client_config().get("security.protocol"), Some("SASL_SSL"));
        let bogus = BTreeMap::from([("ssl.bogus".to_owned(), "1".to_owned())]);
        let error = KafkaConnection::new("127.0.0.1:9", &bogus).unwrap().client_config().create::<BaseProducer>();
        assert!(error.err().unwrap().to_string().contains("ssl.bogus"), "the property is named");
        let secret = BTreeMap::from([("sasl.password".to_owned(), "env:STRAND_TEST_UNSET_VARIABLE".to_owned())]);
        let missing = KafkaConnection::new("127.0.0.1:9", &secret).unwrap_err().to_string();
        assert!(missing.contains("STRAND_TEST_UNSET_VARIABLE"), "{missing}");
    }
}
