//! Requests pipelined on one connection: each answer leaves as soon as it
//! and every answer before it are ready, never held back behind a slower
//! request that follows it.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::raw::{self, frame as raw_frame, read_response};
use common::Broker;
use protocol::kafka_protocol::messages::create_topics_request::CreatableTopic;
use protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use protocol::kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    FetchRequest, FetchResponse, TopicName,
};
use protocol::kafka_protocol::protocol::StrBytes;

const CLIENT_ID: &str = "pipelining-test";
/// How long the trailing fetch waits for data that never comes.
const FETCH_WAIT_MS: i32 = 3_000;

#[test]
fn an_answer_is_not_held_back_by_a_long_poll_behind_it() {
    let broker = Broker::start(&[]);
    let topic = "pipelined";
    let mut stream = raw::connect(&broker);
    let create = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(topic)))
            .with_num_partitions(1)
            .with_replication_factor(1)])
        .with_timeout_ms(10_000);
    stream
        .write_all(&raw_frame(ApiKey::CreateTopics, 5, 1, CLIENT_ID, &create))
        .unwrap();
    let created: CreateTopicsResponse = read_response(&mut stream, 5, 1);
    assert_eq!(created.topics[0].error_code, 0, "{:?}", created.topics[0]);

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
