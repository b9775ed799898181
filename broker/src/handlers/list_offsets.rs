//! ListOffsets (2), versions 1–10: -1 latest (the high watermark, which is
//! also the last stable offset without transactions), -2 earliest, -3 the
//! max timestamp, or the first offset with a timestamp at or after the one
//! given. v8's -4 (earliest local) is the log start offset and v9's -5
//! (latest tiered) offset -1, as Kafka answers without tiered storage.
//! v10's `timeout_ms` bounds Kafka's reads from remote storage: every
//! answer here is local, so it is accepted and never waited on.
//! From v4 each answer carries the leader epoch of the offset found.

use std::rc::Rc;

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::errors;
use crate::handlers::scatter::{each_in_order, Scatter};
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
) -> ListOffsetsResponse {
    let image = shard.metadata.image();
    let mut scatter: Scatter<Wanted, OffsetOutcome> = Scatter::default();
    for topic in &request.topics {
        let name = topic.name.0.as_str();
        for p in &topic.partitions {
            let core = image.leader_core_by_name(name, p.partition_index, shard.cores);
            match core {
                Ok(core) => scatter.route(
                    core,
                    Wanted {
                        topic: name.to_string(),
                        partition: p.partition_index,
                        timestamp: p.timestamp,
                    },
                ),
                Err(code) => scatter.answer(error(code)),
            };
        }
    }
    scatter
        .gather(shard, |owner, work| {
            each_in_order(work, move |w: Wanted| {
                let partition = owner.partition(&w.topic, w.partition);
                async move {
                    match partition {
                        Some(partition) => partition.list_offset(w.timestamp).await,
                        None => error(errors::NOT_LEADER_OR_FOLLOWER),
                    }
                }
            })
        })
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
