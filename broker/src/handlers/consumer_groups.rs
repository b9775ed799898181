//! KIP-848's consumer group protocol (`group.protocol=consumer`):
//! ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69), versions
//! 0–1. Heartbeats name topics by id; the coordinator works by name, so
//! ids are translated here through the metadata image (a topic unknown to
//! the image is left out: it was deleted, or is not created yet).

use std::rc::Rc;

use groups::coordinator::{group_state_name, ConsumerHeartbeat, Partitions, TopicInfo, Topics};
use groups::error::GroupError;
use kafka_protocol::messages::consumer_group_describe_response as describe;
use kafka_protocol::messages::consumer_group_heartbeat_response::Assignment;
use kafka_protocol::messages::{
    consumer_group_heartbeat_request, consumer_group_heartbeat_response,
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, GroupId, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::group::manager;
use crate::handlers::authorized_operations;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 1;

/// Every topic of the image, by name, with its id and partition count.
pub fn topics(shard: &Shard) -> Topics {
    shard
        .metadata
        .image()
        .topics
        .values()
        .map(|t| {
            (
                t.name.clone(),
                TopicInfo {
                    id: t.topic_id,
                    partitions: t.partition_cores.len() as i32,
                },
            )
        })
        .collect()
}

/// Partitions by id turned into partitions by name (unknown ids left out).
fn by_name(
    topics: &Topics,
    owned: Vec<consumer_group_heartbeat_request::TopicPartitions>,
) -> Partitions {
    let mut out = Partitions::new();
    for t in owned {
        let id = t.topic_id.as_u128();
        if let Some((name, _)) = topics.iter().find(|(_, info)| info.id == id) {
            out.entry(name.clone())
                .or_default()
                .extend(t.partitions.iter().copied());
        }
    }
    out
}

fn topic_id(topics: &Topics, name: &str) -> uuid::Uuid {
    uuid::Uuid::from_u128(topics.get(name).map_or(0, |t| t.id))
}

fn text(value: impl Into<String>) -> StrBytes {
    StrBytes::from_string(value.into())
}

pub async fn heartbeat(
    shard: &Rc<Shard>,
    request: ConsumerGroupHeartbeatRequest,
    client_id: String,
    client_host: String,
) -> ConsumerGroupHeartbeatResponse {
    let group_id = request.group_id.0.to_string();
    let outcome = manager::on_coordinator(
        shard,
        &group_id.clone(),
        move |owner, partition| async move {
            let topics = topics(&owner);
            // The group's own settings (IncrementalAlterConfigs on the group).
            let image = owner.metadata.image();
            let group_config = |key: &str| {
                image
                    .group_configs
                    .get(&group_id)
                    .and_then(|configs| configs.get(key))
                    .and_then(|value| value.parse::<u64>().ok())
            };
            let session_timeout_ms = group_config("consumer.session.timeout.ms");
            let heartbeat_interval_ms = group_config("consumer.heartbeat.interval.ms");
            let decoded = ConsumerHeartbeat {
                group_id,
                member_id: request.member_id.to_string(),
                member_epoch: request.member_epoch,
                instance_id: request.instance_id.map(|i| i.to_string()),
                rack_id: request.rack_id.map(|r| r.to_string()),
                rebalance_timeout_ms: request.rebalance_timeout_ms,
                subscribed_topic_names: request
                    .subscribed_topic_names
                    .map(|names| names.into_iter().map(|n| n.0.to_string()).collect()),
                subscribed_topic_regex: request.subscribed_topic_regex.map(|r| r.to_string()),
                server_assignor: request.server_assignor.map(|a| a.to_string()),
                owned: request
                    .topic_partitions
                    .map(|owned| by_name(&topics, owned)),
                client_id,
                client_host,
                session_timeout_ms,
                heartbeat_interval_ms,
            };
            // The change and its records under the partition's write lock,
            // so records of one member reach the log in the order taken; the
            // answer once they are durable on every in-sync replica, so a
            // new coordinator knows what this one told the member.
            let lock = manager::write_lock(&owner, partition).await;
            let answer = manager::with_coordinator(&owner, |c| {
                c.consumer_heartbeat(owner.now_ms() as u64, decoded, &topics)
            });
            let last = manager::append(&owner, partition, Vec::new()).await;
            drop(lock);
            if let Some(last) = last? {
                manager::wait_durable(&owner, partition, last).await?;
                manager::maybe_compact(&owner, partition).await;
            }
            answer.map(|a| (a, topics))
        },
    )
    .await
    .and_then(|inner| inner);
    let (answer, topics) = match outcome {
        Ok(answer) => answer,
        Err(error) => {
            return ConsumerGroupHeartbeatResponse::default()
                .with_error_code(error.code())
                .with_error_message(Some(text(error.to_string())))
        }
    };
    let assignment = answer.assignment.map(|partitions| {
        Assignment::default().with_topic_partitions(
            partitions
                .into_iter()
                .map(|(name, ps)| {
                    consumer_group_heartbeat_response::TopicPartitions::default()
                        .with_topic_id(topic_id(&topics, &name))
                        .with_partitions(ps.into_iter().collect())
                })
                .collect(),
        )
    });
    ConsumerGroupHeartbeatResponse::default()
        .with_member_id(Some(text(answer.member_id)))
        .with_member_epoch(answer.member_epoch)
        .with_heartbeat_interval_ms(answer.heartbeat_interval_ms)
        .with_assignment(assignment)
}

fn described_assignment(topics: &Topics, partitions: &Partitions) -> describe::Assignment {
    describe::Assignment::default().with_topic_partitions(
        partitions
            .iter()
            .map(|(name, ps)| {
                describe::TopicPartitions::default()
                    .with_topic_id(topic_id(topics, name))
                    .with_topic_name(TopicName(text(name.clone())))
                    .with_partitions(ps.iter().copied().collect())
            })
            .collect(),
    )
}

pub async fn describe(
    shard: &Rc<Shard>,
    request: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    let operations = authorized_operations::group(request.include_authorized_operations);
    let mut groups = Vec::with_capacity(request.group_ids.len());
    for group_id in request.group_ids {
        let id = group_id.0.to_string();
        let described = if id.is_empty() {
            Err(GroupError::InvalidGroupId)
        } else {
            manager::on_coordinator(shard, &id.clone(), move |owner, _| async move {
                let topics = topics(&owner);
                manager::with_coordinator(&owner, |c| match c.group(&id) {
                    None => Err(GroupError::GroupIdNotFound),
                    Some(group) => match group.consumer() {
                        None => Err(GroupError::GroupIdNotFound),
                        Some(consumer) => Ok(describe_one(consumer, &topics)),
                    },
                })
            })
            .await
            .and_then(|inner| inner)
        };
        let group = match described {
            Ok(group) => group.with_authorized_operations(operations),
            Err(error) => {
                let message = match error {
                    GroupError::GroupIdNotFound => {
                        format!("Group {} is not a consumer group.", group_id.0)
                    }
                    other => other.to_string(),
                };
                describe::DescribedGroup::default()
                    .with_error_code(error.code())
                    .with_error_message(Some(text(message)))
                    .with_group_state(StrBytes::from_static_str("Dead"))
            }
        };
        groups.push(group.with_group_id(group_id));
    }
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}

fn describe_one(
    consumer: &groups::coordinator::ConsumerGroup,
    topics: &Topics,
) -> describe::DescribedGroup {
    let assignor = consumer
        .members
        .values()
        .find_map(|m| m.server_assignor.clone())
        .unwrap_or_else(|| groups::coordinator::ASSIGNORS[0].to_string());
    describe::DescribedGroup::default()
        .with_group_id(GroupId(text("")))
        .with_group_state(StrBytes::from_static_str(group_state_name(consumer)))
        .with_group_epoch(consumer.group_epoch)
        .with_assignment_epoch(consumer.assignment_epoch)
        .with_assignor_name(text(assignor))
        .with_members(
            consumer
                .members
                .values()
                .map(|m| {
                    let target = consumer
                        .target
                        .get(&m.member_id)
                        .cloned()
                        .unwrap_or_default();
                    describe::Member::default()
                        .with_member_id(text(m.member_id.clone()))
                        .with_instance_id(m.instance_id.clone().map(text))
                        .with_rack_id(m.rack_id.clone().map(text))
                        .with_member_epoch(m.member_epoch)
                        .with_client_id(text(m.client_id.clone()))
                        .with_client_host(text(m.client_host.clone()))
                        .with_subscribed_topic_names(
                            m.subscribed_names
                                .iter()
                                .map(|n| TopicName(text(n.clone())))
                                .collect(),
                        )
                        .with_subscribed_topic_regex(m.subscribed_regex.clone().map(text))
                        .with_assignment(described_assignment(topics, &m.assigned))
                        .with_target_assignment(described_assignment(topics, &target))
                        // 0: a classic member (of a group migrating), 1: consumer.
                        .with_member_type(if m.classic.is_some() { 0 } else { 1 })
                })
                .collect(),
        )
}
