//! A leader stamps its epoch into the batches it stores: against the real
//! broker, a produced batch read back by Fetch carries partitionLeaderEpoch
//! 0 (a single node leads in epoch 0), and the partition directory holds
//! Kafka's `leader-epoch-checkpoint` file saying epoch 0 starts at offset 0.

mod common;

use bytes::Bytes;
use common::{raw, Broker};
use protocol::batch::build::patterned;
use protocol::batch::split_batches;
use protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use protocol::kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use protocol::kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, ProduceRequest, ProduceResponse, TopicName,
};
use protocol::kafka_protocol::protocol::StrBytes;

const CLIENT_ID: &str = "leader-epoch-test";
const TOPIC: &str = "epochs";

#[test]
fn a_produced_batch_is_stored_with_leader_epoch_0_and_checkpointed() {
    let broker = Broker::start(&[]);
    let mut stream = raw::connect(&broker);
    // As a producer sends it: partitionLeaderEpoch -1 (none).
    let mut sent = patterned(1_700_000_000_000, 3, 20, 7);
    sent[12..16].copy_from_slice(&(-1i32).to_be_bytes());
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(sent)))])]);
    let response: ProduceResponse =
        raw::call(&mut stream, ApiKey::Produce, 9, 1, CLIENT_ID, &request);
    let produced = &response.responses[0].partition_responses[0];
    assert_eq!((produced.error_code, produced.base_offset), (0, 0));

    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    let response: FetchResponse = raw::call(&mut stream, ApiKey::Fetch, 4, 2, CLIENT_ID, &request);
    let partition = &response.responses[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    let batches: Vec<_> = split_batches(partition.records.clone().unwrap_or_default())
        .map(|b| b.expect("a whole, valid batch"))
        .collect();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].header().partition_leader_epoch, 0);
    assert_eq!(&batches[0].bytes()[12..16], &0i32.to_be_bytes());

    let checkpoint = broker
        .data_dir
        .join(format!("{TOPIC}-0"))
        .join("leader-epoch-checkpoint");
    // Written before the produce was answered.
    assert_eq!(
        std::fs::read_to_string(&checkpoint).unwrap(),
        "0\n1\n0 0\n",
        "{}",
        checkpoint.display()
    );
}
