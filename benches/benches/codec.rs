//! Micro-benchmarks of request decode and response encode: a produce
//! request of 16 partitions × 64 KiB (the broker's hottest decode), and the
//! produce and fetch responses the broker writes back.

use bytes::{Bytes, BytesMut};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    ApiKey, FetchResponse, ProduceRequest, ProduceResponse, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
use protocol::batch::build;
use protocol::codec;

const PARTITIONS: i32 = 16;
const VERSION: i16 = 9;

fn batch() -> Bytes {
    Bytes::from(build::patterned(1_700_000_000_000, 64, 1000, 1))
}

fn produce_frame() -> Bytes {
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("bench")))
            .with_partition_data(
                (0..PARTITIONS)
                    .map(|p| {
                        PartitionProduceData::default()
                            .with_index(p)
                            .with_records(Some(batch()))
                    })
                    .collect(),
            )]);
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Produce as i16)
        .with_request_api_version(VERSION)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("bench")));
    let mut frame = BytesMut::new();
    header
        .encode(&mut frame, ProduceRequest::header_version(VERSION))
        .unwrap();
    request.encode(&mut frame, VERSION).unwrap();
    frame.freeze()
}

fn decode(c: &mut Criterion) {
    let frame = produce_frame();
    let mut group = c.benchmark_group("request");
    group.throughput(Throughput::Bytes(frame.len() as u64));
    group.bench_function("decode_produce_16x64KiB", |b| {
        b.iter(|| {
            let request = codec::decode_header(black_box(frame.clone())).unwrap();
            black_box(codec::decode_body(&request).unwrap())
        })
    });
    group.finish();
}

fn encode(c: &mut Criterion) {
    let mut group = c.benchmark_group("response");
    let produce = ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
        .with_name(TopicName(StrBytes::from_static_str("bench")))
        .with_partition_responses(
            (0..PARTITIONS)
                .map(|p| {
                    PartitionProduceResponse::default()
                        .with_index(p)
                        .with_base_offset(1_000_000)
                })
                .collect(),
        )]);
    group.bench_function("encode_produce_16_partitions", |b| {
        b.iter(|| black_box(codec::encode_response(7, VERSION, black_box(&produce)).unwrap()))
    });
    let records = batch();
    let fetch = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
        .with_topic(TopicName(StrBytes::from_static_str("bench")))
        .with_partitions(
            (0..PARTITIONS)
                .map(|p| {
                    PartitionData::default()
                        .with_partition_index(p)
                        .with_high_watermark(1_000_000)
                        .with_records(Some(records.clone()))
                })
                .collect(),
        )]);
    group.throughput(Throughput::Bytes(records.len() as u64 * PARTITIONS as u64));
    group.bench_function("encode_fetch_16x64KiB", |b| {
        b.iter(|| black_box(codec::encode_response(7, 12, black_box(&fetch)).unwrap()))
    });
    group.finish();
}

criterion_group!(benches, decode, encode);
criterion_main!(benches);
