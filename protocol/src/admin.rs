//! The requests every Kafka tool needs besides producing and fetching, on
//! a [`Connection`]: Metadata (every topic or some, a topic's partitions,
//! each partition's leader), ListOffsets, DeleteRecords and
//! InitProducerId. The admin CLI and the load generator both use these,
//! against any Kafka broker.
//!
//! In a cluster, partition requests (Produce, Fetch, ListOffsets,
//! DeleteRecords) must go
//! to each partition's leader: a [`Router`] learns the leaders from
//! Metadata and keeps one connection per leader, the bootstrap connection
//! standing for the broker it reached.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::ops::RangeInclusive;

use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, BrokerId, DeleteRecordsRequest, InitProducerIdRequest, ListOffsetsRequest,
    MetadataRequest, MetadataResponse, ProducerId, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::client::{check_error, ClientError, Connection, ERROR_NONE};

/// A topic partition: (topic, partition index).
pub type TopicPartition = (String, i32);

/// Metadata versions spoken (v1+: a null topic list means every topic).
pub const METADATA_VERSIONS: RangeInclusive<i16> = 1..=12;
/// ListOffsets versions spoken (v1+: one offset per partition).
pub const LIST_OFFSETS_VERSIONS: RangeInclusive<i16> = 1..=7;
/// DeleteRecords versions spoken.
pub const DELETE_RECORDS_VERSIONS: RangeInclusive<i16> = 0..=2;
/// DeleteRecords' offset for "every record below the high watermark".
pub const DELETE_TO_HIGH_WATERMARK: i64 = -1;
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
    let answers = list_offsets_answers(connection, partitions, timestamp).await?;
    let mut offsets = BTreeMap::new();
    for (key, answer) in answers {
        match answer {
            Ok(offset) => {
                offsets.insert(key, offset);
            }
            Err(code) => {
                return Err(ClientError::PartitionError {
                    api_key: ApiKey::ListOffsets,
                    topic: key.0,
                    partition: key.1,
                    code,
                })
            }
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

/// ListOffsets of `partitions` at `timestamp` in one request: each
/// partition the broker answered for, with its offset or its error code.
async fn list_offsets_answers(
    connection: &mut Connection,
    partitions: &[(String, i32)],
    timestamp: i64,
) -> Result<BTreeMap<TopicPartition, Result<i64, i16>>, ClientError> {
    let version = connection.version::<ListOffsetsRequest>(LIST_OFFSETS_VERSIONS)?;
    let by_topic = by_topic(
        partitions
            .iter()
            .map(|(topic, partition)| (topic.as_str(), *partition)),
    );
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
    Ok(answers(response.topics.iter().flat_map(|topic| {
        topic.partitions.iter().map(|p| {
            let key = (topic.name.0.to_string(), p.partition_index);
            (key, p.error_code, p.offset)
        })
    })))
}

/// DeleteRecords of `partitions` (each with the offset records below it
/// are deleted, [`DELETE_TO_HIGH_WATERMARK`] for all below the high
/// watermark) in one request, which the broker answers once the ISR's log
/// starts reached them or `timeout_ms` passed: each partition the broker
/// answered for, with its low watermark (the least log start over the
/// ISR) or its error code.
pub async fn delete_records(
    connection: &mut Connection,
    partitions: &[(TopicPartition, i64)],
    timeout_ms: i32,
) -> Result<BTreeMap<TopicPartition, Result<i64, i16>>, ClientError> {
    let version = connection.version::<DeleteRecordsRequest>(DELETE_RECORDS_VERSIONS)?;
    let by_topic = by_topic(
        partitions
            .iter()
            .map(|((topic, partition), offset)| (topic.as_str(), (*partition, *offset))),
    );
    let topics = delete_records_topics(
        by_topic
            .iter()
            .map(|(topic, wanted)| (*topic, wanted.as_slice())),
    );
    let request = DeleteRecordsRequest::default()
        .with_topics(topics)
        .with_timeout_ms(timeout_ms);
    let response = connection.call(&request, version).await?;
    Ok(answers(response.topics.iter().flat_map(|topic| {
        topic.partitions.iter().map(|p| {
            let key = (topic.name.0.to_string(), p.partition_index);
            (key, p.error_code, p.low_watermark)
        })
    })))
}

/// Why one partition has no offset: what its leader answered, or why the
/// leader could not be asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetFailure {
    /// The leader answered this Kafka error code for the partition.
    Code(i16),
    /// Metadata names no live leader for it (not retriable: that is the
    /// partition's state until Metadata says otherwise).
    NoLeader,
    /// The broker did not answer for it, though asked.
    Missing,
    /// The request to its leader failed as a whole.
    Request {
        message: String,
        /// A Kafka error Kafka calls retriable, or a connection that
        /// failed (a leader that went away: its partitions move).
        retriable: bool,
    },
}

impl OffsetFailure {
    /// Whether asking again (after a fresh Metadata) may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            OffsetFailure::Code(code) => crate::client::is_retriable_code(*code),
            OffsetFailure::NoLeader => false,
            OffsetFailure::Missing => true,
            OffsetFailure::Request { retriable, .. } => *retriable,
        }
    }

    fn from_request(error: &ClientError) -> OffsetFailure {
        let connection_failed = matches!(
            error,
            ClientError::Unreachable { .. }
                | ClientError::ConnectTimeout { .. }
                | ClientError::Timeout { .. }
                | ClientError::Io { .. }
                | ClientError::Closed { .. }
                | ClientError::Broken { .. }
        );
        OffsetFailure::Request {
            message: error.to_string(),
            retriable: connection_failed || error.is_retriable(),
        }
    }
}

impl std::fmt::Display for OffsetFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OffsetFailure::Code(code) => f.write_str(&crate::client::error_name(*code)),
            OffsetFailure::NoLeader => f.write_str("no live leader"),
            OffsetFailure::Missing => f.write_str("the leader listed no offset"),
            OffsetFailure::Request { message, .. } => f.write_str(message),
        }
    }
}

/// Each partition's own answer to ListOffsets (its offset) or
/// DeleteRecords (its low watermark), or why it has none.
pub type OffsetAnswers = BTreeMap<TopicPartition, Result<i64, OffsetFailure>>;

/// ListOffsets of some partitions of one topic, each asked of its leader
/// (see [`Router`]): partition → offset.
pub async fn list_topic_offsets(
    bootstrap: &mut Connection,
    topic: &str,
    partitions: &[i32],
    timestamp: i64,
) -> Result<BTreeMap<i32, i64>, ClientError> {
    let wanted: Vec<(String, i32)> = partitions.iter().map(|&p| (topic.to_string(), p)).collect();
    let mut router = Router::discover(bootstrap, &[topic.to_string()]).await?;
    let offsets = router.list_offsets(bootstrap, &wanted, timestamp).await?;
    Ok(offsets
        .into_iter()
        .map(|((_, p), offset)| (p, offset))
        .collect())
}

/// Items by the broker id of their partition's leader: (topic, partition,
/// item) in the order given.
pub type ByLeader<'p, T> = BTreeMap<i32, Vec<(&'p str, i32, T)>>;

/// Where partition requests go: each partition's leader as Metadata
/// named it, and one connection per leader, opened when first needed with
/// the bootstrap connection's settings. The bootstrap connection is used
/// for the broker it reached, so a single broker needs no other
/// connection. A leader that moved answers NOT_LEADER_OR_FOLLOWER; the
/// caller then discovers again.
pub struct Router {
    /// Broker id → `host:port`.
    brokers: BTreeMap<i32, String>,
    /// Each partition's leader id (-1: none).
    leaders: HashMap<TopicPartition, i32>,
    /// The broker the bootstrap connection reached, if it is known.
    bootstrap_id: Option<i32>,
    /// Connections to the other leaders, by broker id.
    others: HashMap<i32, Connection>,
}

impl Router {
    /// The leaders of every partition of `topics`, from the bootstrap
    /// broker's Metadata.
    pub async fn discover(
        bootstrap: &mut Connection,
        topics: &[String],
    ) -> Result<Router, ClientError> {
        let response = metadata(bootstrap, Some(topics), false).await?;
        Ok(Router::from_metadata(bootstrap, &response))
    }

    /// The leaders `response` names (for callers that have asked
    /// Metadata already).
    pub fn from_metadata(bootstrap: &Connection, response: &MetadataResponse) -> Router {
        let brokers: BTreeMap<i32, String> = response
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port)))
            .collect();
        let mut leaders = HashMap::new();
        for topic in &response.topics {
            let Some(name) = topic.name.as_ref() else {
                continue;
            };
            for partition in &topic.partitions {
                leaders.insert(
                    (name.0.to_string(), partition.partition_index),
                    partition.leader_id.0,
                );
            }
        }
        let bootstrap_id = reached_broker(bootstrap.address(), &brokers);
        Router {
            brokers,
            leaders,
            bootstrap_id,
            others: HashMap::new(),
        }
    }

    /// Every broker Metadata listed: id → `host:port`.
    pub fn brokers(&self) -> &BTreeMap<i32, String> {
        &self.brokers
    }

    /// The broker the bootstrap connection reached, if it can be told.
    pub fn bootstrap_id(&self) -> Option<i32> {
        self.bootstrap_id
    }

    /// The leader of a partition, if it has a live one.
    pub fn leader(&self, topic: &str, partition: i32) -> Result<i32, ClientError> {
        let leader = self
            .leaders
            .get(&(topic.to_string(), partition))
            .copied()
            .unwrap_or(-1);
        if !self.brokers.contains_key(&leader) {
            return Err(ClientError::NoLeader {
                topic: topic.to_string(),
                partition,
                leader,
            });
        }
        Ok(leader)
    }

    /// `partitions` grouped by leader (an error if one has none).
    pub fn by_leader<'p, T>(
        &self,
        partitions: impl IntoIterator<Item = (&'p str, i32, T)>,
    ) -> Result<ByLeader<'p, T>, ClientError> {
        let mut grouped: ByLeader<'p, T> = BTreeMap::new();
        for (topic, partition, item) in partitions {
            let leader = self.leader(topic, partition)?;
            grouped
                .entry(leader)
                .or_default()
                .push((topic, partition, item));
        }
        Ok(grouped)
    }

    /// The connection to broker `leader`: the bootstrap one if that is the
    /// broker it reached, else one of this router's own (opened now if
    /// needed).
    pub async fn connection<'c>(
        &'c mut self,
        bootstrap: &'c mut Connection,
        leader: i32,
    ) -> Result<&'c mut Connection, ClientError> {
        if self.bootstrap_id == Some(leader) {
            return Ok(bootstrap);
        }
        let Some(address) = self.brokers.get(&leader) else {
            return Err(ClientError::NoLeader {
                topic: String::new(),
                partition: -1,
                leader,
            });
        };
        match self.others.entry(leader) {
            Entry::Occupied(open) => Ok(open.into_mut()),
            Entry::Vacant(slot) => {
                let connection = Connection::connect(address, bootstrap.config().clone()).await?;
                Ok(slot.insert(connection))
            }
        }
    }

    /// ListOffsets of `partitions` at `timestamp` (as [`list_offsets`]),
    /// one request per leader.
    pub async fn list_offsets(
        &mut self,
        bootstrap: &mut Connection,
        partitions: &[TopicPartition],
        timestamp: i64,
    ) -> Result<BTreeMap<TopicPartition, i64>, ClientError> {
        let grouped = self.by_leader(partitions.iter().map(|(t, p)| (t.as_str(), *p, ())))?;
        let mut offsets = BTreeMap::new();
        for (leader, wanted) in grouped {
            let wanted: Vec<TopicPartition> = wanted
                .iter()
                .map(|(t, p, ())| (t.to_string(), *p))
                .collect();
            let connection = self.connection(bootstrap, leader).await?;
            offsets.extend(list_offsets(connection, &wanted, timestamp).await?);
        }
        Ok(offsets)
    }

    /// ListOffsets of `partitions` at `timestamp`, one request per
    /// leader, where one partition's failure (its leader's error, no
    /// leader, a leader that cannot be reached) is that partition's
    /// answer and no other's.
    pub async fn list_offsets_each(
        &mut self,
        bootstrap: &mut Connection,
        partitions: &[TopicPartition],
        timestamp: i64,
    ) -> OffsetAnswers {
        self.forget_broken_bootstrap(bootstrap);
        let mut answers = OffsetAnswers::new();
        let by_leader = self.each_by_leader(partitions.iter().cloned(), |key| key, &mut answers);
        for (leader, wanted) in by_leader {
            let asked = match self.connection(bootstrap, leader).await {
                Ok(connection) => list_offsets_answers(connection, &wanted, timestamp).await,
                Err(error) => Err(error),
            };
            self.place_answers(leader, wanted, asked, &mut answers);
        }
        answers
    }

    /// DeleteRecords of `partitions` (as [`delete_records`]), one request
    /// per leader, where one partition's failure is that partition's
    /// answer and no other's.
    pub async fn delete_records_each(
        &mut self,
        bootstrap: &mut Connection,
        partitions: &[(TopicPartition, i64)],
        timeout_ms: i32,
    ) -> OffsetAnswers {
        self.forget_broken_bootstrap(bootstrap);
        let mut answers = OffsetAnswers::new();
        let by_leader =
            self.each_by_leader(partitions.iter().cloned(), |(key, _)| key, &mut answers);
        for (leader, wanted) in by_leader {
            let asked = match self.connection(bootstrap, leader).await {
                Ok(connection) => delete_records(connection, &wanted, timeout_ms).await,
                Err(error) => Err(error),
            };
            let keys = wanted.into_iter().map(|(key, _)| key);
            self.place_answers(leader, keys, asked, &mut answers);
        }
        answers
    }

    /// A bootstrap connection that failed earlier is not used again: the
    /// broker it reached gets a connection of its own.
    fn forget_broken_bootstrap(&mut self, bootstrap: &Connection) {
        if bootstrap.is_broken() {
            self.bootstrap_id = None;
        }
    }

    /// `parts` grouped by the leader of each one's partition (`key`), as
    /// [`Router::by_leader`] but a partition without a leader is answered
    /// NoLeader in `answers` and the others still grouped.
    fn each_by_leader<T>(
        &self,
        parts: impl IntoIterator<Item = T>,
        key: impl Fn(&T) -> &TopicPartition,
        answers: &mut OffsetAnswers,
    ) -> BTreeMap<i32, Vec<T>> {
        let mut by_leader: BTreeMap<i32, Vec<T>> = BTreeMap::new();
        for part in parts {
            let (topic, partition) = key(&part);
            match self.leader(topic, *partition) {
                Ok(leader) => by_leader.entry(leader).or_default().push(part),
                Err(_) => {
                    answers.insert(key(&part).clone(), Err(OffsetFailure::NoLeader));
                }
            }
        }
        by_leader
    }

    /// Puts what `leader` was `asked` for `keys` in `answers`: each
    /// partition's offset or error code (Missing if it did not answer for
    /// it), or for all of them why the request failed.
    fn place_answers(
        &mut self,
        leader: i32,
        keys: impl IntoIterator<Item = TopicPartition>,
        asked: Result<BTreeMap<TopicPartition, Result<i64, i16>>, ClientError>,
        answers: &mut OffsetAnswers,
    ) {
        match asked {
            Ok(mut answered) => {
                for key in keys {
                    let answer = match answered.remove(&key) {
                        Some(Ok(offset)) => Ok(offset),
                        Some(Err(code)) => Err(OffsetFailure::Code(code)),
                        None => Err(OffsetFailure::Missing),
                    };
                    answers.insert(key, answer);
                }
            }
            Err(error) => {
                // A broken connection stays broken: the next use opens another.
                self.others.remove(&leader);
                let failure = OffsetFailure::from_request(&error);
                for key in keys {
                    answers.insert(key, Err(failure.clone()));
                }
            }
        }
    }
}

/// Which of `brokers` a connection to `address` reached: the only one, or
/// the one with that address (as written, else as resolved).
fn reached_broker(address: &str, brokers: &BTreeMap<i32, String>) -> Option<i32> {
    if brokers.len() == 1 {
        return brokers.keys().next().copied();
    }
    if let Some((&id, _)) = brokers.iter().find(|(_, a)| a.as_str() == address) {
        return Some(id);
    }
    let resolve = |a: &str| -> Vec<std::net::SocketAddr> {
        std::net::ToSocketAddrs::to_socket_addrs(a)
            .map(Iterator::collect)
            .unwrap_or_default()
    };
    let reached = resolve(address);
    brokers
        .iter()
        .find(|(_, a)| resolve(a).iter().any(|s| reached.contains(s)))
        .map(|(&id, _)| id)
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

/// The topics of a DeleteRecords request: each topic of `topics` once, in
/// the order given, with its (partition, offset) pairs in order.
pub fn delete_records_topics<'a>(
    topics: impl IntoIterator<Item = (&'a str, &'a [(i32, i64)])>,
) -> Vec<DeleteRecordsTopic> {
    topics
        .into_iter()
        .map(|(topic, wanted)| {
            DeleteRecordsTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(
                    wanted
                        .iter()
                        .map(|&(partition, offset)| {
                            DeleteRecordsPartition::default()
                                .with_partition_index(partition)
                                .with_offset(offset)
                        })
                        .collect(),
                )
        })
        .collect()
}

/// `parts` grouped by topic: each topic once, in name order, with its
/// parts in the order given (one request names each topic once).
fn by_topic<'a, T>(parts: impl IntoIterator<Item = (&'a str, T)>) -> BTreeMap<&'a str, Vec<T>> {
    let mut grouped: BTreeMap<&str, Vec<T>> = BTreeMap::new();
    for (topic, part) in parts {
        grouped.entry(topic).or_default().push(part);
    }
    grouped
}

/// Each partition's answer from (partition, error code, value): the value
/// when the code is NONE, else the code.
fn answers<T>(
    parts: impl IntoIterator<Item = (TopicPartition, i16, T)>,
) -> BTreeMap<TopicPartition, Result<T, i16>> {
    parts
        .into_iter()
        .map(|(key, code, value)| {
            let answer = if code == ERROR_NONE {
                Ok(value)
            } else {
                Err(code)
            };
            (key, answer)
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bootstrap_connection_stands_for_the_broker_it_reached() {
        let brokers = |list: &[(i32, &str)]| -> BTreeMap<i32, String> {
            list.iter().map(|(id, a)| (*id, a.to_string())).collect()
        };
        let one = brokers(&[(7, "broker.example:9092")]);
        assert_eq!(reached_broker("127.0.0.1:9092", &one), Some(7));
        let three = brokers(&[
            (1, "127.0.0.1:41092"),
            (2, "127.0.0.1:51092"),
            (3, "127.0.0.1:61092"),
        ]);
        assert_eq!(reached_broker("127.0.0.1:51092", &three), Some(2));
        assert_eq!(reached_broker("localhost:61092", &three), Some(3));
        assert_eq!(reached_broker("127.0.0.1:9092", &three), None);
    }
}
