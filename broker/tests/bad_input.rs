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

    let mut unsupported = raw::connect(&broker);
    unsupported
        .write_all(&request_frame(
            ApiKey::Metadata,
            13,
            &MetadataRequest::default(),
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
    assert_eq!((own.min_version, own.max_version), (0, 3));
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
