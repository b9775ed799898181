//! AlterPartitionReassignments (45), versions 0–1, and
//! ListPartitionReassignments (46), version 0: moving a partition's
//! replicas to other brokers, or to another count of them, and seeing the
//! moves under way. Both are answered by the active controller (other
//! brokers forward them, see `cluster::forward`); how a move runs is
//! [`crate::cluster::placement::reassign`]. A single node has nowhere to
//! move a partition: the only target it takes is the replicas a
//! partition has (nothing to do).

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::controller::{self, Reassignment};
use crate::shard::Shard;

pub const ALTER_VERSION_MIN: i16 = 0;
pub const ALTER_VERSION_MAX: i16 = 1;
pub const LIST_VERSION_MIN: i16 = 0;
pub const LIST_VERSION_MAX: i16 = 0;

pub async fn alter(
    shard: &Rc<Shard>,
    request: AlterPartitionReassignmentsRequest,
    version: i16,
) -> AlterPartitionReassignmentsResponse {
    // Version 0 has no such flag: any replication factor goes.
    let allow_replication_factor_change = version == 0 || request.allow_replication_factor_change;
    let wanted: Vec<Reassignment> = request
        .topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().map(|p| Reassignment {
                topic: topic.name.0.to_string(),
                partition: p.partition_index,
                target: p
                    .replicas
                    .as_ref()
                    .map(|replicas| replicas.iter().map(|b| b.0).collect()),
            })
        })
        .collect();
    let mut outcomes =
        controller::alter_reassignments(shard, wanted, allow_replication_factor_change)
            .await
            .into_iter();
    let responses = request
        .topics
        .into_iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let outcome = outcomes.next().expect("one outcome per partition");
                    let (code, message) = match outcome {
                        Ok(()) => (crate::errors::NONE, None),
                        Err(refusal) => (refusal.error_code, Some(refusal.message)),
                    };
                    ReassignablePartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                        .with_error_message(message.map(StrBytes::from_string))
                })
                .collect();
            ReassignableTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(allow_replication_factor_change)
        .with_responses(responses)
}

pub fn list(
    shard: &Rc<Shard>,
    request: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let wanted: Option<Vec<(String, i32)>> = request.topics.map(|topics| {
        topics
            .into_iter()
            .flat_map(|t| {
                let name = t.name.0.to_string();
                t.partition_indexes
                    .into_iter()
                    .map(move |p| (name.clone(), p))
            })
            .collect()
    });
    let image = shard.metadata.image();
    let mut by_topic: BTreeMap<String, Vec<OngoingPartitionReassignment>> = BTreeMap::new();
    for (topic, index, state) in crate::cluster::placement::reassignments(&image, wanted.as_deref())
    {
        let ids = |ids: &[i32]| ids.iter().map(|&id| BrokerId(id)).collect::<Vec<_>>();
        by_topic.entry(topic).or_default().push(
            OngoingPartitionReassignment::default()
                .with_partition_index(index)
                .with_replicas(ids(&state.replicas))
                .with_adding_replicas(ids(&state.adding))
                .with_removing_replicas(ids(&state.removing)),
        );
    }
    ListPartitionReassignmentsResponse::default().with_topics(
        by_topic
            .into_iter()
            .map(|(name, partitions)| {
                OngoingTopicReassignment::default()
                    .with_name(TopicName(StrBytes::from_string(name)))
                    .with_partitions(partitions)
            })
            .collect(),
    )
}
