//! Requests pipelined on one connection: each answer leaves as soon as it
//! and every answer before it are ready, never held back behind a slower
//! request that follows it.

mod common;

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::raw::{self, frame as raw_frame, read_response};
use common::Broker;
use protocol::batch::build::{self, NewRecord};
use protocol::kafka_protocol::messages::create_topics_request::CreatableTopic;
use protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use protocol::kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use protocol::kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, CreateTopicsRequest,
    CreateTopicsResponse, FetchRequest, FetchResponse, ProduceRequest, ProduceResponse, TopicName,
};
use protocol::kafka_protocol::protocol::StrBytes;

const CLIENT_ID: &str = "pipelining-test";
/// How long the trailing fetch waits for data that never comes.
const FETCH_WAIT_MS: i32 = 3_000;

fn create_topic(stream: &mut std::net::TcpStream, topic: &str, partitions: i32) {
    let create = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_num_partitions(partitions)
            .with_replication_factor(1)])
        .with_timeout_ms(10_000);
    stream
        .write_all(&raw_frame(ApiKey::CreateTopics, 5, 1, CLIENT_ID, &create))
        .unwrap();
    let created: CreateTopicsResponse = read_response(stream, 5, 1);
    assert_eq!(created.topics[0].error_code, 0, "{:?}", created.topics[0]);
}

#[test]
fn an_answer_is_not_held_back_by_a_long_poll_behind_it() {
    let broker = Broker::start(&[]);
    let topic = "pipelined";
    let mut stream = raw::connect(&broker);
    create_topic(&mut stream, topic, 1);

    // A quick request and, right behind it in the same write, a fetch of
    // the empty partition that long-polls for FETCH_WAIT_MS.
    let fetch = FetchRequest::default()
        .with_replica_id(protocol::kafka_protocol::messages::BrokerId(-1))
        .with_max_wait_ms(FETCH_WAIT_MS)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str(topic)))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    let mut both = raw_frame(
        ApiKey::ApiVersions,
        0,
        2,
        CLIENT_ID,
        &ApiVersionsRequest::default(),
    );
    both.extend(raw_frame(ApiKey::Fetch, 4, 3, CLIENT_ID, &fetch));
    let sent = Instant::now();
    stream.write_all(&both).unwrap();

    let versions: ApiVersionsResponse = read_response(&mut stream, 0, 2);
    let first = sent.elapsed();
    assert_eq!(versions.error_code, 0);
    let fetched: FetchResponse = read_response(&mut stream, 4, 3);
    let second = sent.elapsed();
    assert_eq!(fetched.responses[0].partitions[0].error_code, 0);
    // The fetch really waited, so an answer held behind it would show.
    assert!(
        second >= Duration::from_millis(FETCH_WAIT_MS as u64 - 500),
        "the fetch answered after {second:?}, without long-polling"
    );
    assert!(
        first < Duration::from_millis(1_000),
        "ApiVersions answered after {first:?}: held back behind the fetch (answered after {second:?})"
    );
}

/// Produce requests pipelined on one connection.
const PIPELINED_REQUESTS: usize = 120;
/// Records per batch (one batch per request), numbered, and their size:
/// batches of about 128 KiB.
const RECORDS_PER_BATCH: usize = 128;
const RECORD_VALUE_BYTES: usize = 1_000;
/// The broker is stopped (SIGSTOP) for these many milliseconds in turn,
/// with `STALL_GAP_MS` of running between stalls, while the requests flow:
/// the stalls that were logged when batches were found permuted.
const STALLS_MS: [u64; 4] = [700, 250, 1_600, 400];
const STALL_GAP_MS: u64 = 300;
/// Bound on the stalls: the test stops stalling the broker after this many.
const STALLS_MAX: usize = 200;

/// Stops and continues the broker process in turn from a thread until
/// dropped; always leaves it running.
struct Staller {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<usize>>,
    pid: i32,
}

impl Staller {
    fn start(pid: u32) -> Self {
        let pid = pid as i32;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || {
                let mut stalls = 0;
                while !stop.load(Ordering::Relaxed) && stalls < STALLS_MAX {
                    std::thread::sleep(Duration::from_millis(STALL_GAP_MS));
                    // SAFETY: signals to the broker this test started.
                    unsafe { libc::kill(pid, libc::SIGSTOP) };
                    std::thread::sleep(Duration::from_millis(STALLS_MS[stalls % STALLS_MS.len()]));
                    unsafe { libc::kill(pid, libc::SIGCONT) };
                    stalls += 1;
                }
                stalls
            }
        });
        Self {
            stop,
            thread: Some(thread),
            pid,
        }
    }

    /// Stops stalling; returns how many stalls there were.
    fn finish(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Staller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // SAFETY: as above; the broker must not stay stopped.
        unsafe { libc::kill(self.pid, libc::SIGCONT) };
    }
}

/// The batch of request `index`: records numbered by request and record.
fn numbered_batch(acks: i16, partition: i32, index: usize) -> Bytes {
    let records: Vec<NewRecord> = (0..RECORDS_PER_BATCH)
        .map(|record| {
            let mut value =
                format!("acks {acks} partition {partition} request {index} record {record} ")
                    .into_bytes();
            value.resize(RECORD_VALUE_BYTES, b'.');
            NewRecord {
                value: Some(value),
                timestamp_delta: record as i64,
                ..Default::default()
            }
        })
        .collect();
    Bytes::from(build::batch(1_700_000_000_000 + index as i64, &records))
}

/// Sends every request on one connection without waiting for answers, then
/// checks each answer: no error, and base offsets in request order.
/// Returns the batches sent, in order.
fn pipeline_produce(broker: &Broker, topic: &str, partition: i32, acks: i16) -> Vec<Bytes> {
    let batches: Vec<Bytes> = (0..PIPELINED_REQUESTS)
        .map(|i| numbered_batch(acks, partition, i))
        .collect();
    let mut stream = raw::connect(broker);
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let frames: Vec<Vec<u8>> = batches
        .iter()
        .enumerate()
        .map(|(i, batch)| {
            let request = ProduceRequest::default()
                .with_acks(acks)
                .with_timeout_ms(30_000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(batch.clone()))])]);
            raw_frame(ApiKey::Produce, 9, i as i32, CLIENT_ID, &request)
        })
        .collect();
    // Written from a thread: the answers must be read meanwhile, or both
    // ends block on full socket buffers.
    let sender = std::thread::spawn(move || {
        for frame in frames {
            writer
                .write_all(&frame)
                .expect("a pipelined produce request is sent");
        }
    });
    let mut previous: Option<i64> = None;
    for i in 0..PIPELINED_REQUESTS {
        let response: ProduceResponse = read_response(&mut stream, 9, i as i32);
        let answer = &response.responses[0].partition_responses[0];
        assert_eq!(
            answer.error_code, 0,
            "acks={acks} partition {partition}: request {i} answered with an error: {answer:?}"
        );
        if let Some(previous) = previous {
            assert_eq!(
                answer.base_offset,
                previous + RECORDS_PER_BATCH as i64,
                "acks={acks} partition {partition}: request {i} appended out of request order"
            );
        }
        previous = Some(answer.base_offset);
    }
    sender.join().unwrap();
    batches
}

/// Every batch of `partition`, read back from offset 0.
fn read_back(broker: &Broker, topic: &str, partition: i32, count: usize) -> Vec<Bytes> {
    let mut stream = raw::connect(broker);
    let mut batches = Vec::new();
    let mut offset = 0i64;
    for correlation_id in 0..(count as i32 * 2) {
        if batches.len() >= count {
            break;
        }
        let fetch = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(8 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(8 << 20)])]);
        stream
            .write_all(&raw_frame(
                ApiKey::Fetch,
                11,
                correlation_id,
                CLIENT_ID,
                &fetch,
            ))
            .unwrap();
        let fetched: FetchResponse = read_response(&mut stream, 11, correlation_id);
        let data = &fetched.responses[0].partitions[0];
        assert_eq!(data.error_code, 0);
        let records = data.records.clone().unwrap_or_default();
        assert!(
            !records.is_empty(),
            "nothing at offset {offset} of partition {partition}"
        );
        for batch in protocol::batch::split_batches(records) {
            let batch = batch.expect("a whole stored batch");
            offset = batch.header().last_offset() + 1;
            batches.push(batch.into_bytes());
        }
    }
    batches
}

/// Kafka handles a connection's requests one after another, so a client's
/// pipelined produce requests are appended in the order it sent them. Here
/// requests are handled concurrently: this pipelines numbered batches on
/// one connection (acks=1 and acks=all, to a partition of the connection's
/// core and to one of the other core) while the broker is stopped again
/// and again, then checks every answer and the stored bytes, batch by
/// batch.
#[test]
fn pipelined_produce_requests_are_stored_in_request_order_through_stalls() {
    let broker = Broker::start(&["--set", "strom.preallocate.bytes=1048576"]);
    let topic = "ordered";
    create_topic(&mut raw::connect(&broker), topic, 2);
    let staller = Staller::start(broker.pid());
    let mut sent: Vec<Vec<Bytes>> = vec![Vec::new(), Vec::new()];
    for acks in [1i16, -1] {
        for partition in [0, 1] {
            sent[partition as usize].extend(pipeline_produce(&broker, topic, partition, acks));
        }
    }
    let stalls = staller.finish();
    assert!(stalls >= 2, "the broker was stalled {stalls} times only");
    for partition in [0, 1] {
        let expected = &sent[partition as usize];
        let stored = read_back(&broker, topic, partition, expected.len());
        assert_eq!(
            stored.len(),
            expected.len(),
            "batches of partition {partition}"
        );
        for (i, (stored, sent)) in stored.iter().zip(expected).enumerate() {
            let base_offset = i64::from_be_bytes(stored[..8].try_into().unwrap());
            assert_eq!(base_offset, (i * RECORDS_PER_BATCH) as i64);
            // The base offset and leader epoch are the broker's; from the
            // attributes on (what the CRC covers) the bytes are the client's.
            assert!(
                stored[21..] == sent[21..],
                "partition {partition}: stored batch {i} is not the batch sent {i}th"
            );
        }
    }
}
