//! Running a workload: producers and consumers spread over one glommio
//! executor per core, each executor shipping its measurements to the main
//! thread once a second.
//!
//! `pool` starts the executors and gathers their messages, `producer`
//! turns the schedule into records in per-partition `accumulator`s,
//! `lane` pipelines their batches to a leader, `consumer` fetches.

mod accumulator;
mod consumer;
mod lane;
mod pool;
mod producer;

pub use pool::execute;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::e2e::{Acknowledged, Tracker};
use crate::stats::Recorder;
use crate::workload::Workload;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Produce,
    Consume,
    #[serde(rename = "e2e")]
    EndToEnd,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Produce => "produce",
            Mode::Consume => "consume",
            Mode::EndToEnd => "e2e",
        }
    }

    /// Whether the run has producers (and so publish latency).
    pub fn produces(self) -> bool {
        self != Mode::Consume
    }

    /// Whether the run has consumers.
    pub fn consumes(self) -> bool {
        self != Mode::Produce
    }
}

/// Everything the executors need, shared read-only.
pub struct Plan {
    pub mode: Mode,
    pub workload: Workload,
    pub topics: Vec<String>,
    pub leaders: protocol::admin::Leaders,
    /// Each partition's leader's node id (connections are per node id).
    pub leader_ids: HashMap<(String, i32), i32>,
    /// Where consumers start, per partition.
    pub start_offsets: HashMap<(String, i32), i64>,
    /// Where consume mode stops, per partition (the log end at start).
    pub end_offsets: HashMap<(String, i32), i64>,
    pub payload: Bytes,
    pub cores: usize,
    /// How long an idle executor polls before it parks.
    pub spin: Duration,
    pub start: Instant,
    pub start_unix_us: u64,
    pub drain_timeout: Duration,
}

impl Plan {
    /// The connection a partition's requests go on: its leader's node id
    /// and address. Kafka's clients keep one connection per node id, so
    /// brokers listed at one address (behind a load balancer) still get one
    /// each; a partition whose id is unknown gets one per address.
    fn leader_of(&self, tp: &(String, i32)) -> Option<(i32, String)> {
        let address = self.leaders.partitions.get(tp)?.clone();
        let id = self.leader_ids.get(tp).copied().unwrap_or(-1);
        Some((id, address))
    }

    fn unix_us(&self, at: Instant) -> u64 {
        self.start_unix_us + at.saturating_duration_since(self.start).as_micros() as u64
    }
}

/// Shared run state across executors.
pub struct Control {
    pub stop: AtomicBool,
    pub producers_running: AtomicUsize,
}

/// What executors send to the main thread.
pub enum Message {
    Interval {
        second: u64,
        recorder: Box<Recorder>,
    },
    Done {
        tracker: Tracker,
        acknowledged: Acknowledged,
        last: Box<Recorder>,
    },
    Failed(String),
}

pub fn unix_us_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// One producer's share: which topic, at what rate.
#[derive(Clone)]
struct ProducerJob {
    id: u32,
    topic: String,
    rate: f64,
    /// Bytes after which this producer stops (0: no limit).
    byte_budget: u64,
}

#[derive(Clone)]
struct ConsumerJob {
    partitions: Vec<(String, i32)>,
}

fn jobs(plan: &Plan) -> (Vec<ProducerJob>, Vec<ConsumerJob>) {
    let w = &plan.workload;
    let mut producers = Vec::new();
    if plan.mode != Mode::Consume {
        let total = plan.topics.len() * w.producers_per_topic;
        for topic in &plan.topics {
            for _ in 0..w.producers_per_topic {
                producers.push(ProducerJob {
                    id: producers.len() as u32,
                    topic: topic.clone(),
                    rate: w.producer_rate / total as f64,
                    byte_budget: w.backlog_bytes.div_ceil(total as u64),
                });
            }
        }
    }
    let mut consumers = Vec::new();
    if plan.mode != Mode::Produce {
        for topic in &plan.topics {
            for _ in 0..w.subscriptions_per_topic {
                let n = w.consumer_per_subscription.max(1);
                for c in 0..n {
                    let partitions: Vec<(String, i32)> = (0..w.partitions_per_topic)
                        .filter(|p| p % n == c)
                        .map(|p| (topic.clone(), p as i32))
                        .collect();
                    if !partitions.is_empty() {
                        consumers.push(ConsumerJob { partitions });
                    }
                }
            }
        }
    }
    (producers, consumers)
}

/// The error's whole text with its causes (`connection to broker
/// 127.0.0.1:9092 failed: Connection reset by peer (os error 104)`), which
/// is the kind errors are counted by: the address and the cause tell kinds
/// apart, and cutting at the first `:` left `connection to broker 127.0.0.1`.
fn error_text(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    // Bounded: a cause chain is a handful of errors.
    for _ in 0..16 {
        let Some(cause) = source else { break };
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
