//! DeleteRecords (21), versions 0–2: moves each partition's log start
//! offset forward to the offset asked (-1: the high watermark). Records
//! below it are no longer served (a fetch there is OFFSET_OUT_OF_RANGE,
//! ListOffsets earliest answers the new start), whole segments below it
//! are removed, and the start is kept in the log's checkpoint.
//!
//! The leader answers once every ISR member's log start has reached the
//! offset (the followers take the leader's from their fetch answers and
//! report theirs in their next fetch), or at the request's `timeout_ms`
//! (at most [`DELETE_RECORDS_WAIT_MS_MAX`]) with REQUEST_TIMED_OUT; each
//! answer carries the low watermark, the least log start over the ISR.
//! An offset above the high watermark (or negative but -1) is
//! OFFSET_OUT_OF_RANGE, a partition another broker leads
//! NOT_LEADER_OR_FOLLOWER, one that does not exist
//! UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers.
//!
//! Path: each partition hops to the core that owns it; a core's
//! partitions wait for their followers together. In load-balancer mode
//! the partitions another broker leads go to that leader
//! ([`crate::cluster::links::delete_records`]) and its answers are put in
//! place.

use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use crate::cluster::links::{self, Origin};
use crate::errors;
use crate::handlers::placement::{self, Place};
use crate::handlers::scatter::{
    each_concurrently, forwarded_outcomes, forwarded_topics, BrokerWork, Scatter,
};
use crate::limits::DELETE_RECORDS_WAIT_MS_MAX;
use crate::partition::DeleteRecordsOutcome;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 2;

/// One partition's deletion, on its way to the owning core.
struct Wanted {
    topic: String,
    partition: i32,
    offset: i64,
}

/// One partition for the broker that leads it: the index of its topic in
/// the request, and the partition as the client asked.
struct Forward {
    topic: usize,
    partition: DeleteRecordsPartition,
}

/// How long the leader waits for its ISR: the request's `timeout_ms`,
/// within the broker's bound (a negative one waits for nothing).
fn wait_for(timeout_ms: i32) -> Duration {
    Duration::from_millis((timeout_ms.max(0) as u64).min(DELETE_RECORDS_WAIT_MS_MAX))
}

pub async fn handle(
    shard: &Rc<Shard>,
    request: DeleteRecordsRequest,
    version: i16,
    origin: Origin,
) -> DeleteRecordsResponse {
    let image = shard.metadata.image();
    let timeout = wait_for(request.timeout_ms);
    let mut scatter: Scatter<Wanted, DeleteRecordsOutcome, Forward> = Scatter::default();
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
                        offset: p.offset,
                    },
                ),
                Place::Refused(code) => scatter.answer(DeleteRecordsOutcome::error(code)),
            };
        }
    }
    scatter
        .gather_forwarding(
            shard,
            move |owner, work| {
                each_concurrently(work, move |w: Wanted| {
                    let partition = owner.partition(&w.topic, w.partition);
                    async move {
                        match partition {
                            Some(partition) => partition.delete_records(w.offset, timeout).await,
                            None => DeleteRecordsOutcome::error(errors::NOT_LEADER_OR_FOLLOWER),
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
                    DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_low_watermark(outcome.low_watermark)
                        .with_error_code(outcome.error_code)
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}

/// Asks a leader to delete in the partitions it leads, as the client asked.
async fn forward(
    shard: &Rc<Shard>,
    request: &DeleteRecordsRequest,
    version: i16,
    broker: i32,
    work: BrokerWork<Forward>,
) -> BrokerWork<DeleteRecordsOutcome> {
    let topics = forwarded_topics(
        &work,
        |part| part.topic,
        |index| DeleteRecordsTopic::default().with_name(request.topics[index].name.clone()),
        |topic, part| topic.partitions.push(part.partition.clone()),
    );
    let forwarded = DeleteRecordsRequest::default()
        .with_timeout_ms(request.timeout_ms)
        .with_topics(topics);
    let answers = links::delete_records(shard, broker, forwarded, version)
        .await
        .map(|response| {
            response
                .topics
                .iter()
                .flat_map(|t| &t.partitions)
                .map(|p| DeleteRecordsOutcome {
                    error_code: p.error_code,
                    low_watermark: p.low_watermark,
                })
                .collect()
        })
        .map_err(|error| error.to_string());
    forwarded_outcomes(broker, work, answers, || {
        DeleteRecordsOutcome::error(errors::NOT_LEADER_OR_FOLLOWER)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_is_the_request_s_timeout_within_the_bound() {
        for (timeout_ms, expected_ms) in [
            (-1, 0),
            (0, 0),
            (1_500, 1_500),
            (i32::MAX, DELETE_RECORDS_WAIT_MS_MAX),
        ] {
            assert_eq!(
                wait_for(timeout_ms),
                Duration::from_millis(expected_ms),
                "{timeout_ms}"
            );
        }
    }
}
