//! DescribeProducers (61), version 0: each partition's idempotent and
//! transactional producers (id, epoch, last sequence, last append time,
//! and the first offset of the producer's open transaction here, -1
//! outside one), read from its producer state on the owning core. The
//! coordinator epoch is -1: a partition does not keep the epoch of the
//! coordinator that wrote a producer's last marker.

use std::rc::Rc;

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};
use kafka_protocol::protocol::StrBytes;

use crate::errors;
use crate::handlers::scatter::Scatter;
use crate::producer_state::ProducerView;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 0;

/// A partition's producers, or the error code that replaces them.
type Outcome = Result<Vec<ProducerView>, i16>;

pub async fn handle(
    shard: &Rc<Shard>,
    request: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let image = shard.metadata.image();
    let mut scatter: Scatter<(String, i32), Outcome> = Scatter::default();
    for topic in &request.topics {
        let name = topic.name.0.as_str();
        let meta = image.topics.get(name);
        for &index in &topic.partition_indexes {
            match meta.and_then(|m| image.owner_core(m, index, shard.cores)) {
                Some(core) => scatter.route(core, (name.to_string(), index)),
                None => scatter.answer(Err(errors::UNKNOWN_TOPIC_OR_PARTITION)),
            };
        }
    }
    scatter
        .gather(shard, |owner, work| async move {
            work.into_iter()
                .map(|(slot, (topic, index))| {
                    let outcome = match owner.partition(&topic, index) {
                        Some(partition) => Ok(partition.producers()),
                        None => Err(errors::NOT_LEADER_OR_FOLLOWER),
                    };
                    (slot, outcome)
                })
                .collect()
        })
        .await;
    let mut outcomes = scatter.into_outcomes();
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            let partitions =
                topic
                    .partition_indexes
                    .iter()
                    .map(|&index| {
                        let response = PartitionResponse::default().with_partition_index(index);
                        match outcomes.next().expect("one outcome per partition") {
                            Ok(producers) => response.with_active_producers(
                                producers.into_iter().map(producer_state).collect(),
                            ),
                            Err(error_code) => response
                                .with_error_code(error_code)
                                .with_error_message(Some(StrBytes::from_static_str(
                                    error_message(error_code),
                                ))),
                        }
                    })
                    .collect();
            TopicResponse::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}

fn producer_state(view: ProducerView) -> ProducerState {
    ProducerState::default()
        .with_producer_id(ProducerId(view.producer_id))
        .with_producer_epoch(i32::from(view.epoch))
        .with_last_sequence(view.last_sequence)
        .with_last_timestamp(view.last_timestamp_ms)
        .with_coordinator_epoch(view.coordinator_epoch)
        .with_current_txn_start_offset(view.current_txn_start_offset)
}

fn error_message(error_code: i16) -> &'static str {
    if error_code == errors::UNKNOWN_TOPIC_OR_PARTITION {
        "This server does not host this topic-partition."
    } else {
        "This server is not the leader for that topic-partition."
    }
}
