//! Idempotent producers across restarts, against the real broker with raw
//! produce requests (explicit producer id, epoch and sequence): a batch
//! retried after 160,000 other offsets and a crash or a clean stop is
//! answered with its original offset and stored once; a damaged snapshot
//! is reported and not trusted; a producer the broker has no state for
//! that continues a sequence is refused and nothing is stored.

mod common;

use std::net::TcpStream;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use common::{raw, Broker};
use protocol::batch::build::{pattern, patterned};
use protocol::batch::{compute_crc, split_batches};
use protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use protocol::kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use protocol::kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, ProduceRequest, ProduceResponse, TopicName,
};
use protocol::kafka_protocol::protocol::StrBytes;

const CLIENT_ID: &str = "idempotence-restart-test";
/// A log filter that shows each partition's `producer state rebuilt` line.
const REBUILD_LINES: &str = "info,broker::partition=debug";
const TOPIC: &str = "idem";
const BASE_TIMESTAMP_MS: i64 = 1_700_000_000_000;
const PRODUCER_ID: i64 = 7_001;
const EPOCH: i16 = 0;
/// Records of the idempotent batch that is retried.
const FIRST_RECORDS: usize = 10;
/// Non-idempotent filler after it: 160,000 offsets, past the 100,000 the
/// broker used to rebuild producer state from.
const FILLER_BATCHES: usize = 16;
const FILLER_RECORDS: usize = 10_000;
const UNKNOWN_PRODUCER_ID: i16 = 59;
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
/// Fetch rounds allowed to read a partition back (each reads up to 4 MiB).
const FETCH_ROUNDS_MAX: usize = 1_000;

/// The expected content of one record: key and value.
type Expected = (Vec<u8>, Vec<u8>);
/// A record read back: offset, key, value.
type ReadRecord = (i64, Vec<u8>, Vec<u8>);

fn records_of(seed: u64, count: usize, value_len: usize) -> Vec<Expected> {
    (0..count)
        .map(|i| {
            (
                format!("k{seed}-{i}").into_bytes(),
                pattern(seed.wrapping_add(i as u64), value_len),
            )
        })
        .collect()
}

/// A v2 batch of `count` patterned records from an idempotent producer.
fn idempotent_batch(
    seed: u64,
    count: usize,
    producer_id: i64,
    epoch: i16,
    first_sequence: i32,
) -> Bytes {
    let mut batch = patterned(BASE_TIMESTAMP_MS, count, 16, seed);
    batch[43..51].copy_from_slice(&producer_id.to_be_bytes());
    batch[51..53].copy_from_slice(&epoch.to_be_bytes());
    batch[53..57].copy_from_slice(&first_sequence.to_be_bytes());
    let crc = compute_crc(&batch);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(batch)
}

/// Produces one batch with acks=all; returns (error code, base offset).
fn produce(stream: &mut TcpStream, version: i16, topic: &str, batch: &Bytes) -> (i16, i64) {
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch.clone()))])]);
    let response: ProduceResponse =
        raw::call(stream, ApiKey::Produce, version, 1, CLIENT_ID, &request);
    let partition = &response.responses[0].partition_responses[0];
    (partition.error_code, partition.base_offset)
}

/// Reads the whole partition back: (high watermark, (offset, key, value)
/// of every record in order).
fn read_all(stream: &mut TcpStream, topic: &str) -> (i64, Vec<ReadRecord>) {
    let mut records = Vec::new();
    let mut offset = 0i64;
    for round in 0..FETCH_ROUNDS_MAX {
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(8 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(4 << 20)])]);
        let response: FetchResponse = raw::call(
            stream,
            ApiKey::Fetch,
            4,
            100 + round as i32,
            CLIENT_ID,
            &request,
        );
        let partition = &response.responses[0].partitions[0];
        assert_eq!(partition.error_code, 0, "fetch at {offset}");
        let high_watermark = partition.high_watermark;
        if offset >= high_watermark {
            return (high_watermark, records);
        }
        let bytes = partition.records.clone().unwrap_or_default();
        assert!(
            !bytes.is_empty(),
            "no records at {offset} below {high_watermark}"
        );
        for batch in split_batches(bytes) {
            let batch = batch.expect("a whole, valid batch");
            for record in batch.records().expect("uncompressed records") {
                let record = record.expect("a well-formed record");
                if record.offset < offset {
                    continue;
                }
                records.push((
                    record.offset,
                    record.key.expect("a key").to_vec(),
                    record.value.expect("a value").to_vec(),
                ));
                offset = record.offset + 1;
            }
        }
    }
    panic!("partition not read back within {FETCH_ROUNDS_MAX} fetches");
}

/// Asserts the partition holds exactly `expected`, each record once, at
/// offsets 0, 1, 2, ...
fn assert_holds_exactly(stream: &mut TcpStream, expected: &[Expected]) {
    let (high_watermark, records) = read_all(stream, TOPIC);
    assert_eq!(high_watermark, expected.len() as i64, "log end");
    assert_eq!(records.len(), expected.len(), "records read back");
    for (i, ((offset, key, value), (want_key, want_value))) in
        records.iter().zip(expected).enumerate()
    {
        assert_eq!(*offset, i as i64, "record {i}'s offset");
        assert_eq!(key, want_key, "record {i}'s key");
        assert_eq!(value, want_value, "record {i}'s value");
    }
}

fn partition_dir(broker: &Broker) -> PathBuf {
    broker.data_dir.join(format!("{TOPIC}-0"))
}

fn snapshots(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("partition directory")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "snapshot"))
        .collect();
    found.sort();
    found
}

/// Writes the idempotent batch at offset 0 and 160,000 offsets of filler;
/// returns the expected content and the retried batch.
fn write_batch_then_filler(broker: &Broker) -> (Vec<Expected>, Bytes) {
    let mut stream = raw::connect(broker);
    let first = idempotent_batch(1, FIRST_RECORDS, PRODUCER_ID, EPOCH, 0);
    assert_eq!(produce(&mut stream, 9, TOPIC, &first), (0, 0));
    let mut expected = records_of(1, FIRST_RECORDS, 16);
    for i in 0..FILLER_BATCHES {
        let seed = 100 + i as u64;
        let filler = Bytes::from(patterned(BASE_TIMESTAMP_MS, FILLER_RECORDS, 8, seed));
        let (code, base) = produce(&mut stream, 9, TOPIC, &filler);
        assert_eq!((code, base), (0, expected.len() as i64), "filler batch {i}");
        expected.extend(records_of(seed, FILLER_RECORDS, 8));
    }
    (expected, first)
}

/// After the restart: the retry is answered with offset 0 and stores
/// nothing; the producer's next batch follows at the log end; every record
/// is there once.
fn assert_retry_is_a_duplicate(broker: &Broker, mut expected: Vec<Expected>, first: &Bytes) {
    let mut stream = raw::connect(broker);
    let log_end = expected.len() as i64;
    assert_eq!(
        produce(&mut stream, 9, TOPIC, first),
        (0, 0),
        "the retried batch is answered with its original offset\n{}",
        broker.log()
    );
    assert_holds_exactly(&mut stream, &expected);
    let next = idempotent_batch(2, 3, PRODUCER_ID, EPOCH, FIRST_RECORDS as i32);
    assert_eq!(produce(&mut stream, 9, TOPIC, &next), (0, log_end));
    expected.extend(records_of(2, 3, 16));
    // A sequence gap is still refused after the restart.
    let gap = idempotent_batch(3, 1, PRODUCER_ID, EPOCH, FIRST_RECORDS as i32 + 10);
    assert_eq!(
        produce(&mut stream, 9, TOPIC, &gap).0,
        OUT_OF_ORDER_SEQUENCE_NUMBER
    );
    assert_holds_exactly(&mut stream, &expected);
}

/// No roll, no snapshot: the whole log is replayed after the crash.
#[test]
fn a_retry_after_a_crash_and_160000_offsets_is_answered_with_its_offset() {
    let mut broker = Broker::start(&[]);
    let (expected, first) = write_batch_then_filler(&broker);
    assert!(snapshots(&partition_dir(&broker)).is_empty());
    broker.crash_and_restart();
    assert_retry_is_a_duplicate(&broker, expected, &first);
}

/// A clean stop writes a snapshot at the log end; the next start uses it.
#[test]
fn a_retry_after_a_clean_stop_is_answered_with_its_offset() {
    let mut broker = Broker::start_with_env(&[], &[("STROM_LOG", REBUILD_LINES)]);
    let (expected, first) = write_batch_then_filler(&broker);
    broker.restart();
    let dir = partition_dir(&broker);
    let names: Vec<String> = snapshots(&dir)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [format!("{:020}.snapshot", expected.len())],
        "one snapshot, at the log end"
    );
    assert!(
        broker
            .log()
            .contains("snapshot=160010 replayed_from=160010"),
        "state rebuilt from the snapshot:\n{}",
        broker.log()
    );
    // A snapshot past the log end (as a log cut back at recovery leaves)
    // is deleted at the next start, not trusted.
    let beyond = dir.join(format!("{:020}.snapshot", 999_999_999u64));
    std::fs::copy(dir.join(&names[0]), &beyond).unwrap();
    broker.crash_and_restart();
    assert!(!beyond.exists(), "the snapshot past the log end is deleted");
    assert!(broker.log().contains("snapshot past the log end"));
    assert_eq!(snapshots(&dir).len(), 1);
    assert_retry_is_a_duplicate(&broker, expected, &first);
}

/// `producer.id.expiration.ms`: an idle producer is dropped from state, so
/// continuing its sequence is then refused as an unknown producer.
#[test]
fn an_idle_producer_expires() {
    let broker = Broker::start(&[
        "--set",
        "producer.id.expiration.ms=1000",
        "--set",
        "log.retention.check.interval.ms=100",
    ]);
    let mut stream = raw::connect(&broker);
    let first = idempotent_batch(8, 4, 9_001, 0, 0);
    assert_eq!(produce(&mut stream, 9, TOPIC, &first), (0, 0));
    let expired = common::poll_until(std::time::Duration::from_secs(20), || {
        broker
            .log()
            .contains("expired idle producers")
            .then_some(())
    });
    assert!(expired.is_some(), "no expiry logged:\n{}", broker.log());
    let next = idempotent_batch(9, 1, 9_001, 0, 4);
    assert_eq!(
        produce(&mut stream, 9, TOPIC, &next),
        (UNKNOWN_PRODUCER_ID, -1)
    );
    assert_holds_exactly(&mut stream, &records_of(8, 4, 16));
}

/// 1 MiB segments roll about four times: a snapshot per roll (the newest
/// three kept), then a crash; the start loads the newest and replays the
/// log after it.
#[test]
fn a_retry_after_rolls_and_a_crash_is_answered_with_its_offset() {
    let mut broker = Broker::start(&["--set", "log.segment.bytes=1048576"]);
    let (expected, first) = write_batch_then_filler(&broker);
    let taken = snapshots(&partition_dir(&broker));
    assert_eq!(taken.len(), 3, "the newest three roll snapshots: {taken:?}");
    broker.crash_and_restart();
    assert_retry_is_a_duplicate(&broker, expected, &first);
}

/// Every snapshot damaged (one byte flipped in each): each is reported as
/// not trusted and the whole log is replayed instead.
#[test]
fn damaged_snapshots_are_reported_and_the_log_is_replayed() {
    let mut broker = Broker::start_with_env(
        &["--set", "log.segment.bytes=1048576"],
        &[("STROM_LOG", REBUILD_LINES)],
    );
    let (expected, first) = write_batch_then_filler(&broker);
    broker.restart();
    let dir = partition_dir(&broker);
    let taken = snapshots(&dir);
    assert_eq!(taken.len(), 3, "{taken:?}");
    // Damage them while the broker runs: the next start reads them.
    for path in &taken {
        let mut bytes = std::fs::read(path).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x40;
        std::fs::write(path, &bytes).unwrap();
    }
    let damaged_before = broker.log().matches("snapshot damaged").count();
    broker.crash_and_restart();
    let log = broker.log();
    assert_eq!(
        log.matches("snapshot damaged").count() - damaged_before,
        taken.len(),
        "each damaged snapshot reported:\n{log}"
    );
    assert!(log.contains("snapshot=-1 replayed_from=0"), "{log}");
    assert_retry_is_a_duplicate(&broker, expected, &first);
}

/// A producer id the partition has no state for, whose first sequence is
/// 5: UNKNOWN_PRODUCER_ID (produce v5+) or OUT_OF_ORDER_SEQUENCE_NUMBER
/// (v3-4), nothing stored; starting at sequence 0 it is accepted.
#[test]
fn an_unknown_producer_continuing_a_sequence_is_refused() {
    let broker = Broker::start(&[]);
    let mut stream = raw::connect(&broker);
    let continuing = idempotent_batch(5, 2, 4_242, 0, 5);
    assert_eq!(
        produce(&mut stream, 9, TOPIC, &continuing),
        (UNKNOWN_PRODUCER_ID, -1)
    );
    assert_eq!(
        produce(&mut stream, 5, TOPIC, &continuing),
        (UNKNOWN_PRODUCER_ID, -1)
    );
    assert_eq!(
        produce(&mut stream, 4, TOPIC, &continuing),
        (OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    );
    assert_holds_exactly(&mut stream, &[]);
    // From sequence 0 the producer is new; then 5 follows 0..=4.
    let start = idempotent_batch(6, 5, 4_242, 0, 0);
    assert_eq!(produce(&mut stream, 9, TOPIC, &start), (0, 0));
    assert_eq!(produce(&mut stream, 9, TOPIC, &continuing), (0, 5));
    let mut expected = records_of(6, 5, 16);
    expected.extend(records_of(5, 2, 16));
    assert_holds_exactly(&mut stream, &expected);
}
