//! Cluster metadata for a single node: topics, their partitions' owning
//! cores (the shard table), topic configs and producer id blocks. Changes
//! are records appended to an on-disk metadata log (`__metadata/metadata.log`
//! in the data dir) and synced before they take effect; start-up replays
//! the log into an immutable [`MetadataImage`] that every core reads.
//!
//! This is the single-node form of the controller's replicated metadata
//! log: the records are the same, only the replication is missing.
//!
//! Record framing: `len u32 | crc32 u32 (crc32fast of payload) | payload`.
//! A torn tail (a damaged record with no valid record after it: a crash
//! during an append) is truncated at start, with a warning. A damaged
//! record with valid records after it is not a torn write: those records
//! were committed, so start-up refuses with the byte position and the
//! repair command ([`repair`]) instead of dropping them.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use crate::limits::METADATA_RECORD_BYTES_MAX;

pub const METADATA_DIR: &str = "__metadata";
/// Topics the broker writes itself: clients may read them, but not write,
/// delete or repartition them (Kafka's `Topic.isInternal`).
pub fn is_internal_topic(name: &str) -> bool {
    name == crate::group::OFFSETS_TOPIC
}

/// Where `strom repair` keeps what it cut from a partition log.
pub const REPAIR_DIR: &str = "__repair";
const METADATA_FILE: &str = "metadata.log";

#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("metadata log {path}: {op}: {error}")]
    Io {
        op: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("metadata log {path}: record at byte {position} is not understood: {reason}")]
    Corrupt {
        path: PathBuf,
        position: u64,
        reason: String,
    },
    #[error(
        "metadata log {path}: the record at byte {position} is damaged ({reason}) but valid \
         records follow from byte {next_valid}, so it is not a torn write and committed \
         metadata would be lost by cutting the log there; the broker does not start. \
         To drop only the damaged record (a copy of the file is kept): \
         strom repair metadata --data-dir {data_dir} --drop-damaged-at {position}",
        data_dir = data_dir.display()
    )]
    Damaged {
        path: PathBuf,
        data_dir: PathBuf,
        position: u64,
        next_valid: u64,
        reason: String,
    },
    #[error("metadata log {path}: no damaged record at byte {position}: {reason}")]
    NothingToRepair {
        path: PathBuf,
        position: u64,
        reason: String,
    },
}

/// A topic as the metadata log knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMeta {
    pub name: String,
    pub topic_id: u128,
    /// The owning core of each partition, by partition index: the shard table.
    pub partition_cores: Vec<u32>,
    /// Topic config overrides, in topic key names.
    pub configs: BTreeMap<String, String>,
    /// The replicas (broker ids) of each partition, by partition index, as
    /// assigned at creation: by hand, or this node alone. Partitions beyond
    /// the list (topics created before replicas were recorded) have this
    /// node alone; see [`TopicMeta::replicas`].
    pub replicas: Vec<Vec<i32>>,
}

impl TopicMeta {
    /// The replicas of `partition`, `node_id` alone when none were recorded.
    pub fn replicas(&self, partition: usize, node_id: i32) -> Vec<i32> {
        self.replicas
            .get(partition)
            .filter(|replicas| !replicas.is_empty())
            .cloned()
            .unwrap_or_else(|| vec![node_id])
    }
}

/// One change to the metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataRecord {
    ClusterId(String),
    TopicCreated(TopicMeta),
    TopicDeleted {
        name: String,
    },
    PartitionsAdded {
        name: String,
        cores: Vec<u32>,
        /// The new partitions' replicas (empty in records written before
        /// replicas were recorded).
        replicas: Vec<Vec<i32>>,
    },
    TopicConfigsSet {
        name: String,
        configs: BTreeMap<String, String>,
    },
    ProducerIdsAllocated {
        end: i64,
    },
    /// Replaces the dynamic settings of a broker resource: `""` the
    /// cluster-wide default, else a node id.
    BrokerConfigsSet {
        resource: String,
        configs: BTreeMap<String, String>,
    },
    /// Replaces the settings of a consumer group (GROUP resources).
    GroupConfigsSet {
        group: String,
        configs: BTreeMap<String, String>,
    },
}

/// Everything the metadata log says, at one point.
#[derive(Debug, Clone, Default)]
pub struct MetadataImage {
    pub cluster_id: String,
    pub topics: BTreeMap<String, Arc<TopicMeta>>,
    /// Producer ids below this were handed out (or reserved) already.
    pub producer_ids_end: i64,
    /// Dynamic broker settings by broker resource (`""`: cluster default).
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Consumer group settings by group id.
    pub group_configs: BTreeMap<String, BTreeMap<String, String>>,
}

impl MetadataImage {
    pub fn apply(&mut self, record: &MetadataRecord) {
        match record {
            MetadataRecord::ClusterId(id) => self.cluster_id = id.clone(),
            MetadataRecord::TopicCreated(topic) => {
                self.topics
                    .insert(topic.name.clone(), Arc::new(topic.clone()));
            }
            MetadataRecord::TopicDeleted { name } => {
                self.topics.remove(name);
            }
            MetadataRecord::PartitionsAdded {
                name,
                cores,
                replicas,
            } => {
                if let Some(topic) = self.topics.get_mut(name) {
                    let topic = Arc::make_mut(topic);
                    if !replicas.is_empty() {
                        // Partitions before these without recorded replicas
                        // keep the default (empty) entry.
                        let before = topic.partition_cores.len();
                        topic.replicas.resize(before, Vec::new());
                        topic.replicas.extend_from_slice(replicas);
                    }
                    topic.partition_cores.extend_from_slice(cores);
                }
            }
            MetadataRecord::TopicConfigsSet { name, configs } => {
                if let Some(topic) = self.topics.get_mut(name) {
                    Arc::make_mut(topic).configs = configs.clone();
                }
            }
            MetadataRecord::ProducerIdsAllocated { end } => {
                self.producer_ids_end = self.producer_ids_end.max(*end);
            }
            MetadataRecord::BrokerConfigsSet { resource, configs } => {
                set_or_remove(&mut self.broker_configs, resource, configs);
            }
            MetadataRecord::GroupConfigsSet { group, configs } => {
                set_or_remove(&mut self.group_configs, group, configs);
            }
        }
    }

    /// The core that owns a partition, mapped into the running core count
    /// (the count may have changed since the topic was created).
    pub fn owner_core(&self, topic: &TopicMeta, partition: i32, cores: usize) -> Option<usize> {
        let index = usize::try_from(partition).ok()?;
        topic
            .partition_cores
            .get(index)
            .map(|&core| core as usize % cores)
    }

    /// Partitions per core, to place new ones on the least loaded core.
    pub fn partitions_per_core(&self, cores: usize) -> Vec<usize> {
        let mut counts = vec![0usize; cores];
        for topic in self.topics.values() {
            for &core in &topic.partition_cores {
                counts[core as usize % cores] += 1;
            }
        }
        counts
    }
}

/// An empty set of settings leaves no entry behind.
fn set_or_remove(
    all: &mut BTreeMap<String, BTreeMap<String, String>>,
    name: &str,
    configs: &BTreeMap<String, String>,
) {
    if configs.is_empty() {
        all.remove(name);
    } else {
        all.insert(name.to_string(), configs.clone());
    }
}

/// Picks owning cores for `count` new partitions: each goes to the core
/// with the fewest partitions (lowest index on ties), so cores stay balanced.
pub fn place_partitions(counts: &mut [usize], count: usize) -> Vec<u32> {
    (0..count)
        .map(|_| {
            let (core, _) = counts
                .iter()
                .enumerate()
                .min_by_key(|&(core, &n)| (n, core))
                .expect("at least one core");
            counts[core] += 1;
            core as u32
        })
        .collect()
}

// Record encoding: a type byte, then fields; strings and lists are
// u32-length prefixed. Decoding bounds every length by the bytes left.
// A field added later goes at the end of its record and may be absent
// (records written before it), never in the middle.
const TYPE_CLUSTER_ID: u8 = 1;
const TYPE_TOPIC_CREATED: u8 = 2;
const TYPE_TOPIC_DELETED: u8 = 3;
const TYPE_PARTITIONS_ADDED: u8 = 4;
const TYPE_TOPIC_CONFIGS_SET: u8 = 5;
const TYPE_PRODUCER_IDS: u8 = 6;
const TYPE_BROKER_CONFIGS_SET: u8 = 7;
const TYPE_GROUP_CONFIGS_SET: u8 = 8;

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_cores(out: &mut Vec<u8>, cores: &[u32]) {
    out.extend_from_slice(&(cores.len() as u32).to_be_bytes());
    for core in cores {
        out.extend_from_slice(&core.to_be_bytes());
    }
}

fn put_replicas(out: &mut Vec<u8>, replicas: &[Vec<i32>]) {
    out.extend_from_slice(&(replicas.len() as u32).to_be_bytes());
    for partition in replicas {
        out.extend_from_slice(&(partition.len() as u32).to_be_bytes());
        for broker in partition {
            out.extend_from_slice(&broker.to_be_bytes());
        }
    }
}

fn put_configs(out: &mut Vec<u8>, configs: &BTreeMap<String, String>) {
    out.extend_from_slice(&(configs.len() as u32).to_be_bytes());
    for (key, value) in configs {
        put_str(out, key);
        put_str(out, value);
    }
}

impl MetadataRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            MetadataRecord::ClusterId(id) => {
                out.push(TYPE_CLUSTER_ID);
                put_str(&mut out, id);
            }
            MetadataRecord::TopicCreated(topic) => {
                out.push(TYPE_TOPIC_CREATED);
                put_str(&mut out, &topic.name);
                out.extend_from_slice(&topic.topic_id.to_be_bytes());
                put_cores(&mut out, &topic.partition_cores);
                put_configs(&mut out, &topic.configs);
                put_replicas(&mut out, &topic.replicas);
            }
            MetadataRecord::TopicDeleted { name } => {
                out.push(TYPE_TOPIC_DELETED);
                put_str(&mut out, name);
            }
            MetadataRecord::PartitionsAdded {
                name,
                cores,
                replicas,
            } => {
                out.push(TYPE_PARTITIONS_ADDED);
                put_str(&mut out, name);
                put_cores(&mut out, cores);
                put_replicas(&mut out, replicas);
            }
            MetadataRecord::TopicConfigsSet { name, configs } => {
                out.push(TYPE_TOPIC_CONFIGS_SET);
                put_str(&mut out, name);
                put_configs(&mut out, configs);
            }
            MetadataRecord::ProducerIdsAllocated { end } => {
                out.push(TYPE_PRODUCER_IDS);
                out.extend_from_slice(&end.to_be_bytes());
            }
            MetadataRecord::BrokerConfigsSet { resource, configs } => {
                out.push(TYPE_BROKER_CONFIGS_SET);
                put_str(&mut out, resource);
                put_configs(&mut out, configs);
            }
            MetadataRecord::GroupConfigsSet { group, configs } => {
                out.push(TYPE_GROUP_CONFIGS_SET);
                put_str(&mut out, group);
                put_configs(&mut out, configs);
            }
        }
        out
    }

    pub fn decode(mut buf: &[u8]) -> Result<Self, String> {
        let record = match take_u8(&mut buf)? {
            TYPE_CLUSTER_ID => MetadataRecord::ClusterId(take_str(&mut buf)?),
            TYPE_TOPIC_CREATED => {
                let name = take_str(&mut buf)?;
                let topic_id = u128::from_be_bytes(take::<16>(&mut buf)?);
                let partition_cores = take_cores(&mut buf)?;
                let configs = take_configs(&mut buf)?;
                let replicas = take_replicas_if_any(&mut buf)?;
                MetadataRecord::TopicCreated(TopicMeta {
                    name,
                    topic_id,
                    partition_cores,
                    configs,
                    replicas,
                })
            }
            TYPE_TOPIC_DELETED => MetadataRecord::TopicDeleted {
                name: take_str(&mut buf)?,
            },
            TYPE_PARTITIONS_ADDED => MetadataRecord::PartitionsAdded {
                name: take_str(&mut buf)?,
                cores: take_cores(&mut buf)?,
                replicas: take_replicas_if_any(&mut buf)?,
            },
            TYPE_TOPIC_CONFIGS_SET => MetadataRecord::TopicConfigsSet {
                name: take_str(&mut buf)?,
                configs: take_configs(&mut buf)?,
            },
            TYPE_PRODUCER_IDS => MetadataRecord::ProducerIdsAllocated {
                end: i64::from_be_bytes(take::<8>(&mut buf)?),
            },
            TYPE_BROKER_CONFIGS_SET => MetadataRecord::BrokerConfigsSet {
                resource: take_str(&mut buf)?,
                configs: take_configs(&mut buf)?,
            },
            TYPE_GROUP_CONFIGS_SET => MetadataRecord::GroupConfigsSet {
                group: take_str(&mut buf)?,
                configs: take_configs(&mut buf)?,
            },
            other => return Err(format!("unknown record type {other}")),
        };
        if !buf.is_empty() {
            return Err(format!("{} trailing bytes", buf.len()));
        }
        Ok(record)
    }
}

fn take<const N: usize>(buf: &mut &[u8]) -> Result<[u8; N], String> {
    if buf.len() < N {
        return Err("truncated field".to_string());
    }
    let (head, rest) = buf.split_at(N);
    *buf = rest;
    Ok(head.try_into().expect("N bytes"))
}

fn take_u8(buf: &mut &[u8]) -> Result<u8, String> {
    Ok(take::<1>(buf)?[0])
}

fn take_len(buf: &mut &[u8], element_bytes: usize) -> Result<usize, String> {
    let len = u32::from_be_bytes(take::<4>(buf)?) as usize;
    if len.saturating_mul(element_bytes) > buf.len() {
        return Err("length beyond the record".to_string());
    }
    Ok(len)
}

fn take_str(buf: &mut &[u8]) -> Result<String, String> {
    let len = take_len(buf, 1)?;
    let (head, rest) = buf.split_at(len);
    *buf = rest;
    String::from_utf8(head.to_vec()).map_err(|_| "string is not UTF-8".to_string())
}

fn take_cores(buf: &mut &[u8]) -> Result<Vec<u32>, String> {
    let len = take_len(buf, 4)?;
    (0..len)
        .map(|_| Ok(u32::from_be_bytes(take::<4>(buf)?)))
        .collect()
}

/// Replicas per partition, or none in a record written before they were.
fn take_replicas_if_any(buf: &mut &[u8]) -> Result<Vec<Vec<i32>>, String> {
    if buf.is_empty() {
        return Ok(Vec::new());
    }
    let len = take_len(buf, 4)?;
    (0..len)
        .map(|_| {
            let brokers = take_len(buf, 4)?;
            (0..brokers)
                .map(|_| Ok(i32::from_be_bytes(take::<4>(buf)?)))
                .collect()
        })
        .collect()
}

fn take_configs(buf: &mut &[u8]) -> Result<BTreeMap<String, String>, String> {
    let len = take_len(buf, 8)?;
    let mut configs = BTreeMap::new();
    for _ in 0..len {
        let key = take_str(buf)?;
        let value = take_str(buf)?;
        configs.insert(key, value);
    }
    Ok(configs)
}

/// A record frame at `position` that is not valid, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Damage {
    position: usize,
    reason: String,
    /// Start of the first valid record after the damage, if any: with
    /// none, the damage is a torn tail.
    next_valid: Option<usize>,
    /// The frame's CRC matched but its payload is not understood (a
    /// newer version wrote it, or a bug): never a torn write.
    crc_valid: bool,
}

/// What reading a metadata log's bytes found.
struct Replayed {
    image: MetadataImage,
    /// The valid records, each with its byte position.
    records: Vec<(usize, MetadataRecord)>,
    /// End of the valid records before the first damaged one.
    valid_end: usize,
    damage: Option<Damage>,
}

/// Why no record is framed at a position: the reason, and whether the
/// frame's CRC matched (its payload is then not understood).
type FrameError = (String, bool);

/// The record framed at `position`, or why there is none.
fn frame_at(bytes: &[u8], position: usize) -> Result<(MetadataRecord, usize), FrameError> {
    let rest = &bytes[position..];
    if rest.len() < 8 {
        return Err((
            format!("{} bytes, too short for a record head", rest.len()),
            false,
        ));
    }
    let len = u32::from_be_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_be_bytes(rest[4..8].try_into().expect("4 bytes"));
    if len > METADATA_RECORD_BYTES_MAX {
        return Err((
            format!("length {len} above the {METADATA_RECORD_BYTES_MAX}-byte record limit"),
            false,
        ));
    }
    if rest.len() - 8 < len {
        return Err((
            format!(
                "length {len} runs past the end of the file ({} bytes left)",
                rest.len() - 8
            ),
            false,
        ));
    }
    let payload = &rest[8..8 + len];
    if crc32fast::hash(payload) != crc {
        return Err(("CRC mismatch".to_string(), false));
    }
    let record = MetadataRecord::decode(payload).map_err(|reason| (reason, true))?;
    Ok((record, 8 + len))
}

/// Replays `bytes` up to the first damaged record, and looks past it for
/// a valid record (at any byte: the damaged length says nothing).
fn replay_bytes(bytes: &[u8]) -> Replayed {
    let mut image = MetadataImage::default();
    let mut records = Vec::new();
    let mut position = 0usize;
    let mut damage = None;
    while position < bytes.len() {
        match frame_at(bytes, position) {
            Ok((record, len)) => {
                image.apply(&record);
                records.push((position, record));
                position += len;
            }
            Err((reason, crc_valid)) => {
                let next_valid = (position + 1..bytes.len()).find(|&q| frame_at(bytes, q).is_ok());
                damage = Some(Damage {
                    position,
                    reason,
                    next_valid,
                    crc_valid,
                });
                break;
            }
        }
    }
    Replayed {
        image,
        records,
        valid_end: position,
        damage,
    }
}

/// What [`repair`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairReport {
    /// The copy of the log as it was before the repair.
    pub backup: PathBuf,
    /// Bytes removed: `[position, position + removed_bytes)`.
    pub position: u64,
    pub removed_bytes: u64,
    /// Valid records kept after the removed bytes.
    pub records_after: usize,
}

/// Removes the damaged record at byte `position` of `data_dir`'s metadata
/// log: the bytes up to the next valid record (or to the end for a torn
/// tail). A copy of the original file is kept next to it first. Refuses
/// unless `position` is where the first damaged record starts.
pub fn repair(data_dir: &Path, position: u64) -> Result<RepairReport, MetadataError> {
    let path = data_dir.join(METADATA_DIR).join(METADATA_FILE);
    let io = |op: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |error| MetadataError::Io { op, path, error }
    };
    let bytes = std::fs::read(&path).map_err(io("read", &path))?;
    let replayed = replay_bytes(&bytes);
    let nothing = |reason: String| MetadataError::NothingToRepair {
        path: path.clone(),
        position,
        reason,
    };
    let Some(damage) = replayed.damage else {
        return Err(nothing(format!(
            "every record of the {} bytes is valid",
            bytes.len()
        )));
    };
    if damage.position as u64 != position {
        return Err(nothing(format!(
            "the first damaged record starts at byte {}",
            damage.position
        )));
    }
    let resume = damage.next_valid.unwrap_or(bytes.len());
    let mut repaired = bytes[..damage.position].to_vec();
    repaired.extend_from_slice(&bytes[resume..]);
    let after = replay_bytes(&repaired);
    if let Some(later) = after.damage {
        // Repaired one at a time, so each removal is the operator's choice.
        tracing::warn!(
            position = later.position,
            reason = %later.reason,
            "another damaged record follows; run the repair again for it"
        );
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let backup = path.with_file_name(format!("{METADATA_FILE}.{stamp}.before-repair"));
    std::fs::copy(&path, &backup).map_err(io("copy to a backup", &backup))?;
    File::open(&backup)
        .and_then(|f| f.sync_all())
        .map_err(io("sync", &backup))?;
    // Written aside and renamed over, so a crash leaves one whole file.
    let staged = path.with_file_name(format!("{METADATA_FILE}.repairing"));
    std::fs::write(&staged, &repaired).map_err(io("write", &staged))?;
    File::open(&staged)
        .and_then(|f| f.sync_all())
        .map_err(io("sync", &staged))?;
    std::fs::rename(&staged, &path).map_err(io("rename", &path))?;
    let dir = data_dir.join(METADATA_DIR);
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(io("sync directory", &dir))?;
    let records_after = after
        .records
        .iter()
        .filter(|(at, _)| *at >= damage.position)
        .count();
    Ok(RepairReport {
        backup,
        position,
        removed_bytes: (resume - damage.position) as u64,
        records_after,
    })
}

/// The append-only metadata log file.
pub struct MetadataLog {
    file: File,
    path: PathBuf,
}

impl MetadataLog {
    /// Opens (or creates) the log in `data_dir`, replays it and truncates a
    /// torn tail. A new log gets a fresh cluster id as its first record.
    pub fn open(data_dir: &Path) -> Result<(MetadataLog, MetadataImage), MetadataError> {
        let dir = data_dir.join(METADATA_DIR);
        let path = dir.join(METADATA_FILE);
        let io = |op: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |error| MetadataError::Io { op, path, error }
        };
        std::fs::create_dir_all(&dir).map_err(io("create directory", &dir))?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io("open", &path))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io("read", &path))?;
        let Replayed {
            mut image,
            valid_end,
            damage,
            ..
        } = replay_bytes(&bytes);
        if let Some(damage) = damage {
            if damage.crc_valid {
                return Err(MetadataError::Corrupt {
                    path,
                    position: damage.position as u64,
                    reason: damage.reason,
                });
            }
            match damage.next_valid {
                Some(next_valid) => {
                    return Err(MetadataError::Damaged {
                        path,
                        data_dir: data_dir.to_path_buf(),
                        position: damage.position as u64,
                        next_valid: next_valid as u64,
                        reason: damage.reason,
                    })
                }
                None => {
                    tracing::warn!(
                        path = %path.display(),
                        valid_bytes = valid_end,
                        file_bytes = bytes.len(),
                        reason = %damage.reason,
                        "truncating torn metadata log tail (no valid record after it)"
                    );
                    file.set_len(valid_end as u64)
                        .map_err(io("truncate", &path))?;
                    file.sync_all().map_err(io("sync", &path))?;
                }
            }
        }
        file.seek(SeekFrom::End(0)).map_err(io("seek", &path))?;
        let mut log = MetadataLog { file, path };
        if image.cluster_id.is_empty() {
            let record = MetadataRecord::ClusterId(new_cluster_id());
            log.append(&record)?;
            image.apply(&record);
            File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(io("sync directory", &dir))?;
        }
        Ok((log, image))
    }

    /// Appends a record and syncs it before returning.
    pub fn append(&mut self, record: &MetadataRecord) -> Result<(), MetadataError> {
        let payload = record.encode();
        let mut frame = Vec::with_capacity(8 + payload.len());
        frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        frame.extend_from_slice(&crc32fast::hash(&payload).to_be_bytes());
        frame.extend_from_slice(&payload);
        let path = self.path.clone();
        self.file
            .write_all(&frame)
            .and_then(|()| self.file.sync_data())
            .map_err(|error| MetadataError::Io {
                op: "append",
                path,
                error,
            })
    }
}

/// A cluster id in Kafka's form: 16 bytes, URL-safe base64 without padding.
fn new_cluster_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let seed = nanos ^ (u128::from(std::process::id()) << 64);
    let bytes = topic_id_from(seed).to_be_bytes();
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    let mut bits = 0u32;
    let mut acc = 0u32;
    for byte in bytes {
        acc = (acc << 8) | u32::from(byte);
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            out.push(ALPHABET[((acc >> bits) & 0x3f) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[((acc << (6 - bits)) & 0x3f) as usize] as char);
    }
    out
}

/// Mixes a seed into a 128-bit id (splitmix-style), for topic and cluster ids.
pub fn topic_id_from(seed: u128) -> u128 {
    let mut x = seed.wrapping_add(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C834);
    x = (x ^ (x >> 67)).wrapping_mul(0xBF58_476D_1CE4_E5B9_94D0_49BB_1331_11EB);
    x ^ (x >> 61)
}

/// The metadata every core shares: the log (written by the controller core
/// only) and the current image (read by every core per request).
pub struct MetadataStore {
    log: Mutex<MetadataLog>,
    image: RwLock<Arc<MetadataImage>>,
}

impl MetadataStore {
    pub fn new(log: MetadataLog, image: MetadataImage) -> Self {
        Self {
            log: Mutex::new(log),
            image: RwLock::new(Arc::new(image)),
        }
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.read().expect("metadata image lock").clone()
    }

    /// Makes a change durable, then visible. Only the controller core calls
    /// this, so changes are serialized by construction; the mutex makes the
    /// store `Sync`, it is never contended.
    pub fn commit(&self, records: &[MetadataRecord]) -> Result<Arc<MetadataImage>, MetadataError> {
        let mut log = self.log.lock().expect("metadata log lock");
        for record in records {
            log.append(record)?;
        }
        let mut image = (*self.image()).clone();
        for record in records {
            image.apply(record);
        }
        let image = Arc::new(image);
        *self.image.write().expect("metadata image lock") = image.clone();
        Ok(image)
    }
}

/// Directories of `data_dir` that look like partition directories
/// (`<topic>-<index>`) but that no topic of `image` names: data the
/// metadata does not know, reported at start and never adopted or
/// deleted silently. Names starting with `__` are the broker's own.
pub fn unnamed_partition_dirs(
    data_dir: &Path,
    image: &MetadataImage,
) -> std::io::Result<Vec<PathBuf>> {
    let mut unnamed = Vec::new();
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            unnamed.push(entry.path());
            continue;
        };
        if [METADATA_DIR, storage::journal::DIR_NAME, REPAIR_DIR].contains(&name) {
            continue;
        }
        let named = name.rsplit_once('-').is_some_and(|(topic, index)| {
            index.parse::<usize>().is_ok_and(|index| {
                image
                    .topics
                    .get(topic)
                    .is_some_and(|t| index < t.partition_cores.len())
            })
        });
        if !named {
            unnamed.push(entry.path());
        }
    }
    unnamed.sort();
    Ok(unnamed)
}

/// Whether a partition directory exists and holds any bytes (a topic
/// created over it adopts them).
pub fn partition_dir_holds_data(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.metadata().is_ok_and(|m| m.is_file() && m.len() > 0))
    })
}

/// Checks a topic name the way Kafka does.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("topic name is empty".to_string());
    }
    if name == "." || name == ".." {
        return Err(format!("topic name {name:?} is not allowed"));
    }
    if name.len() > 249 {
        return Err(format!(
            "topic name is {} characters, more than 249",
            name.len()
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!("topic name {name:?} contains {bad:?}; only ASCII letters, digits, '.', '_' and '-' are allowed"));
    }
    if name == METADATA_DIR {
        return Err(format!("topic name {name:?} is reserved"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str, cores: &[u32]) -> MetadataRecord {
        MetadataRecord::TopicCreated(TopicMeta {
            name: name.to_string(),
            topic_id: 42,
            partition_cores: cores.to_vec(),
            configs: BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]),
            replicas: cores.iter().map(|_| vec![0]).collect(),
        })
    }

    #[test]
    fn records_round_trip() {
        let records = [
            MetadataRecord::ClusterId("abc".to_string()),
            topic("t", &[0, 1, 0]),
            MetadataRecord::TopicDeleted {
                name: "t".to_string(),
            },
            MetadataRecord::PartitionsAdded {
                name: "t".to_string(),
                cores: vec![1],
                replicas: vec![vec![0, 3]],
            },
            MetadataRecord::PartitionsAdded {
                name: "t".to_string(),
                cores: vec![1],
                replicas: Vec::new(),
            },
            MetadataRecord::TopicConfigsSet {
                name: "t".to_string(),
                configs: BTreeMap::new(),
            },
            MetadataRecord::ProducerIdsAllocated { end: 1000 },
            MetadataRecord::BrokerConfigsSet {
                resource: String::new(),
                configs: BTreeMap::from([("log.retention.ms".to_string(), "5".to_string())]),
            },
            MetadataRecord::GroupConfigsSet {
                group: "g".to_string(),
                configs: BTreeMap::new(),
            },
        ];
        for record in records {
            assert_eq!(MetadataRecord::decode(&record.encode()).unwrap(), record);
        }
        assert!(MetadataRecord::decode(&[2, 0xff, 0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn records_written_before_replicas_were_recorded_still_decode() {
        let MetadataRecord::TopicCreated(mut meta) = topic("old", &[0, 1]) else {
            unreachable!("topic() builds a TopicCreated")
        };
        meta.replicas.clear();
        let mut old = MetadataRecord::TopicCreated(meta.clone()).encode();
        // Without the (empty) replica list at the end: the old layout.
        old.truncate(old.len() - 4);
        assert_eq!(
            MetadataRecord::decode(&old).unwrap(),
            MetadataRecord::TopicCreated(meta.clone())
        );
        let mut image = MetadataImage::default();
        image.apply(&MetadataRecord::TopicCreated(meta));
        image.apply(&MetadataRecord::PartitionsAdded {
            name: "old".to_string(),
            cores: vec![0],
            replicas: vec![vec![7]],
        });
        let topic = &image.topics["old"];
        assert_eq!(topic.replicas(0, 3), vec![3], "unrecorded: this node");
        assert_eq!(topic.replicas(2, 3), vec![7], "recorded by hand");
    }

    #[test]
    fn log_replays_and_truncates_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, image) = MetadataLog::open(dir.path()).unwrap();
        let cluster_id = image.cluster_id.clone();
        assert_eq!(cluster_id.len(), 22);
        log.append(&topic("a", &[0, 1])).unwrap();
        log.append(&MetadataRecord::PartitionsAdded {
            name: "a".to_string(),
            cores: vec![0],
            replicas: vec![vec![0]],
        })
        .unwrap();
        drop(log);
        let path = dir.path().join(METADATA_DIR).join(METADATA_FILE);
        let full = std::fs::read(&path).unwrap();
        let mut torn = full.clone();
        torn.extend_from_slice(&[0, 0, 0, 50, 1, 2]);
        std::fs::write(&path, &torn).unwrap();
        let (_, image) = MetadataLog::open(dir.path()).unwrap();
        assert_eq!(image.cluster_id, cluster_id);
        assert_eq!(image.topics["a"].partition_cores, vec![0, 1, 0]);
        assert_eq!(std::fs::read(&path).unwrap(), full);
    }

    /// A log of a cluster id and topics `a`, `b`, `c`; returns its path and
    /// the byte position of each topic's record.
    fn three_topics(dir: &Path) -> (PathBuf, Vec<u64>) {
        let (mut log, _) = MetadataLog::open(dir).unwrap();
        let path = dir.join(METADATA_DIR).join(METADATA_FILE);
        let mut positions = Vec::new();
        for name in ["a", "b", "c"] {
            positions.push(std::fs::metadata(&path).unwrap().len());
            log.append(&topic(name, &[0])).unwrap();
        }
        (path, positions)
    }

    #[test]
    fn a_damaged_record_with_valid_records_after_it_refuses_to_open() {
        let dir = tempfile::tempdir().unwrap();
        let (path, positions) = three_topics(dir.path());
        let mut bytes = std::fs::read(&path).unwrap();
        // One flipped byte in the payload of topic `b`'s record.
        bytes[positions[1] as usize + 12] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();
        let error = MetadataLog::open(dir.path()).err().expect("refused");
        let message = error.to_string();
        assert!(
            matches!(error, MetadataError::Damaged { position, next_valid, .. }
                if position == positions[1] && next_valid == positions[2]),
            "{message}"
        );
        assert!(message.contains(&format!("--drop-damaged-at {}", positions[1])));
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing was touched");

        // A repair elsewhere than the damage is refused; at it, only the
        // damaged record goes and a copy of the original stays.
        assert!(matches!(
            repair(dir.path(), positions[2]),
            Err(MetadataError::NothingToRepair { .. })
        ));
        let report = repair(dir.path(), positions[1]).unwrap();
        assert_eq!(report.records_after, 1);
        assert_eq!(report.removed_bytes, positions[2] - positions[1]);
        assert_eq!(std::fs::read(&report.backup).unwrap(), bytes);
        let (_, image) = MetadataLog::open(dir.path()).unwrap();
        assert_eq!(
            image.topics.keys().collect::<Vec<_>>(),
            vec!["a", "c"],
            "the topics of valid records are all kept"
        );
    }

    #[test]
    fn a_damaged_last_record_is_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let (path, positions) = three_topics(dir.path());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[positions[2] as usize + 12] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();
        let (_, image) = MetadataLog::open(dir.path()).unwrap();
        assert_eq!(image.topics.keys().collect::<Vec<_>>(), vec!["a", "b"]);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), positions[2]);
    }

    #[test]
    fn a_valid_record_that_is_not_understood_is_never_cut() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = three_topics(dir.path());
        let mut bytes = std::fs::read(&path).unwrap();
        let before = bytes.len();
        let payload = [99u8, 1, 2, 3];
        bytes.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&crc32fast::hash(&payload).to_be_bytes());
        bytes.extend_from_slice(&payload);
        std::fs::write(&path, &bytes).unwrap();
        let error = MetadataLog::open(dir.path()).err().expect("refused");
        assert!(
            matches!(error, MetadataError::Corrupt { position, .. } if position == before as u64),
            "{error}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }

    #[test]
    fn partition_dirs_the_metadata_does_not_name_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, mut image) = MetadataLog::open(dir.path()).unwrap();
        let record = topic("orders", &[0, 1]);
        log.append(&record).unwrap();
        image.apply(&record);
        for name in [
            "orders-0",
            "orders-1",
            "orders-2",
            "gone-0",
            "__journal",
            "__repair",
            "__consumer_offsets-0",
            "odd",
        ] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
        }
        std::fs::write(dir.path().join(crate::exclusive::LOCK_FILE), b"").unwrap();
        let unnamed = unnamed_partition_dirs(dir.path(), &image).unwrap();
        let names: Vec<_> = unnamed
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap())
            .collect();
        assert_eq!(
            names,
            vec!["__consumer_offsets-0", "gone-0", "odd", "orders-2"]
        );
        assert!(!partition_dir_holds_data(&dir.path().join("gone-0")));
        std::fs::write(dir.path().join("gone-0").join("x.log"), b"1").unwrap();
        assert!(partition_dir_holds_data(&dir.path().join("gone-0")));
    }

    #[test]
    fn placement_balances_cores() {
        let mut counts = vec![0, 0, 0];
        assert_eq!(
            place_partitions(&mut counts, 10),
            vec![0, 1, 2, 0, 1, 2, 0, 1, 2, 0]
        );
        let mut counts = vec![3, 0];
        assert_eq!(place_partitions(&mut counts, 4), vec![1, 1, 1, 0]);
    }

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(validate_topic_name("orders.v1_x-y").is_ok());
        for bad in ["", ".", "..", "a/b", "ä", &"x".repeat(250)] {
            assert!(validate_topic_name(bad).is_err(), "{bad}");
        }
    }
}
