//! Metadata image snapshots: a [`MetadataImage`] as bytes, for the
//! replicated metadata log's compaction (the snapshot's data) and for a node
//! that starts from one.
//!
//! Layout: `magic (8) | format version: u32 LE | crc32: u32 LE | archive`.
//! The archive is an rkyv archive of private mirror structs (plain data: no
//! `Arc`, maps as sorted lists), so the image's own types stay free to
//! change; a change to the mirror structs is a new format version. Decoding
//! checks the magic, the version and the CRC, then validates the archive
//! (rkyv's `bytecheck`) before reading it: the bytes come from disk or from
//! another node, and are never read unchecked.

use std::collections::BTreeMap;
use std::sync::Arc;

use rkyv::rancor;

use super::image::{
    AclBinding, BrokerMeta, Endpoint, MetadataImage, PartitionState, ScramCredential, TopicMeta,
};

const MAGIC: [u8; 8] = *b"STRMIMG\0";
/// The layout of the mirror structs below. Version 2 added the running
/// reassignments, version 3 the SCRAM credentials and ACLs, version 4 the
/// brokers' named listeners; decode still reads versions 1 to 3 (none of
/// them then).
const FORMAT_VERSION: u32 = 4;
/// Magic, version and CRC: 16 bytes, so an archive copied after it stays
/// as aligned as the header.
const HEADER_BYTES: usize = MAGIC.len() + 4 + 4;
const _: () = assert!(HEADER_BYTES == 16);
/// rkyv's archives need this alignment to be read in place.
const ARCHIVE_ALIGNMENT: usize = 16;

type Configs = Vec<(String, String)>;
/// A broker's named listeners: name, host, port.
type Listeners = Vec<(String, String, u16)>;

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct ImageSnapshot {
    offset: u64,
    cluster_id: String,
    topics: Vec<TopicSnapshot>,
    producer_ids_end: i64,
    broker_configs: Vec<(String, Configs)>,
    group_configs: Vec<(String, Configs)>,
    brokers: Vec<BrokerSnapshot>,
    reassignments: Vec<ReassignmentSnapshot>,
    scram: Vec<ScramSnapshot>,
    acls: Vec<AclSnapshot>,
    /// Each broker's named listeners (id, then name, host, port).
    endpoints: Vec<(i32, Listeners)>,
}

/// [`ImageSnapshot`] in format version 3: before named listeners.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct ImageSnapshotV3 {
    offset: u64,
    cluster_id: String,
    topics: Vec<TopicSnapshot>,
    producer_ids_end: i64,
    broker_configs: Vec<(String, Configs)>,
    group_configs: Vec<(String, Configs)>,
    brokers: Vec<BrokerSnapshot>,
    reassignments: Vec<ReassignmentSnapshot>,
    scram: Vec<ScramSnapshot>,
    acls: Vec<AclSnapshot>,
}

/// [`ImageSnapshot`] in format version 2: before SCRAM credentials.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct ImageSnapshotV2 {
    offset: u64,
    cluster_id: String,
    topics: Vec<TopicSnapshot>,
    producer_ids_end: i64,
    broker_configs: Vec<(String, Configs)>,
    group_configs: Vec<(String, Configs)>,
    brokers: Vec<BrokerSnapshot>,
    reassignments: Vec<ReassignmentSnapshot>,
}

/// [`ImageSnapshot`] in format version 1: before reassignments.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct ImageSnapshotV1 {
    offset: u64,
    cluster_id: String,
    topics: Vec<TopicSnapshot>,
    producer_ids_end: i64,
    broker_configs: Vec<(String, Configs)>,
    group_configs: Vec<(String, Configs)>,
    brokers: Vec<BrokerSnapshot>,
}

/// A partition a reassignment is moving: the replicas it adds and removes.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct ReassignmentSnapshot {
    topic: String,
    partition: u32,
    adding: Vec<i32>,
    removing: Vec<i32>,
}

/// An ACL.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct AclSnapshot {
    resource_type: i8,
    resource_name: String,
    pattern_type: i8,
    principal: String,
    host: String,
    operation: i8,
    permission_type: i8,
}

/// A user's SCRAM credential for one mechanism.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct ScramSnapshot {
    user: String,
    mechanism: i8,
    salt: Vec<u8>,
    iterations: i32,
    stored_key: Vec<u8>,
    server_key: Vec<u8>,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct TopicSnapshot {
    name: String,
    topic_id: u128,
    partition_cores: Vec<u32>,
    configs: Configs,
    partitions: Vec<PartitionSnapshot>,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct PartitionSnapshot {
    replicas: Vec<i32>,
    leader: i32,
    leader_epoch: i32,
    isr: Vec<i32>,
    partition_epoch: i32,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct BrokerSnapshot {
    id: i32,
    incarnation: u64,
    host: String,
    port: u16,
    rack: Option<String>,
    controller_address: String,
    fenced: bool,
}

/// The snapshot of `image` (all of it but the node id, which is the
/// reader's).
pub fn encode(image: &MetadataImage) -> Vec<u8> {
    let archive = rkyv::to_bytes::<rancor::Error>(&ImageSnapshot::of(image))
        .expect("plain structs always archive");
    let mut out = Vec::with_capacity(HEADER_BYTES + archive.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&archive).to_le_bytes());
    out.extend_from_slice(&archive);
    out
}

/// The image a snapshot holds, on node `node_id`. Refuses (never panics on)
/// bytes that are not a whole, undamaged snapshot of this format version.
pub fn decode(bytes: &[u8], node_id: i32) -> Result<MetadataImage, String> {
    let Some((header, archive)) = bytes.split_at_checked(HEADER_BYTES) else {
        return Err(format!(
            "metadata snapshot of {} bytes, shorter than its {HEADER_BYTES}-byte header",
            bytes.len()
        ));
    };
    let (magic, rest) = header.split_at(MAGIC.len());
    if magic != MAGIC {
        return Err(format!("not a metadata snapshot (magic {magic:02x?})"));
    }
    let version = u32::from_le_bytes(rest[0..4].try_into().expect("4 bytes"));
    if !(1..=FORMAT_VERSION).contains(&version) {
        return Err(format!(
            "metadata snapshot format version {version}; this broker reads versions 1 to \
             {FORMAT_VERSION}"
        ));
    }
    let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
    let actual = crc32fast::hash(archive);
    if crc != actual {
        return Err(format!(
            "metadata snapshot of {} bytes is damaged: CRC {actual:08x}, header says {crc:08x}",
            bytes.len()
        ));
    }
    // The caller's slice may sit anywhere; rkyv reads an archive in place,
    // so it gets an aligned copy.
    let mut aligned = rkyv::util::AlignedVec::<ARCHIVE_ALIGNMENT>::with_capacity(archive.len());
    aligned.extend_from_slice(archive);
    let invalid = |e: rancor::Error| format!("metadata snapshot archive does not validate: {e}");
    let v2 = |v2: ImageSnapshotV2| ImageSnapshot {
        offset: v2.offset,
        cluster_id: v2.cluster_id,
        topics: v2.topics,
        producer_ids_end: v2.producer_ids_end,
        broker_configs: v2.broker_configs,
        group_configs: v2.group_configs,
        brokers: v2.brokers,
        reassignments: v2.reassignments,
        scram: Vec::new(),
        acls: Vec::new(),
        endpoints: Vec::new(),
    };
    let snapshot = match version {
        1 => {
            let v1 =
                rkyv::from_bytes::<ImageSnapshotV1, rancor::Error>(&aligned).map_err(invalid)?;
            v2(ImageSnapshotV2 {
                offset: v1.offset,
                cluster_id: v1.cluster_id,
                topics: v1.topics,
                producer_ids_end: v1.producer_ids_end,
                broker_configs: v1.broker_configs,
                group_configs: v1.group_configs,
                brokers: v1.brokers,
                reassignments: Vec::new(),
            })
        }
        2 => v2(rkyv::from_bytes::<ImageSnapshotV2, rancor::Error>(&aligned).map_err(invalid)?),
        3 => {
            let v3 =
                rkyv::from_bytes::<ImageSnapshotV3, rancor::Error>(&aligned).map_err(invalid)?;
            ImageSnapshot {
                offset: v3.offset,
                cluster_id: v3.cluster_id,
                topics: v3.topics,
                producer_ids_end: v3.producer_ids_end,
                broker_configs: v3.broker_configs,
                group_configs: v3.group_configs,
                brokers: v3.brokers,
                reassignments: v3.reassignments,
                scram: v3.scram,
                acls: v3.acls,
                endpoints: Vec::new(),
            }
        }
        _ => rkyv::from_bytes::<ImageSnapshot, rancor::Error>(&aligned).map_err(invalid)?,
    };
    snapshot.into_image(node_id)
}

impl ImageSnapshot {
    fn of(image: &MetadataImage) -> Self {
        ImageSnapshot {
            offset: image.offset,
            cluster_id: image.cluster_id.clone(),
            topics: image
                .topics
                .values()
                .map(|topic| TopicSnapshot::of(topic))
                .collect(),
            producer_ids_end: image.producer_ids_end,
            broker_configs: named_configs(&image.broker_configs),
            group_configs: named_configs(&image.group_configs),
            brokers: image.brokers.values().map(BrokerSnapshot::of).collect(),
            reassignments: image
                .partition_states()
                .filter(|(_, _, p)| p.reassigning())
                .map(|(topic, index, p)| ReassignmentSnapshot {
                    topic: topic.name.clone(),
                    partition: index as u32,
                    adding: p.adding.clone(),
                    removing: p.removing.clone(),
                })
                .collect(),
            scram: image
                .scram
                .iter()
                .map(|((user, mechanism), credential)| ScramSnapshot {
                    user: user.clone(),
                    mechanism: *mechanism,
                    salt: credential.salt.clone(),
                    iterations: credential.iterations,
                    stored_key: credential.stored_key.clone(),
                    server_key: credential.server_key.clone(),
                })
                .collect(),
            acls: image
                .acls
                .iter()
                .map(|acl| AclSnapshot {
                    resource_type: acl.resource_type,
                    resource_name: acl.resource_name.clone(),
                    pattern_type: acl.pattern_type,
                    principal: acl.principal.clone(),
                    host: acl.host.clone(),
                    operation: acl.operation,
                    permission_type: acl.permission_type,
                })
                .collect(),
            endpoints: image
                .brokers
                .values()
                .filter(|b| !b.endpoints.is_empty())
                .map(|b| {
                    let endpoints = b
                        .endpoints
                        .iter()
                        .map(|e| (e.name.clone(), e.host.clone(), e.port))
                        .collect();
                    (b.id, endpoints)
                })
                .collect(),
        }
    }

    fn into_image(self, node_id: i32) -> Result<MetadataImage, String> {
        let mut topics = BTreeMap::new();
        for topic in self.topics {
            let topic = topic.into_meta()?;
            let name = topic.name.clone();
            if topics.insert(name.clone(), topic).is_some() {
                return Err(format!("metadata snapshot lists topic {name:?} twice"));
            }
        }
        for moving in self.reassignments {
            let state = topics
                .get_mut(&moving.topic)
                .and_then(|t| t.partitions.get_mut(moving.partition as usize))
                .ok_or_else(|| {
                    format!(
                        "metadata snapshot reassigns partition {} of {:?}, which it does not have",
                        moving.partition, moving.topic
                    )
                })?;
            state.adding = moving.adding;
            state.removing = moving.removing;
        }
        let topics = topics
            .into_iter()
            .map(|(name, topic)| (name, Arc::new(topic)))
            .collect();
        let mut brokers = BTreeMap::new();
        for broker in self.brokers {
            let broker = broker.into_meta();
            let id = broker.id;
            if brokers.insert(id, broker).is_some() {
                return Err(format!("metadata snapshot lists broker {id} twice"));
            }
        }
        for (id, endpoints) in self.endpoints {
            let broker = brokers.get_mut(&id).ok_or_else(|| {
                format!("metadata snapshot lists listeners of broker {id}, which it does not have")
            })?;
            broker.endpoints = endpoints
                .into_iter()
                .map(|(name, host, port)| Endpoint { name, host, port })
                .collect();
        }
        Ok(MetadataImage {
            node_id,
            offset: self.offset,
            cluster_id: self.cluster_id,
            topics,
            producer_ids_end: self.producer_ids_end,
            broker_configs: configs_by_name(self.broker_configs),
            group_configs: configs_by_name(self.group_configs),
            brokers,
            scram: self
                .scram
                .into_iter()
                .map(|c| {
                    let credential = ScramCredential {
                        salt: c.salt,
                        iterations: c.iterations,
                        stored_key: c.stored_key,
                        server_key: c.server_key,
                    };
                    ((c.user, c.mechanism), credential)
                })
                .collect(),
            acls: self
                .acls
                .into_iter()
                .map(|a| AclBinding {
                    resource_type: a.resource_type,
                    resource_name: a.resource_name,
                    pattern_type: a.pattern_type,
                    principal: a.principal,
                    host: a.host,
                    operation: a.operation,
                    permission_type: a.permission_type,
                })
                .collect(),
        })
    }
}

impl TopicSnapshot {
    fn of(topic: &TopicMeta) -> Self {
        TopicSnapshot {
            name: topic.name.clone(),
            topic_id: topic.topic_id,
            partition_cores: topic.partition_cores.clone(),
            configs: configs(&topic.configs),
            partitions: topic
                .partitions
                .iter()
                .map(|p| PartitionSnapshot {
                    replicas: p.replicas.clone(),
                    leader: p.leader,
                    leader_epoch: p.leader_epoch,
                    isr: p.isr.clone(),
                    partition_epoch: p.partition_epoch,
                })
                .collect(),
        }
    }

    /// The topic, if it keeps the image's invariant: a state per partition.
    fn into_meta(self) -> Result<TopicMeta, String> {
        if self.partitions.len() != self.partition_cores.len() {
            return Err(format!(
                "metadata snapshot: topic {:?} has {} partition states for {} partitions",
                self.name,
                self.partitions.len(),
                self.partition_cores.len()
            ));
        }
        Ok(TopicMeta {
            name: self.name,
            topic_id: self.topic_id,
            partition_cores: self.partition_cores,
            configs: self.configs.into_iter().collect(),
            partitions: self
                .partitions
                .into_iter()
                .map(|p| PartitionState {
                    replicas: p.replicas,
                    leader: p.leader,
                    leader_epoch: p.leader_epoch,
                    isr: p.isr,
                    partition_epoch: p.partition_epoch,
                    adding: Vec::new(),
                    removing: Vec::new(),
                })
                .collect(),
        })
    }
}

impl BrokerSnapshot {
    fn of(broker: &BrokerMeta) -> Self {
        BrokerSnapshot {
            id: broker.id,
            incarnation: broker.incarnation,
            host: broker.host.clone(),
            port: broker.port,
            rack: broker.rack.clone(),
            controller_address: broker.controller_address.clone(),
            fenced: broker.fenced,
        }
    }

    fn into_meta(self) -> BrokerMeta {
        BrokerMeta {
            id: self.id,
            incarnation: self.incarnation,
            host: self.host,
            port: self.port,
            rack: self.rack,
            controller_address: self.controller_address,
            fenced: self.fenced,
            endpoints: Vec::new(),
        }
    }
}

fn configs(configs: &BTreeMap<String, String>) -> Configs {
    configs
        .iter()
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

fn named_configs(all: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<(String, Configs)> {
    all.iter()
        .map(|(name, settings)| (name.clone(), configs(settings)))
        .collect()
}

fn configs_by_name(all: Vec<(String, Configs)>) -> BTreeMap<String, BTreeMap<String, String>> {
    all.into_iter()
        .map(|(name, settings)| (name, settings.into_iter().collect()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: i32 = 2;

    fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|&(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn partition(replicas: &[i32], leader: i32, isr: &[i32], epochs: (i32, i32)) -> PartitionState {
        PartitionState {
            replicas: replicas.to_vec(),
            leader,
            leader_epoch: epochs.0,
            isr: isr.to_vec(),
            partition_epoch: epochs.1,
            adding: Vec::new(),
            removing: Vec::new(),
        }
    }

    fn broker(id: i32, rack: Option<&str>, fenced: bool) -> BrokerMeta {
        BrokerMeta {
            id,
            incarnation: 0x8000_0000_0000_0000 | id as u64,
            host: format!("broker-{id}.example"),
            port: 9092 + id as u16,
            rack: rack.map(str::to_string),
            controller_address: if id == 1 {
                "broker-1.example:9093".to_string()
            } else {
                String::new()
            },
            fenced,
            endpoints: if id == 1 {
                vec![
                    Endpoint {
                        name: "INTERNAL".to_string(),
                        host: "broker-1.example".to_string(),
                        port: 9092 + id as u16,
                    },
                    Endpoint {
                        name: "EXTERNAL".to_string(),
                        host: "kafka.example".to_string(),
                        port: 9094,
                    },
                ]
            } else {
                Vec::new()
            },
        }
    }

    /// Topics with partition states and configs, brokers fenced and not,
    /// cluster, broker and group settings, producer ids.
    fn rich_image() -> MetadataImage {
        let topics = [
            TopicMeta {
                name: "orders".to_string(),
                // Both halves set: a u128 must not come back as a u64.
                topic_id: 0xfedc_ba98_7654_3210_0123_4567_89ab_cdef,
                partition_cores: vec![0, 1, 2, 0],
                configs: settings(&[("retention.ms", "604800000"), ("cleanup.policy", "delete")]),
                partitions: vec![
                    partition(&[1, 2, 3], 1, &[1, 2, 3], (0, 0)),
                    partition(&[2, 3, 1], 3, &[3, 1], (4, 7)),
                    partition(&[3, 1, 2], -1, &[], (9, 12)),
                    // Moving from [2, 1] to [4, 2].
                    PartitionState {
                        adding: vec![4],
                        removing: vec![1],
                        ..partition(&[4, 2, 1], 2, &[2, 1], (3, 5))
                    },
                ],
            },
            TopicMeta {
                name: "__consumer_offsets".to_string(),
                topic_id: u128::MAX,
                partition_cores: vec![1],
                configs: settings(&[("cleanup.policy", "compact")]),
                partitions: vec![partition(&[NODE], NODE, &[NODE], (1, 1))],
            },
            TopicMeta {
                name: "empty-Ünïcode".to_string(),
                topic_id: 1,
                partition_cores: Vec::new(),
                configs: BTreeMap::new(),
                partitions: Vec::new(),
            },
        ];
        MetadataImage {
            node_id: NODE,
            offset: 1234,
            cluster_id: "strom-cluster-7".to_string(),
            topics: topics
                .into_iter()
                .map(|t| (t.name.clone(), Arc::new(t)))
                .collect(),
            producer_ids_end: 5_000_000_000,
            broker_configs: BTreeMap::from([
                (String::new(), settings(&[("log.retention.ms", "1000")])),
                ("2".to_string(), settings(&[("num.io.threads", "4")])),
            ]),
            group_configs: BTreeMap::from([(
                "payments".to_string(),
                settings(&[("consumer.session.timeout.ms", "45000")]),
            )]),
            brokers: [
                broker(1, Some("rack-a"), false),
                broker(2, None, true),
                broker(3, Some("rack-b"), false),
            ]
            .into_iter()
            .map(|b| (b.id, b))
            .collect(),
            scram: BTreeMap::from([(
                ("alice".to_string(), 2),
                ScramCredential {
                    salt: vec![3; 16],
                    iterations: 4096,
                    stored_key: vec![5; 64],
                    server_key: vec![6; 64],
                },
            )]),
            acls: [AclBinding {
                resource_type: 2,
                resource_name: "orders-".to_string(),
                pattern_type: 4,
                principal: "User:alice".to_string(),
                host: "*".to_string(),
                operation: 4,
                permission_type: 3,
            }]
            .into(),
        }
    }

    /// `archive` framed as a snapshot of format `version`.
    fn framed(version: u32, archive: &[u8]) -> Vec<u8> {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&version.to_le_bytes());
        bytes.extend_from_slice(&crc32fast::hash(archive).to_le_bytes());
        bytes.extend_from_slice(archive);
        bytes
    }

    /// Every field of the image, for comparison (`MetadataImage` is not `PartialEq`).
    fn fields(image: &MetadataImage) -> String {
        format!("{image:?}")
    }

    #[test]
    fn a_rich_image_round_trips() {
        let image = rich_image();
        let bytes = encode(&image);
        let decoded = decode(&bytes, NODE).unwrap();
        assert_eq!(fields(&decoded), fields(&image));
        assert_eq!(
            decoded.topics["orders"].topic_id,
            0xfedc_ba98_7654_3210_0123_4567_89ab_cdef
        );
        assert!(decoded.brokers[&2].fenced && !decoded.brokers[&1].fenced);
        assert_eq!(decoded.live_brokers().count(), 2);
        // The node id is the reader's.
        assert_eq!(decode(&bytes, 9).unwrap().node_id, 9);
        // Encoding is deterministic: the same image, the same bytes.
        assert_eq!(encode(&decoded), bytes);
    }

    #[test]
    fn an_empty_image_round_trips() {
        let image = MetadataImage::new(NODE);
        let decoded = decode(&encode(&image), NODE).unwrap();
        assert_eq!(fields(&decoded), fields(&image));
    }

    #[test]
    fn a_flipped_byte_anywhere_is_refused() {
        let bytes = encode(&rich_image());
        for position in 0..bytes.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut damaged = bytes.clone();
                damaged[position] ^= flip;
                assert!(
                    decode(&damaged, NODE).is_err(),
                    "byte {position} of {} xor {flip:#04x} was accepted",
                    bytes.len()
                );
            }
        }
    }

    #[test]
    fn a_damaged_archive_with_a_matching_crc_is_refused_or_read_never_trusted() {
        // Past the CRC, only the archive's validation stands between damaged
        // bytes and the reader: every result must be an error or an image,
        // never a panic or a wild read.
        let bytes = encode(&rich_image());
        let mut refused = 0;
        for position in HEADER_BYTES..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[position] ^= 0xff;
            let crc = crc32fast::hash(&damaged[HEADER_BYTES..]);
            damaged[MAGIC.len() + 4..HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
            refused += usize::from(decode(&damaged, NODE).is_err());
        }
        assert!(
            refused > 0,
            "validation refused none of the damaged archives"
        );
    }

    #[test]
    fn truncated_input_is_refused() {
        let bytes = encode(&rich_image());
        for len in 0..bytes.len() {
            assert!(
                decode(&bytes[..len], NODE).is_err(),
                "{len} of {} bytes were accepted",
                bytes.len()
            );
        }
    }

    #[test]
    fn another_format_version_or_magic_is_refused() {
        let bytes = encode(&rich_image());
        let mut newer = bytes.clone();
        newer[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
        let error = decode(&newer, NODE).unwrap_err();
        assert!(error.contains("version 5"), "{error}");

        let mut other = bytes.clone();
        other[..MAGIC.len()].copy_from_slice(b"NOTSTROM");
        let error = decode(&other, NODE).unwrap_err();
        assert!(error.contains("not a metadata snapshot"), "{error}");
    }

    /// A snapshot written before reassignments were recorded reads as the
    /// same image with none running.
    #[test]
    fn a_format_1_snapshot_still_reads() {
        let image = rich_image();
        let now = ImageSnapshot::of(&image);
        let v1 = ImageSnapshotV1 {
            offset: now.offset,
            cluster_id: now.cluster_id,
            topics: now.topics,
            producer_ids_end: now.producer_ids_end,
            broker_configs: now.broker_configs,
            group_configs: now.group_configs,
            brokers: now.brokers,
        };
        let archive = rkyv::to_bytes::<rancor::Error>(&v1).unwrap();
        let read = decode(&framed(1, &archive), NODE).unwrap();
        let mut expected = without_listeners(&image);
        expected.scram.clear();
        expected.acls.clear();
        for topic in expected.topics.values_mut() {
            for p in &mut Arc::make_mut(topic).partitions {
                p.adding.clear();
                p.removing.clear();
            }
        }
        assert_eq!(fields(&read), fields(&expected));
        assert!(
            fields(&image) != fields(&expected),
            "the image had a reassignment"
        );
    }

    /// A snapshot written before SCRAM credentials were recorded reads as
    /// the same image with none.
    #[test]
    fn a_format_2_snapshot_still_reads() {
        let image = rich_image();
        let now = ImageSnapshot::of(&image);
        let v2 = ImageSnapshotV2 {
            offset: now.offset,
            cluster_id: now.cluster_id,
            topics: now.topics,
            producer_ids_end: now.producer_ids_end,
            broker_configs: now.broker_configs,
            group_configs: now.group_configs,
            brokers: now.brokers,
            reassignments: now.reassignments,
        };
        let archive = rkyv::to_bytes::<rancor::Error>(&v2).unwrap();
        let read = decode(&framed(2, &archive), NODE).unwrap();
        let mut expected = without_listeners(&image);
        expected.scram.clear();
        expected.acls.clear();
        assert_eq!(fields(&read), fields(&expected));
        assert!(!image.scram.is_empty(), "the image had a credential");
    }

    /// A snapshot written before brokers registered named listeners reads
    /// as the same image with each broker at its one address.
    #[test]
    fn a_format_3_snapshot_still_reads() {
        let image = rich_image();
        let now = ImageSnapshot::of(&image);
        assert!(!now.endpoints.is_empty(), "the image had named listeners");
        let v3 = ImageSnapshotV3 {
            offset: now.offset,
            cluster_id: now.cluster_id,
            topics: now.topics,
            producer_ids_end: now.producer_ids_end,
            broker_configs: now.broker_configs,
            group_configs: now.group_configs,
            brokers: now.brokers,
            reassignments: now.reassignments,
            scram: now.scram,
            acls: now.acls,
        };
        let archive = rkyv::to_bytes::<rancor::Error>(&v3).unwrap();
        let read = decode(&framed(3, &archive), NODE).unwrap();
        assert_eq!(fields(&read), fields(&without_listeners(&image)));
    }

    /// `image` with no broker's named listeners.
    fn without_listeners(image: &MetadataImage) -> MetadataImage {
        let mut image = image.clone();
        for broker in image.brokers.values_mut() {
            broker.endpoints.clear();
        }
        image
    }

    #[test]
    fn a_reassignment_of_a_partition_not_there_is_refused() {
        let mut snapshot = ImageSnapshot::of(&rich_image());
        snapshot.reassignments[0].partition = 99;
        let archive = rkyv::to_bytes::<rancor::Error>(&snapshot).unwrap();
        let error = decode(&framed(FORMAT_VERSION, &archive), NODE).unwrap_err();
        assert!(error.contains("does not have"), "{error}");
    }

    #[test]
    fn an_archive_breaking_the_image_invariant_is_refused() {
        let mut snapshot = ImageSnapshot::of(&rich_image());
        snapshot.topics[0].partitions.pop();
        let archive = rkyv::to_bytes::<rancor::Error>(&snapshot).unwrap();
        let error = decode(&framed(FORMAT_VERSION, &archive), NODE).unwrap_err();
        assert!(error.contains("partition states"), "{error}");
    }
}
