//! A throwaway Kafka-protocol broker for the test process, and a reader of its topics.
//!
//! The broker is `nisshi` 0.7.0-pre.2 (crates.io; tansu's successor, built with its `libsql` storage): its
//! consumer groups rebalance when members join and reassign a dead member's partitions once its session
//! expires (`../shared/tools/group_probe.py`: all four checks pass, the SIGKILLed member's partitions moved
//! in 10 s), which tansu 0.6.0 did not. Later nisshi releases need a newer rustc than this machine has.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::{Message as _, Offset, TopicPartitionList};

use crate::watched::{scratch_dir, shared, WatchedServer};

/// A running broker that lives as long as the test process.
pub struct Kafka {
    server: WatchedServer,
}

/// A message as a consumer sees it.
#[derive(Debug, Clone)]
pub struct Received {
    pub partition: i32,
    pub offset: i64,
    pub key: String,
    pub payload: String,
    pub headers: Vec<(String, String)>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// How the tests' broker is installed (`.ci/setup` does it).
const INSTALL: &str = "cargo install nisshi --version 0.7.0-pre.2 --locked --features dynostore,libsql";

static SHARED: OnceLock<Result<Kafka, String>> = OnceLock::new();
static NEXT_PREFIX: AtomicU32 = AtomicU32::new(0);

impl Kafka {
    /// The process-wide broker, started on first use.
    pub fn shared() -> anyhow::Result<&'static Kafka> {
        shared(&SHARED, Kafka::start, &format!("throwaway nisshi broker failed ({INSTALL})"))
    }

    fn start() -> anyhow::Result<Self> {
        let dir = scratch_dir("strand-broker-")?;
        let command = "nisshi broker --listener-url tcp://127.0.0.1:$PORT \
            --advertised-listener-url tcp://127.0.0.1:$PORT --storage-engine memory://nisshi/";
        Ok(Kafka { server: WatchedServer::start(&dir, crate::free_port()?, command)? })
    }

    /// A broker of the test's own that keeps its messages in `store` (an SQLite file there), so that it can
    /// be stopped and started again on `port` without losing what it acknowledged.
    pub fn persistent(store: &Path, port: u16) -> anyhow::Result<Self> {
        let dir = scratch_dir("strand-broker-")?;
        let command = format!(
            "cd '{}' && nisshi broker --listener-url tcp://127.0.0.1:$PORT \
             --advertised-listener-url tcp://127.0.0.1:$PORT --storage-engine sqlite://nisshi.db",
            store.display()
        );
        Ok(Kafka { server: WatchedServer::start(&dir, port, &command)? })
    }

    /// Stops the broker process (its persistent store stays).
    pub fn stop(self) -> anyhow::Result<()> {
        self.server.stop()
    }

    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.server.port)
    }

    /// A topic prefix no other test of this process uses, so tests sharing the broker never mix messages.
    pub fn unique_prefix(&self) -> String {
        format!("t{}x{}.", std::process::id(), NEXT_PREFIX.fetch_add(1, Ordering::Relaxed))
    }

    /// Reads `topic` from the beginning of each of its `partitions` until `expected` messages arrived or
    /// `limit` passed (blocking: call from `spawn_blocking`).
    pub fn read(&self, topic: &str, partitions: i32, expected: usize, limit: Duration) -> Vec<Received> {
        self.read_until(topic, partitions, limit, |received| received.len() >= expected)
    }

    /// Reads `topic` from the beginning of each of its `partitions` until what arrived satisfies `done` or
    /// `limit` passed (blocking: call from `spawn_blocking`).
    pub fn read_until(
        &self,
        topic: &str,
        partitions: i32,
        limit: Duration,
        done: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", self.brokers())
            .set("group.id", "strand-tests")
            .set("enable.auto.commit", "false")
            .create()
            .expect("a consumer");
        let mut assignment = TopicPartitionList::new();
        for partition in 0..partitions {
            assignment.add_partition_offset(topic, partition, Offset::Beginning).expect("a partition");
        }
        consumer.assign(&assignment).expect("assigned");
        let deadline = Instant::now() + limit;
        let mut received = Vec::new();
        while !done(&received) && Instant::now() < deadline {
            let Some(polled) = consumer.poll(Duration::from_millis(100)) else { continue };
            let message = match polled {
                Ok(message) => message,
                // The topic may not exist yet while the relay creates it; keep polling until the deadline.
                Err(_) => continue,
            };
            let text = |bytes: Option<&[u8]>| String::from_utf8_lossy(bytes.unwrap_or_default()).into_owned();
            let headers = message
                .headers()
                .map(|h| h.iter().map(|h| (h.key.to_owned(), text(h.value))).collect())
                .unwrap_or_default();
            received.push(Received {
                partition: message.partition(),
                offset: message.offset(),
                key: text(message.key()),
                payload: text(message.payload()),
                headers,
            });
        }
        received
    }
}
