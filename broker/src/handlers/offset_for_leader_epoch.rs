//! OffsetForLeaderEpoch (23), versions 2–4 (Kafka 4 serves no older one):
//! for each partition, where the asked leader epoch ends in the leader's
//! log, as (epoch, end offset): the largest epoch at or below the one
//! asked and the start of the next larger one, or the log end for the
//! current epoch; (-1, -1) when unknown. A follower asks it after a leader
//! change to find where its log diverged (KIP-101, KIP-279); a consumer
//! (replica id -1, or none before v3) after a seek or a leader change, to
//! detect a truncated log. Each partition is answered on its owning core
//! by its leader, checking `current_leader_epoch` as Fetch does. In
//! load-balancer mode a consumer's question about a partition another
//! broker leads is asked of that leader ([`crate::cluster::links`]); a
//! follower's never is.

use std::rc::Rc;

use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use crate::cluster::links::{self, Origin};
use crate::errors;
use crate::handlers::placement::{self, Place};
use crate::handlers::scatter::{
    each_in_order, forwarded_outcomes, forwarded_topics, BrokerWork, Scatter,
};
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 2;
pub const VERSION_MAX: i16 = 4;

/// One partition's question, on its way to the owning core.
struct Wanted {
    topic: String,
    partition: i32,
    current_leader_epoch: i32,
    leader_epoch: i32,
}

/// One partition for the broker that leads it: the index of its topic in
/// the request, and the partition as the client asked.
struct Forward {
    topic: usize,
    partition: OffsetForLeaderPartition,
}

/// One partition's answer: (epoch, end offset) or an error code.
type Answer = Result<(i32, i64), i16>;

pub async fn handle(
    shard: &Rc<Shard>,
    request: OffsetForLeaderEpochRequest,
    version: i16,
    origin: Origin,
) -> OffsetForLeaderEpochResponse {
    let image = shard.metadata.image();
    let mut scatter: Scatter<Wanted, Answer, Forward> = Scatter::default();
    // A follower (replica id 0 or more, v3+) asks the leader itself.
    let consumer = request.replica_id.0 < 0;
    for (topic_index, topic) in request.topics.iter().enumerate() {
        let name = topic.topic.0.as_str();
        for p in &topic.partitions {
            let place = if consumer {
                placement::place(shard, &image, origin, name, p.partition)
            } else {
                placement::place_here(shard, &image, name, p.partition)
            };
            match place {
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
                        partition: p.partition,
                        current_leader_epoch: p.current_leader_epoch,
                        leader_epoch: p.leader_epoch,
                    },
                ),
                Place::Refused(code) => scatter.answer(Err(code)),
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
                            Some(partition) => partition
                                .offset_for_leader_epoch(w.current_leader_epoch, w.leader_epoch),
                            None => Err(errors::NOT_LEADER_OR_FOLLOWER),
                        }
                    }
                })
            },
            |broker, work| forward(shard, &request, version, broker, work),
        )
        .await;
    let mut answers = scatter.into_outcomes();
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let answer = answers.next().expect("one answer per partition");
                    let (error_code, (leader_epoch, end_offset)) = match answer {
                        Ok(found) => (errors::NONE, found),
                        Err(code) => (code, (-1, -1)),
                    };
                    EpochEndOffset::default()
                        .with_partition(p.partition)
                        .with_error_code(error_code)
                        .with_leader_epoch(leader_epoch)
                        .with_end_offset(end_offset)
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(topic.topic.clone())
                .with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}

/// Asks a leader about the partitions it leads, as the client asked.
async fn forward(
    shard: &Rc<Shard>,
    request: &OffsetForLeaderEpochRequest,
    version: i16,
    broker: i32,
    work: BrokerWork<Forward>,
) -> BrokerWork<Answer> {
    let topics = forwarded_topics(
        &work,
        |part| part.topic,
        |index| OffsetForLeaderTopic::default().with_topic(request.topics[index].topic.clone()),
        |topic, part| topic.partitions.push(part.partition.clone()),
    );
    let forwarded = OffsetForLeaderEpochRequest::default()
        .with_replica_id(request.replica_id)
        .with_topics(topics);
    let answers = links::offset_for_leader_epoch(shard, broker, forwarded, version)
        .await
        .map(|response| {
            response
                .topics
                .iter()
                .flat_map(|t| &t.partitions)
                .map(|p| {
                    if p.error_code == errors::NONE {
                        Ok((p.leader_epoch, p.end_offset))
                    } else {
                        Err(p.error_code)
                    }
                })
                .collect()
        })
        .map_err(|error| error.to_string());
    forwarded_outcomes(broker, work, answers, || {
        Err(errors::NOT_LEADER_OR_FOLLOWER)
    })
}
