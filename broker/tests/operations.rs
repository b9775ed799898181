//! The admin HTTP listener against a real broker: /metrics figures move by
//! exactly what was sent, /health, /ready, /status, `strom status`, and
//! io-properties.toml taken and logged at start.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::admin::Admin;
use common::{free_port, poll_until, run};
use protocol::kafka_protocol::messages::create_topics_request::CreatableTopic;
use protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use protocol::kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use protocol::kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, DeleteGroupsRequest, DeleteGroupsResponse,
    GroupId, HeartbeatRequest, HeartbeatResponse, MetadataRequest, MetadataResponse,
    ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader, TopicName,
};
use protocol::kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

const IO_TIMEOUT: Duration = Duration::from_secs(20);

/// The samples of /metrics, for these tests.
trait Scrape {
    fn scrape(&self) -> Metrics;
}

impl Scrape for Admin {
    /// Every sample of /metrics, by `name{labels}` as exposed.
    fn scrape(&self) -> Metrics {
        let (code, body) = self.get("/metrics");
        assert_eq!(code, 200, "{body}");
        let mut samples = HashMap::new();
        for line in body
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (name, value) = line.rsplit_once(' ').expect("name value");
            let value = if value == "NaN" {
                f64::NAN
            } else {
                value.parse().unwrap_or_else(|_| panic!("{line}"))
            };
            samples.insert(name.to_string(), value);
        }
        Metrics { samples, body }
    }
}

struct Metrics {
    samples: HashMap<String, f64>,
    body: String,
}

impl Metrics {
    /// A sample's value, 0 when absent (counters not yet touched).
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let key = if labels.is_empty() {
            name.to_string()
        } else {
            let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
            format!("{name}{{{}}}", inner.join(","))
        };
        self.samples.get(&key).copied().unwrap_or(0.0)
    }

    fn all(&self, name: &str) -> f64 {
        self.get(name, &[("shard", "all")])
    }

    fn api(&self, name: &str, api: &str) -> f64 {
        self.get(name, &[("shard", "all"), ("api", api)])
    }
}

fn produce_frame(topic: &str, partitions: &[i32], batch: &Bytes, correlation_id: i32) -> Vec<u8> {
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(
                partitions
                    .iter()
                    .map(|p| {
                        PartitionProduceData::default()
                            .with_index(*p)
                            .with_records(Some(batch.clone()))
                    })
                    .collect(),
            )]);
    let version = 9;
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Produce as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("operations-test")));
    let mut payload = BytesMut::new();
    header
        .encode(
            &mut payload,
            ApiKey::Produce.request_header_version(version),
        )
        .unwrap();
    request.encode(&mut payload, version).unwrap();
    let mut frame = (payload.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&payload);
    frame
}

/// Sends a produce frame and returns (response bytes with prefix, error codes).
fn produce(stream: &mut TcpStream, frame: &[u8]) -> (usize, Vec<i16>) {
    stream.write_all(frame).unwrap();
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).unwrap();
    let mut body = vec![0u8; i32::from_be_bytes(length) as usize];
    stream.read_exact(&mut body).unwrap();
    let mut response = Bytes::from(body.clone());
    ResponseHeader::decode(&mut response, ProduceResponse::header_version(9)).unwrap();
    let response = ProduceResponse::decode(&mut response, 9).unwrap();
    let codes = response
        .responses
        .iter()
        .flat_map(|t| t.partition_responses.iter().map(|p| p.error_code))
        .collect();
    (4 + body.len(), codes)
}

#[test]
fn metrics_move_by_exactly_what_was_produced() {
    let (broker, admin) = Admin::start(&["--set", "num.partitions=2"]);
    let batch = Bytes::from(protocol::batch::build::patterned(
        1_700_000_000_000,
        10,
        100,
        7,
    ));
    let mut stream = TcpStream::connect(broker.address()).unwrap();
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    // Create the topic (auto-create, 2 partitions, one per core) first.
    let (_, codes) = produce(&mut stream, &produce_frame("ops", &[0, 1], &batch, 1));
    assert_eq!(codes, [0, 0]);

    let before = admin.scrape();
    assert_eq!(before.get("strom_cores", &[]), 2.0);
    assert_eq!(before.get("strom_ready", &[]), 1.0);
    assert_eq!(before.get("strom_topics", &[]), 1.0);
    assert_eq!(before.all("strom_partitions"), 2.0);
    assert_eq!(before.get("strom_partitions", &[("shard", "0")]), 1.0);
    assert_eq!(before.get("strom_partitions", &[("shard", "1")]), 1.0);
    assert_eq!(before.all("strom_partition_leaders"), 2.0);
    assert_eq!(before.all("strom_connections"), 1.0, "{}", before.body);

    const REQUESTS: usize = 5;
    let mut sent_bytes = 0usize;
    let mut received_bytes = 0usize;
    for i in 0..REQUESTS {
        let frame = produce_frame("ops", &[0, 1], &batch, 10 + i as i32);
        sent_bytes += frame.len() - 4;
        let (received, codes) = produce(&mut stream, &frame);
        assert_eq!(codes, [0, 0]);
        received_bytes += received;
    }
    // One partition that does not exist: an error code, counted by name.
    let frame = produce_frame("ops", &[7], &batch, 99);
    sent_bytes += frame.len() - 4;
    let (received, codes) = produce(&mut stream, &frame);
    assert_eq!(codes, [3], "UNKNOWN_TOPIC_OR_PARTITION");
    received_bytes += received;

    let after = admin.scrape();
    let delta = |f: &dyn Fn(&Metrics) -> f64| f(&after) - f(&before);
    assert_eq!(
        delta(&|m| m.api("strom_requests_total", "Produce")),
        (REQUESTS + 1) as f64
    );
    assert_eq!(
        delta(&|m| m.api("strom_request_latency_seconds_count", "Produce")),
        (REQUESTS + 1) as f64
    );
    assert_eq!(
        delta(&|m| m.get(
            "strom_request_errors_total",
            &[
                ("shard", "all"),
                ("api", "Produce"),
                ("error", "UnknownTopicOrPartition")
            ]
        )),
        1.0
    );
    assert_eq!(
        delta(&|m| m.all("strom_request_bytes_total")),
        sent_bytes as f64
    );
    assert_eq!(
        delta(&|m| m.all("strom_response_bytes_total")),
        received_bytes as f64
    );
    // Batches are stored verbatim: the logs grew by exactly what was sent.
    assert_eq!(
        delta(&|m| m.all("strom_log_size_bytes")),
        (REQUESTS * 2 * batch.len()) as f64
    );
    // Every request had a partition on each core: one hop each, from
    // whichever core holds the connection.
    assert_eq!(
        delta(&|m| m.all("strom_cross_core_hops_total")),
        REQUESTS as f64
    );
    assert_eq!(after.all("strom_cross_core_hops_in_flight"), 0.0);
    // acks=all syncs: every sync is in the histogram.
    let syncs = delta(&|m| m.all("strom_fdatasync_total"));
    assert!(syncs >= 1.0, "{}", after.body);
    assert_eq!(
        delta(&|m| m.all("strom_fdatasync_latency_seconds_count")),
        syncs
    );
    assert_eq!(
        after.all("strom_fdatasync_total"),
        after.get("strom_fdatasync_total", &[("shard", "0")])
            + after.get("strom_fdatasync_total", &[("shard", "1")])
    );
    // Acknowledged small appends may wait in memory for their segment
    // write (the journal holds them): at most four times
    // strom.journal.bytes (64 KiB by default) per partition.
    let pending = after.all("strom_log_pending_bytes");
    assert!(pending <= 2.0 * 4.0 * 65536.0, "{pending} pending bytes");
    // Those small durable appends went through the cores' journals: each
    // journal write carries at least one record, and the records at least
    // the bytes of one batch.
    let journal_writes = delta(&|m| m.all("strom_journal_writes_total"));
    let journal_records = delta(&|m| m.all("strom_journal_records_total"));
    let journal_bytes = delta(&|m| m.all("strom_journal_bytes_total"));
    assert!(journal_writes >= 1.0, "{}", after.body);
    assert!(journal_records >= journal_writes, "{}", after.body);
    assert!(
        journal_bytes >= journal_records * batch.len() as f64,
        "{}",
        after.body
    );
    drop(stream);

    // A real client reads everything back: fetches are counted and served
    // from the batch cache (the records are recent).
    let output = run(
        Command::new("kcat").args([
            "-b",
            &broker.bootstrap(),
            "-C",
            "-t",
            "ops",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%o\n",
        ]),
        None,
        IO_TIMEOUT,
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let records = String::from_utf8_lossy(&output.stdout).lines().count();
    assert_eq!(records, (REQUESTS + 1) * 2 * 10, "every record consumed");
    let consumed = admin.scrape();
    assert!(consumed.api("strom_requests_total", "Fetch") >= 2.0);
    assert!(consumed.api("strom_requests_total", "Metadata") >= 1.0);
    let cached = consumed.get(
        "strom_batch_cache_reads_total",
        &[("shard", "all"), ("source", "cache")],
    );
    assert!(cached >= 2.0, "{}", consumed.body);
    let ratio = consumed.all("strom_batch_cache_hit_ratio");
    assert!(ratio > 0.0 && ratio <= 1.0, "{ratio}");
    // Histogram buckets are cumulative and end at the count.
    let count = consumed.api("strom_request_latency_seconds_count", "Fetch");
    let inf = consumed.get(
        "strom_request_latency_seconds_bucket",
        &[("shard", "all"), ("api", "Fetch"), ("le", "+Inf")],
    );
    assert_eq!(count, inf);

    // Deleting the topic takes its partitions and their bytes away, but no
    // counter goes back: a scraper would read that as a restart.
    let deleted = run(
        Command::new(env!("CARGO_BIN_EXE_strom")).args([
            "topic",
            "delete",
            "ops",
            "--bootstrap",
            &broker.bootstrap(),
        ]),
        None,
        IO_TIMEOUT,
    );
    assert!(
        deleted.status.success(),
        "{}",
        String::from_utf8_lossy(&deleted.stderr)
    );
    let gone = admin.scrape();
    assert_eq!(gone.all("strom_partitions"), 0.0, "{}", gone.body);
    assert_eq!(gone.all("strom_log_size_bytes"), 0.0, "{}", gone.body);
    for counter in [
        "strom_fdatasync_total",
        "strom_fdatasync_latency_seconds_count",
        "strom_fdatasync_latency_seconds_sum",
        "strom_log_writes_total",
        "strom_log_written_bytes_total",
    ] {
        assert!(
            gone.all(counter) >= consumed.all(counter),
            "{counter}: {} after the delete, {} before",
            gone.all(counter),
            consumed.all(counter)
        );
    }
    assert!(
        consumed.all("strom_fdatasync_total") >= 1.0,
        "{}",
        consumed.body
    );
    let cache_reads = |m: &Metrics| {
        m.get(
            "strom_batch_cache_reads_total",
            &[("shard", "all"), ("source", "cache")],
        )
    };
    assert!(cache_reads(&gone) >= cache_reads(&consumed) && cache_reads(&gone) >= 2.0);
}

/// Sends one request and decodes its response.
fn call<Req: Encodable, Resp: Decodable + HeaderVersion>(
    stream: &mut TcpStream,
    api_key: ApiKey,
    version: i16,
    request: &Req,
    correlation_id: i32,
) -> Resp {
    common::raw::call(
        stream,
        api_key,
        version,
        correlation_id,
        "operations-test",
        request,
    )
}

/// Every answered API counts the error codes of its responses (top level,
/// per topic, per group) under its own name, and nothing else moves.
/// A broker stopped for a second (SIGSTOP, as a debugger or an overloaded
/// host would) counts one stall on each core, logs it, and answers again.
#[test]
fn a_stopped_broker_counts_and_logs_one_stall_per_core() {
    let (broker, admin) = Admin::start(&[]);
    let before = admin.scrape();
    let stalls = |m: &Metrics, shard: &str| m.get("strom_core_stalls_total", &[("shard", shard)]);
    let signal = |signal| {
        // SAFETY: kill with a pid of our own child process.
        assert_eq!(unsafe { libc::kill(broker.pid() as i32, signal) }, 0);
    };
    // The fault itself: the broker stays stopped for twice the gap that
    // counts as a stall (nothing to poll: a stopped process shows nothing).
    signal(libc::SIGSTOP);
    std::thread::sleep(2 * protocol::watchdog::STALL_WARNING);
    signal(libc::SIGCONT);
    // Each core's watchdog runs within its period of the continue. (A
    // loaded machine may starve a core past 500 ms at other times too:
    // the counts grow by at least the stop.)
    let after = poll_until(Duration::from_secs(10), || {
        let m = admin.scrape();
        ["0", "1"]
            .iter()
            .all(|shard| stalls(&m, shard) > stalls(&before, shard))
            .then_some(m)
    })
    .unwrap_or_else(|| panic!("no stall counted on each core:\n{}", admin.scrape().body));
    assert_eq!(
        after.all("strom_core_stalls_total"),
        stalls(&after, "0") + stalls(&after, "1")
    );
    let stalled_ms = |line: &str| -> Option<u64> {
        line.split("stalled_ms=")
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let log = broker.log();
    for core in 0..2 {
        let name = format!("executor=strom-core-{core}");
        let logged = log
            .lines()
            .filter(|l| l.contains("executor did not run for a while") && l.contains(&name))
            .filter_map(stalled_ms)
            .any(|ms| (900..10_000).contains(&ms));
        assert!(
            logged,
            "no stall of about 1 s logged for core {core}:\n{log}"
        );
    }
    let (code, _) = admin.get("/ready");
    assert_eq!(code, 200);
}

#[test]
fn metrics_count_the_error_codes_of_every_api() {
    let (broker, admin) = Admin::start(&["--set", "auto.create.topics.enable=false"]);
    let mut stream = TcpStream::connect(broker.address()).unwrap();
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    let error_total = |m: &Metrics| -> f64 {
        m.samples
            .iter()
            .filter(|(k, _)| k.starts_with("strom_request_errors_total{shard=\"all\","))
            .map(|(_, v)| v)
            .sum()
    };
    let error = |m: &Metrics, api: &str, error: &str| {
        m.get(
            "strom_request_errors_total",
            &[("shard", "all"), ("api", api), ("error", error)],
        )
    };
    let before = admin.scrape();

    // Metadata for two unknown topics, auto-creation off: one error each.
    let topic = |name: &str| {
        MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(name.to_string()))))
    };
    let metadata: MetadataResponse = call(
        &mut stream,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default()
            .with_topics(Some(vec![topic("missing-a"), topic("missing-b")]))
            .with_allow_auto_topic_creation(false),
        1,
    );
    let codes: Vec<i16> = metadata.topics.iter().map(|t| t.error_code).collect();
    assert_eq!(codes, [3, 3], "UNKNOWN_TOPIC_OR_PARTITION");

    // CreateTopics: created (0), then the same topic again (36).
    let create = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("dup")))
            .with_num_partitions(1)
            .with_replication_factor(1)])
        .with_timeout_ms(10_000);
    for (correlation_id, expected) in [(2, 0), (3, 36)] {
        let created: CreateTopicsResponse = call(
            &mut stream,
            ApiKey::CreateTopics,
            7,
            &create,
            correlation_id,
        );
        let codes: Vec<i16> = created.topics.iter().map(|t| t.error_code).collect();
        assert_eq!(codes, [expected], "{created:?}");
    }

    // Heartbeat from a member of no group: UNKNOWN_MEMBER_ID (25), twice.
    for correlation_id in [4, 5] {
        let heartbeat: HeartbeatResponse = call(
            &mut stream,
            ApiKey::Heartbeat,
            4,
            &HeartbeatRequest::default()
                .with_group_id(GroupId(StrBytes::from_static_str("no-such-group")))
                .with_generation_id(1)
                .with_member_id(StrBytes::from_static_str("nobody")),
            correlation_id,
        );
        assert_eq!(heartbeat.error_code, 25);
    }

    // DeleteGroups of three unknown groups: GROUP_ID_NOT_FOUND (69) each.
    let deleted: DeleteGroupsResponse = call(
        &mut stream,
        ApiKey::DeleteGroups,
        2,
        &DeleteGroupsRequest::default().with_groups_names(
            ["gone-1", "gone-2", "gone-3"]
                .map(|g| GroupId(StrBytes::from_static_str(g)))
                .to_vec(),
        ),
        6,
    );
    let codes: Vec<i16> = deleted.results.iter().map(|r| r.error_code).collect();
    assert_eq!(codes, [69, 69, 69]);

    let after = admin.scrape();
    let delta = |f: &dyn Fn(&Metrics) -> f64| f(&after) - f(&before);
    for (api, requests) in [
        ("Metadata", 1.0),
        ("CreateTopics", 2.0),
        ("Heartbeat", 2.0),
        ("DeleteGroups", 1.0),
    ] {
        assert_eq!(delta(&|m| m.api("strom_requests_total", api)), requests);
    }
    let counted = [
        ("Metadata", "UnknownTopicOrPartition", 2.0),
        ("CreateTopics", "TopicAlreadyExists", 1.0),
        ("Heartbeat", "UnknownMemberId", 2.0),
        ("DeleteGroups", "GroupIdNotFound", 3.0),
    ];
    for (api, code, count) in counted {
        assert_eq!(
            delta(&|m| error(m, api, code)),
            count,
            "{api} {code}:\n{}",
            after.body
        );
    }
    // Nothing else was counted: successes (code 0) are not errors.
    let expected: f64 = counted.iter().map(|(_, _, count)| count).sum();
    assert_eq!(delta(&error_total), expected, "{}", after.body);
    drop(stream);
}

#[test]
fn health_ready_status_and_the_status_command() {
    let (broker, admin) = Admin::start(&["--set", "num.partitions=3"]);
    assert_eq!(admin.get("/health"), (200, "ok\n".to_string()));
    assert_eq!(admin.get("/ready"), (200, "ready\n".to_string()));
    assert_eq!(admin.get("/nothing-here").0, 404);
    let batch = Bytes::from(protocol::batch::build::patterned(
        1_700_000_000_000,
        4,
        50,
        1,
    ));
    let mut stream = TcpStream::connect(broker.address()).unwrap();
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    let (_, codes) = produce(
        &mut stream,
        &produce_frame("status-topic", &[0, 1, 2], &batch, 1),
    );
    assert_eq!(codes, [0, 0, 0]);

    let (code, body) = admin.get("/status");
    assert_eq!(code, 200);
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["cores"], 2);
    assert_eq!(status["ready"], true);
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(status["topics"][0]["name"], "status-topic");
    assert_eq!(status["topics"][0]["partitions"], 3);
    assert_eq!(status["totals"]["partitions"], 3);
    assert_eq!(status["shards"].as_array().unwrap().len(), 2);
    assert_eq!(status["disk"]["log_bytes"], 3 * batch.len());
    assert!(status["disk"]["filesystem_free_bytes"].as_u64().unwrap() > 0);

    let output = run(
        Command::new(env!("CARGO_BIN_EXE_strom")).args([
            "status",
            "--admin",
            &admin.address(),
            "--interval-ms",
            "200",
        ]),
        None,
        IO_TIMEOUT,
    );
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let version_line = format!("strom {}", env!("CARGO_PKG_VERSION"));
    for expected in [
        version_line.as_str(),
        "ready",
        "cores 2",
        "status-topic",
        "shard 0",
        "shard 1",
        "throughput",
        "disk",
    ] {
        assert!(text.contains(expected), "missing {expected:?}:\n{text}");
    }
    // Nothing listening: a clear error and exit 1.
    let output = run(
        Command::new(env!("CARGO_BIN_EXE_strom")).args([
            "status",
            "--admin",
            &format!("127.0.0.1:{}", free_port()),
        ]),
        None,
        IO_TIMEOUT,
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot reach"));
}

/// The broker runs without transparent huge pages (see
/// `broker::allocator::configure`): the kernel's flag on the process, and
/// the start line says so.
#[test]
fn the_broker_runs_without_transparent_huge_pages() {
    let (mut broker, _admin) = Admin::start(&[]);
    let pid = broker.pid();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("THP_enabled:"))
        .unwrap_or_else(|| panic!("no THP_enabled in /proc/{pid}/status:\n{status}"));
    assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
    let log = broker.log();
    assert!(
        log.contains(common::STARTED_LINE) && log.contains("transparent_huge_pages=off"),
        "{log}"
    );
    broker.stop();
}

#[test]
fn io_properties_size_the_writes_and_are_logged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("io-properties.toml");
    std::fs::write(
        &path,
        "[io]\n\"strom.write.bytes\" = 262144\n\"strom.writes.inflight\" = 8\n",
    )
    .unwrap();
    let setting = format!("strom.io.properties={}", path.display());
    let (mut broker, admin) = Admin::start(&["--set", &setting]);
    let log = broker.log();
    assert!(
        log.contains("io properties")
            && log.contains("262144")
            && log.contains("strom.writes.inflight=8"),
        "{log}"
    );
    let (_, body) = admin.get("/status");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["io_properties"], path.display().to_string());
    broker.stop();
}

#[test]
fn an_explicit_admin_address_that_is_taken_stops_the_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let output = run(
        Command::new(env!("CARGO_BIN_EXE_strom")).args([
            "start",
            "--data-dir",
            dir.path().join("data").to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
            "--cores",
            "1",
            "--admin-listen",
            &address,
        ]),
        None,
        IO_TIMEOUT,
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("admin.listen"), "{stderr}");
}
