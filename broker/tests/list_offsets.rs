//! ListOffsets answers as Kafka's: by timestamp, the first record at or
//! after it with that record's own timestamp; MAX_TIMESTAMP, the record
//! holding the largest timestamp (KAFKA-16310), also inside compressed
//! batches. Through confluent-kafka's `AdminClient.list_offsets`. From v4
//! each answer carries the leader epoch of the offset found: 0, the epoch a
//! partition led by this node alone has (-1 when no offset is found).

mod common;

use std::time::Duration;

use common::{raw, run_python, Broker};
use protocol::kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use protocol::kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use protocol::kafka_protocol::messages::{
    ApiKey, BrokerId, ListOffsetsRequest, ListOffsetsResponse, MetadataRequest, MetadataResponse,
    ProduceRequest, ProduceResponse, TopicName,
};
use protocol::kafka_protocol::protocol::StrBytes;

#[test]
fn list_offsets_answers_the_found_records_offset_and_timestamp() {
    let broker = Broker::start(&[]);
    let bootstrap = broker.bootstrap();
    let out = run_python(
        "list_offsets_check.py",
        &[&bootstrap],
        Duration::from_secs(180),
    );
    for codec in ["none", "lz4", "zstd"] {
        assert!(out.contains(&format!("{codec}: ok")), "{out}");
    }
}

#[test]
fn list_offsets_from_v4_answers_leader_epoch_zero() {
    const TOPIC: &str = "epochs";
    const BASE_TIMESTAMP_MS: i64 = 1_700_000_000_000;
    let broker = Broker::start(&[]);
    let mut stream = raw::connect(&broker);
    let name = || TopicName(StrBytes::from_static_str(TOPIC));
    let metadata: MetadataResponse = raw::call(
        &mut stream,
        ApiKey::Metadata,
        12,
        1,
        "epochs",
        &MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(name()))
            ]))
            .with_allow_auto_topic_creation(true),
    );
    assert_eq!(metadata.topics[0].error_code, 0, "{metadata:?}");
    let batch = bytes::Bytes::from(protocol::batch::build::patterned(
        BASE_TIMESTAMP_MS,
        5,
        20,
        3,
    ));
    let produced: ProduceResponse = raw::call(
        &mut stream,
        ApiKey::Produce,
        9,
        2,
        "epochs",
        &ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(5_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name())
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(batch))])]),
    );
    let answer = &produced.responses[0].partition_responses[0];
    assert_eq!(
        (answer.error_code, answer.base_offset),
        (0, 0),
        "{produced:?}"
    );
    /// (partition, timestamp) asked, (error, offset, leader epoch) answered.
    type Case = ((i32, i64), (i16, i64, i32));
    let cases: [Case; 5] = [
        ((0, -1), (0, 5, 0)),
        ((0, -2), (0, 0, 0)),
        ((0, BASE_TIMESTAMP_MS), (0, 0, 0)),
        ((0, BASE_TIMESTAMP_MS + 3_600_000), (0, -1, -1)),
        ((9, -1), (3, -1, -1)),
    ];
    // Before v4 there is no leader epoch in the answer (read as -1).
    for (round, version) in [1i16, 3, 4, 7, 10].into_iter().enumerate() {
        let partitions = cases
            .iter()
            .map(|((partition, timestamp), _)| {
                ListOffsetsPartition::default()
                    .with_partition_index(*partition)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(*timestamp)
            })
            .collect();
        let response: ListOffsetsResponse = raw::call(
            &mut stream,
            ApiKey::ListOffsets,
            version,
            10 + round as i32,
            "epochs",
            &ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(name())
                    .with_partitions(partitions)]),
        );
        let answers: Vec<(i16, i64, i32)> = response.topics[0]
            .partitions
            .iter()
            .map(|p| (p.error_code, p.offset, p.leader_epoch))
            .collect();
        let expected: Vec<(i16, i64, i32)> = cases
            .iter()
            .map(|(_, (error, offset, epoch))| {
                (*error, *offset, if version >= 4 { *epoch } else { -1 })
            })
            .collect();
        assert_eq!(answers, expected, "ListOffsets v{version}: {response:?}");
    }
}
