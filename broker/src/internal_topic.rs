//! The internal topics a coordinator lives on (`__consumer_offsets` for
//! groups, `__transaction_state` for transactional ids): created on first
//! use as Kafka does, a key (group id, transactional id) placed on a
//! partition by Kafka's rule, and that partition's leader the key's
//! coordinator, on the core owning the partition.

use std::collections::BTreeMap;
use std::rc::Rc;

use std::time::Duration;

use bytes::Bytes;
use protocol::batch::build::{self, NewRecord};
use protocol::batch::{split_batches, RecordBatch};

use crate::controller::{self, TopicSpec};
use crate::errors;
use crate::limits::{OFFSETS_COMMIT_TIMEOUT_MS, OFFSETS_LOAD_READ_BYTES};
use crate::metadata::{MetadataImage, NotServed};
use crate::partition::Partition;
use crate::shard::Shard;

/// How an internal topic is created.
pub struct InternalTopic {
    pub name: &'static str,
    pub partitions: i32,
    /// The configured replication factor, capped by the live brokers
    /// when the topic is created (one on a single node).
    pub replication_factor: i16,
    /// `min.insync.replicas`, capped by the replication factor it is
    /// created with (`None`: the broker's default).
    pub min_insync_replicas: Option<i32>,
    pub configs: Vec<(&'static str, String)>,
}

impl InternalTopic {
    /// A coordinator's topic as Kafka creates it: compacted (the latest
    /// record of each key is the state), kept forever, 100 MiB segments,
    /// small preallocation and cache, plus `more` settings.
    pub fn compacted(
        name: &'static str,
        partitions: i32,
        replication_factor: i16,
        min_insync_replicas: Option<i32>,
        more: &[(&'static str, &str)],
    ) -> Self {
        let mut configs = vec![
            ("cleanup.policy", "compact".to_string()),
            ("retention.ms", "-1".to_string()),
            ("segment.bytes", "104857600".to_string()),
            ("strom.preallocate.bytes", "65536".to_string()),
            ("strom.cache.bytes", "1048576".to_string()),
        ];
        configs.extend(more.iter().map(|&(k, v)| (k, v.to_string())));
        InternalTopic {
            name,
            partitions,
            replication_factor,
            min_insync_replicas,
            configs,
        }
    }
}

/// Why a key has no coordinator here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unplaced {
    /// The topic cannot be created, or its partition has no leader.
    NotAvailable,
    /// Another broker leads the key's partition.
    NotHere,
}

/// Where a key's coordinator runs on this broker.
#[derive(Debug, Clone, Copy)]
pub struct Placement {
    pub partition: i32,
    pub core: usize,
}

/// Java's `String.hashCode` (over UTF-16 code units).
pub fn java_string_hash(value: &str) -> i32 {
    value.encode_utf16().fold(0i32, |hash, unit| {
        hash.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// The partition of `key` among `partitions`, as Kafka computes it
/// (`Utils.abs(key.hashCode) % partitions`, where `abs(MIN)` is 0).
pub fn partition_for(key: &str, partitions: i32) -> i32 {
    let hash = java_string_hash(key);
    let positive = if hash == i32::MIN { 0 } else { hash.abs() };
    positive % partitions.max(1)
}

/// The topic's partition count as the metadata has it (1 before it exists).
pub fn partition_count(shard: &Shard, name: &str) -> i32 {
    shard
        .metadata
        .image()
        .topics
        .get(name)
        .map_or(1, |t| t.partition_cores.len() as i32)
}

/// The image, with the topic created if missing.
pub async fn image(
    shard: &Rc<Shard>,
    topic: &InternalTopic,
) -> Result<Rc<MetadataImage>, Unplaced> {
    let mut image = shard.metadata.image();
    if image.topics.contains_key(topic.name) {
        return Ok(image);
    }
    let replication_factor = if shard.in_cluster() {
        let live = i16::try_from(image.live_brokers().count()).unwrap_or(i16::MAX);
        topic.replication_factor.min(live).max(1)
    } else {
        1
    };
    let mut configs: BTreeMap<String, String> = topic
        .configs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    if let Some(min_isr) = topic.min_insync_replicas {
        let capped = min_isr.min(i32::from(replication_factor)).max(1);
        configs.insert("min.insync.replicas".to_string(), capped.to_string());
    }
    let spec = TopicSpec {
        name: topic.name.to_string(),
        partitions: topic.partitions,
        replication_factor,
        configs,
    };
    let outcome = controller::create_topics(shard, vec![spec], false).await;
    if let Some(Err(refusal)) = outcome.first() {
        if refusal.error_code != errors::TOPIC_ALREADY_EXISTS {
            tracing::error!(message = %refusal.message, topic = topic.name, "cannot create an internal topic");
            return Err(Unplaced::NotAvailable);
        }
    }
    image = shard.metadata.image();
    Ok(image)
}

/// The image (with the topic in it) and `key`'s partition.
async fn key_partition(
    shard: &Rc<Shard>,
    topic: &InternalTopic,
    key: &str,
) -> Result<(Rc<MetadataImage>, i32), Unplaced> {
    let image = image(shard, topic).await?;
    let count = image
        .topics
        .get(topic.name)
        .ok_or(Unplaced::NotAvailable)?
        .partition_cores
        .len() as i32;
    Ok((image, partition_for(key, count)))
}

/// The broker coordinating `key`: the leader of its partition.
pub async fn coordinator(
    shard: &Rc<Shard>,
    topic: &InternalTopic,
    key: &str,
) -> Result<i32, Unplaced> {
    let (image, partition) = key_partition(shard, topic, key).await?;
    match image.topics[topic.name]
        .partition(partition)
        .map(|p| p.leader)
    {
        Some(leader) if leader >= 0 => Ok(leader),
        _ => Err(Unplaced::NotAvailable),
    }
}

/// `key`'s placement on this broker.
pub async fn place(
    shard: &Rc<Shard>,
    topic: &InternalTopic,
    key: &str,
) -> Result<Placement, Unplaced> {
    let (image, partition) = key_partition(shard, topic, key).await?;
    let core = image
        .leader_core(&image.topics[topic.name], partition, shard.cores)
        .map_err(|why| match why {
            NotServed::NotLeaderOrFollower => Unplaced::NotHere,
            NotServed::UnknownTopicOrPartition => Unplaced::NotAvailable,
        })?;
    Ok(Placement { partition, core })
}

/// Reads a coordinator's partition from its log start up to `end`,
/// handing `each` every batch in order (a batch that does not parse ends
/// its read). The failed read's error code, if one fails.
pub async fn for_each_batch(
    log: &Partition,
    end: i64,
    mut each: impl FnMut(&RecordBatch),
) -> Result<(), i16> {
    let mut from = log.log_start_offset();
    while from < end {
        let read = log.read(from, OFFSETS_LOAD_READ_BYTES, false).await;
        if read.error_code != errors::NONE {
            return Err(read.error_code);
        }
        let mut next = from;
        for batch in split_batches(read.records) {
            let Ok(batch) = batch else { break };
            next = batch.header().last_offset() + 1;
            each(&batch);
        }
        if next <= from {
            break;
        }
        from = next;
    }
    Ok(())
}

/// Appends `records` to a coordinator's partition as one batch, acks=all:
/// answered once every in-sync replica has it. Its base offset, or the
/// produce's error code.
pub async fn append_replicated(
    log: &Partition,
    timestamp: i64,
    records: &[NewRecord],
) -> Result<i64, i16> {
    let bytes = Bytes::from(build::batch(timestamp, records));
    let batch = RecordBatch::new(bytes).map_err(|error| {
        tracing::error!(%error, "a coordinator's batch built here does not parse");
        errors::INVALID_RECORD
    })?;
    let outcome = log
        .produce(batch, -1, Duration::from_millis(OFFSETS_COMMIT_TIMEOUT_MS))
        .await;
    match outcome.error_code {
        errors::NONE => Ok(outcome.base_offset),
        code => Err(code),
    }
}
