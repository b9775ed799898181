//! The requests every Kafka tool needs besides producing and fetching, on
//! a [`Connection`]: Metadata (every topic or some, a topic's partitions,
//! each partition's leader), ListOffsets and InitProducerId. The admin CLI
//! and the load generator both use these, against any Kafka broker.

use std::collections::{BTreeMap, HashMap};
use std::ops::RangeInclusive;

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, BrokerId, InitProducerIdRequest, ListOffsetsRequest, MetadataRequest, MetadataResponse,
    ProducerId, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::client::{check_error, ClientError, Connection, ERROR_NONE};

/// Metadata versions spoken (v1+: a null topic list means every topic).
pub const METADATA_VERSIONS: RangeInclusive<i16> = 1..=12;
/// ListOffsets versions spoken (v1+: one offset per partition).
pub const LIST_OFFSETS_VERSIONS: RangeInclusive<i16> = 1..=7;
/// InitProducerId versions spoken.
pub const INIT_PRODUCER_ID_VERSIONS: RangeInclusive<i16> = 0..=4;

/// ListOffsets' timestamp for the log end offset.
pub const LATEST: i64 = -1;
/// ListOffsets' timestamp for the log start offset.
pub const EARLIEST: i64 = -2;

/// The transaction timeout an idempotent (not transactional) producer
/// asks for, as Kafka's clients default it.
const TRANSACTION_TIMEOUT_MS: i32 = 60_000;

pub fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// Metadata for `topics` (`None`: every topic; empty: brokers only),
/// creating missing ones when `auto_create` and the broker allows it.
pub async fn metadata(
    connection: &mut Connection,
    topics: Option<&[String]>,
    auto_create: bool,
) -> Result<MetadataResponse, ClientError> {
    let version = connection.version::<MetadataRequest>(METADATA_VERSIONS)?;
    let request = MetadataRequest::default()
        .with_topics(topics.map(|names| {
            names
                .iter()
                .map(|name| MetadataRequestTopic::default().with_name(Some(topic_name(name))))
                .collect()
        }))
        .with_allow_auto_topic_creation(auto_create);
    connection.call(&request, version).await
}

/// The partition ids of one topic, sorted; the broker's error
/// (UNKNOWN_TOPIC_OR_PARTITION) when it does not exist.
pub async fn partitions(
    connection: &mut Connection,
    topic: &str,
    auto_create: bool,
) -> Result<Vec<i32>, ClientError> {
    let response = metadata(connection, Some(&[topic.to_string()]), auto_create).await?;
    let Some(found) = response
        .topics
        .iter()
        .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some(topic))
    else {
        return Err(ClientError::TopicMissing {
            topic: topic.to_string(),
        });
    };
    check_topic(ApiKey::Metadata, topic, found.error_code)?;
    let mut ids: Vec<i32> = found.partitions.iter().map(|p| p.partition_index).collect();
    ids.sort_unstable();
    if ids.is_empty() {
        return Err(ClientError::NoPartitions {
            topic: topic.to_string(),
        });
    }
    Ok(ids)
}

/// Where each partition's leader is.
#[derive(Debug, Clone, Default)]
pub struct Leaders {
    /// Broker id → `host:port`.
    pub brokers: HashMap<i32, String>,
    /// (topic, partition) → the leader's `host:port`.
    pub partitions: HashMap<(String, i32), String>,
}

/// The leader of every partition of `topics`; an error when a topic has
/// an error or a partition no live leader.
pub async fn leaders(
    connection: &mut Connection,
    topics: &[String],
) -> Result<Leaders, ClientError> {
    let response = metadata(connection, Some(topics), false).await?;
    let mut leaders = Leaders::default();
    for broker in &response.brokers {
        leaders
            .brokers
            .insert(broker.node_id.0, format!("{}:{}", broker.host, broker.port));
    }
    for topic in &response.topics {
        let name = topic
            .name
            .as_ref()
            .map(|n| n.0.to_string())
            .unwrap_or_default();
        check_topic(ApiKey::Metadata, &name, topic.error_code)?;
        for partition in &topic.partitions {
            let leader = partition.leader_id.0;
            let Some(address) = leaders.brokers.get(&leader) else {
                return Err(ClientError::NoLeader {
                    topic: name,
                    partition: partition.partition_index,
                    leader,
                });
            };
            leaders
                .partitions
                .insert((name.clone(), partition.partition_index), address.clone());
        }
    }
    Ok(leaders)
}

/// ListOffsets of `partitions` at `timestamp` ([`LATEST`], [`EARLIEST`],
/// else the first offset at or after it; -1 if none), in one request.
pub async fn list_offsets(
    connection: &mut Connection,
    partitions: &[(String, i32)],
    timestamp: i64,
) -> Result<BTreeMap<(String, i32), i64>, ClientError> {
    let version = connection.version::<ListOffsetsRequest>(LIST_OFFSETS_VERSIONS)?;
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in partitions {
        by_topic.entry(topic).or_default().push(*partition);
    }
    let topics = by_topic
        .iter()
        .map(|(topic, ids)| {
            ListOffsetsTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(
                    ids.iter()
                        .map(|&p| {
                            ListOffsetsPartition::default()
                                .with_partition_index(p)
                                .with_current_leader_epoch(-1)
                                .with_timestamp(timestamp)
                        })
                        .collect(),
                )
        })
        .collect();
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(topics);
    let response = connection.call(&request, version).await?;
    let mut offsets = BTreeMap::new();
    for topic in &response.topics {
        for p in &topic.partitions {
            let key = (topic.name.0.to_string(), p.partition_index);
            if p.error_code != ERROR_NONE {
                return Err(ClientError::PartitionError {
                    api_key: ApiKey::ListOffsets,
                    topic: key.0,
                    partition: key.1,
                    code: p.error_code,
                });
            }
            offsets.insert(key, p.offset);
        }
    }
    if let Some((topic, partition)) = partitions.iter().find(|tp| !offsets.contains_key(*tp)) {
        return Err(ClientError::OffsetMissing {
            topic: topic.clone(),
            partition: *partition,
        });
    }
    Ok(offsets)
}

/// ListOffsets of some partitions of one topic: partition → offset.
pub async fn list_topic_offsets(
    connection: &mut Connection,
    topic: &str,
    partitions: &[i32],
    timestamp: i64,
) -> Result<BTreeMap<i32, i64>, ClientError> {
    let wanted: Vec<(String, i32)> = partitions.iter().map(|&p| (topic.to_string(), p)).collect();
    let offsets = list_offsets(connection, &wanted, timestamp).await?;
    Ok(offsets
        .into_iter()
        .map(|((_, p), offset)| (p, offset))
        .collect())
}

/// A producer id and epoch for an idempotent producer.
pub async fn init_producer_id(connection: &mut Connection) -> Result<(i64, i16), ClientError> {
    let version = connection.version::<InitProducerIdRequest>(INIT_PRODUCER_ID_VERSIONS)?;
    let request = InitProducerIdRequest::default()
        .with_transaction_timeout_ms(TRANSACTION_TIMEOUT_MS)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let response = connection.call(&request, version).await?;
    check_error(ApiKey::InitProducerId, response.error_code, None)?;
    Ok((response.producer_id.0, response.producer_epoch))
}

fn check_topic(api_key: ApiKey, topic: &str, code: i16) -> Result<(), ClientError> {
    if code == ERROR_NONE {
        return Ok(());
    }
    Err(ClientError::TopicError {
        api_key,
        topic: topic.to_string(),
        code,
    })
}
