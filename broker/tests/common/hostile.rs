//! Hostile clients and a well-behaved one, against a broker with known
//! memory budgets: shared by the hostile-client tests and the soak.

#![allow(dead_code)]

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{raw, Broker};
use bytes::Bytes;
use protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use protocol::kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use protocol::kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, FetchRequest, FetchResponse, MetadataRequest,
    MetadataResponse, ProduceRequest, ProduceResponse, TopicName,
};
use protocol::kafka_protocol::protocol::StrBytes;

pub const MIB: u64 = 1 << 20;
/// The budgets every broker here runs with (two cores: half each).
pub const REQUEST_BUDGET: u64 = 32 * MIB;
pub const RESPONSE_BUDGET: u64 = 32 * MIB;
pub const CONNECTION_RESPONSE_BUDGET: u64 = 8 * MIB;
pub const RECEIVE_TIMEOUT_MS: u64 = 3_000;
/// What the well-behaved client allows itself per request while attacked.
pub const ANSWER_BOUND: Duration = Duration::from_secs(3);
/// How long each attack is kept up while the well-behaved client works.
pub const ATTACK_SECS: u64 = 8;

/// A broker with the budgets above and its admin listener on a free port
/// (the figures of /metrics are read from it).
pub fn start_budgeted(extra: &[&str]) -> Broker {
    let admin = format!("127.0.0.1:{}", super::free_port());
    let request = format!("queued.max.request.bytes={REQUEST_BUDGET}");
    let response = format!("strom.queued.max.response.bytes={RESPONSE_BUDGET}");
    let connection =
        format!("strom.connection.queued.max.response.bytes={CONNECTION_RESPONSE_BUDGET}");
    let receive = format!("strom.request.receive.timeout.ms={RECEIVE_TIMEOUT_MS}");
    let mut args = vec![
        "--admin-listen",
        &admin,
        "--set",
        &request,
        "--set",
        &response,
        "--set",
        &connection,
        "--set",
        &receive,
    ];
    args.extend_from_slice(extra);
    Broker::start(&args)
}

pub fn rss_bytes(pid: u32) -> Option<u64> {
    status_bytes(pid, "VmRSS:")
}

/// The process's address space: memory allocated but not touched yet
/// shows here before it shows in RSS.
pub fn vm_size_bytes(pid: u32) -> Option<u64> {
    status_bytes(pid, "VmSize:")
}

fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Samples the broker's resident memory every 20 ms; past `kill_above` it
/// kills the broker at once (so a broken bound fails the test instead of
/// exhausting the machine) and remembers that it did.
pub struct RssWatch {
    /// Dropped by [`RssWatch::finish`]: the sampler's wait ends at once.
    stop: Option<std::sync::mpsc::Sender<()>>,
    peak: Arc<AtomicU64>,
    killed: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl RssWatch {
    pub fn start(pid: u32, kill_above: u64) -> RssWatch {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let peak = Arc::new(AtomicU64::new(0));
        let killed = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (peak, killed) = (peak.clone(), killed.clone());
            move || {
                // Bounded by the attack's length; the stop ends it sooner.
                let deadline = Instant::now() + Duration::from_secs(600);
                while Instant::now() < deadline {
                    let Some(rss) = rss_bytes(pid) else { return };
                    peak.fetch_max(rss, Ordering::Relaxed);
                    if rss > kill_above {
                        killed.store(true, Ordering::Relaxed);
                        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                        return;
                    }
                    // The sampling period, cut short by the stop (the sender
                    // dropped): the wait is on the stop, bounded by 20 ms.
                    match stopped.recv_timeout(Duration::from_millis(20)) {
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                }
            }
        });
        RssWatch {
            stop: Some(stop),
            peak,
            killed,
            thread: Some(thread),
        }
    }

    /// The peak seen, and whether the watch had to kill the broker.
    pub fn finish(mut self) -> (u64, bool) {
        drop(self.stop.take());
        self.thread.take().unwrap().join().unwrap();
        (
            self.peak.load(Ordering::Relaxed),
            self.killed.load(Ordering::Relaxed),
        )
    }
}

pub fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

pub fn produce_request(topic: &str, records: Bytes, acks: i16) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])])
}

pub fn fetch_request(topic: &str, offset: i64, max_bytes: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(protocol::kafka_protocol::messages::BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(max_bytes)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(max_bytes)])])
}

pub fn produce(stream: &mut TcpStream, topic: &str, batch: &[u8], correlation_id: i32) -> i64 {
    let response: ProduceResponse = raw::call(
        stream,
        ApiKey::Produce,
        9,
        correlation_id,
        "well-behaved",
        &produce_request(topic, Bytes::copy_from_slice(batch), -1),
    );
    let partition = &response.responses[0].partition_responses[0];
    assert_eq!(partition.error_code, 0, "produce to {topic}");
    partition.base_offset
}

/// A batch as stored: the same bytes as sent but for the base offset and
/// the partition leader epoch, which the broker assigns.
pub fn assert_stored_as_sent(stored: &[u8], sent: &[u8], offset: i64) {
    assert_eq!(stored.len(), sent.len(), "batch length");
    assert_eq!(i64::from_be_bytes(stored[..8].try_into().unwrap()), offset);
    assert_eq!(stored[8..12], sent[8..12], "batch length field");
    assert_eq!(
        stored[16..],
        sent[16..],
        "batch bytes after the leader epoch"
    );
}

/// A client that behaves: every 100 ms, on its own connection, ApiVersions,
/// Metadata, an acks=all produce of a fresh batch and a fetch of it, each
/// answered within [`ANSWER_BOUND`]; the fetched batch must be the sent
/// one, byte for byte. Returns the slowest answer and the rounds done.
pub fn well_behaved(broker: &Broker, topic: &str, secs: u64) -> (Duration, usize) {
    let mut stream = raw::connect(broker);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut slowest = Duration::ZERO;
    let mut rounds = 0usize;
    let timed = |what: &str, slowest: &mut Duration, started: Instant| {
        let took = started.elapsed();
        assert!(
            took <= ANSWER_BOUND,
            "{what} took {took:?} under attack (bound {ANSWER_BOUND:?})\nbroker log:\n{}",
            broker.log()
        );
        *slowest = (*slowest).max(took);
    };
    let mut correlation_id = 1_000;
    while Instant::now() < deadline && rounds < 1_000 {
        correlation_id += 4;
        let started = Instant::now();
        let _: ApiVersionsResponse = raw::call(
            &mut stream,
            ApiKey::ApiVersions,
            3,
            correlation_id,
            "well-behaved",
            &ApiVersionsRequest::default(),
        );
        timed("ApiVersions", &mut slowest, started);

        let started = Instant::now();
        let metadata: MetadataResponse = raw::call(
            &mut stream,
            ApiKey::Metadata,
            12,
            correlation_id + 1,
            "well-behaved",
            &MetadataRequest::default().with_topics(None),
        );
        timed("Metadata", &mut slowest, started);
        assert!(!metadata.brokers.is_empty());

        let batch = protocol::batch::build::patterned(
            1_700_000_000_000 + rounds as i64,
            10,
            200,
            rounds as u64,
        );
        let started = Instant::now();
        let offset = produce(&mut stream, topic, &batch, correlation_id + 2);
        timed("Produce", &mut slowest, started);

        let started = Instant::now();
        let fetched: FetchResponse = raw::call(
            &mut stream,
            ApiKey::Fetch,
            12,
            correlation_id + 3,
            "well-behaved",
            &fetch_request(topic, offset, 1 << 20),
        );
        timed("Fetch", &mut slowest, started);
        let partition = &fetched.responses[0].partitions[0];
        assert_eq!(partition.error_code, 0);
        let records = partition.records.clone().expect("records");
        assert_stored_as_sent(&records[..batch.len().min(records.len())], &batch, offset);
        rounds += 1;
        // The client's pace (a round every 100 ms), not a wait for a
        // condition: it keeps asking through the whole attack.
        std::thread::sleep(Duration::from_millis(100));
    }
    (slowest, rounds)
}

pub fn admin_address(broker: &Broker) -> String {
    broker
        .arg("--admin-listen")
        .expect("started with an admin listener")
        .to_string()
}

/// A figure of /metrics for the whole broker (its `shard="all"` sample).
pub fn metric(broker: &Broker, name: &str) -> u64 {
    let (code, text) = super::http_get(&admin_address(broker), "/metrics");
    assert_eq!(code, 200);
    let sample = format!("{name}{{shard=\"all\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&sample)?.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no {sample} in /metrics"))
}

pub fn assert_within(broker: &Broker, watch: RssWatch, baseline: u64, bound: u64, what: &str) {
    let (peak, killed) = watch.finish();
    assert!(
        !killed,
        "{what}: the broker's RSS passed {} MiB and it was killed\nbroker log:\n{}",
        (baseline + bound * 2) / MIB,
        broker.log()
    );
    let growth = peak.saturating_sub(baseline);
    assert!(
        growth <= bound,
        "{what}: RSS grew {} MiB (from {} MiB), bound {} MiB",
        growth / MIB,
        baseline / MIB,
        bound / MIB
    );
    eprintln!(
        "{what}: RSS {} -> peak {} MiB (growth {} MiB, bound {} MiB)",
        baseline / MIB,
        peak / MIB,
        growth / MIB,
        bound / MIB
    );
}

/// Connections that write `bytes` and then hold the socket open, reading
/// nothing, until `release` is raised.
pub fn hostile(
    broker: &Broker,
    connections: usize,
    bytes: Vec<u8>,
    release: Arc<Release>,
) -> Vec<JoinHandle<()>> {
    let bytes = Arc::new(bytes);
    (0..connections)
        .map(|_| {
            let stream = TcpStream::connect(broker.address()).unwrap();
            let bytes = bytes.clone();
            let release = release.clone();
            std::thread::spawn(move || {
                let mut stream = stream;
                // The broker stops reading once a bound is reached: a write
                // that blocks past this is what the test wants, not a failure.
                stream
                    .set_write_timeout(Some(Duration::from_secs(ATTACK_SECS + 5)))
                    .unwrap();
                let _ = stream.write_all(&bytes);
                release.wait(Duration::from_secs(120));
            })
        })
        .collect()
}

/// Raised once, when the attacking connections may go.
#[derive(Default)]
pub struct Release {
    raised: std::sync::Mutex<bool>,
    changed: std::sync::Condvar,
}

impl Release {
    pub fn new() -> Arc<Release> {
        Arc::default()
    }

    pub fn raise(&self) {
        *self.raised.lock().unwrap() = true;
        self.changed.notify_all();
    }

    /// Until raised, or `limit` at most.
    pub fn wait(&self, limit: Duration) {
        let raised = self.raised.lock().unwrap();
        let _ = self
            .changed
            .wait_timeout_while(raised, limit, |raised| !*raised)
            .unwrap();
    }
}

pub fn end(release: Arc<Release>, threads: Vec<JoinHandle<()>>) {
    release.raise();
    for thread in threads {
        thread.join().unwrap();
    }
}

/// The growth every attack here must stay within: twice the budgets.
/// Resident memory also holds what the allocators keep, the batch cache and
/// the connections' own buffers; twice the budgets leaves room for those.
pub const BUDGET_BOUND: u64 = 2 * (REQUEST_BUDGET + RESPONSE_BUDGET);
