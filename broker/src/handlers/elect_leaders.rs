//! ElectLeaders (43), versions 0–2: moves partitions' leadership to their
//! preferred replica (the first; election type 0) or gives a partition
//! without a leader a live replica even out of sync (type 1, unclean).
//! Decided by the active controller (other brokers forward the request,
//! see `cluster::forward`); each partition's result is NONE when elected,
//! ELECTION_NOT_NEEDED when nothing changes, PREFERRED_LEADER_NOT_AVAILABLE
//! or ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica may lead, or
//! UNKNOWN_TOPIC_OR_PARTITION. No topic list (null) means every partition.
//! A single node leads everything already: every partition answers
//! ELECTION_NOT_NEEDED.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::controller;
use crate::errors;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 2;

const ELECTION_PREFERRED: i8 = 0;
const ELECTION_UNCLEAN: i8 = 1;

pub async fn handle(
    shard: &Rc<Shard>,
    request: ElectLeadersRequest,
    version: i16,
) -> ElectLeadersResponse {
    let election_type = if version == 0 {
        ELECTION_PREFERRED
    } else {
        request.election_type
    };
    if election_type != ELECTION_PREFERRED && election_type != ELECTION_UNCLEAN {
        return ElectLeadersResponse::default().with_error_code(errors::INVALID_REQUEST);
    }
    let wanted: Option<Vec<(String, i32)>> = request.topic_partitions.map(|topics| {
        topics
            .into_iter()
            .flat_map(|t| {
                let name = t.topic.0.to_string();
                t.partitions.into_iter().map(move |p| (name.clone(), p))
            })
            .collect()
    });
    let results =
        controller::elect_leaders(shard, election_type == ELECTION_PREFERRED, wanted).await;
    let mut by_topic: BTreeMap<String, Vec<PartitionResult>> = BTreeMap::new();
    for ((topic, partition), error_code) in results {
        by_topic.entry(topic).or_default().push(
            PartitionResult::default()
                .with_partition_id(partition)
                .with_error_code(error_code)
                .with_error_message(
                    (error_code != errors::NONE)
                        .then(|| StrBytes::from_string(protocol::client::error_name(error_code))),
                ),
        );
    }
    ElectLeadersResponse::default().with_replica_election_results(
        by_topic
            .into_iter()
            .map(|(topic, results)| {
                ReplicaElectionResult::default()
                    .with_topic(TopicName(StrBytes::from_string(topic)))
                    .with_partition_result(results)
            })
            .collect(),
    )
}
