//! The names of the pipeline, in one place: every topic, consumer group and projection name is built here
//! from the deployment's topic prefix, so the relay, the workers, the lag probe and the CLI cannot drift.

/// Names under one topic prefix (`topic_prefix`, default `strand.`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    prefix: String,
}

impl Topology {
    pub fn new(prefix: &str) -> Self {
        Self { prefix: prefix.to_owned() }
    }

    /// `{prefix}{topic}`: what a router's destination topic is published to.
    pub fn topic(&self, topic: &str) -> String {
        format!("{}{topic}", self.prefix)
    }

    /// `{prefix}following`: the topic of the follow graph's events, which every projection reads.
    pub fn events_topic(&self) -> String {
        self.topic(crate::graph::AGGREGATE_TYPE)
    }

    /// `{prefix}{projection}`: the projection's Kafka consumer group.
    pub fn consumer_group(&self, projection: &str) -> String {
        self.topic(projection)
    }

    /// `{prefix}dead-letter.{projection}`: where the projection's poison events go, each with its error.
    pub fn dead_letter_topic(&self, projection: &str) -> String {
        self.topic(&format!("dead-letter.{projection}"))
    }

    /// `{prefix}plugin-logs`: plugins' log lines on a Kafka deployment (keyed by tenant), as Redpanda keeps
    /// its transforms' logs, for the operator's log pipeline.
    pub fn plugin_logs_topic(&self) -> String {
        self.topic("plugin-logs")
    }

    /// `projector.{plugin}`: the projection that runs projector plugin `plugin` (its subscriber name and
    /// the suffix of its group and dead-letter topic).
    pub fn projector_projection(plugin: &str) -> String {
        format!("projector.{plugin}")
    }
}
