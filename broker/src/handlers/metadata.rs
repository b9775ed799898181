//! Metadata (3), versions 0–13. Lists all topics (v0 empty list, v1+ null)
//! or the requested ones, by name, creating missing ones when auto-create
//! is on, or (v12+) by topic id. Topic ids are sent from v10 on; v13's
//! top-level error code is always 0 (it only asks a client to
//! re-bootstrap).
//! Authorized operations, when asked for, are all a topic (and, v8–10, the
//! cluster) supports: there is no authorizer.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::authorized_operations;
use crate::controller::{self, TopicSpec};
use crate::errors;
use crate::metadata::{validate_topic_name, MetadataImage, TopicMeta};
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 13;

/// Broker ids as the messages carry them.
pub fn broker_ids(ids: &[i32]) -> Vec<BrokerId> {
    ids.iter().copied().map(BrokerId).collect()
}

pub fn topic_response(image: &MetadataImage, topic: &TopicMeta) -> MetadataResponseTopic {
    let partitions = topic
        .partitions
        .iter()
        .enumerate()
        .map(|(index, state)| {
            MetadataResponsePartition::default()
                .with_partition_index(index as i32)
                .with_leader_id(BrokerId(state.leader))
                .with_leader_epoch(state.leader_epoch)
                .with_replica_nodes(broker_ids(&state.replicas))
                .with_isr_nodes(broker_ids(&state.isr))
                .with_offline_replicas(broker_ids(&crate::cluster::offline_replicas(
                    image,
                    &state.replicas,
                )))
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(topic.name.clone()))))
        .with_topic_id(topic_id(topic))
        .with_is_internal(crate::metadata::is_internal_topic(&topic.name))
        .with_partitions(partitions)
}

fn error_topic(name: &str, error_code: i16) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(name.to_string()))))
        .with_error_code(error_code)
}

/// A topic id as the messages carry it (zero: none).
pub fn topic_id(topic: &TopicMeta) -> uuid::Uuid {
    uuid::Uuid::from_u128(topic.topic_id)
}

/// The topic with id `id` (a request naming topics by id), if any; the
/// nil id names none.
pub fn topic_by_id(image: &MetadataImage, id: uuid::Uuid) -> Option<&TopicMeta> {
    if id.is_nil() {
        return None;
    }
    image
        .topics
        .values()
        .find(|t| t.topic_id == id.as_u128())
        .map(|t| t.as_ref())
}

/// `listener`: the listener the client asked on, whose addresses it gets.
pub async fn handle(
    shard: &Rc<Shard>,
    request: MetadataRequest,
    version: i16,
    listener: &str,
) -> MetadataResponse {
    let mut response = answer(shard, request, version, listener).await;
    // One listed broker behind a load balancer: it leads every partition
    // in the clients' view (the brokers forward to the real leaders).
    if crate::cluster::single_listed(shard, &shard.metadata.image()).is_some() {
        let image = shard.metadata.image();
        for partition in response.topics.iter_mut().flat_map(|t| &mut t.partitions) {
            partition.leader_id = BrokerId(crate::cluster::client_node(
                shard,
                &image,
                partition.leader_id.0,
            ));
        }
    }
    response
}

async fn answer(
    shard: &Rc<Shard>,
    request: MetadataRequest,
    version: i16,
    listener: &str,
) -> MetadataResponse {
    let config = &shard.config;
    let asked = request.topics.clone().unwrap_or_default();
    // Topic ids are asked for from v12 on; v10-11 carry the field but
    // Kafka refuses a request that uses it, or leaves a name out.
    if version < 12
        && asked
            .iter()
            .any(|t| t.name.is_none() || !t.topic_id.is_nil())
    {
        let topics = asked
            .into_iter()
            .map(|t| {
                MetadataResponseTopic::default()
                    .with_name(t.name)
                    .with_topic_id(t.topic_id)
                    .with_error_code(errors::INVALID_REQUEST)
            })
            .collect();
        return MetadataResponse::default().with_topics(topics);
    }
    let ids: Vec<uuid::Uuid> = asked
        .iter()
        .map(|t| t.topic_id)
        .filter(|id| !id.is_nil())
        .collect();
    if !ids.is_empty() {
        return by_topic_id(
            shard,
            &ids,
            request.include_topic_authorized_operations,
            listener,
        );
    }
    let requested: Option<Vec<String>> = match request.topics {
        None => None,
        Some(topics) if topics.is_empty() && version == 0 => None,
        Some(topics) => Some(
            topics
                .into_iter()
                .filter_map(|t| t.name.map(|n| n.0.to_string()))
                .collect(),
        ),
    };
    let mut image = shard.metadata.image();
    let mut refused: BTreeMap<String, i16> = BTreeMap::new();
    if let Some(names) = &requested {
        let allow_create =
            config.auto_create_topics && (version < 4 || request.allow_auto_topic_creation);
        let missing: Vec<String> = names
            .iter()
            .filter(|n| !image.topics.contains_key(*n))
            .cloned()
            .collect();
        let mut to_create = Vec::new();
        for name in missing {
            if validate_topic_name(&name).is_err() {
                refused.insert(name, errors::INVALID_TOPIC_EXCEPTION);
            } else if allow_create {
                to_create.push(name);
            } else {
                refused.insert(name, errors::UNKNOWN_TOPIC_OR_PARTITION);
            }
        }
        if !to_create.is_empty() {
            let specs = to_create
                .iter()
                .map(|name| TopicSpec {
                    name: name.clone(),
                    partitions: config.num_partitions,
                    replication_factor: -1,
                    configs: BTreeMap::new(),
                })
                .collect();
            let outcomes = controller::create_topics(shard, specs, false).await;
            for (name, outcome) in to_create.into_iter().zip(outcomes) {
                // Another request may have created it meanwhile: that is fine.
                if let Err(refusal) = outcome {
                    if refusal.error_code != errors::TOPIC_ALREADY_EXISTS {
                        refused.insert(name, refusal.error_code);
                    }
                }
            }
            image = shard.metadata.image();
        }
    }
    let topic_operations =
        authorized_operations::topic(request.include_topic_authorized_operations);
    let topics: Vec<MetadataResponseTopic> = match &requested {
        None => image
            .topics
            .values()
            .map(|t| topic_response(&image, t))
            .collect(),
        Some(names) => names
            .iter()
            .map(|name| match image.topics.get(name) {
                Some(topic) => topic_response(&image, topic),
                None => error_topic(
                    name,
                    refused
                        .get(name)
                        .copied()
                        .unwrap_or(errors::UNKNOWN_TOPIC_OR_PARTITION),
                ),
            })
            .collect(),
    };
    let topics = topics
        .into_iter()
        .map(|topic| topic.with_topic_authorized_operations(topic_operations))
        .collect();
    // v8–10 carry the cluster's operations too; later versions moved them
    // to DescribeCluster.
    let cluster_operations = authorized_operations::cluster(
        (8..=10).contains(&version) && request.include_cluster_authorized_operations,
    );
    cluster(shard, &image, listener)
        .with_cluster_authorized_operations(cluster_operations)
        .with_topics(topics)
}

/// The response's broker list, cluster id and controller.
fn cluster(shard: &Shard, image: &MetadataImage, listener: &str) -> MetadataResponse {
    let brokers = crate::cluster::listed_brokers(shard, image, false, listener)
        .into_iter()
        .map(|b| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(b.id))
                .with_host(StrBytes::from_string(b.host))
                .with_port(i32::from(b.port))
                .with_rack(b.rack.map(StrBytes::from_string))
        })
        .collect();
    MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id(Some(StrBytes::from_string(image.cluster_id.clone())))
        .with_controller_id(BrokerId(crate::cluster::controller_id(shard)))
}

/// Topics asked for by id (v12+): never created; an id no topic has gets
/// UNKNOWN_TOPIC_ID without a name, as Kafka answers.
fn by_topic_id(
    shard: &Shard,
    ids: &[uuid::Uuid],
    with_operations: bool,
    listener: &str,
) -> MetadataResponse {
    let image = shard.metadata.image();
    let operations = authorized_operations::topic(with_operations);
    let topics = ids
        .iter()
        .map(|id| {
            let found = topic_by_id(&image, *id);
            match found {
                Some(topic) => topic_response(&image, topic),
                None => MetadataResponseTopic::default()
                    .with_name(None)
                    .with_topic_id(*id)
                    .with_error_code(errors::UNKNOWN_TOPIC_ID),
            }
            .with_topic_authorized_operations(operations)
        })
        .collect();
    cluster(shard, &image, listener).with_topics(topics)
}
