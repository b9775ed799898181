//! Hostile clients against a broker with known memory budgets: fetchers
//! that never read their answers, frames announced and never sent, large
//! produce frames sent half-way, idle connections. The broker's resident
//! memory must stay within a stated multiple of its budgets while a
//! well-behaved client on its own connection keeps getting answers within
//! a bound, every byte of its records read back.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{poll_until, raw, Broker};
use protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use protocol::kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use protocol::kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, FetchRequest, FetchResponse, MetadataRequest,
    MetadataResponse, ProduceRequest, ProduceResponse, TopicName,
};
use protocol::kafka_protocol::protocol::StrBytes;

const MIB: u64 = 1 << 20;
/// The budgets every broker here runs with (two cores: half each).
const REQUEST_BUDGET: u64 = 32 * MIB;
const RESPONSE_BUDGET: u64 = 32 * MIB;
const CONNECTION_RESPONSE_BUDGET: u64 = 8 * MIB;
const RECEIVE_TIMEOUT_MS: u64 = 3_000;
/// What the well-behaved client allows itself per request while attacked.
const ANSWER_BOUND: Duration = Duration::from_secs(3);
/// How long each attack is kept up while the well-behaved client works.
const ATTACK_SECS: u64 = 8;

/// A broker with the budgets above and its admin listener on a free port
/// (the figures of /metrics are read from it).
fn start_budgeted(extra: &[&str]) -> Broker {
    let admin = format!("127.0.0.1:{}", common::free_port());
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

fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Samples the broker's resident memory every 20 ms; past `kill_above` it
/// kills the broker at once (so a broken bound fails the test instead of
/// exhausting the machine) and remembers that it did.
struct RssWatch {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    killed: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl RssWatch {
    fn start(pid: u32, kill_above: u64) -> RssWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let killed = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (stop, peak, killed) = (stop.clone(), peak.clone(), killed.clone());
            move || {
                // Bounded by the attack's length; the stop flag ends it sooner.
                let deadline = Instant::now() + Duration::from_secs(600);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let Some(rss) = rss_bytes(pid) else { return };
                    peak.fetch_max(rss, Ordering::Relaxed);
                    if rss > kill_above {
                        killed.store(true, Ordering::Relaxed);
                        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        });
        RssWatch {
            stop,
            peak,
            killed,
            thread: Some(thread),
        }
    }

    /// The peak seen, and whether the watch had to kill the broker.
    fn finish(mut self) -> (u64, bool) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        (
            self.peak.load(Ordering::Relaxed),
            self.killed.load(Ordering::Relaxed),
        )
    }
}

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

fn produce_request(topic: &str, records: Bytes, acks: i16) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])])
}

fn fetch_request(topic: &str, offset: i64, max_bytes: i32) -> FetchRequest {
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

fn produce(stream: &mut TcpStream, topic: &str, batch: &[u8], correlation_id: i32) -> i64 {
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
fn assert_stored_as_sent(stored: &[u8], sent: &[u8], offset: i64) {
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
fn well_behaved(broker: &Broker, topic: &str, secs: u64) -> (Duration, usize) {
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
        std::thread::sleep(Duration::from_millis(100));
    }
    (slowest, rounds)
}

fn admin_address(broker: &Broker) -> String {
    broker
        .arg("--admin-listen")
        .expect("started with an admin listener")
        .to_string()
}

/// A figure of /metrics for the whole broker (its `shard="all"` sample).
fn metric(broker: &Broker, name: &str) -> u64 {
    let (code, text) = common::http_get(&admin_address(broker), "/metrics");
    assert_eq!(code, 200);
    let sample = format!("{name}{{shard=\"all\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&sample)?.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no {sample} in /metrics"))
}

fn assert_within(broker: &Broker, watch: RssWatch, baseline: u64, bound: u64, what: &str) {
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
fn hostile(
    broker: &Broker,
    connections: usize,
    bytes: Vec<u8>,
    release: Arc<AtomicBool>,
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
                let deadline = Instant::now() + Duration::from_secs(120);
                while !release.load(Ordering::Relaxed) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect()
}

fn end(release: Arc<AtomicBool>, threads: Vec<JoinHandle<()>>) {
    release.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
}

/// The growth every attack here must stay within: twice the budgets.
/// Resident memory also holds what the allocators keep, the batch cache and
/// the connections' own buffers; twice the budgets leaves room for those.
const BUDGET_BOUND: u64 = 2 * (REQUEST_BUDGET + RESPONSE_BUDGET);

#[test]
fn fetchers_that_never_read_are_held_to_the_response_budgets() {
    let broker = start_budgeted(&[]);
    // 24 MiB in one partition, so every fetch could answer 24 MiB.
    let mut setup = raw::connect(&broker);
    for i in 0..24 {
        let batch = protocol::batch::build::patterned(1_700_000_000_000, 1_000, 1_000, i);
        produce(&mut setup, "data", &batch, i as i32);
    }
    produce(
        &mut setup,
        "good",
        &protocol::batch::build::patterned(1, 1, 1, 1),
        99,
    );
    let baseline = rss_bytes(broker.pid()).unwrap();
    let watch = RssWatch::start(broker.pid(), baseline + 2 * BUDGET_BOUND);

    // Ten connections, each pipelining 300 fetches of up to 50 MB of the
    // whole partition, never reading an answer.
    let mut fetches = Vec::new();
    for i in 0..300 {
        fetches.extend(raw::frame(
            ApiKey::Fetch,
            12,
            i,
            "never-reads",
            &fetch_request("data", 0, 50_000_000),
        ));
    }
    let release = Arc::new(AtomicBool::new(false));
    let threads = hostile(&broker, 10, fetches, release.clone());
    let (slowest, rounds) = well_behaved(&broker, "good", ATTACK_SECS);
    let response_peak = metric(&broker, "strom_queued_response_bytes_peak");
    assert_within(
        &broker,
        watch,
        baseline,
        BUDGET_BOUND,
        "never-reading fetchers",
    );
    eprintln!(
        "well-behaved: {rounds} rounds, slowest answer {slowest:?}; response budget peak {} MiB",
        response_peak / MIB
    );
    assert!(
        rounds >= 10,
        "the well-behaved client got only {rounds} rounds done"
    );
    // Beyond the cores' shares, a connection holds at most its own budget
    // and one batch (a fetch always answers its first batch).
    assert!(
        response_peak <= RESPONSE_BUDGET + 10 * (CONNECTION_RESPONSE_BUDGET + MIB),
        "responses waiting peaked at {} MiB",
        response_peak / MIB
    );
    end(release, threads);
}

#[test]
fn frames_announced_and_never_sent_hold_neither_memory_nor_budget() {
    let broker = start_budgeted(&[]);
    let mut setup = raw::connect(&broker);
    produce(
        &mut setup,
        "good",
        &protocol::batch::build::patterned(1, 1, 1, 1),
        1,
    );
    let baseline = rss_bytes(broker.pid()).unwrap();
    let watch = RssWatch::start(broker.pid(), baseline + 2 * BUDGET_BOUND);

    // 300 connections announce an 8 MiB Metadata frame (the largest allowed
    // for it) and send its api key and a few bytes more, then stall.
    let release = Arc::new(AtomicBool::new(false));
    let threads = hostile(
        &broker,
        300,
        {
            let mut head = ((8u32 << 20) as i32).to_be_bytes().to_vec();
            head.extend_from_slice(&(ApiKey::Metadata as i16).to_be_bytes());
            head.extend_from_slice(&[0, 12, 0, 0, 0, 1]);
            head
        },
        release.clone(),
    );
    let (slowest, rounds) = well_behaved(&broker, "good", ATTACK_SECS);
    assert_within(
        &broker,
        watch,
        baseline,
        BUDGET_BOUND,
        "stalled 8 MiB headers",
    );
    eprintln!("well-behaved: {rounds} rounds, slowest answer {slowest:?}");
    assert!(
        rounds >= 10,
        "the well-behaved client got only {rounds} rounds done"
    );
    // Past the receive timeout every stalled connection was closed.
    let closed = poll_until(Duration::from_secs(10), || {
        let closed = metric(&broker, "strom_connections_closed_receive_timeout_total");
        (closed >= 300).then_some(closed)
    });
    assert!(
        closed.is_some(),
        "stalled connections closed: {} of 300",
        metric(&broker, "strom_connections_closed_receive_timeout_total")
    );
    end(release, threads);
}

#[test]
fn half_sent_large_produce_frames_wait_for_budget_and_time_out() {
    let broker = start_budgeted(&[]);
    let mut setup = raw::connect(&broker);
    produce(
        &mut setup,
        "good",
        &protocol::batch::build::patterned(1, 1, 1, 1),
        1,
    );
    let baseline = rss_bytes(broker.pid()).unwrap();
    // A frame larger than a core's whole share is admitted alone, so each
    // core may hold one such frame beyond its budget: here half of 100 MiB.
    let frame_bytes: u64 = 100 * MIB;
    let bound = BUDGET_BOUND + 2 * frame_bytes;
    let watch = RssWatch::start(broker.pid(), baseline + 2 * bound);

    // 40 connections each send half of a 100 MiB Produce frame, then stall.
    let release = Arc::new(AtomicBool::new(false));
    let threads = hostile(
        &broker,
        40,
        {
            let mut half = vec![0x5a; (frame_bytes / 2) as usize];
            half[..4].copy_from_slice(&(frame_bytes as i32).to_be_bytes());
            half[4..6].copy_from_slice(&(ApiKey::Produce as i16).to_be_bytes());
            half
        },
        release.clone(),
    );
    let (slowest, rounds) = well_behaved(&broker, "good", ATTACK_SECS);
    let request_peak = metric(&broker, "strom_queued_request_bytes_peak");
    assert_within(
        &broker,
        watch,
        baseline,
        bound,
        "half-sent 100 MiB produce frames",
    );
    eprintln!(
        "well-behaved: {rounds} rounds, slowest answer {slowest:?}; request budget peak {} MiB",
        request_peak / MIB
    );
    assert!(
        rounds >= 10,
        "the well-behaved client got only {rounds} rounds done"
    );
    // Per core: one large frame alone, or its share, plus small frames.
    assert!(
        request_peak <= 2 * frame_bytes + 4 * MIB,
        "request budget peaked at {} MiB",
        request_peak / MIB
    );
    assert!(
        metric(&broker, "strom_connections_closed_receive_timeout_total") >= 2,
        "admitted frames that stalled were closed at the receive timeout\n{}",
        broker.log()
    );
    end(release, threads);
}

#[test]
fn idle_connections_are_closed_and_a_long_poll_is_not_idle() {
    let broker = start_budgeted(&["--set", "connections.max.idle.ms=1000"]);
    let mut setup = raw::connect(&broker);
    produce(
        &mut setup,
        "good",
        &protocol::batch::build::patterned(1, 1, 1, 1),
        1,
    );

    // A connection that says nothing is closed after about a second.
    let mut idle = TcpStream::connect(broker.address()).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let mut byte = [0u8; 1];
    let read = idle.read(&mut byte);
    assert!(
        matches!(read, Ok(0)),
        "an idle connection is closed by the broker, got {read:?}"
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "closed after {took:?}, connections.max.idle.ms=1000"
    );
    assert!(metric(&broker, "strom_connections_closed_idle_total") >= 1);

    // A fetch long-polling for 2.5 s keeps its connection: a request in
    // flight is not idleness.
    let mut polling = raw::connect(&broker);
    let started = Instant::now();
    let fetched: FetchResponse = raw::call(
        &mut polling,
        ApiKey::Fetch,
        12,
        7,
        "long-poll",
        &fetch_request("good", 1, 1 << 20)
            .with_max_wait_ms(2_500)
            .with_min_bytes(1),
    );
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert_eq!(fetched.responses[0].partitions[0].error_code, 0);
}
