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

    /// `{prefix}{topic}`: a topic of the host's own.
    fn topic(&self, topic: &str) -> String {
        format!("{}{topic}", self.prefix)
    }

    /// What `tenant`'s router destination `topic` is published to: the shared events topic when it names
    /// `following` (the projections read it; the payload and the host's headers are the host's, so a router
    /// can re-key events there but not forge them), else a topic in the tenant's own namespace,
    /// `{prefix}tenant.{tenant}.{topic}`. So no router reaches another tenant's topics, a dead-letter topic or
    /// `plugin-logs`. The tenant id is spelled with `.` as `-d`, `_` as `-u` and `-` as `--`: no two tenants'
    /// names can meet, not even under Kafka's rule that `.` and `_` collide.
    pub fn tenant_topic(&self, tenant: &str, topic: &str) -> String {
        if topic == crate::outbox::AGGREGATE_TYPE {
            return self.events_topic();
        }
        let mut spelled = String::with_capacity(tenant.len() + 4);
        for c in tenant.chars() {
            match c {
                '.' => spelled.push_str("-d"),
                '_' => spelled.push_str("-u"),
                '-' => spelled.push_str("--"),
                c => spelled.push(c),
            }
        }
        self.topic(&format!("tenant.{spelled}.{topic}"))
    }

    /// `{prefix}following`: the topic of the follow graph's events, which every projection reads.
    pub fn events_topic(&self) -> String {
        self.topic(crate::outbox::AGGREGATE_TYPE)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenants_topics_are_its_own_and_never_meet_anothers() {
        let topology = Topology::new("strand.");
        assert_eq!(topology.tenant_topic("acme", "following"), "strand.following", "the shared events topic");
        assert_eq!(topology.tenant_topic("acme", "audit"), "strand.tenant.acme.audit");
        for host_topic in ["dead-letter.follower", "plugin-logs", "dead-letter.projector.follow-counts"] {
            assert_ne!(topology.tenant_topic("acme", host_topic), topology.topic(host_topic));
        }
        // Kafka treats `.` and `_` as one: compare names with both folded.
        let folded = |t: String| t.replace('_', ".");
        let pairs = [
            (("a.b", "c"), ("a", "b.c")),
            (("a_b", "c"), ("a.b", "c")),
            (("a-b", "c"), ("a", "b-c")),
            (("a-d", "x"), ("a.", "x")),
        ];
        for ((t1, x1), (t2, x2)) in pairs {
            assert_ne!(
                folded(topology.tenant_topic(t1, x1)),
                folded(topology.tenant_topic(t2, x2)),
                "{t1}/{x1} vs {t2}/{x2}"
            );
        }
    }
}
