//! DescribeQuorum (55), versions 0–2: the Raft quorum that replicates the
//! metadata, as topic `__cluster_metadata` partition 0. The active
//! controller answers: its id, its term as the leader epoch, the commit
//! index as the high watermark, each voter with the index it has
//! replicated (its log end offset) and the brokers that are not voters as
//! observers (whose position the quorum does not track: -1). The voters
//! are the configuration the quorum applied, which AddRaftVoter and
//! RemoveRaftVoter change (a learner being added is an observer). Another
//! broker forwards the request there (`cluster::forward`); if it cannot,
//! it answers NOT_LEADER_OR_FOLLOWER naming the leader it knows. A single
//! node is a quorum of one: it leads, and its metadata offset is the high
//! watermark. Fetch and catch-up times are not tracked: -1.

use std::rc::Rc;

use kafka_protocol::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use kafka_protocol::messages::{BrokerId, DescribeQuorumRequest, DescribeQuorumResponse};
use kafka_protocol::protocol::StrBytes;

use crate::cluster::Role;
use crate::errors;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 2;

/// The metadata log's topic and partition, as Kafka names them.
pub const METADATA_TOPIC: &str = "__cluster_metadata";
const METADATA_PARTITION: i32 = 0;
/// The listener name voters' endpoints are given under (v2).
const CONTROLLER_LISTENER: &str = "CONTROLLER";
/// The first version with the voters' endpoints.
const NODES_VERSION_MIN: i16 = 2;
/// A time or offset the quorum does not track.
const UNKNOWN: i64 = -1;

/// What the answer says of the quorum.
struct Quorum {
    leader: i32,
    epoch: i32,
    high_watermark: i64,
    /// Voter id → its log end offset (-1: unknown).
    voters: Vec<(i32, i64)>,
    observers: Vec<i32>,
    /// Set when this node is not the leader and so cannot describe it.
    error_code: i16,
}

pub fn handle(
    shard: &Rc<Shard>,
    request: DescribeQuorumRequest,
    version: i16,
) -> DescribeQuorumResponse {
    let quorum = quorum(shard);
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            let known = topic.topic_name.0.as_str() == METADATA_TOPIC;
            TopicData::default()
                .with_topic_name(topic.topic_name.clone())
                .with_partitions(
                    topic
                        .partitions
                        .iter()
                        .map(|p| {
                            if known && p.partition_index == METADATA_PARTITION {
                                partition(&quorum)
                            } else {
                                PartitionData::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(errors::UNKNOWN_TOPIC_OR_PARTITION)
                                    .with_leader_id(BrokerId(-1))
                                    .with_leader_epoch(-1)
                                    .with_high_watermark(UNKNOWN)
                            }
                        })
                        .collect(),
                )
        })
        .collect();
    let response = DescribeQuorumResponse::default().with_topics(topics);
    // Endpoints are v2's: an older version cannot carry them.
    if version >= NODES_VERSION_MIN {
        response.with_nodes(nodes(shard, &quorum))
    } else {
        response
    }
}

fn quorum(shard: &Shard) -> Quorum {
    let Some(cluster) = crate::cluster::of(shard) else {
        let image = shard.metadata.image();
        let node_id = shard.config.node_id;
        let offset = image.offset as i64;
        return Quorum {
            leader: node_id,
            epoch: 0,
            high_watermark: offset,
            voters: vec![(node_id, offset)],
            observers: Vec::new(),
            error_code: errors::NONE,
        };
    };
    let status = cluster.quorum_status();
    // The voters of the configuration the quorum applied (they change by
    // AddRaftVoter and RemoveRaftVoter); the configured ones before it says.
    let voter_ids: Vec<i32> = if status.voters.is_empty() {
        cluster.voters.iter().map(|v| v.id).collect()
    } else {
        status.voters.clone()
    };
    let voters = voter_ids
        .iter()
        .map(|&id| {
            let matched = status
                .progress
                .iter()
                .find(|(voter, _)| *voter == id)
                .map_or(UNKNOWN, |(_, index)| *index as i64);
            (id, matched)
        })
        .collect();
    let observers = cluster
        .image()
        .brokers
        .keys()
        .copied()
        .filter(|id| !voter_ids.contains(id))
        .collect();
    Quorum {
        leader: cluster.active_controller(),
        epoch: i32::try_from(status.term).unwrap_or(i32::MAX),
        high_watermark: status.commit_index as i64,
        voters,
        observers,
        error_code: if status.role == Role::Leader {
            errors::NONE
        } else {
            errors::NOT_LEADER_OR_FOLLOWER
        },
    }
}

fn partition(quorum: &Quorum) -> PartitionData {
    let replica = |id: i32, log_end_offset: i64| {
        ReplicaState::default()
            .with_replica_id(BrokerId(id))
            .with_log_end_offset(log_end_offset)
            .with_last_fetch_timestamp(UNKNOWN)
            .with_last_caught_up_timestamp(UNKNOWN)
    };
    let data = PartitionData::default()
        .with_partition_index(METADATA_PARTITION)
        .with_error_code(quorum.error_code)
        .with_leader_id(BrokerId(quorum.leader))
        .with_leader_epoch(quorum.epoch);
    if quorum.error_code != errors::NONE {
        return data.with_high_watermark(UNKNOWN);
    }
    data.with_high_watermark(quorum.high_watermark)
        .with_current_voters(
            quorum
                .voters
                .iter()
                .map(|&(id, offset)| replica(id, offset))
                .collect(),
        )
        .with_observers(
            quorum
                .observers
                .iter()
                .map(|&id| replica(id, UNKNOWN))
                .collect(),
        )
}

/// The voters' controller endpoints (v2; a single node lists those its
/// configuration names, if any).
fn nodes(shard: &Shard, quorum: &Quorum) -> Vec<Node> {
    if quorum.error_code != errors::NONE {
        return Vec::new();
    }
    shard
        .config
        .quorum
        .voters
        .iter()
        .filter(|v| quorum.voters.iter().any(|(id, _)| *id == v.id))
        .map(|v| {
            Node::default()
                .with_node_id(BrokerId(v.id))
                .with_listeners(vec![Listener::default()
                    .with_name(StrBytes::from_static_str(CONTROLLER_LISTENER))
                    .with_host(StrBytes::from_string(v.host.clone()))
                    .with_port(v.port)])
        })
        .collect()
}
