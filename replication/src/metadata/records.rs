//! Metadata log records: the changes [`super::MetadataImage`] applies, and
//! their encoding. A type byte, then fields; strings and lists are u32-length
//! prefixed. Decoding bounds every length by the bytes left. A field added
//! later goes at the end of its record and may be absent (records written
//! before it), never in the middle: a data dir written by an older broker
//! still opens.

use std::collections::BTreeMap;

use super::image::{AclBinding, BrokerMeta, Endpoint, PartitionState, ScramCredential, TopicMeta};

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
        /// The new partitions' states, one per core (empty in records
        /// written before replicas were recorded: this node alone).
        partitions: Vec<PartitionState>,
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
    /// A broker joined the cluster, or came back with a new incarnation
    /// (its addresses and rack replace the old ones); it starts unfenced.
    BrokerRegistered(BrokerMeta),
    /// A broker is fenced (missed heartbeats, or stopped cleanly) or
    /// unfenced (heartbeats again): fenced brokers lead nothing.
    BrokerFencing {
        id: i32,
        fenced: bool,
    },
    /// One partition's replication state changes (a new leader, ISR or
    /// replica list).
    PartitionChanged {
        name: String,
        index: i32,
        state: PartitionState,
    },
    /// A user's SCRAM credential for a mechanism is set (replacing any).
    ScramCredentialSet {
        user: String,
        mechanism: i8,
        credential: ScramCredential,
    },
    /// A user's SCRAM credential for a mechanism is removed.
    ScramCredentialDeleted {
        user: String,
        mechanism: i8,
    },
    /// An ACL is added (adding one that exists changes nothing).
    AclCreated(AclBinding),
    /// An ACL is removed.
    AclDeleted(AclBinding),
}

const TYPE_CLUSTER_ID: u8 = 1;
const TYPE_TOPIC_CREATED: u8 = 2;
const TYPE_TOPIC_DELETED: u8 = 3;
const TYPE_PARTITIONS_ADDED: u8 = 4;
const TYPE_TOPIC_CONFIGS_SET: u8 = 5;
const TYPE_PRODUCER_IDS: u8 = 6;
const TYPE_BROKER_CONFIGS_SET: u8 = 7;
const TYPE_GROUP_CONFIGS_SET: u8 = 8;
const TYPE_BROKER_REGISTERED: u8 = 9;
const TYPE_BROKER_FENCING: u8 = 10;
const TYPE_PARTITION_CHANGED: u8 = 11;
const TYPE_SCRAM_CREDENTIAL_SET: u8 = 12;
const TYPE_SCRAM_CREDENTIAL_DELETED: u8 = 13;
const TYPE_ACL_CREATED: u8 = 14;
const TYPE_ACL_DELETED: u8 = 15;

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

fn put_cores(out: &mut Vec<u8>, cores: &[u32]) {
    out.extend_from_slice(&(cores.len() as u32).to_be_bytes());
    for core in cores {
        out.extend_from_slice(&core.to_be_bytes());
    }
}

fn put_brokers(out: &mut Vec<u8>, brokers: &[i32]) {
    out.extend_from_slice(&(brokers.len() as u32).to_be_bytes());
    for broker in brokers {
        out.extend_from_slice(&broker.to_be_bytes());
    }
}

/// The replica lists (the first layout's field), then leader, leader
/// epoch, ISR and partition epoch of each partition (added after).
fn put_partition_states(out: &mut Vec<u8>, partitions: &[PartitionState]) {
    out.extend_from_slice(&(partitions.len() as u32).to_be_bytes());
    for partition in partitions {
        put_brokers(out, &partition.replicas);
    }
    out.extend_from_slice(&(partitions.len() as u32).to_be_bytes());
    for partition in partitions {
        out.extend_from_slice(&partition.leader.to_be_bytes());
        out.extend_from_slice(&partition.leader_epoch.to_be_bytes());
        put_brokers(out, &partition.isr);
        out.extend_from_slice(&partition.partition_epoch.to_be_bytes());
    }
}

/// A PartitionChanged record's state; the replicas a reassignment adds
/// and removes come last (added after), and only while one runs.
fn put_partition_state(out: &mut Vec<u8>, state: &PartitionState) {
    put_brokers(out, &state.replicas);
    out.extend_from_slice(&state.leader.to_be_bytes());
    out.extend_from_slice(&state.leader_epoch.to_be_bytes());
    put_brokers(out, &state.isr);
    out.extend_from_slice(&state.partition_epoch.to_be_bytes());
    if state.reassigning() {
        put_brokers(out, &state.adding);
        put_brokers(out, &state.removing);
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn put_acl(out: &mut Vec<u8>, acl: &AclBinding) {
    out.extend_from_slice(&acl.resource_type.to_be_bytes());
    put_str(out, &acl.resource_name);
    out.extend_from_slice(&acl.pattern_type.to_be_bytes());
    put_str(out, &acl.principal);
    put_str(out, &acl.host);
    out.extend_from_slice(&acl.operation.to_be_bytes());
    out.extend_from_slice(&acl.permission_type.to_be_bytes());
}

fn take_acl(buf: &mut &[u8]) -> Result<AclBinding, String> {
    Ok(AclBinding {
        resource_type: take_u8(buf)? as i8,
        resource_name: take_str(buf)?,
        pattern_type: take_u8(buf)? as i8,
        principal: take_str(buf)?,
        host: take_str(buf)?,
        operation: take_u8(buf)? as i8,
        permission_type: take_u8(buf)? as i8,
    })
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
                put_partition_states(&mut out, &topic.partitions);
            }
            MetadataRecord::TopicDeleted { name } => {
                out.push(TYPE_TOPIC_DELETED);
                put_str(&mut out, name);
            }
            MetadataRecord::PartitionsAdded {
                name,
                cores,
                partitions,
            } => {
                out.push(TYPE_PARTITIONS_ADDED);
                put_str(&mut out, name);
                put_cores(&mut out, cores);
                put_partition_states(&mut out, partitions);
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
            MetadataRecord::BrokerRegistered(broker) => {
                out.push(TYPE_BROKER_REGISTERED);
                out.extend_from_slice(&broker.id.to_be_bytes());
                out.extend_from_slice(&broker.incarnation.to_be_bytes());
                put_str(&mut out, &broker.host);
                out.extend_from_slice(&broker.port.to_be_bytes());
                put_str(&mut out, broker.rack.as_deref().unwrap_or(""));
                put_str(&mut out, &broker.controller_address);
                // Appended: a registration of one listener ends before it.
                if !broker.endpoints.is_empty() {
                    out.extend_from_slice(&(broker.endpoints.len() as u16).to_be_bytes());
                    for endpoint in &broker.endpoints {
                        put_str(&mut out, &endpoint.name);
                        put_str(&mut out, &endpoint.host);
                        out.extend_from_slice(&endpoint.port.to_be_bytes());
                    }
                }
            }
            MetadataRecord::BrokerFencing { id, fenced } => {
                out.push(TYPE_BROKER_FENCING);
                out.extend_from_slice(&id.to_be_bytes());
                out.push(u8::from(*fenced));
            }
            MetadataRecord::PartitionChanged { name, index, state } => {
                out.push(TYPE_PARTITION_CHANGED);
                put_str(&mut out, name);
                out.extend_from_slice(&index.to_be_bytes());
                put_partition_state(&mut out, state);
            }
            MetadataRecord::ScramCredentialSet {
                user,
                mechanism,
                credential,
            } => {
                out.push(TYPE_SCRAM_CREDENTIAL_SET);
                put_str(&mut out, user);
                out.extend_from_slice(&mechanism.to_be_bytes());
                put_bytes(&mut out, &credential.salt);
                out.extend_from_slice(&credential.iterations.to_be_bytes());
                put_bytes(&mut out, &credential.stored_key);
                put_bytes(&mut out, &credential.server_key);
            }
            MetadataRecord::ScramCredentialDeleted { user, mechanism } => {
                out.push(TYPE_SCRAM_CREDENTIAL_DELETED);
                put_str(&mut out, user);
                out.extend_from_slice(&mechanism.to_be_bytes());
            }
            MetadataRecord::AclCreated(acl) => {
                out.push(TYPE_ACL_CREATED);
                put_acl(&mut out, acl);
            }
            MetadataRecord::AclDeleted(acl) => {
                out.push(TYPE_ACL_DELETED);
                put_acl(&mut out, acl);
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
                let partitions = take_partition_states(&mut buf)?;
                MetadataRecord::TopicCreated(TopicMeta {
                    name,
                    topic_id,
                    partition_cores,
                    configs,
                    partitions,
                })
            }
            TYPE_TOPIC_DELETED => MetadataRecord::TopicDeleted {
                name: take_str(&mut buf)?,
            },
            TYPE_PARTITIONS_ADDED => MetadataRecord::PartitionsAdded {
                name: take_str(&mut buf)?,
                cores: take_cores(&mut buf)?,
                partitions: take_partition_states(&mut buf)?,
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
            TYPE_BROKER_REGISTERED => {
                let id = take_i32(&mut buf)?;
                let incarnation = u64::from_be_bytes(take::<8>(&mut buf)?);
                let host = take_str(&mut buf)?;
                let port = u16::from_be_bytes(take::<2>(&mut buf)?);
                let rack = take_str(&mut buf)?;
                let controller_address = take_str(&mut buf)?;
                let mut endpoints = Vec::new();
                if !buf.is_empty() {
                    let count = u16::from_be_bytes(take::<2>(&mut buf)?);
                    for _ in 0..count {
                        endpoints.push(Endpoint {
                            name: take_str(&mut buf)?,
                            host: take_str(&mut buf)?,
                            port: u16::from_be_bytes(take::<2>(&mut buf)?),
                        });
                    }
                }
                MetadataRecord::BrokerRegistered(BrokerMeta {
                    id,
                    incarnation,
                    host,
                    port,
                    rack: (!rack.is_empty()).then_some(rack),
                    controller_address,
                    fenced: false,
                    endpoints,
                })
            }
            TYPE_BROKER_FENCING => MetadataRecord::BrokerFencing {
                id: take_i32(&mut buf)?,
                fenced: match take_u8(&mut buf)? {
                    0 => false,
                    1 => true,
                    other => return Err(format!("fencing flag {other} is neither 0 nor 1")),
                },
            },
            TYPE_PARTITION_CHANGED => {
                let name = take_str(&mut buf)?;
                let index = take_i32(&mut buf)?;
                let mut state = PartitionState {
                    replicas: take_brokers(&mut buf)?,
                    leader: take_i32(&mut buf)?,
                    leader_epoch: take_i32(&mut buf)?,
                    isr: take_brokers(&mut buf)?,
                    partition_epoch: take_i32(&mut buf)?,
                    adding: Vec::new(),
                    removing: Vec::new(),
                };
                if !buf.is_empty() {
                    state.adding = take_brokers(&mut buf)?;
                    state.removing = take_brokers(&mut buf)?;
                }
                MetadataRecord::PartitionChanged { name, index, state }
            }
            TYPE_SCRAM_CREDENTIAL_SET => MetadataRecord::ScramCredentialSet {
                user: take_str(&mut buf)?,
                mechanism: take_u8(&mut buf)? as i8,
                credential: ScramCredential {
                    salt: take_bytes(&mut buf)?,
                    iterations: take_i32(&mut buf)?,
                    stored_key: take_bytes(&mut buf)?,
                    server_key: take_bytes(&mut buf)?,
                },
            },
            TYPE_SCRAM_CREDENTIAL_DELETED => MetadataRecord::ScramCredentialDeleted {
                user: take_str(&mut buf)?,
                mechanism: take_u8(&mut buf)? as i8,
            },
            TYPE_ACL_CREATED => MetadataRecord::AclCreated(take_acl(&mut buf)?),
            TYPE_ACL_DELETED => MetadataRecord::AclDeleted(take_acl(&mut buf)?),
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
    String::from_utf8(take_bytes(buf)?).map_err(|_| "string is not UTF-8".to_string())
}

fn take_bytes(buf: &mut &[u8]) -> Result<Vec<u8>, String> {
    let len = take_len(buf, 1)?;
    let (head, rest) = buf.split_at(len);
    *buf = rest;
    Ok(head.to_vec())
}

fn take_cores(buf: &mut &[u8]) -> Result<Vec<u32>, String> {
    let len = take_len(buf, 4)?;
    (0..len)
        .map(|_| Ok(u32::from_be_bytes(take::<4>(buf)?)))
        .collect()
}

fn take_i32(buf: &mut &[u8]) -> Result<i32, String> {
    Ok(i32::from_be_bytes(take::<4>(buf)?))
}

fn take_brokers(buf: &mut &[u8]) -> Result<Vec<i32>, String> {
    let len = take_len(buf, 4)?;
    (0..len).map(|_| take_i32(buf)).collect()
}

/// The partitions' states at the end of a TopicCreated or PartitionsAdded
/// record. Each part is absent in records written before it was recorded:
/// no replica list (the partitions have this node alone, filled in by
/// [`super::MetadataImage::apply`]), or replicas without leader, ISR and
/// epochs (a new partition's: see [`PartitionState::new`]).
fn take_partition_states(buf: &mut &[u8]) -> Result<Vec<PartitionState>, String> {
    if buf.is_empty() {
        return Ok(Vec::new());
    }
    let count = take_len(buf, 4)?;
    let replicas: Vec<Vec<i32>> = (0..count)
        .map(|_| take_brokers(buf))
        .collect::<Result<_, _>>()?;
    if buf.is_empty() {
        return Ok(replicas.into_iter().map(PartitionState::new).collect());
    }
    let states = take_len(buf, 16)?;
    if states != count {
        return Err(format!(
            "{states} partition states for {count} replica lists"
        ));
    }
    replicas
        .into_iter()
        .map(|replicas| {
            Ok(PartitionState {
                replicas,
                leader: take_i32(buf)?,
                leader_epoch: take_i32(buf)?,
                isr: take_brokers(buf)?,
                partition_epoch: take_i32(buf)?,
                adding: Vec::new(),
                removing: Vec::new(),
            })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::testing::topic_meta;

    fn topic(name: &str, cores: &[u32]) -> MetadataRecord {
        MetadataRecord::TopicCreated(TopicMeta {
            configs: BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]),
            ..topic_meta(name, cores)
        })
    }

    #[test]
    fn records_round_trip() {
        let moved = PartitionState {
            replicas: vec![0, 3, 5],
            leader: 3,
            leader_epoch: 7,
            isr: vec![3, 5],
            partition_epoch: 9,
            adding: vec![],
            removing: vec![],
        };
        let records = [
            MetadataRecord::ClusterId("abc".to_string()),
            topic("t", &[0, 1, 0]),
            MetadataRecord::TopicDeleted {
                name: "t".to_string(),
            },
            MetadataRecord::PartitionsAdded {
                name: "t".to_string(),
                cores: vec![1, 0],
                partitions: vec![PartitionState::new(vec![0, 3]), moved],
            },
            MetadataRecord::PartitionsAdded {
                name: "t".to_string(),
                cores: vec![1],
                partitions: Vec::new(),
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
            MetadataRecord::BrokerRegistered(BrokerMeta {
                id: 2,
                incarnation: 77,
                host: "127.0.0.1".to_string(),
                port: 19092,
                rack: Some("r1".to_string()),
                controller_address: "127.0.0.1:19093".to_string(),
                fenced: false,
                endpoints: vec![
                    Endpoint {
                        name: "INTERNAL".to_string(),
                        host: "127.0.0.1".to_string(),
                        port: 19092,
                    },
                    Endpoint {
                        name: "EXTERNAL".to_string(),
                        host: "broker2.example".to_string(),
                        port: 9094,
                    },
                ],
            }),
            MetadataRecord::BrokerRegistered(BrokerMeta {
                id: 3,
                incarnation: 78,
                host: "h".to_string(),
                port: 1,
                rack: None,
                controller_address: String::new(),
                fenced: false,
                endpoints: Vec::new(),
            }),
            MetadataRecord::BrokerFencing {
                id: 2,
                fenced: true,
            },
            MetadataRecord::BrokerFencing {
                id: 2,
                fenced: false,
            },
            MetadataRecord::PartitionChanged {
                name: "t".to_string(),
                index: 4,
                state: PartitionState {
                    replicas: vec![1, 2, 3],
                    leader: 2,
                    leader_epoch: 5,
                    isr: vec![2, 3],
                    partition_epoch: 8,
                    adding: vec![],
                    removing: vec![],
                },
            },
            // A reassignment from [1, 2] to [3, 2] under way.
            MetadataRecord::PartitionChanged {
                name: "t".to_string(),
                index: 0,
                state: PartitionState {
                    replicas: vec![3, 2, 1],
                    leader: 1,
                    leader_epoch: 2,
                    isr: vec![1, 2],
                    partition_epoch: 3,
                    adding: vec![3],
                    removing: vec![1],
                },
            },
            MetadataRecord::ScramCredentialSet {
                user: "alice".to_string(),
                mechanism: 2,
                credential: ScramCredential {
                    salt: vec![1, 2, 3],
                    iterations: 8192,
                    stored_key: vec![7; 64],
                    server_key: vec![9; 64],
                },
            },
            MetadataRecord::ScramCredentialDeleted {
                user: "alice".to_string(),
                mechanism: 1,
            },
            MetadataRecord::AclCreated(AclBinding {
                resource_type: 2,
                resource_name: "orders-".to_string(),
                pattern_type: 4,
                principal: "User:alice".to_string(),
                host: "*".to_string(),
                operation: 3,
                permission_type: 3,
            }),
            MetadataRecord::AclDeleted(AclBinding {
                resource_type: 4,
                resource_name: "kafka-cluster".to_string(),
                pattern_type: 3,
                principal: "User:*".to_string(),
                host: "10.0.0.1".to_string(),
                operation: 7,
                permission_type: 2,
            }),
        ];
        for record in records {
            assert_eq!(MetadataRecord::decode(&record.encode()).unwrap(), record);
        }
        assert!(MetadataRecord::decode(&[2, 0xff, 0xff, 0xff, 0xff]).is_err());
    }

    /// The bytes of a TopicCreated record in the layout before leader, ISR
    /// and epochs were recorded: with `replicas`, or (older still) without.
    fn old_topic_created(name: &str, cores: &[u32], replicas: Option<&[Vec<i32>]>) -> Vec<u8> {
        let mut out = vec![TYPE_TOPIC_CREATED];
        put_str(&mut out, name);
        out.extend_from_slice(&42u128.to_be_bytes());
        put_cores(&mut out, cores);
        put_configs(&mut out, &BTreeMap::new());
        if let Some(replicas) = replicas {
            out.extend_from_slice(&(replicas.len() as u32).to_be_bytes());
            for partition in replicas {
                put_brokers(&mut out, partition);
            }
        }
        out
    }

    #[test]
    fn records_of_older_layouts_decode_with_new_partitions_state() {
        let decoded = MetadataRecord::decode(&old_topic_created("a", &[0, 1], None)).unwrap();
        let MetadataRecord::TopicCreated(topic) = decoded else {
            panic!("{decoded:?}")
        };
        assert!(topic.partitions.is_empty(), "filled in when applied");

        let replicas = [vec![4, 2], vec![2]];
        let decoded =
            MetadataRecord::decode(&old_topic_created("a", &[0, 1], Some(&replicas))).unwrap();
        let MetadataRecord::TopicCreated(topic) = decoded else {
            panic!("{decoded:?}")
        };
        assert_eq!(
            topic.partitions,
            vec![
                PartitionState {
                    replicas: vec![4, 2],
                    leader: 4,
                    leader_epoch: 0,
                    isr: vec![4, 2],
                    partition_epoch: 0,
                    adding: vec![],
                    removing: vec![],
                },
                PartitionState::new(vec![2])
            ]
        );

        let mut added = vec![TYPE_PARTITIONS_ADDED];
        put_str(&mut added, "a");
        put_cores(&mut added, &[1]);
        let decoded = MetadataRecord::decode(&added).unwrap();
        assert_eq!(
            decoded,
            MetadataRecord::PartitionsAdded {
                name: "a".to_string(),
                cores: vec![1],
                partitions: Vec::new()
            }
        );
    }

    #[test]
    fn partition_states_that_do_not_match_the_replica_lists_are_refused() {
        let mut bytes = topic("t", &[0, 1]).encode();
        // The state count follows the two replica lists (4 + 2 * 8 bytes
        // after the configs): claim three states for two lists.
        let replicas_end = bytes.len() - 2 * (4 + 4 + 4 + 4 + 4);
        bytes[replicas_end - 4..replicas_end].copy_from_slice(&3u32.to_be_bytes());
        assert!(MetadataRecord::decode(&bytes).is_err());
    }
}
