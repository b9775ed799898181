//! ListOffsets (2), versions 1–10: -1 latest (the high watermark, which is
//! also the last stable offset without transactions), -2 earliest, -3 the
//! max timestamp, or the first offset with a timestamp at or after the one
//! given. v8's -4 (earliest local) is the log start offset and v9's -5
//! (latest tiered) offset -1, as Kafka answers without tiered storage.
//! v10's `timeout_ms` bounds Kafka's reads from remote storage: every
//! answer here is local, so it is accepted and never waited on.
//! From v4 each answer carries the leader epoch of the offset found.
//! In load-balancer mode the partitions another broker leads are asked of
//! that leader ([`crate::cluster::links`]) and its answers put in place.

use std::rc::Rc;

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::cluster::links::{self, Origin};
use crate::errors;
use crate::handlers::placement::{self, Place};
use crate::handlers::scatter::{
    each_in_order, forwarded_outcomes, forwarded_topics, BrokerWork, Scatter,
};
use crate::partition::OffsetOutcome;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 1;
pub const VERSION_MAX: i16 = 10;
/// Answers carry a leader epoch from v4.
const LEADER_EPOCH_VERSION_MIN: i16 = 4;

/// One partition's question, on its way to the owning core.
struct Wanted {
    topic: String,
    partition: i32,
    timestamp: i64,
    read_committed: bool,
}

/// One partition for the broker that leads it: the index of its topic in
/// the request, and the partition as the client asked.
struct Forward {
    topic: usize,
    partition: ListOffsetsPartition,
}

fn error(error_code: i16) -> OffsetOutcome {
    OffsetOutcome {
        error_code,
        timestamp: -1,
        offset: -1,
        leader_epoch: -1,
    }
}

pub async fn handle(
    shard: &Rc<Shard>,
    request: ListOffsetsRequest,
    version: i16,
    origin: Origin,
) -> ListOffsetsResponse {
    let image = shard.metadata.image();
    let mut scatter: Scatter<Wanted, OffsetOutcome, Forward> = Scatter::default();
    for (topic_index, topic) in request.topics.iter().enumerate() {
        let name = topic.name.0.as_str();
        for p in &topic.partitions {
            match placement::place(shard, &image, origin, name, p.partition_index) {
                Place::Broker(broker) => scatter.forward(
                    broker,
                    Forward {
                        topic: topic_index,
                        partition: p.clone(),
                    },
                ),
                Place::Core(core) => scatter.route(
                    core,
                    Wanted {
                        topic: name.to_string(),
                        partition: p.partition_index,
                        timestamp: p.timestamp,
                        read_committed: request.isolation_level == 1,
                    },
                ),
                Place::Refused(code) => scatter.answer(error(code)),
            };
        }
    }
    scatter
        .gather_forwarding(
            shard,
            |owner, work| {
                each_in_order(work, move |w: Wanted| {
                    let partition = owner.partition(&w.topic, w.partition);
                    async move {
                        match partition {
                            Some(partition) => {
                                partition.list_offset(w.timestamp, w.read_committed).await
                            }
                            None => error(errors::NOT_LEADER_OR_FOLLOWER),
                        }
                    }
                })
            },
            |broker, work| forward(shard, &request, version, broker, work),
        )
        .await;
    let mut outcomes = scatter.into_outcomes();
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let outcome = outcomes.next().expect("one outcome per partition");
                    ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(outcome.error_code)
                        .with_timestamp(outcome.timestamp)
                        .with_offset(outcome.offset)
                        .with_leader_epoch(if version >= LEADER_EPOCH_VERSION_MIN {
                            outcome.leader_epoch
                        } else {
                            -1
                        })
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

/// Asks a leader for the partitions it leads, as the client asked them.
async fn forward(
    shard: &Rc<Shard>,
    request: &ListOffsetsRequest,
    version: i16,
    broker: i32,
    work: BrokerWork<Forward>,
) -> BrokerWork<OffsetOutcome> {
    let topics = forwarded_topics(
        &work,
        |part| part.topic,
        |index| ListOffsetsTopic::default().with_name(request.topics[index].name.clone()),
        |topic, part| topic.partitions.push(part.partition.clone()),
    );
    let forwarded = ListOffsetsRequest::default()
        .with_replica_id(request.replica_id)
        .with_isolation_level(request.isolation_level)
        .with_timeout_ms(request.timeout_ms)
        .with_topics(topics);
    let answers = links::list_offsets(shard, broker, forwarded, version)
        .await
        .map(|response| {
            response
                .topics
                .iter()
                .flat_map(|t| &t.partitions)
                .map(|p| OffsetOutcome {
                    error_code: p.error_code,
                    timestamp: p.timestamp,
                    offset: p.offset,
                    leader_epoch: p.leader_epoch,
                })
                .collect()
        })
        .map_err(|error| error.to_string());
    forwarded_outcomes(broker, work, answers, || {
        error(errors::NOT_LEADER_OR_FOLLOWER)
    })
}
