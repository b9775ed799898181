//! OffsetForLeaderEpoch (23) answers as Kafka's leader does, against the
//! real broker over raw requests at every served version (2–4): a single
//! node leads in epoch 0, so epoch 0 ends at the log end (0 while the log is
//! empty: the leader's epoch starts where its leadership did); an epoch
//! above the current one is unknown (-1, -1), a `current_leader_epoch`
//! above the partition's is UNKNOWN_LEADER_EPOCH, a missing topic or
//! partition UNKNOWN_TOPIC_OR_PARTITION. Consumers (replica id -1) and
//! replicas are answered alike. confluent-kafka's consumer, which asks it to
//! validate a position seeked with a leader epoch (KIP-320), reads on after
//! a valid one and reports a log truncation for one past the log end.

mod common;

use std::net::TcpStream;
use std::time::Duration;

use bytes::Bytes;
use common::{raw, run_python, Broker};
use protocol::batch::build::patterned;
use protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use protocol::kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use protocol::kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use protocol::kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, MetadataRequest, MetadataResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, ProduceRequest, ProduceResponse,
    TopicName,
};
use protocol::kafka_protocol::protocol::StrBytes;

const CLIENT_ID: &str = "epoch-ends";
const TOPIC: &str = "epoch-ends";
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const UNKNOWN_LEADER_EPOCH: i16 = 75;

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

/// Produces `count` records to partition 0 of `topic` (created on first
/// use); returns the base offset.
fn produce(stream: &mut TcpStream, topic: &str, count: usize) -> i64 {
    let batch = Bytes::from(patterned(1_700_000_000_000, count, 20, count as u64));
    let response: ProduceResponse = raw::call(
        stream,
        ApiKey::Produce,
        9,
        1,
        CLIENT_ID,
        &ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name(topic))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(batch))])]),
    );
    let answer = &response.responses[0].partition_responses[0];
    assert_eq!(answer.error_code, 0, "{response:?}");
    answer.base_offset
}

/// One question: (topic, partition, current leader epoch, leader epoch).
type Question = (&'static str, i32, i32, i32);
/// Its answer: (error code, leader epoch, end offset).
type Answer = (i16, i32, i64);

/// Asks every question in one request at `version` as `replica_id`;
/// returns the answers in order, checking the partitions come back as
/// asked.
fn ask(
    stream: &mut TcpStream,
    version: i16,
    replica_id: i32,
    questions: &[Question],
) -> Vec<Answer> {
    // One topic entry per question keeps the order and the duplicates.
    let topics = questions
        .iter()
        .map(|&(topic, partition, current, epoch)| {
            OffsetForLeaderTopic::default()
                .with_topic(name(topic))
                .with_partitions(vec![OffsetForLeaderPartition::default()
                    .with_partition(partition)
                    .with_current_leader_epoch(current)
                    .with_leader_epoch(epoch)])
        })
        .collect();
    let response: OffsetForLeaderEpochResponse = raw::call(
        stream,
        ApiKey::OffsetForLeaderEpoch,
        version,
        2,
        CLIENT_ID,
        &OffsetForLeaderEpochRequest::default()
            .with_replica_id(BrokerId(replica_id))
            .with_topics(topics),
    );
    assert_eq!(response.topics.len(), questions.len(), "{response:?}");
    response
        .topics
        .iter()
        .zip(questions)
        .map(|(topic, &(asked, partition, _, _))| {
            assert_eq!(topic.topic.0.as_str(), asked);
            let [answer] = &topic.partitions[..] else {
                panic!("one partition per topic: {topic:?}");
            };
            assert_eq!(answer.partition, partition);
            (answer.error_code, answer.leader_epoch, answer.end_offset)
        })
        .collect()
}

#[test]
fn the_leader_answers_where_an_epoch_ends_at_every_version() {
    let broker = Broker::start(&[]);
    let mut stream = raw::connect(&broker);
    let versions: ApiVersionsResponse = raw::call(
        &mut stream,
        ApiKey::ApiVersions,
        3,
        1,
        CLIENT_ID,
        &ApiVersionsRequest::default(),
    );
    assert!(
        versions
            .api_keys
            .iter()
            .any(|k| k.api_key == ApiKey::OffsetForLeaderEpoch as i16
                && (k.min_version, k.max_version) == (2, 4)),
        "advertised as 2-4: {:?}",
        versions.api_keys
    );

    produce(&mut stream, "other", 1);
    assert_eq!(produce(&mut stream, TOPIC, 5), 0);
    assert_eq!(produce(&mut stream, TOPIC, 3), 5);
    let cases: [(Question, Answer); 9] = [
        ((TOPIC, 0, -1, 0), (0, 0, 8)),
        ((TOPIC, 0, 0, 0), (0, 0, 8)),
        // Above the current epoch: unknown.
        ((TOPIC, 0, -1, 1), (0, -1, -1)),
        ((TOPIC, 0, 0, -1), (0, -1, -1)),
        // The asker knows a newer leader than this one.
        ((TOPIC, 0, 1, 0), (UNKNOWN_LEADER_EPOCH, -1, -1)),
        ((TOPIC, 0, 1, 1), (UNKNOWN_LEADER_EPOCH, -1, -1)),
        ((TOPIC, 3, -1, 0), (UNKNOWN_TOPIC_OR_PARTITION, -1, -1)),
        (
            ("no-such-topic", 0, -1, 0),
            (UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
        ),
        (("other", 0, 0, 0), (0, 0, 1)),
    ];
    let questions: Vec<Question> = cases.iter().map(|(q, _)| *q).collect();
    let expected: Vec<Answer> = cases.iter().map(|(_, a)| *a).collect();
    for version in 2..=4 {
        // A consumer (-1) and a replica (node 1, this node's id) alike.
        for replica_id in [-1, 1] {
            assert_eq!(
                ask(&mut stream, version, replica_id, &questions),
                expected,
                "v{version}, replica id {replica_id}"
            );
        }
    }
}

#[test]
fn an_empty_partition_s_epoch_ends_at_0() {
    let broker = Broker::start(&[]);
    let mut stream = raw::connect(&broker);
    let metadata: MetadataResponse = raw::call(
        &mut stream,
        ApiKey::Metadata,
        12,
        1,
        CLIENT_ID,
        &MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(name("empty")))
            ]))
            .with_allow_auto_topic_creation(true),
    );
    assert_eq!(metadata.topics[0].error_code, 0, "{metadata:?}");
    assert_eq!(
        ask(
            &mut stream,
            4,
            -1,
            &[("empty", 0, 0, 0), ("empty", 0, -1, 1)]
        ),
        [(0, 0, 0), (0, -1, -1)]
    );
}

#[test]
fn confluent_kafka_validates_seeked_positions_with_it() {
    let broker = Broker::start(&[]);
    let out = run_python(
        "offset_for_leader_epoch_check.py",
        &[&broker.bootstrap()],
        Duration::from_secs(180),
    );
    for line in ["seek within the log: ok", "seek past the log end: ok"] {
        assert!(out.contains(line), "{line}\n{out}");
    }
}
