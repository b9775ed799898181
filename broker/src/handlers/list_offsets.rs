//! ListOffsets (2), versions 1–10: -1 latest (the high watermark, which is
//! also the last stable offset without transactions), -2 earliest, -3 the
//! max timestamp, or the first offset with a timestamp at or after the one
//! given. v8's -4 (earliest local) is the log start offset and v9's -5
//! (latest tiered) offset -1, as Kafka answers without tiered storage.
//! v10's `timeout_ms` bounds Kafka's reads from remote storage: every
//! answer here is local, so it is accepted and never waited on.
//! From v4 each answer carries the leader epoch of the offset found.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::rc::Rc;

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::errors;
use crate::partition::OffsetOutcome;
use crate::shard::Shard;
use crate::sync::join_all;

pub const VERSION_MIN: i16 = 1;
pub const VERSION_MAX: i16 = 10;
/// Answers carry a leader epoch from v4.
const LEADER_EPOCH_VERSION_MIN: i16 = 4;

type BoxFuture<'a, T> = Pin<Box<dyn std::future::Future<Output = T> + 'a>>;

pub async fn handle(
    shard: &Rc<Shard>,
    request: ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let image = shard.metadata.image();
    let mut outcomes: Vec<OffsetOutcome> = Vec::new();
    let mut by_core: BTreeMap<usize, Vec<(usize, String, i32, i64)>> = BTreeMap::new();
    for topic in &request.topics {
        let name = topic.name.0.as_str();
        let meta = image.topics.get(name);
        for p in &topic.partitions {
            let slot = outcomes.len();
            outcomes.push(OffsetOutcome {
                error_code: errors::UNKNOWN_TOPIC_OR_PARTITION,
                timestamp: -1,
                offset: -1,
                leader_epoch: -1,
            });
            if let Some(core) =
                meta.and_then(|m| image.owner_core(m, p.partition_index, shard.cores))
            {
                by_core.entry(core).or_default().push((
                    slot,
                    name.to_string(),
                    p.partition_index,
                    p.timestamp,
                ));
            }
        }
    }
    let hops: Vec<BoxFuture<'_, Vec<(usize, OffsetOutcome)>>> = by_core
        .into_iter()
        .map(|(core, wanted)| {
            Box::pin(shard.run_on(core, move |owner| async move {
                let mut results = Vec::with_capacity(wanted.len());
                for (slot, topic, index, timestamp) in wanted {
                    let outcome = match owner.partition(&topic, index) {
                        Some(partition) => partition.list_offset(timestamp).await,
                        None => OffsetOutcome {
                            error_code: errors::NOT_LEADER_OR_FOLLOWER,
                            timestamp: -1,
                            offset: -1,
                            leader_epoch: -1,
                        },
                    };
                    results.push((slot, outcome));
                }
                results
            })) as BoxFuture<'_, _>
        })
        .collect();
    for (slot, outcome) in join_all(hops).await.into_iter().flatten() {
        outcomes[slot] = outcome;
    }
    let mut outcomes = outcomes.into_iter();
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
