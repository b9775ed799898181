//! DescribeTopicPartitions (75), version 0: topics by name (none named:
//! every topic), sorted by name, with at most `response_partition_limit`
//! partitions (and at most `DESCRIBE_TOPIC_PARTITIONS_MAX`) per answer; the
//! next cursor points at the first partition left out. As Kafka's
//! handler: a cursor's topic must be among the named topics
//! (INVALID_REQUEST), names before the cursor's are skipped, and topics
//! that do not exist are answered with an error only when named.

use std::collections::BTreeSet;
use std::rc::Rc;

use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::authorized_operations;
use super::metadata::broker_ids;
use crate::errors;
use crate::limits::DESCRIBE_TOPIC_PARTITIONS_MAX;
use crate::metadata::{is_internal_topic, validate_topic_name};
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 0;

fn topic_name(name: &str) -> Option<TopicName> {
    Some(TopicName(StrBytes::from_string(name.to_string())))
}

pub fn handle(
    shard: &Rc<Shard>,
    request: DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    let image = shard.metadata.image();
    let cursor_topic = request
        .cursor
        .as_ref()
        .map(|c| c.topic_name.0.to_string())
        .unwrap_or_default();
    let all_topics = request.topics.is_empty();
    let names: BTreeSet<String> = if all_topics {
        image
            .topics
            .keys()
            .filter(|name| **name >= cursor_topic)
            .cloned()
            .collect()
    } else {
        request
            .topics
            .iter()
            .map(|t| t.name.0.to_string())
            .filter(|name| *name >= cursor_topic)
            .collect()
    };
    if let Some(cursor) = &request.cursor {
        if !all_topics && !names.contains(cursor.topic_name.0.as_str()) {
            // Kafka fails the whole request: every named topic gets the error.
            let topics = request
                .topics
                .iter()
                .map(|t| {
                    DescribeTopicPartitionsResponseTopic::default()
                        .with_name(Some(t.name.clone()))
                        .with_error_code(errors::INVALID_REQUEST)
                })
                .collect();
            return DescribeTopicPartitionsResponse::default().with_topics(topics);
        }
    }
    let mut start_index = request.cursor.as_ref().map_or(0, |c| c.partition_index);
    let mut remaining = request
        .response_partition_limit
        .min(DESCRIBE_TOPIC_PARTITIONS_MAX);
    let mut topics = Vec::new();
    let mut next_cursor = None;
    for name in names {
        if remaining <= 0 {
            if remaining == 0 {
                // Everything before this topic is answered whole.
                next_cursor = Some(
                    Cursor::default()
                        .with_topic_name(TopicName(StrBytes::from_string(name)))
                        .with_partition_index(0),
                );
            }
            break;
        }
        let Some(topic) = image.topics.get(&name) else {
            if !all_topics {
                let error_code = if validate_topic_name(&name).is_ok() {
                    errors::UNKNOWN_TOPIC_OR_PARTITION
                } else {
                    errors::INVALID_TOPIC_EXCEPTION
                };
                topics.push(
                    DescribeTopicPartitionsResponseTopic::default()
                        .with_name(topic_name(&name))
                        .with_error_code(error_code)
                        .with_is_internal(is_internal_topic(&name))
                        .with_topic_authorized_operations(authorized_operations::TOPIC),
                );
            }
            start_index = 0;
            continue;
        };
        let count = topic.partition_cores.len() as i32;
        let first = start_index.max(0);
        let end = count.min(first.saturating_add(remaining));
        start_index = 0;
        let partitions: Vec<DescribeTopicPartitionsResponsePartition> = (first..end)
            .filter_map(|index| Some((index, topic.partition(index)?)))
            .map(|(index, state)| {
                DescribeTopicPartitionsResponsePartition::default()
                    .with_partition_index(index)
                    .with_leader_id(BrokerId(crate::cluster::client_node(
                        shard,
                        &image,
                        state.leader,
                    )))
                    .with_leader_epoch(state.leader_epoch)
                    .with_replica_nodes(broker_ids(&state.replicas))
                    .with_isr_nodes(broker_ids(&state.isr))
                    .with_offline_replicas(broker_ids(&crate::cluster::offline_replicas(
                        &image,
                        &state.replicas,
                    )))
                    .with_eligible_leader_replicas(Some(Vec::new()))
                    .with_last_known_elr(Some(Vec::new()))
            })
            .collect();
        remaining -= partitions.len() as i32;
        topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(topic_name(&name))
                .with_topic_id(uuid::Uuid::from_u128(topic.topic_id))
                .with_is_internal(is_internal_topic(&name))
                .with_partitions(partitions)
                .with_topic_authorized_operations(authorized_operations::TOPIC),
        );
        if end < count {
            next_cursor = Some(
                Cursor::default()
                    .with_topic_name(TopicName(StrBytes::from_string(name)))
                    .with_partition_index(end),
            );
            break;
        }
    }
    DescribeTopicPartitionsResponse::default()
        .with_topics(topics)
        .with_next_cursor(next_cursor)
}
