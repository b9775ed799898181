//! Hostile and malformed input: each gets Kafka's error code or a closed
//! connection, and the broker keeps serving everyone else.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use bytes::{Buf, Bytes};
use common::{raw, Broker};
use protocol::kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use protocol::kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse,
    ProduceRequest, ProduceResponse, TopicName,
};
use protocol::kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

const CLIENT_ID: &str = "bad-input-test";
const CORRELATION_ID: i32 = 42;

fn request_frame<T: Encodable>(api_key: ApiKey, version: i16, body: &T) -> Vec<u8> {
    raw::frame(api_key, version, CORRELATION_ID, CLIENT_ID, body)
}

fn call<Req: Encodable, Resp: Decodable + HeaderVersion>(
    broker: &Broker,
    api_key: ApiKey,
    version: i16,
    body: &Req,
) -> Resp {
    let mut stream = raw::connect(broker);
    raw::call(
        &mut stream,
        api_key,
        version,
        CORRELATION_ID,
        CLIENT_ID,
        body,
    )
}

/// The broker closes this connection: a read sees end of stream (or reset).
fn assert_closed(mut stream: TcpStream) {
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(0) | Err(_) => {}
        Ok(n) => panic!("expected a closed connection, got {n} bytes"),
    }
}

fn assert_still_serving(broker: &Broker) {
    let response: ApiVersionsResponse = call(
        broker,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    );
    assert_eq!(response.error_code, 0);
    assert!(response
        .api_keys
        .iter()
        .any(|k| k.api_key == ApiKey::Produce as i16));
}

#[test]
fn garbage_oversized_truncated_and_unknown_requests_close_only_their_connection() {
    let broker = Broker::start(&[]);
    let idle = raw::connect(&broker);

    let mut garbage = raw::connect(&broker);
    garbage
        .write_all(&[
            0, 0, 0, 16, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
        ])
        .unwrap();
    assert_closed(garbage);

    let mut oversized = raw::connect(&broker);
    oversized.write_all(&i32::MAX.to_be_bytes()).unwrap();
    assert_closed(oversized);

    let mut negative = raw::connect(&broker);
    negative.write_all(&(-5i32).to_be_bytes()).unwrap();
    assert_closed(negative);

    let mut truncated = raw::connect(&broker);
    let frame = request_frame(ApiKey::Metadata, 9, &MetadataRequest::default());
    truncated.write_all(&frame[..frame.len() - 3]).unwrap();
    truncated.shutdown(std::net::Shutdown::Write).unwrap();
    assert_closed(truncated);

    let mut unknown_key = raw::connect(&broker);
    unknown_key
        .write_all(&[0, 0, 0, 10, 0x27, 0x0f, 0, 0, 0, 0, 0, 1, 0xff, 0xff])
        .unwrap();
    assert_closed(unknown_key);

    // Produce v13 (topic ids in place of names) is not served.
    let mut unsupported = raw::connect(&broker);
    unsupported
        .write_all(&request_frame(
            ApiKey::Produce,
            13,
            &ProduceRequest::default(),
        ))
        .unwrap();
    assert_closed(unsupported);

    // A Metadata v1 request claiming 2^31 - 1 topics in a 20-byte frame.
    let mut huge_count = raw::connect(&broker);
    let mut frame = request_frame(
        ApiKey::Metadata,
        1,
        &MetadataRequest::default().with_topics(Some(vec![])),
    );
    let len = frame.len();
    frame[len - 4..].copy_from_slice(&i32::MAX.to_be_bytes());
    huge_count.write_all(&frame).unwrap();
    assert_closed(huge_count);

    // The same in a flexible version: a compact (varint) count of 2^31.
    let mut huge_compact = raw::connect(&broker);
    let mut frame = request_frame(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(Some(vec![])),
    );
    let header_end = frame.len() - 4; // topics count, 3 bools/tags
    frame.truncate(header_end);
    frame.extend_from_slice(&[0x81, 0x80, 0x80, 0x80, 0x08, 1, 0, 0]);
    let len = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    huge_compact.write_all(&frame).unwrap();
    assert_closed(huge_compact);

    assert_still_serving(&broker);
    drop(idle);
    assert!(
        broker.log().contains("closing connection"),
        "one log line per closed connection:\n{}",
        broker.log()
    );
    // Refused by the shape check, before the decoders allocate from the count.
    assert!(
        broker.log().contains("array of 2147483647 elements"),
        "{}",
        broker.log()
    );
    assert!(
        broker.log().contains("array of 2147483648 elements"),
        "{}",
        broker.log()
    );
}

#[test]
fn api_versions_at_an_unsupported_version_gets_the_v0_answer() {
    let broker = Broker::start(&[]);
    let mut stream = raw::connect(&broker);
    stream
        .write_all(&request_frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())[..])
        .unwrap();
    let _ = raw::read_frame(&mut stream);
    // Same request bytes, version patched to 99: the body is not parsed.
    let mut frame = request_frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    frame[6..8].copy_from_slice(&99i16.to_be_bytes());
    stream.write_all(&frame).unwrap();
    let mut response = raw::read_frame(&mut stream);
    assert_eq!(
        response.get_i32(),
        42,
        "response header v0: correlation id only"
    );
    let body = ApiVersionsResponse::decode(&mut response, 0).unwrap();
    assert_eq!(body.error_code, 35);
    let own = body
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::ApiVersions as i16)
        .expect("ApiVersions listed");
    assert_eq!((own.min_version, own.max_version), (0, 4));
}

fn produce(topic: &str, partition: i32, records: Bytes) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])])
}

fn produce_error(broker: &Broker, request: &ProduceRequest) -> i16 {
    let response: ProduceResponse = call(broker, ApiKey::Produce, 9, request);
    response.responses[0].partition_responses[0].error_code
}

#[test]
fn bad_batches_unknown_topics_and_partitions_get_kafka_error_codes() {
    let broker = Broker::start(&[
        "--set",
        "auto.create.topics.enable=false",
        "--set",
        "message.max.bytes=2000",
    ]);
    let batch = protocol::batch::build::patterned(1_700_000_000_000, 5, 50, 7);

    // Unknown topic with auto-create off, in Metadata and Produce.
    let metadata: MetadataResponse = call(
        &broker,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(Some(vec![
            protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("nowhere")))),
        ])),
    );
    assert_eq!(metadata.topics[0].error_code, 3);
    assert_eq!(
        produce_error(&broker, &produce("nowhere", 0, Bytes::from(batch.clone()))),
        3
    );

    // Create the topic through CreateTopics, then the good batch works.
    let created: protocol::kafka_protocol::messages::CreateTopicsResponse = call(
        &broker,
        ApiKey::CreateTopics,
        7,
        &protocol::kafka_protocol::messages::CreateTopicsRequest::default().with_topics(vec![
            protocol::kafka_protocol::messages::create_topics_request::CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("strict")))
                .with_num_partitions(2)
                .with_replication_factor(1),
        ]),
    );
    assert_eq!(created.topics[0].error_code, 0);
    assert_eq!(
        produce_error(&broker, &produce("strict", 0, Bytes::from(batch.clone()))),
        0
    );

    // Negative and missing partitions.
    assert_eq!(
        produce_error(&broker, &produce("strict", -1, Bytes::from(batch.clone()))),
        3
    );
    assert_eq!(
        produce_error(&broker, &produce("strict", 2, Bytes::from(batch.clone()))),
        3
    );

    // A flipped byte under the CRC.
    let mut corrupt = batch.clone();
    *corrupt.last_mut().unwrap() ^= 0x55;
    assert_eq!(
        produce_error(&broker, &produce("strict", 0, Bytes::from(corrupt))),
        2
    );

    // Not a v2 batch at all.
    assert_eq!(
        produce_error(
            &broker,
            &produce("strict", 0, Bytes::from_static(&[1, 2, 3]))
        ),
        87
    );

    // Over message.max.bytes.
    let large = protocol::batch::build::patterned(1_700_000_000_000, 10, 300, 9);
    assert!(large.len() > 2000);
    assert_eq!(
        produce_error(&broker, &produce("strict", 0, Bytes::from(large))),
        10
    );

    // Nothing stored was touched: the good batch is still the only one.
    let listed: protocol::kafka_protocol::messages::ListOffsetsResponse = call(
        &broker,
        ApiKey::ListOffsets,
        7,
        &protocol::kafka_protocol::messages::ListOffsetsRequest::default().with_topics(vec![
            protocol::kafka_protocol::messages::list_offsets_request::ListOffsetsTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("strict")))
                .with_partitions(vec![protocol::kafka_protocol::messages::list_offsets_request::ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(-1)]),
        ]),
    );
    assert_eq!(listed.topics[0].partitions[0].offset, 5);
}

// Batches Kafka's LogValidator refuses record by record. Each test starts
// its own broker, stores a good batch, sends one bad shape and checks the
// exact error code, that the log end offset did not move, and that a good
// batch sent afterwards (its base offset forged) is stored at the log end
// and read back byte for byte.

use protocol::batch::build::{self, NewRecord};
use protocol::batch::{Compression, HEADER_LEN};
use protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use protocol::kafka_protocol::messages::{FetchRequest, FetchResponse};

const INVALID_RECORD: i16 = 87;
const CORRUPT_MESSAGE: i16 = 2;
const MESSAGE_TOO_LARGE: i16 = 10;
const TS: i64 = 1_700_000_000_000;
const TOPIC: &str = "validated";

fn create_topic(broker: &Broker, name: &str) {
    let created: protocol::kafka_protocol::messages::CreateTopicsResponse = call(
        broker,
        ApiKey::CreateTopics,
        7,
        &protocol::kafka_protocol::messages::CreateTopicsRequest::default().with_topics(vec![
            protocol::kafka_protocol::messages::create_topics_request::CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(name.to_string())))
                .with_num_partitions(1)
                .with_replication_factor(1),
        ]),
    );
    assert_eq!(created.topics[0].error_code, 0);
}

fn log_end(broker: &Broker, topic: &str) -> i64 {
    use protocol::kafka_protocol::messages::list_offsets_request::{
        ListOffsetsPartition, ListOffsetsTopic,
    };
    let listed: protocol::kafka_protocol::messages::ListOffsetsResponse = call(
        broker,
        ApiKey::ListOffsets,
        7,
        &protocol::kafka_protocol::messages::ListOffsetsRequest::default().with_topics(vec![
            ListOffsetsTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(-1)]),
        ]),
    );
    let partition = &listed.topics[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    partition.offset
}

/// The record bytes a Fetch at `offset` returns (no wait: the data is
/// durable once acks=all answered).
fn fetch(broker: &Broker, topic: &str, offset: i64) -> Bytes {
    let request = FetchRequest::default()
        .with_replica_id(protocol::kafka_protocol::messages::BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(8 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(8 << 20)])]);
    let response: FetchResponse = call(broker, ApiKey::Fetch, 12, &request);
    assert_eq!(response.error_code, 0);
    let partition = &response.responses[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    partition.records.clone().unwrap_or_default()
}

/// Produces `good` (whose base offset is forged to 1,000,000) and checks it
/// is stored at `expected_offset` exactly: the bytes read back are the bytes
/// sent but for the base offset and partition leader epoch the broker sets.
fn produce_and_read_back(broker: &Broker, good: &[u8], expected_offset: i64) {
    let mut sent = good.to_vec();
    protocol::batch::set_base_offset(&mut sent, 1_000_000);
    let response: ProduceResponse = call(
        broker,
        ApiKey::Produce,
        9,
        &produce(TOPIC, 0, Bytes::from(sent.clone())),
    );
    let partition = &response.responses[0].partition_responses[0];
    assert_eq!(partition.error_code, 0, "{}", broker.log());
    assert_eq!(partition.base_offset, expected_offset);
    let stored = fetch(broker, TOPIC, expected_offset);
    assert_eq!(
        stored.len(),
        sent.len(),
        "exactly the one batch is returned"
    );
    assert_eq!(&stored[..8], &expected_offset.to_be_bytes()[..]);
    assert_eq!(&stored[8..12], &sent[8..12]);
    assert_eq!(
        &stored[16..],
        &sent[16..],
        "every byte under the CRC as sent"
    );
}

/// A good batch, then `bad` refused with `code`, the log end unmoved, then
/// `after` stored at the log end and read back exactly.
fn assert_refused(extra_args: &[&str], bad: Vec<u8>, code: i16, after: &[u8]) {
    let broker = Broker::start(extra_args);
    create_topic(&broker, TOPIC);
    let first = build::patterned(TS, 5, 50, 7);
    produce_and_read_back(&broker, &first, 0);
    assert_eq!(log_end(&broker, TOPIC), 5);

    assert_eq!(
        produce_error(&broker, &produce(TOPIC, 0, Bytes::from(bad))),
        code,
        "{}",
        broker.log()
    );
    assert_eq!(
        log_end(&broker, TOPIC),
        5,
        "the refused batch moved the log end"
    );

    produce_and_read_back(&broker, after, 5);
    let count = protocol::batch::BatchHeader::parse(after)
        .unwrap()
        .record_count;
    assert_eq!(log_end(&broker, TOPIC), 5 + i64::from(count));
    // The first batch is untouched.
    let stored = fetch(&broker, TOPIC, 0);
    assert_eq!(&stored[16..first.len()], &first[16..]);
}

fn three_records() -> Vec<u8> {
    build::records_body(&[
        NewRecord {
            value: Some(b"one".to_vec()),
            ..Default::default()
        },
        NewRecord {
            value: Some(b"two".to_vec()),
            timestamp_delta: 1,
            ..Default::default()
        },
        NewRecord {
            value: Some(b"three".to_vec()),
            timestamp_delta: 2,
            ..Default::default()
        },
    ])
    .0
}

fn good_after() -> Vec<u8> {
    build::patterned(TS, 3, 200, 11)
}

#[test]
fn a_record_count_of_zero_over_three_records_is_invalid_record() {
    let bad = build::with_body(TS, TS + 2, 0, 2, 0, &three_records());
    assert_refused(&[], bad, INVALID_RECORD, &good_after());
}

#[test]
fn a_last_offset_delta_of_a_million_over_three_records_is_invalid_record() {
    let bad = build::with_body(TS, TS + 2, 3, 1_000_000, 0, &three_records());
    assert_refused(&[], bad, INVALID_RECORD, &good_after());
}

#[test]
fn a_record_length_of_two_to_the_31_is_invalid_record() {
    let body = three_records();
    // The first record's length varint (1 byte) replaced by zigzag(2^31).
    let mut forged = vec![0x80, 0x80, 0x80, 0x80, 0x10];
    forged.extend_from_slice(&body[1..]);
    let bad = build::with_body(TS, TS + 2, 3, 2, 0, &forged);
    assert_refused(&[], bad, INVALID_RECORD, &good_after());
}

#[test]
fn a_value_length_of_minus_five_is_invalid_record() {
    let mut body = three_records();
    // First record: length, attributes, ts delta, offset delta, null key,
    // then the value length (zigzag 3 = 6) at byte 5.
    assert_eq!(body[5], 6);
    body[5] = 9; // zigzag -5
    let bad = build::with_body(TS, TS + 2, 3, 2, 0, &body);
    assert_refused(&[], bad, INVALID_RECORD, &good_after());
}

#[test]
fn an_offset_delta_out_of_sequence_is_invalid_record() {
    let mut body = three_records();
    assert_eq!(body[3], 0);
    body[3] = 4; // offset delta 2 for the first record
    let bad = build::with_body(TS, TS + 2, 3, 2, 0, &body);
    assert_refused(&[], bad, INVALID_RECORD, &good_after());
}

#[test]
fn bytes_after_the_declared_records_are_invalid_record() {
    let mut body = three_records();
    body.extend_from_slice(&three_records()[..12]);
    let bad = build::with_body(TS, TS + 2, 3, 2, 0, &body);
    assert_refused(&[], bad, INVALID_RECORD, &good_after());
}

fn garbage_refused(codec: Compression) {
    let garbage = build::pattern(5, 2_000);
    let bad = build::with_body(TS, TS + 2, 3, 2, build::codec_attributes(codec), &garbage);
    let values: Vec<NewRecord> = (0..4)
        .map(|i| NewRecord {
            key: Some(vec![b'k', i]),
            value: Some(build::pattern(u64::from(i), 3_000)),
            timestamp_delta: i64::from(i),
            ..Default::default()
        })
        .collect();
    let after = build::compressed(codec, TS, &values);
    assert_eq!(
        &after[HEADER_LEN - 40..HEADER_LEN - 38],
        &build::codec_attributes(codec).to_be_bytes()
    );
    assert_refused(&[], bad, CORRUPT_MESSAGE, &after);
}

#[test]
fn garbage_gzip_is_corrupt_message() {
    garbage_refused(Compression::Gzip);
}

#[test]
fn garbage_snappy_is_corrupt_message() {
    garbage_refused(Compression::Snappy);
}

#[test]
fn garbage_lz4_is_corrupt_message() {
    garbage_refused(Compression::Lz4);
}

#[test]
fn garbage_zstd_is_corrupt_message() {
    garbage_refused(Compression::Zstd);
}

#[test]
fn a_one_megabyte_gzip_expanding_to_a_gibibyte_is_message_too_large() {
    let body = build::gzip_bomb_body(1 << 30);
    assert!(body.len() < 1_200_000, "{}", body.len());
    let bad = build::with_body(TS, TS, 1, 0, 1, &body);
    // The bomb is under max.message.bytes on the wire, so only the
    // decompression bound (32 x 1.5 MB = 48 MB) can refuse it.
    let started = std::time::Instant::now();
    assert_refused(
        &["--set", "message.max.bytes=1500000"],
        bad,
        MESSAGE_TOO_LARGE,
        &good_after(),
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "decompression stopped at the bound"
    );
}
