//! The metadata image: the state machine the metadata log's records are
//! applied to, in log order. Plain data and plain code (no I/O), so start-up
//! replay, the controller's proposals and every core's copy apply records
//! the same way, and the replicated log that follows applies them too.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::records::MetadataRecord;
use super::NotServed;

/// One partition's replication state, as the controller records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    /// Broker ids holding a replica, the preferred leader first.
    pub replicas: Vec<i32>,
    /// The broker that leads the partition (-1: none).
    pub leader: i32,
    /// Grows each time the leader changes.
    pub leader_epoch: i32,
    /// The replicas caught up with the leader (a subset of `replicas`).
    pub isr: Vec<i32>,
    /// Grows with every change to this state.
    pub partition_epoch: i32,
    /// While a reassignment moves the partition: the replicas it adds
    /// (in `replicas`, copying the log; Kafka's `addingReplicas`).
    pub adding: Vec<i32>,
    /// While a reassignment moves the partition: the replicas that leave
    /// once every target replica is in sync (in `replicas` until then;
    /// Kafka's `removingReplicas`).
    pub removing: Vec<i32>,
}

impl PartitionState {
    /// A new partition: led by its first replica, every replica in sync,
    /// both epochs 0.
    pub fn new(replicas: Vec<i32>) -> Self {
        Self {
            leader: replicas.first().copied().unwrap_or(-1),
            leader_epoch: 0,
            isr: replicas.clone(),
            partition_epoch: 0,
            replicas,
            adding: Vec::new(),
            removing: Vec::new(),
        }
    }

    /// Whether a reassignment is moving this partition.
    pub fn reassigning(&self) -> bool {
        !self.adding.is_empty() || !self.removing.is_empty()
    }

    /// The replicas a reassignment moves to (all of them when none runs),
    /// in the order asked (the preferred leader first).
    pub fn target_replicas(&self) -> Vec<i32> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.removing.contains(r))
            .collect()
    }

    /// The replicas before the running reassignment (all of them when
    /// none runs).
    pub fn original_replicas(&self) -> Vec<i32> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.adding.contains(r))
            .collect()
    }
}

/// A broker of the cluster, as it registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerMeta {
    pub id: i32,
    /// Differs on every start of the broker's process: a registration
    /// with a new one replaces the old.
    pub incarnation: u64,
    /// The client listener's advertised address.
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
    /// `HOST:PORT` of its controller listener (empty: not a voter).
    pub controller_address: String,
    /// Missed its heartbeats or stopped: leads nothing, listed nowhere.
    pub fenced: bool,
    /// The advertised address of each of its client listeners, by name
    /// (empty for a broker that registered one listener: `host`/`port`).
    pub endpoints: Vec<Endpoint>,
}

/// One named listener's advertised address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl BrokerMeta {
    /// The address clients of listener `name` reach this broker at: that
    /// listener's advertised address, `host`/`port` for a broker that
    /// registered no list, none when it has no such listener.
    pub fn endpoint(&self, name: &str) -> Option<(&str, u16)> {
        if self.endpoints.is_empty() {
            return Some((self.host.as_str(), self.port));
        }
        self.endpoints
            .iter()
            .find(|e| e.name == name)
            .map(|e| (e.host.as_str(), e.port))
    }
}

/// A user's SCRAM credential for one mechanism, as RFC 5802 keeps it: the
/// salt, the iteration count and the keys derived from the salted
/// password (never the password).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub iterations: i32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

/// An ACL as Kafka's StandardAuthorizer keeps it: a resource pattern
/// (type, name, literal or prefixed), a principal (`User:name`, `User:*`),
/// a host (`*`: any), an operation and allow or deny. The codes are
/// Kafka's (`ResourceType`, `PatternType`, `AclOperation`,
/// `AclPermissionType`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclBinding {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission_type: i8,
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
    /// Each partition's replication state, by partition index. In an image
    /// there is one per entry of `partition_cores`; in a record written
    /// before they were recorded there may be none ([`MetadataImage::apply`]
    /// fills in this node alone).
    pub partitions: Vec<PartitionState>,
}

impl TopicMeta {
    /// The state of partition `index`, if the topic has it.
    pub fn partition(&self, index: i32) -> Option<&PartitionState> {
        self.partitions.get(usize::try_from(index).ok()?)
    }
}

/// Everything the metadata log says, at one point.
#[derive(Debug, Clone, Default)]
pub struct MetadataImage {
    /// The node whose image this is: partitions of records written before
    /// replicas were recorded have it alone.
    pub node_id: i32,
    /// Records applied so far: a later image has a larger offset.
    pub offset: u64,
    pub cluster_id: String,
    pub topics: BTreeMap<String, Arc<TopicMeta>>,
    /// Producer ids below this were handed out (or reserved) already.
    pub producer_ids_end: i64,
    /// Dynamic broker settings by broker resource (`""`: cluster default).
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Consumer group settings by group id.
    pub group_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// The brokers that registered, by id (none on a single node: the
    /// node itself is the only broker).
    pub brokers: BTreeMap<i32, BrokerMeta>,
    /// SCRAM credentials by user and mechanism (Kafka's ScramMechanism
    /// type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512).
    pub scram: BTreeMap<(String, i8), ScramCredential>,
    /// The ACLs, in their order (resource type, then name, ...).
    pub acls: std::collections::BTreeSet<AclBinding>,
}

impl MetadataImage {
    /// The image of an empty log, on node `node_id`.
    pub fn new(node_id: i32) -> Self {
        Self {
            node_id,
            ..Self::default()
        }
    }

    /// The image of `records` applied in order, on node `node_id`.
    pub fn replay<'a>(node_id: i32, records: impl IntoIterator<Item = &'a MetadataRecord>) -> Self {
        let mut image = Self::new(node_id);
        for record in records {
            image.apply(record);
        }
        image
    }

    /// This image with `records` applied after it.
    pub fn with(&self, records: &[MetadataRecord]) -> Self {
        let mut next = self.clone();
        for record in records {
            next.apply(record);
        }
        next
    }

    /// A copy that shares nothing with `self`: a core keeps one, so that
    /// reading or cloning its topics never touches a cache line another
    /// core writes (an `Arc`'s count).
    pub fn local_copy(&self) -> Self {
        Self {
            topics: self
                .topics
                .iter()
                .map(|(name, topic)| (name.clone(), Arc::new(TopicMeta::clone(topic))))
                .collect(),
            ..self.clone()
        }
    }

    pub fn apply(&mut self, record: &MetadataRecord) {
        self.offset += 1;
        let node_id = self.node_id;
        match record {
            MetadataRecord::ClusterId(id) => self.cluster_id = id.clone(),
            MetadataRecord::TopicCreated(topic) => {
                let mut topic = topic.clone();
                fill_partition_states(&mut topic, node_id);
                self.topics.insert(topic.name.clone(), Arc::new(topic));
            }
            MetadataRecord::TopicDeleted { name } => {
                self.topics.remove(name);
            }
            MetadataRecord::PartitionsAdded {
                name,
                cores,
                partitions,
            } => {
                if let Some(topic) = self.topics.get_mut(name) {
                    let topic = Arc::make_mut(topic);
                    topic.partition_cores.extend_from_slice(cores);
                    topic.partitions.extend(partitions.iter().cloned());
                    fill_partition_states(topic, node_id);
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
            MetadataRecord::BrokerRegistered(broker) => {
                self.brokers.insert(broker.id, broker.clone());
            }
            MetadataRecord::BrokerFencing { id, fenced } => {
                if let Some(broker) = self.brokers.get_mut(id) {
                    broker.fenced = *fenced;
                }
            }
            MetadataRecord::ScramCredentialSet {
                user,
                mechanism,
                credential,
            } => {
                self.scram
                    .insert((user.clone(), *mechanism), credential.clone());
            }
            MetadataRecord::ScramCredentialDeleted { user, mechanism } => {
                self.scram.remove(&(user.clone(), *mechanism));
            }
            MetadataRecord::AclCreated(acl) => {
                self.acls.insert(acl.clone());
            }
            MetadataRecord::AclDeleted(acl) => {
                self.acls.remove(acl);
            }
            MetadataRecord::PartitionChanged { name, index, state } => {
                if let Some(topic) = self.topics.get_mut(name) {
                    let topic = Arc::make_mut(topic);
                    if let Some(slot) = usize::try_from(*index)
                        .ok()
                        .and_then(|i| topic.partitions.get_mut(i))
                    {
                        // Every change is decided on the state it follows
                        // and records the next partition epoch; one
                        // decided on a state another change has replaced
                        // meanwhile would undo that change, and is dropped
                        // (on every node alike: the log's order decides).
                        if state.partition_epoch == slot.partition_epoch + 1 {
                            *slot = state.clone();
                        } else {
                            tracing::warn!(
                                topic = %name,
                                partition = index,
                                recorded_epoch = slot.partition_epoch,
                                change_epoch = state.partition_epoch,
                                "a partition change decided on an older state is dropped"
                            );
                        }
                    }
                }
            }
        }
    }

    /// The brokers that are registered and not fenced, by id.
    pub fn live_brokers(&self) -> impl Iterator<Item = &BrokerMeta> {
        self.brokers.values().filter(|b| !b.fenced)
    }

    /// Whether broker `id` is registered and unfenced.
    pub fn is_live(&self, id: i32) -> bool {
        self.brokers.get(&id).is_some_and(|b| !b.fenced)
    }

    /// Every partition's state, with its topic and index, topics by name.
    pub fn partition_states(&self) -> impl Iterator<Item = (&TopicMeta, i32, &PartitionState)> {
        self.topics.values().flat_map(|topic| {
            topic
                .partitions
                .iter()
                .enumerate()
                .map(move |(index, state)| (topic.as_ref(), index as i32, state))
        })
    }

    /// The core that owns a partition, mapped into the running core count
    /// (the count may have changed since the topic was created).
    /// None when this node holds no replica of it.
    pub fn owner_core(&self, topic: &TopicMeta, partition: i32, cores: usize) -> Option<usize> {
        let index = usize::try_from(partition).ok()?;
        if !topic
            .partitions
            .get(index)
            .is_some_and(|p| p.replicas.contains(&self.node_id))
        {
            return None;
        }
        topic
            .partition_cores
            .get(index)
            .map(|&core| core as usize % cores)
    }

    /// The core of this node that serves partition `partition` of `topic`
    /// as its leader; else why not: [`NotServed::NotLeaderOrFollower`]
    /// when the partition exists but another broker leads it (or none
    /// does), [`NotServed::UnknownTopicOrPartition`] when it does not exist.
    pub fn leader_core(
        &self,
        topic: &TopicMeta,
        partition: i32,
        cores: usize,
    ) -> Result<usize, NotServed> {
        let state = topic
            .partition(partition)
            .ok_or(NotServed::UnknownTopicOrPartition)?;
        if state.leader != self.node_id {
            return Err(NotServed::NotLeaderOrFollower);
        }
        self.owner_core(topic, partition, cores)
            .ok_or(NotServed::NotLeaderOrFollower)
    }

    /// [`MetadataImage::leader_core`] of a topic named `topic`
    /// ([`NotServed::UnknownTopicOrPartition`] when there is none).
    pub fn leader_core_by_name(
        &self,
        topic: &str,
        partition: i32,
        cores: usize,
    ) -> Result<usize, NotServed> {
        let meta = self
            .topics
            .get(topic)
            .ok_or(NotServed::UnknownTopicOrPartition)?;
        self.leader_core(meta, partition, cores)
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

/// Gives every partition of `topic` a state: those a record did not carry
/// (written before replicas were recorded) have `node_id` alone. States
/// beyond the partitions (a record that does not add up) are dropped.
fn fill_partition_states(topic: &mut TopicMeta, node_id: i32) {
    let count = topic.partition_cores.len();
    topic
        .partitions
        .resize_with(count, || PartitionState::new(vec![node_id]));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::testing::topic_meta;

    const NODE: i32 = 3;

    fn topic(name: &str, cores: &[u32], partitions: Vec<PartitionState>) -> MetadataRecord {
        MetadataRecord::TopicCreated(TopicMeta {
            partitions,
            ..topic_meta(name, cores)
        })
    }

    /// Applies `records` in order, as start-up's replay does.
    fn check(records: &[MetadataRecord], expected: &[(&str, Vec<PartitionState>)]) {
        let image = MetadataImage::replay(NODE, records);
        assert_eq!(image.offset, records.len() as u64);
        let got: Vec<(&str, Vec<PartitionState>)> = image
            .topics
            .values()
            .map(|t| {
                assert_eq!(t.partitions.len(), t.partition_cores.len(), "{}", t.name);
                (t.name.as_str(), t.partitions.clone())
            })
            .collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn a_created_topic_has_a_state_per_partition() {
        let single = PartitionState::new(vec![NODE]);
        assert_eq!(
            single,
            PartitionState {
                replicas: vec![NODE],
                leader: NODE,
                leader_epoch: 0,
                isr: vec![NODE],
                partition_epoch: 0,
                adding: vec![],
                removing: vec![],
            }
        );
        check(
            &[topic("a", &[0, 1], vec![single.clone(); 2])],
            &[("a", vec![single.clone(); 2])],
        );
        // Records written before replicas were recorded: this node alone.
        check(
            &[topic("old", &[0, 1, 0], Vec::new())],
            &[("old", vec![single.clone(); 3])],
        );
    }

    #[test]
    fn added_partitions_extend_the_states() {
        let single = PartitionState::new(vec![NODE]);
        let assigned = PartitionState::new(vec![7]);
        let added = |partitions: Vec<PartitionState>| MetadataRecord::PartitionsAdded {
            name: "a".to_string(),
            cores: vec![0; partitions.len().max(1)],
            partitions,
        };
        check(
            &[
                topic("a", &[0], Vec::new()),
                added(vec![assigned.clone()]),
                added(Vec::new()),
            ],
            &[("a", vec![single.clone(), assigned, single])],
        );
        // Partitions of a topic that is gone change nothing.
        check(
            &[
                topic("a", &[0], Vec::new()),
                MetadataRecord::TopicDeleted {
                    name: "a".to_string(),
                },
                added(Vec::new()),
            ],
            &[],
        );
    }

    #[test]
    fn configs_producer_ids_and_cluster_id_apply() {
        let mut image = MetadataImage::new(NODE);
        let configs = BTreeMap::from([("retention.ms".to_string(), "5".to_string())]);
        for record in [
            MetadataRecord::ClusterId("c".to_string()),
            topic("a", &[0], Vec::new()),
            MetadataRecord::TopicConfigsSet {
                name: "a".to_string(),
                configs: configs.clone(),
            },
            MetadataRecord::ProducerIdsAllocated { end: 2000 },
            MetadataRecord::ProducerIdsAllocated { end: 1000 },
            MetadataRecord::BrokerConfigsSet {
                resource: String::new(),
                configs: configs.clone(),
            },
            MetadataRecord::GroupConfigsSet {
                group: "g".to_string(),
                configs: configs.clone(),
            },
            MetadataRecord::GroupConfigsSet {
                group: "g".to_string(),
                configs: BTreeMap::new(),
            },
        ] {
            image.apply(&record);
        }
        assert_eq!(image.cluster_id, "c");
        assert_eq!(image.topics["a"].configs, configs);
        assert_eq!(image.producer_ids_end, 2000, "never goes back");
        assert_eq!(image.broker_configs[""], configs);
        assert!(
            image.group_configs.is_empty(),
            "empty settings leave no entry"
        );
        assert_eq!(image.offset, 8);
    }

    /// Two changes decided on the same state: the first recorded wins, the
    /// second (which would undo it) is dropped; a change decided after
    /// the first applies.
    #[test]
    fn a_partition_change_decided_on_an_older_state_is_dropped() {
        let start = PartitionState::new(vec![1, 2, 3]);
        let change = |leader: i32, partition_epoch: i32| MetadataRecord::PartitionChanged {
            name: "a".to_string(),
            index: 0,
            state: PartitionState {
                leader,
                partition_epoch,
                ..start.clone()
            },
        };
        let image = MetadataImage::replay(
            NODE,
            &[
                topic("a", &[0], vec![start.clone()]),
                change(2, 1),
                change(3, 1),
            ],
        );
        assert_eq!(image.topics["a"].partitions[0].leader, 2);
        let image = image.with(&[change(3, 2)]);
        let state = &image.topics["a"].partitions[0];
        assert_eq!((state.leader, state.partition_epoch), (3, 2));
    }

    #[test]
    fn a_local_copy_shares_no_topic() {
        let image = MetadataImage::replay(NODE, &[topic("a", &[0], Vec::new())]);
        let copy = image.local_copy();
        assert_eq!(copy.topics, image.topics);
        assert_eq!(copy.offset, image.offset);
        assert!(!Arc::ptr_eq(&copy.topics["a"], &image.topics["a"]));
        let next = image.with(&[MetadataRecord::TopicDeleted {
            name: "a".to_string(),
        }]);
        assert!(next.topics.is_empty());
        assert_eq!(image.topics.len(), 1, "with() leaves the image as it was");
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
}
