//! Consumer-protocol groups (KIP-848, `group.protocol=consumer`): the
//! coordinator computes the assignment and hands it out through
//! ConsumerGroupHeartbeat, one member at a time, without stopping the
//! group.
//!
//! The group has an epoch, bumped by any change of membership, of
//! subscriptions or of the subscribed topics' partitions; the target
//! assignment is computed for the group epoch by a server-side assignor
//! (`uniform` or `range`). Each member then reconciles towards its target
//! at its own pace: it first gives up what the target takes from it
//! (UNREVOKED_PARTITIONS: its epoch stays until it heartbeats without
//! them), then gets its new epoch with the partitions no other member
//! still holds; those still held come as they are released
//! (UNRELEASED_PARTITIONS). So no partition is ever owned by two members.

use std::collections::{BTreeMap, BTreeSet};

use crate::consumer_records::{self as records, AssignmentValue, ById, ConsumerKey, MemberValue};
use crate::error::GroupError;
use crate::limits::GROUP_MEMBERS_MAX;

use super::messages::GroupState;
use super::state::Group;
use super::{too_long, Coordinator};

/// Partitions by topic name.
pub type Partitions = BTreeMap<String, BTreeSet<i32>>;

pub use crate::config::ASSIGNORS;

/// Topics a group may be assigned, as the metadata has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicInfo {
    /// The topic id (clients name topics by id in heartbeats).
    pub id: u128,
    pub partitions: i32,
}

/// Every topic by name.
pub type Topics = BTreeMap<String, TopicInfo>;

/// A ConsumerGroupHeartbeat, decoded (topics by name).
#[derive(Debug, Clone, Default)]
pub struct ConsumerHeartbeat {
    pub group_id: String,
    pub member_id: String,
    /// 0 joins, -1 leaves, -2 leaves for now (a static member).
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// -1: unchanged.
    pub rebalance_timeout_ms: i32,
    /// `None`: unchanged.
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// The partitions the member owns; `None`: unchanged since the last
    /// heartbeat.
    pub owned: Option<Partitions>,
    pub client_id: String,
    pub client_host: String,
    /// The group's own `consumer.session.timeout.ms` and
    /// `consumer.heartbeat.interval.ms` (group configs), over the broker's.
    pub session_timeout_ms: Option<u64>,
    pub heartbeat_interval_ms: Option<u64>,
}

/// The answer to a heartbeat that was accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerHeartbeatAnswer {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The partitions the member may own now, when they changed (or the
    /// member may not know them).
    pub assignment: Option<Partitions>,
}

/// Where a member is in reaching its target assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    Stable,
    /// It must first give up partitions (`revoking`).
    UnrevokedPartitions,
    /// Some partitions of its target are still held by others.
    UnreleasedPartitions,
}

impl MemberState {
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Stable => "stable",
            MemberState::UnrevokedPartitions => "unrevoked_partitions",
            MemberState::UnreleasedPartitions => "unreleased_partitions",
        }
    }
}

/// One member of a consumer-protocol group.
#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: u64,
    pub subscribed_names: BTreeSet<String>,
    pub subscribed_regex: Option<String>,
    pub(super) compiled_regex: Option<regex::Regex>,
    pub server_assignor: Option<String>,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: MemberState,
    /// What it may own now.
    pub assigned: Partitions,
    /// What it must give up before it moves on.
    pub revoking: Partitions,
    pub session_deadline_ms: u64,
    /// Until when it may take to revoke (UNREVOKED_PARTITIONS).
    pub revocation_deadline_ms: Option<u64>,
    /// A static member that left for now (epoch -2): its assignment waits
    /// for its instance to come back within the session timeout.
    pub away: bool,
    /// A member speaking the classic protocol (JoinGroup, SyncGroup,
    /// Heartbeat) in a consumer-protocol group, while the group migrates.
    pub classic: Option<ClassicMember>,
}

/// What a classic member of a consumer-protocol group joined with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicMember {
    /// Its protocols (assignor names) and their metadata (subscriptions),
    /// in its order of preference.
    pub protocols: Vec<(String, bytes::Bytes)>,
    pub session_timeout_ms: u64,
}

impl ConsumerMember {
    /// A member that just joined: epoch 0, owning nothing.
    pub(super) fn new(member_id: &str, instance_id: Option<String>) -> Self {
        ConsumerMember {
            member_id: member_id.to_string(),
            instance_id,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            rebalance_timeout_ms: 0,
            subscribed_names: BTreeSet::new(),
            subscribed_regex: None,
            compiled_regex: None,
            server_assignor: None,
            member_epoch: 0,
            previous_member_epoch: -1,
            state: MemberState::Stable,
            assigned: Partitions::new(),
            revoking: Partitions::new(),
            session_deadline_ms: 0,
            revocation_deadline_ms: None,
            away: false,
            classic: None,
        }
    }

    fn bytes(&self) -> usize {
        let names: usize = self.subscribed_names.iter().map(String::len).sum();
        self.member_id.len()
            + self.client_id.len()
            + self.client_host.len()
            + names
            + self.subscribed_regex.as_ref().map_or(0, String::len)
            + 8 * (count(&self.assigned) + count(&self.revoking))
    }

    /// What its records hold, to tell when they must be written again.
    pub(super) fn recorded(&self) -> (MemberValue, i32, i32, MemberState, Partitions, Partitions) {
        (
            self.member_value(),
            self.member_epoch,
            self.previous_member_epoch,
            self.state,
            self.assigned.clone(),
            self.revoking.clone(),
        )
    }

    fn member_value(&self) -> MemberValue {
        MemberValue {
            instance_id: self.instance_id.clone(),
            rack_id: self.rack_id.clone(),
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
            subscribed_topic_names: self.subscribed_names.iter().cloned().collect(),
            subscribed_topic_regex: self.subscribed_regex.clone(),
            rebalance_timeout_ms: i32::try_from(self.rebalance_timeout_ms).unwrap_or(i32::MAX),
            server_assignor: self.server_assignor.clone(),
            classic_protocols: self.classic.as_ref().map(|c| {
                c.protocols
                    .iter()
                    .map(|(name, metadata)| (name.clone(), metadata.to_vec()))
                    .collect()
            }),
        }
    }

    fn assignment_value(&self, ids: &BTreeMap<String, u128>) -> AssignmentValue {
        AssignmentValue {
            member_epoch: self.member_epoch,
            previous_member_epoch: self.previous_member_epoch,
            state: match self.state {
                MemberState::Stable => 0,
                MemberState::UnrevokedPartitions => 1,
                MemberState::UnreleasedPartitions => 2,
            },
            assigned: by_id(&self.assigned, ids),
            revoking: by_id(&self.revoking, ids),
        }
    }

    /// Whether it subscribes to `topic`.
    fn subscribes(&self, topic: &str) -> bool {
        self.subscribed_names.contains(topic)
            || self
                .compiled_regex
                .as_ref()
                .is_some_and(|r| r.is_match(topic))
    }
}

/// The consumer-protocol part of a group.
#[derive(Debug, Clone, Default)]
pub struct ConsumerGroup {
    pub group_epoch: i32,
    /// The epoch `target` was computed for.
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ConsumerMember>,
    pub target: BTreeMap<String, Partitions>,
    /// The subscribed topics' partition counts the target was computed
    /// from: a change bumps the group epoch.
    pub subscribed_topics: BTreeMap<String, i32>,
    /// Topic ids by name, for the records (which name topics by id).
    pub topic_ids: BTreeMap<String, u128>,
    /// What changed since its records were last taken.
    pub(super) dirty: Dirty,
    /// Loaded from the log: the first heartbeat takes the subscribed
    /// topics as they are, without a new epoch.
    pub(super) loaded: bool,
    /// The topics as the last call that brought them saw them (classic
    /// members' heartbeats do not).
    pub(super) last_topics: Topics,
}

/// The records a consumer-protocol group owes `__consumer_offsets`.
#[derive(Debug, Clone, Default)]
pub(super) struct Dirty {
    pub(super) epoch: bool,
    /// The whole target assignment (its epoch and every member's).
    pub(super) target: bool,
    /// Members whose metadata and current assignment changed.
    pub(super) members: BTreeSet<String>,
    /// Members gone: tombstones for their records.
    pub(super) gone: BTreeSet<String>,
}

impl Dirty {
    fn is_empty(&self) -> bool {
        !self.epoch && !self.target && self.members.is_empty() && self.gone.is_empty()
    }
}

/// A consumer-protocol group's state as ConsumerGroupDescribe names it.
pub fn group_state_name(group: &ConsumerGroup) -> &'static str {
    if group.members.is_empty() {
        "Empty"
    } else if group.assignment_epoch < group.group_epoch {
        "Assigning"
    } else if group
        .members
        .values()
        .any(|m| m.member_epoch != group.assignment_epoch || m.state != MemberState::Stable)
    {
        "Reconciling"
    } else {
        "Stable"
    }
}

fn count(partitions: &Partitions) -> usize {
    partitions.values().map(BTreeSet::len).sum()
}

fn contains(partitions: &Partitions, topic: &str, partition: i32) -> bool {
    partitions
        .get(topic)
        .is_some_and(|p| p.contains(&partition))
}

fn intersects(a: &Partitions, b: &Partitions) -> bool {
    a.iter()
        .any(|(topic, ps)| b.get(topic).is_some_and(|other| !ps.is_disjoint(other)))
}

fn is_subset(a: &Partitions, b: &Partitions) -> bool {
    a.iter()
        .all(|(topic, ps)| ps.is_empty() || b.get(topic).is_some_and(|other| ps.is_subset(other)))
}

/// Whether a member reporting `owned` has given up `revoke` and keeps
/// `kept`: it owns none of the one and all of the other. A report that
/// lacks partitions the member keeps was sent before it took its
/// assignment up (a client that has not yet run its assign callback
/// reports owning nothing): it proves no revocation, since the member
/// may still take, and then own, what is being revoked. A classic member
/// (a group migrating) is the exception: an eager one gives up everything
/// before it joins again and gets what it keeps back at SyncGroup.
fn revoked(owned: &Partitions, kept: &Partitions, revoke: &Partitions, classic: bool) -> bool {
    !intersects(owned, revoke) && (classic || is_subset(kept, owned))
}

/// `a` ∩ `b` and `a` − `b`.
fn split(a: &Partitions, b: &Partitions) -> (Partitions, Partitions) {
    let mut both = Partitions::new();
    let mut only = Partitions::new();
    for (topic, ps) in a {
        for &p in ps {
            let side = if contains(b, topic, p) {
                &mut both
            } else {
                &mut only
            };
            side.entry(topic.clone()).or_default().insert(p);
        }
    }
    (both, only)
}

fn add(into: &mut Partitions, from: &Partitions) {
    for (topic, ps) in from {
        into.entry(topic.clone()).or_default().extend(ps);
    }
}

/// The empty topics dropped, so equal sets compare equal.
fn normalized(mut partitions: Partitions) -> Partitions {
    partitions.retain(|_, ps| !ps.is_empty());
    partitions
}

/// Compiles a subscription's regular expression (Kafka's RE2/J syntax;
/// the whole topic name must match).
fn compile(regex: &str) -> Result<regex::Regex, GroupError> {
    regex::Regex::new(&format!("^(?:{regex})$")).map_err(|_| GroupError::InvalidRegularExpression)
}

impl ConsumerGroup {
    /// Topics some member subscribes to, with their partition counts.
    fn subscribed(&self, topics: &Topics) -> BTreeMap<String, i32> {
        topics
            .iter()
            .filter(|(name, _)| self.members.values().any(|m| m.subscribes(name)))
            .map(|(name, info)| (name.clone(), info.partitions))
            .collect()
    }

    /// Who owns `topic`-`partition` now (assigned or still revoking),
    /// other than `except`.
    fn held_by_other(&self, except: &str, topic: &str, partition: i32) -> bool {
        self.members.iter().any(|(id, m)| {
            id != except
                && (contains(&m.assigned, topic, partition)
                    || contains(&m.revoking, topic, partition))
        })
    }

    /// Every partition owned by two members at once: none, ever.
    pub fn double_owned(&self) -> Vec<(String, i32)> {
        let mut seen = BTreeSet::new();
        let mut twice = Vec::new();
        for member in self.members.values() {
            let mut mine = member.assigned.clone();
            add(&mut mine, &member.revoking);
            for (topic, ps) in mine {
                for p in ps {
                    if !seen.insert((topic.clone(), p)) {
                        twice.push((topic.clone(), p));
                    }
                }
            }
        }
        twice
    }

    /// Bumps the group epoch once when the group `changed` (members or
    /// subscriptions) or its subscribed topics did, and computes the
    /// target assignment for it.
    pub(super) fn refresh_target(
        &mut self,
        topics: &Topics,
        default_assignor: &str,
        changed: bool,
    ) {
        if self.last_topics != *topics {
            self.last_topics = topics.clone();
        }
        let subscribed = self.subscribed(topics);
        for name in subscribed.keys() {
            if let Some(info) = topics.get(name) {
                self.topic_ids.insert(name.clone(), info.id);
            }
        }
        if std::mem::take(&mut self.loaded) && !changed {
            self.subscribed_topics = subscribed.clone();
        }
        if changed || subscribed != self.subscribed_topics {
            self.subscribed_topics = subscribed;
            self.group_epoch += 1;
            self.dirty.epoch = true;
        }
        if self.assignment_epoch >= self.group_epoch {
            return;
        }
        // The most common choice among the members, else the default.
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(name) = m.server_assignor.as_deref() {
                *votes.entry(name).or_default() += 1;
            }
        }
        let assignor = votes
            .iter()
            .max_by_key(|(_, n)| **n)
            .map_or(default_assignor, |(name, _)| *name)
            .to_string();
        let subscriptions: BTreeMap<String, BTreeSet<String>> = self
            .members
            .iter()
            .map(|(id, m)| {
                let topics = self
                    .subscribed_topics
                    .keys()
                    .filter(|t| m.subscribes(t))
                    .cloned()
                    .collect();
                (id.clone(), topics)
            })
            .collect();
        self.target = match assignor.as_str() {
            "range" => assign_range(&subscriptions, &self.subscribed_topics),
            _ => assign_uniform(&subscriptions, &self.subscribed_topics, &self.target),
        };
        self.assignment_epoch = self.group_epoch;
        self.dirty.target = true;
    }

    /// Moves `member_id` towards its target; `owned` is what it reported.
    pub(super) fn reconcile(&mut self, member_id: &str, owned: Option<&Partitions>, now_ms: u64) {
        // Two passes at most: a confirmed revocation then the new epoch.
        for _ in 0..2 {
            let Some(member) = self.members.get(member_id) else {
                return;
            };
            match member.state {
                MemberState::UnrevokedPartitions => {
                    let classic = member.classic.is_some();
                    let released = owned.is_some_and(|owned| {
                        revoked(owned, &member.assigned, &member.revoking, classic)
                    });
                    if !released {
                        return;
                    }
                    let member = self.members.get_mut(member_id).expect("member exists");
                    member.revoking.clear();
                    member.revocation_deadline_ms = None;
                    member.state = MemberState::Stable;
                    // Same epoch as before: the next pass moves it on.
                    continue;
                }
                MemberState::Stable if member.member_epoch == self.assignment_epoch => return,
                _ => {}
            }
            let target = self.target.get(member_id).cloned().unwrap_or_default();
            let (kept, revoke) = split(&member.assigned, &target);
            // A member whose report shows it no longer owns them (a
            // classic member rejoins after revoking) moves on at once.
            let classic = member.classic.is_some();
            let released = owned.is_some_and(|owned| revoked(owned, &kept, &revoke, classic));
            if !revoke.is_empty() && !released {
                let deadline = now_ms + member.rebalance_timeout_ms;
                let member = self.members.get_mut(member_id).expect("member exists");
                member.assigned = normalized(kept);
                member.revoking = revoke;
                member.state = MemberState::UnrevokedPartitions;
                member.revocation_deadline_ms = Some(deadline);
                return;
            }
            let (_, new) = split(&target, &kept);
            let mut free = Partitions::new();
            let mut unreleased = false;
            for (topic, ps) in &new {
                for &p in ps {
                    if self.held_by_other(member_id, topic, p) {
                        unreleased = true;
                    } else {
                        free.entry(topic.clone()).or_default().insert(p);
                    }
                }
            }
            let epoch = self.assignment_epoch;
            let member = self.members.get_mut(member_id).expect("member exists");
            let mut assigned = kept;
            add(&mut assigned, &free);
            member.assigned = normalized(assigned);
            if member.member_epoch != epoch {
                member.previous_member_epoch = member.member_epoch;
                member.member_epoch = epoch;
            }
            member.state = if unreleased {
                MemberState::UnreleasedPartitions
            } else {
                MemberState::Stable
            };
            return;
        }
    }
}

/// Partitions by name as records name them: by topic id (a topic
/// without a known id is left out).
fn by_id(partitions: &Partitions, ids: &BTreeMap<String, u128>) -> ById {
    partitions
        .iter()
        .filter(|(_, ps)| !ps.is_empty())
        .filter_map(|(name, ps)| Some((*ids.get(name)?, ps.iter().copied().collect())))
        .collect()
}

/// Partitions by id resolved to names (`ids` learns each one); a topic
/// `names` does not know (deleted since) is left out.
fn by_name(
    partitions: &ById,
    names: &dyn Fn(u128) -> Option<String>,
    ids: &mut BTreeMap<String, u128>,
) -> Partitions {
    let mut out = Partitions::new();
    for (id, ps) in partitions {
        if let Some(name) = names(*id) {
            ids.insert(name.clone(), *id);
            out.entry(name).or_default().extend(ps.iter().copied());
        }
    }
    out
}

impl ConsumerGroup {
    /// DescribeGroups of a consumer-protocol group, as Kafka answers it:
    /// protocol type `consumer`, the assignor as the protocol, and each
    /// member's subscription and assignment in the consumer protocol's
    /// encoding.
    pub(super) fn describe(&self, group: &Group) -> super::messages::GroupDescription {
        use protocol::consumer_protocol::{self as wire, Assignment, Subscription};
        let assignor = self
            .members
            .values()
            .find_map(|m| m.server_assignor.clone())
            .unwrap_or_else(|| ASSIGNORS[0].to_string());
        let members = self
            .members
            .values()
            .map(|m| {
                let listed = |p: &Partitions| -> wire::TopicPartitions {
                    p.iter()
                        .map(|(t, ps)| (t.clone(), ps.iter().copied().collect()))
                        .collect()
                };
                let subscription = Subscription {
                    owned_partitions: listed(&m.assigned),
                    // Named topics, and those its regex matches now.
                    ..Subscription::to_topics(
                        self.subscribed_topics
                            .keys()
                            .filter(|t| m.subscribes(t))
                            .chain(&m.subscribed_names)
                            .collect::<BTreeSet<_>>()
                            .into_iter()
                            .cloned(),
                    )
                };
                let assignment = Assignment {
                    partitions: listed(&m.assigned),
                    user_data: None,
                };
                super::messages::MemberDescription {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: wire::encode_subscription(&subscription, 1).unwrap_or_default(),
                    assignment: wire::encode_assignment(&assignment, 0).unwrap_or_default(),
                }
            })
            .collect();
        super::messages::GroupDescription {
            group_id: group.id.clone(),
            state: group.state,
            state_name: group_state_name(self),
            protocol_type: "consumer".to_string(),
            protocol_name: assignor,
            generation_id: self.group_epoch,
            members,
        }
    }
}

/// A record for `__consumer_offsets`: key and value (`None`: tombstone).
pub type ConsumerRecord = (Vec<u8>, Option<Vec<u8>>);

impl ConsumerGroup {
    /// Whether records are owed.
    pub(super) fn is_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    fn member_records(&self, group_id: &str, member: &ConsumerMember) -> [ConsumerRecord; 2] {
        let member_id = member.member_id.clone();
        [
            (
                ConsumerKey::Member {
                    group_id: group_id.to_string(),
                    member_id: member_id.clone(),
                }
                .encode(),
                Some(records::member_value(&member.member_value())),
            ),
            (
                ConsumerKey::CurrentAssignment {
                    group_id: group_id.to_string(),
                    member_id,
                }
                .encode(),
                Some(records::assignment_value(
                    &member.assignment_value(&self.topic_ids),
                )),
            ),
        ]
    }

    fn target_records(&self, group_id: &str) -> Vec<ConsumerRecord> {
        let mut out: Vec<ConsumerRecord> = self
            .target
            .iter()
            .map(|(member_id, partitions)| {
                (
                    ConsumerKey::TargetMember {
                        group_id: group_id.to_string(),
                        member_id: member_id.clone(),
                    }
                    .encode(),
                    Some(records::target_member_value(&by_id(
                        partitions,
                        &self.topic_ids,
                    ))),
                )
            })
            .collect();
        out.push((
            ConsumerKey::Target {
                group_id: group_id.to_string(),
            }
            .encode(),
            Some(records::target_value(self.assignment_epoch)),
        ));
        out
    }

    fn group_record(&self, group_id: &str) -> ConsumerRecord {
        (
            ConsumerKey::Group {
                group_id: group_id.to_string(),
            }
            .encode(),
            Some(records::group_value(self.group_epoch)),
        )
    }

    /// The records owed since the last call, in Kafka's order: members'
    /// records, then the target assignment, then the group epoch (a
    /// member gone: tombstones for its three records).
    pub(super) fn take_records(&mut self, group_id: &str) -> Vec<ConsumerRecord> {
        let dirty = std::mem::take(&mut self.dirty);
        let mut out = Vec::new();
        for member_id in &dirty.gone {
            for key in [
                ConsumerKey::CurrentAssignment {
                    group_id: group_id.to_string(),
                    member_id: member_id.clone(),
                },
                ConsumerKey::TargetMember {
                    group_id: group_id.to_string(),
                    member_id: member_id.clone(),
                },
                ConsumerKey::Member {
                    group_id: group_id.to_string(),
                    member_id: member_id.clone(),
                },
            ] {
                out.push((key.encode(), None));
            }
        }
        for member_id in &dirty.members {
            if let Some(member) = self.members.get(member_id) {
                out.extend(self.member_records(group_id, member));
            }
        }
        if dirty.target {
            out.extend(self.target_records(group_id));
        }
        if dirty.epoch {
            out.push(self.group_record(group_id));
        }
        out
    }

    /// Every live record of the group (a compaction's snapshot).
    pub fn records(&self, group_id: &str) -> Vec<ConsumerRecord> {
        let mut out: Vec<ConsumerRecord> = self
            .members
            .values()
            .flat_map(|m| self.member_records(group_id, m))
            .collect();
        out.extend(self.target_records(group_id));
        out.push(self.group_record(group_id));
        out
    }

    /// Tombstones for the group's own records, once it is gone.
    pub(super) fn tombstones(group_id: &str) -> Vec<ConsumerRecord> {
        [
            ConsumerKey::Target {
                group_id: group_id.to_string(),
            },
            ConsumerKey::Group {
                group_id: group_id.to_string(),
            },
        ]
        .into_iter()
        .map(|key| (key.encode(), None))
        .collect()
    }

    /// Replays one record loaded from `__consumer_offsets`; `names`
    /// resolves topic ids. A loaded member's session starts at `now_ms`.
    pub(super) fn load(
        &mut self,
        key: &ConsumerKey,
        value: Option<&[u8]>,
        names: &dyn Fn(u128) -> Option<String>,
        now_ms: u64,
        session_ms: u64,
    ) -> bool {
        let session_deadline_ms = now_ms + session_ms;
        self.loaded = true;
        let blank = |member_id: &str| ConsumerMember {
            session_deadline_ms,
            ..ConsumerMember::new(member_id, None)
        };
        match (key, value) {
            (ConsumerKey::PartitionMetadata { .. }, _) => true,
            (ConsumerKey::Group { .. }, Some(bytes)) => match records::parse_epoch(bytes) {
                Some(epoch) => {
                    self.group_epoch = epoch;
                    true
                }
                None => false,
            },
            (ConsumerKey::Target { .. }, Some(bytes)) => match records::parse_epoch(bytes) {
                Some(epoch) => {
                    self.assignment_epoch = epoch;
                    true
                }
                None => false,
            },
            (ConsumerKey::Group { .. } | ConsumerKey::Target { .. }, None) => true,
            (ConsumerKey::Member { member_id, .. }, None) => {
                self.members.remove(member_id);
                self.target.remove(member_id);
                true
            }
            (ConsumerKey::Member { member_id, .. }, Some(bytes)) => {
                let Some(value) = records::parse_member(bytes) else {
                    return false;
                };
                let member = self
                    .members
                    .entry(member_id.clone())
                    .or_insert_with(|| blank(member_id));
                member.instance_id = value.instance_id;
                member.rack_id = value.rack_id;
                member.client_id = value.client_id;
                member.client_host = value.client_host;
                member.subscribed_names = value.subscribed_topic_names.into_iter().collect();
                member.compiled_regex = value
                    .subscribed_topic_regex
                    .as_deref()
                    .and_then(|r| compile(r).ok());
                member.subscribed_regex = value.subscribed_topic_regex;
                member.rebalance_timeout_ms = value.rebalance_timeout_ms.max(0) as u64;
                member.server_assignor = value.server_assignor;
                // A loaded classic member's session is the broker's
                // (the record keeps its protocols, not its timeout).
                member.classic = value.classic_protocols.map(|protocols| ClassicMember {
                    protocols: protocols
                        .into_iter()
                        .map(|(name, metadata)| (name, bytes::Bytes::from(metadata)))
                        .collect(),
                    session_timeout_ms: session_ms,
                });
                true
            }
            (ConsumerKey::TargetMember { member_id, .. }, None) => {
                self.target.remove(member_id);
                true
            }
            (ConsumerKey::TargetMember { member_id, .. }, Some(bytes)) => {
                match records::parse_target_member(bytes) {
                    Some(partitions) => {
                        let partitions = by_name(&partitions, names, &mut self.topic_ids);
                        self.target.insert(member_id.clone(), partitions);
                        true
                    }
                    None => false,
                }
            }
            (ConsumerKey::CurrentAssignment { member_id, .. }, None) => {
                if let Some(member) = self.members.get_mut(member_id) {
                    member.assigned.clear();
                    member.revoking.clear();
                }
                true
            }
            (ConsumerKey::CurrentAssignment { member_id, .. }, Some(bytes)) => {
                let Some(value) = records::parse_assignment(bytes) else {
                    return false;
                };
                let member = self
                    .members
                    .entry(member_id.clone())
                    .or_insert_with(|| blank(member_id));
                member.member_epoch = value.member_epoch;
                member.previous_member_epoch = value.previous_member_epoch;
                member.state = match value.state {
                    1 => MemberState::UnrevokedPartitions,
                    2 => MemberState::UnreleasedPartitions,
                    _ => MemberState::Stable,
                };
                member.assigned = by_name(&value.assigned, names, &mut self.topic_ids);
                member.revoking = by_name(&value.revoking, names, &mut self.topic_ids);
                member.revocation_deadline_ms = (member.state == MemberState::UnrevokedPartitions)
                    .then_some(session_deadline_ms);
                true
            }
        }
    }
}

/// `uniform`: every member gets as many partitions as another, within
/// one, among the topics it subscribes to; a partition stays with its
/// member from the previous target when balance allows (sticky).
pub fn assign_uniform(
    subscriptions: &BTreeMap<String, BTreeSet<String>>,
    topics: &BTreeMap<String, i32>,
    previous: &BTreeMap<String, Partitions>,
) -> BTreeMap<String, Partitions> {
    let mut owner: BTreeMap<(String, i32), String> = BTreeMap::new();
    let mut counts: BTreeMap<&str, usize> =
        subscriptions.keys().map(|m| (m.as_str(), 0usize)).collect();
    let candidates = |topic: &str| -> Vec<&str> {
        subscriptions
            .iter()
            .filter(|(_, subscribed)| subscribed.contains(topic))
            .map(|(m, _)| m.as_str())
            .collect()
    };
    // Sticky first: each partition with its previous member, up to the
    // fair share of that member's topics.
    let total: usize = topics.values().map(|&n| n.max(0) as usize).sum();
    let share = total.div_ceil(subscriptions.len().max(1));
    for (member, partitions) in previous {
        let Some(subscribed) = subscriptions.get(member) else {
            continue;
        };
        for (topic, ps) in partitions {
            let Some(&n) = topics.get(topic) else {
                continue;
            };
            if !subscribed.contains(topic) {
                continue;
            }
            for &p in ps {
                let count = counts.get_mut(member.as_str()).expect("member counted");
                if p < n && *count < share {
                    owner.insert((topic.clone(), p), member.clone());
                    *count += 1;
                }
            }
        }
    }
    // The rest to the least loaded candidate.
    for (topic, &n) in topics {
        let members = candidates(topic);
        if members.is_empty() {
            continue;
        }
        for p in 0..n {
            let key = (topic.clone(), p);
            if owner.contains_key(&key) {
                continue;
            }
            let least = members
                .iter()
                .min_by_key(|m| (counts[**m], **m))
                .expect("candidates");
            *counts.get_mut(*least).expect("member counted") += 1;
            owner.insert(key, least.to_string());
        }
    }
    // Balance: a partition moves from a member with two more than the
    // least loaded member that could take it. Bounded by the partitions.
    for _ in 0..total {
        let mut moved = false;
        let keys: Vec<(String, i32)> = owner.keys().cloned().collect();
        for key in keys {
            let from = owner[&key].clone();
            let members = candidates(&key.0);
            let least = members
                .iter()
                .min_by_key(|m| (counts[**m], **m))
                .expect("candidates");
            if counts[from.as_str()] > counts[*least] + 1 {
                *counts.get_mut(from.as_str()).expect("member counted") -= 1;
                *counts.get_mut(*least).expect("member counted") += 1;
                owner.insert(key, least.to_string());
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    let mut out: BTreeMap<String, Partitions> = subscriptions
        .keys()
        .map(|m| (m.clone(), Partitions::new()))
        .collect();
    for ((topic, p), member) in owner {
        out.get_mut(&member)
            .expect("member listed")
            .entry(topic)
            .or_default()
            .insert(p);
    }
    out
}

/// `range`: each topic's partitions in contiguous ranges over the members
/// subscribing to it, in member id order; the first members get one more
/// when they do not divide evenly.
pub fn assign_range(
    subscriptions: &BTreeMap<String, BTreeSet<String>>,
    topics: &BTreeMap<String, i32>,
) -> BTreeMap<String, Partitions> {
    let mut out: BTreeMap<String, Partitions> = subscriptions
        .keys()
        .map(|m| (m.clone(), Partitions::new()))
        .collect();
    for (topic, &n) in topics {
        let members: Vec<&String> = subscriptions
            .iter()
            .filter(|(_, s)| s.contains(topic))
            .map(|(m, _)| m)
            .collect();
        if members.is_empty() || n <= 0 {
            continue;
        }
        let n = n as usize;
        let each = n / members.len();
        let extra = n % members.len();
        let mut next = 0usize;
        for (i, member) in members.iter().enumerate() {
            let take = each + usize::from(i < extra);
            let ps = out
                .get_mut(*member)
                .expect("member listed")
                .entry(topic.clone())
                .or_default();
            for p in next..next + take {
                ps.insert(p as i32);
            }
            next += take;
        }
    }
    out
}

impl Coordinator {
    /// ConsumerGroupHeartbeat. `topics` is every topic the metadata has.
    pub fn consumer_heartbeat(
        &mut self,
        now_ms: u64,
        request: ConsumerHeartbeat,
        topics: &Topics,
    ) -> Result<ConsumerHeartbeatAnswer, GroupError> {
        Self::check_group_id(&request.group_id)?;
        let config = self.config.consumer.clone();
        if request.member_id.is_empty()
            || too_long(&request.member_id)
            || request.instance_id.as_deref().is_some_and(too_long)
            || request.rack_id.as_deref().is_some_and(too_long)
            || request
                .subscribed_topic_regex
                .as_deref()
                .is_some_and(too_long)
            || request
                .subscribed_topic_names
                .as_ref()
                .is_some_and(|names| {
                    names.len() > GROUP_MEMBERS_MAX * 10 || names.iter().any(|n| too_long(n))
                })
        {
            return Err(GroupError::InvalidRequest);
        }
        if request.member_epoch < -2 {
            return Err(GroupError::InvalidRequest);
        }
        if request.member_epoch == 0 {
            // A join says what it subscribes to and how long it may take.
            if request.rebalance_timeout_ms < 0
                || (request.subscribed_topic_names.is_none()
                    && request.subscribed_topic_regex.is_none())
                || request.owned.as_ref().is_some_and(|o| count(o) > 0)
            {
                return Err(GroupError::InvalidRequest);
            }
        }
        if request.member_epoch == -2 && request.instance_id.is_none() {
            return Err(GroupError::InvalidRequest);
        }
        if let Some(assignor) = &request.server_assignor {
            if !config.assignors.iter().any(|a| a == assignor) {
                return Err(GroupError::UnsupportedAssignor);
            }
        }
        let regex = match request.subscribed_topic_regex.as_deref() {
            Some("") | None => None,
            Some(text) => Some(compile(text)?),
        };
        match self.groups.get(&request.group_id) {
            None => {
                if request.member_epoch != 0 {
                    return Err(GroupError::UnknownMemberId);
                }
                self.add_group(&request.group_id)?;
            }
            Some(group) if group.consumer.is_none() => {
                // A classic group converts once it has no members, or
                // while it has some if the policy allows it (its members
                // stay, speaking the classic protocol).
                let empty = group.state == GroupState::Empty && group.pending.is_empty();
                if !empty {
                    if request.member_epoch != 0
                        || !config.migration_policy.upgrades()
                        || !group.upgradable()
                    {
                        return Err(GroupError::GroupIdNotFound);
                    }
                    let group = self.groups.get_mut(&request.group_id).expect("group");
                    group.upgrade(now_ms);
                }
            }
            Some(_) => {}
        }
        let default_assignor = config
            .assignors
            .first()
            .cloned()
            .unwrap_or_else(|| ASSIGNORS[0].to_string());
        let group_id = request.group_id.clone();
        let leaving = request.member_epoch == -1;
        let answer = self
            .with_group(&group_id, |group| {
                let answer = heartbeat(
                    group,
                    &config,
                    &default_assignor,
                    now_ms,
                    request,
                    regex,
                    topics,
                );
                group.settle_consumer(now_ms);
                answer
            })
            .expect("group exists");
        if leaving {
            // No classic member is parked in a consumer-protocol group.
            self.maybe_downgrade(&group_id, now_ms, &mut Vec::new());
        }
        answer
    }

    /// ConsumerGroupDescribe for one group (`None`: no such group, or not
    /// a consumer-protocol group).
    pub fn consumer_group(&self, group_id: &str) -> Option<&ConsumerGroup> {
        self.groups.get(group_id)?.consumer.as_deref()
    }

    /// Consumer-protocol members whose session or revocation time ran
    /// out leave their groups.
    pub(super) fn tick_consumer_groups(&mut self, now_ms: u64) {
        let ids: Vec<String> = self
            .groups
            .values()
            .filter(|g| g.consumer.as_ref().is_some_and(|c| !c.members.is_empty()))
            .map(|g| g.id.clone())
            .collect();
        for id in ids {
            self.with_group(&id, |group| {
                let consumer = group.consumer.as_mut().expect("consumer group");
                let expired: Vec<String> = consumer
                    .members
                    .values()
                    .filter(|m| {
                        m.session_deadline_ms <= now_ms
                            || m.revocation_deadline_ms.is_some_and(|d| d <= now_ms)
                    })
                    .map(|m| m.member_id.clone())
                    .collect();
                for member_id in expired {
                    remove_member(consumer, &member_id);
                }
                group.settle_consumer(now_ms);
            });
            self.maybe_downgrade(&id, now_ms, &mut Vec::new());
        }
    }
}

/// A member leaves: its partitions are free at once.
pub(super) fn remove_member(group: &mut ConsumerGroup, member_id: &str) {
    if group.members.remove(member_id).is_some() {
        group.target.remove(member_id);
        group.group_epoch += 1;
        group.dirty.epoch = true;
        group.dirty.members.remove(member_id);
        group.dirty.gone.insert(member_id.to_string());
    }
}

fn heartbeat(
    group: &mut Group,
    config: &crate::config::ConsumerGroupConfig,
    default_assignor: &str,
    now_ms: u64,
    request: ConsumerHeartbeat,
    regex: Option<regex::Regex>,
    topics: &Topics,
) -> Result<ConsumerHeartbeatAnswer, GroupError> {
    if group.consumer.is_none() {
        group.protocol_type = Some("consumer".to_string());
        group.protocol_name = None;
        group.consumer = Some(Box::default());
    }
    let consumer = group.consumer.as_mut().expect("consumer group");
    let member_id = request.member_id.clone();
    let heartbeat_interval_ms = request
        .heartbeat_interval_ms
        .unwrap_or(config.heartbeat_interval_ms);
    let heartbeat_interval_ms = i32::try_from(heartbeat_interval_ms).unwrap_or(i32::MAX);
    let session_timeout_ms = request
        .session_timeout_ms
        .unwrap_or(config.session_timeout_ms);
    let mut joined = false;
    match request.member_epoch {
        -1 | -2 => {
            let Some(member) = consumer.members.get_mut(&member_id) else {
                return Err(GroupError::UnknownMemberId);
            };
            if request.member_epoch == -2 {
                // A static member restarting: its partitions wait for it.
                member.away = true;
            } else {
                remove_member(consumer, &member_id);
            }
            return Ok(ConsumerHeartbeatAnswer {
                member_id,
                member_epoch: request.member_epoch,
                heartbeat_interval_ms: 0,
                assignment: None,
            });
        }
        0 => {
            let static_away = request.instance_id.as_ref().and_then(|instance| {
                consumer
                    .members
                    .values()
                    .find(|m| m.instance_id.as_ref() == Some(instance) && m.member_id != member_id)
                    .map(|m| (m.member_id.clone(), m.away))
            });
            match static_away {
                Some((_, false)) => return Err(GroupError::UnreleasedInstanceId),
                Some((old_id, true)) => {
                    // The instance is back under a new member id: it takes
                    // its place, epoch and partitions, without a rebalance.
                    let mut member = consumer.members.remove(&old_id).expect("member");
                    if let Some(target) = consumer.target.remove(&old_id) {
                        consumer.target.insert(member_id.clone(), target);
                    }
                    consumer.dirty.gone.insert(old_id.clone());
                    consumer.dirty.target = true;
                    member.member_id = member_id.clone();
                    member.away = false;
                    consumer.members.insert(member_id.clone(), member);
                }
                None => {
                    if consumer.members.contains_key(&member_id) {
                        // Rejoining after being fenced: a fresh start.
                        remove_member(consumer, &member_id);
                    }
                    if consumer.members.len() >= config.max_size {
                        return Err(GroupError::GroupMaxSizeReached);
                    }
                    consumer.members.insert(
                        member_id.clone(),
                        ConsumerMember::new(&member_id, request.instance_id.clone()),
                    );
                    joined = true;
                }
            }
        }
        epoch => {
            let Some(member) = consumer.members.get(&member_id) else {
                return Err(GroupError::UnknownMemberId);
            };
            // An answer may have been lost: the epoch before is accepted
            // while the member owns nothing it was not given.
            let tolerated = epoch == member.previous_member_epoch
                && request
                    .owned
                    .as_ref()
                    .is_some_and(|owned| is_subset(owned, &member.assigned));
            if epoch != member.member_epoch && !tolerated {
                return Err(GroupError::FencedMemberEpoch);
            }
        }
    }
    let member = consumer.members.get_mut(&member_id).expect("member exists");
    let before = (member.member_epoch, member.assigned.clone());
    let recorded_before = member.recorded();
    member.client_id = request.client_id;
    member.client_host = request.client_host;
    member.session_deadline_ms = now_ms + session_timeout_ms;
    if request.rebalance_timeout_ms >= 0 {
        member.rebalance_timeout_ms = request.rebalance_timeout_ms as u64;
    }
    if request.rack_id.is_some() {
        member.rack_id = request.rack_id;
    }
    let mut changed = joined;
    if let Some(names) = request.subscribed_topic_names {
        let names: BTreeSet<String> = names.into_iter().collect();
        changed |= names != member.subscribed_names;
        member.subscribed_names = names;
    }
    if let Some(text) = request.subscribed_topic_regex {
        let text = (!text.is_empty()).then_some(text);
        changed |= text != member.subscribed_regex;
        member.subscribed_regex = text;
        member.compiled_regex = regex;
    }
    if request.server_assignor.is_some() && request.server_assignor != member.server_assignor {
        member.server_assignor = request.server_assignor;
        changed = true;
    }
    consumer.refresh_target(topics, default_assignor, changed);
    consumer.reconcile(&member_id, request.owned.as_ref(), now_ms);
    let member = &consumer.members[&member_id];
    if member.recorded() != recorded_before {
        consumer.dirty.gone.remove(&member_id);
        consumer.dirty.members.insert(member_id.clone());
    }
    let member = &consumer.members[&member_id];
    let after = (member.member_epoch, member.assigned.clone());
    let send = request.member_epoch == 0
        || request
            .owned
            .as_ref()
            .is_some_and(|o| normalized(o.clone()) != member.assigned)
        || request.member_epoch != member.member_epoch
        || before != after;
    Ok(ConsumerHeartbeatAnswer {
        member_id,
        member_epoch: member.member_epoch,
        heartbeat_interval_ms,
        assignment: send.then(|| member.assigned.clone()),
    })
}

impl Group {
    /// Keeps the classic view of a consumer-protocol group true: Empty
    /// without members (its offsets then expire as a classic group's do),
    /// Stable with some.
    pub(super) fn settle_consumer(&mut self, now_ms: u64) {
        let Some(consumer) = self.consumer.as_ref() else {
            return;
        };
        if consumer.members.is_empty() {
            if self.state != GroupState::Empty {
                self.state = GroupState::Empty;
                self.empty_since_ms = Some(now_ms);
            }
        } else {
            self.state = GroupState::Stable;
            self.empty_since_ms = None;
        }
        self.generation_id = consumer.group_epoch;
    }

    /// The member bytes of the consumer-protocol members.
    pub(super) fn consumer_bytes(&self) -> usize {
        self.consumer
            .as_ref()
            .map_or(0, |c| c.members.values().map(ConsumerMember::bytes).sum())
    }

    /// OffsetCommit's check for a consumer-protocol group: a member at its
    /// current epoch (an `assign()` consumer, epoch -1 without a member
    /// id, only while the group has no members).
    pub(super) fn consumer_commit_allowed(
        &self,
        member_id: &str,
        member_epoch: i32,
    ) -> Option<Result<(), GroupError>> {
        let consumer = self.consumer.as_ref()?;
        if member_epoch < 0 && member_id.is_empty() {
            return Some(if consumer.members.is_empty() {
                Ok(())
            } else {
                Err(GroupError::UnknownMemberId)
            });
        }
        let Some(member) = consumer.members.get(member_id) else {
            return Some(Err(GroupError::UnknownMemberId));
        };
        Some(if member_epoch != member.member_epoch {
            Err(GroupError::StaleMemberEpoch)
        } else {
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GroupConfig;

    fn topics(list: &[(&str, i32)]) -> Topics {
        list.iter()
            .enumerate()
            .map(|(i, (name, n))| {
                (
                    name.to_string(),
                    TopicInfo {
                        id: i as u128 + 1,
                        partitions: *n,
                    },
                )
            })
            .collect()
    }

    fn join(member: &str, names: &[&str]) -> ConsumerHeartbeat {
        ConsumerHeartbeat {
            group_id: "g".into(),
            member_id: member.into(),
            member_epoch: 0,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: Some(names.iter().map(|n| n.to_string()).collect()),
            owned: Some(Partitions::new()),
            ..Default::default()
        }
    }

    fn beat(member: &str, epoch: i32, owned: &Partitions) -> ConsumerHeartbeat {
        ConsumerHeartbeat {
            group_id: "g".into(),
            member_id: member.into(),
            member_epoch: epoch,
            rebalance_timeout_ms: -1,
            owned: Some(owned.clone()),
            ..Default::default()
        }
    }

    /// A client that does what it is told: owns what each answer
    /// assigns, reporting it in its next heartbeat.
    struct Client {
        id: String,
        epoch: i32,
        owned: Partitions,
    }

    fn coordinator() -> Coordinator {
        Coordinator::new(GroupConfig::default(), 7)
    }

    fn run(c: &mut Coordinator, clients: &mut [Client], topics: &Topics, now: u64) {
        for client in clients.iter_mut() {
            let answer = c
                .consumer_heartbeat(now, beat(&client.id, client.epoch, &client.owned), topics)
                .unwrap();
            client.epoch = answer.member_epoch;
            if let Some(assignment) = answer.assignment {
                client.owned = assignment;
            }
            let group = c.consumer_group("g").unwrap();
            assert!(group.double_owned().is_empty(), "{group:?}");
        }
    }

    fn owned_total(clients: &[Client]) -> usize {
        clients.iter().map(|c| count(&c.owned)).sum()
    }

    #[test]
    fn members_converge_on_a_balanced_assignment_and_no_partition_has_two_owners() {
        let topics = topics(&[("t", 6)]);
        let mut c = coordinator();
        let mut clients = Vec::new();
        for (i, id) in ["a", "b", "c"].iter().enumerate() {
            let answer = c
                .consumer_heartbeat(i as u64, join(id, &["t"]), &topics)
                .unwrap();
            clients.push(Client {
                id: id.to_string(),
                epoch: answer.member_epoch,
                owned: answer.assignment.unwrap_or_default(),
            });
            assert!(c.consumer_group("g").unwrap().double_owned().is_empty());
        }
        for round in 0..5 {
            run(&mut c, &mut clients, &topics, 10 + round);
        }
        assert_eq!(owned_total(&clients), 6);
        for client in &clients {
            assert_eq!(count(&client.owned), 2, "{}", client.id);
        }
        let group = c.consumer_group("g").unwrap();
        assert_eq!(group_state_name(group), "Stable");
        // One leaves: the others take its partitions.
        let leave = ConsumerHeartbeat {
            member_epoch: -1,
            ..beat("b", clients[1].epoch, &clients[1].owned)
        };
        assert_eq!(
            c.consumer_heartbeat(20, leave, &topics)
                .unwrap()
                .member_epoch,
            -1
        );
        let mut rest: Vec<Client> = clients.into_iter().filter(|c| c.id != "b").collect();
        for round in 0..4 {
            run(&mut c, &mut rest, &topics, 30 + round);
        }
        assert_eq!(owned_total(&rest), 6);
        assert!(rest.iter().all(|c| count(&c.owned) == 3));
    }

    #[test]
    fn a_partition_moves_only_after_its_owner_revoked_it() {
        let topics = topics(&[("t", 2)]);
        let mut c = coordinator();
        let a = c.consumer_heartbeat(0, join("a", &["t"]), &topics).unwrap();
        assert_eq!(count(a.assignment.as_ref().unwrap()), 2);
        let a_owned = a.assignment.unwrap();
        let b = c.consumer_heartbeat(1, join("b", &["t"]), &topics).unwrap();
        // b's partition is still a's: b gets the new epoch and nothing yet.
        assert_eq!(b.assignment, Some(Partitions::new()));
        // a is told to give one up, keeping its epoch.
        let a2 = c
            .consumer_heartbeat(2, beat("a", a.member_epoch, &a_owned), &topics)
            .unwrap();
        assert_eq!(a2.member_epoch, a.member_epoch);
        let kept = a2.assignment.unwrap();
        assert_eq!(count(&kept), 1);
        // b still waits while a has not confirmed.
        let b2 = c
            .consumer_heartbeat(3, beat("b", b.member_epoch, &Partitions::new()), &topics)
            .unwrap();
        assert!(b2.assignment.is_none_or(|p| count(&p) == 0));
        // a confirms; then b gets it.
        let a3 = c
            .consumer_heartbeat(4, beat("a", a2.member_epoch, &kept), &topics)
            .unwrap();
        assert_eq!(a3.member_epoch, b.member_epoch);
        let b3 = c
            .consumer_heartbeat(5, beat("b", b.member_epoch, &Partitions::new()), &topics)
            .unwrap();
        assert_eq!(count(&b3.assignment.unwrap()), 1);
    }

    /// A member's report sent before it took its assignment up (it owns
    /// nothing yet) proves no revocation: its partitions move only once
    /// it reports keeping what it keeps and owning none of the others.
    #[test]
    fn a_report_from_before_the_assignment_was_taken_up_moves_nothing() {
        let topics = topics(&[("t", 2)]);
        let mut c = coordinator();
        let a = c.consumer_heartbeat(0, join("a", &["t"]), &topics).unwrap();
        assert_eq!(count(a.assignment.as_ref().unwrap()), 2);
        let b = c.consumer_heartbeat(1, join("b", &["t"]), &topics).unwrap();
        // a, not yet through its assign callback, still reports nothing.
        let a2 = c
            .consumer_heartbeat(2, beat("a", a.member_epoch, &Partitions::new()), &topics)
            .unwrap();
        assert_eq!(a2.member_epoch, a.member_epoch, "a must revoke first");
        let kept = a2.assignment.unwrap();
        assert_eq!(count(&kept), 1);
        let b2 = c
            .consumer_heartbeat(3, beat("b", b.member_epoch, &Partitions::new()), &topics)
            .unwrap();
        assert!(
            b2.assignment.as_ref().is_none_or(|p| count(p) == 0),
            "{b2:?}"
        );
        assert!(c.consumer_group("g").unwrap().double_owned().is_empty());
        // a took both up, then gave one back: now b gets it.
        c.consumer_heartbeat(4, beat("a", a.member_epoch, &kept), &topics)
            .unwrap();
        let b3 = c
            .consumer_heartbeat(5, beat("b", b.member_epoch, &Partitions::new()), &topics)
            .unwrap();
        assert_eq!(count(&b3.assignment.unwrap()), 1);
    }

    #[test]
    fn stale_epochs_are_fenced_and_unknown_members_rejoin() {
        let topics = topics(&[("t", 1)]);
        let mut c = coordinator();
        let a = c.consumer_heartbeat(0, join("a", &["t"]), &topics).unwrap();
        let err = c
            .consumer_heartbeat(
                1,
                beat("a", a.member_epoch + 5, &Partitions::new()),
                &topics,
            )
            .unwrap_err();
        assert_eq!(err, GroupError::FencedMemberEpoch);
        let err = c
            .consumer_heartbeat(1, beat("zz", 3, &Partitions::new()), &topics)
            .unwrap_err();
        assert_eq!(err, GroupError::UnknownMemberId);
        let mut bad = join("b", &["t"]);
        bad.server_assignor = Some("sticky".into());
        assert_eq!(
            c.consumer_heartbeat(1, bad, &topics).unwrap_err(),
            GroupError::UnsupportedAssignor
        );
        let mut bad = join("b", &[]);
        bad.subscribed_topic_names = None;
        bad.subscribed_topic_regex = Some("(".into());
        assert_eq!(
            c.consumer_heartbeat(1, bad, &topics).unwrap_err(),
            GroupError::InvalidRegularExpression
        );
    }

    #[test]
    fn a_session_timeout_frees_the_partitions_and_a_regex_finds_new_topics() {
        let mut all = topics(&[("orders-1", 2)]);
        let mut c = coordinator();
        let mut request = join("a", &[]);
        request.subscribed_topic_names = None;
        request.subscribed_topic_regex = Some("orders-.*".into());
        let a = c.consumer_heartbeat(0, request, &all).unwrap();
        assert_eq!(count(a.assignment.as_ref().unwrap()), 2);
        all.insert(
            "orders-2".into(),
            TopicInfo {
                id: 9,
                partitions: 3,
            },
        );
        all.insert(
            "other".into(),
            TopicInfo {
                id: 10,
                partitions: 3,
            },
        );
        let a2 = c
            .consumer_heartbeat(10, beat("a", a.member_epoch, &a.assignment.unwrap()), &all)
            .unwrap();
        let owned = a2.assignment.unwrap();
        assert_eq!(count(&owned), 5);
        assert!(!owned.contains_key("other"));
        // Silent past the session timeout: it is gone.
        c.tick_consumer_groups(10 + GroupConfig::default().consumer.session_timeout_ms);
        // Gone with it: the group had nothing else to keep.
        assert!(c.consumer_group("g").is_none_or(|g| g.members.is_empty()));
    }

    #[test]
    fn a_static_member_back_under_a_new_id_keeps_its_partitions_and_the_epoch() {
        let topics = topics(&[("t", 4)]);
        let mut c = coordinator();
        let mut first = join("a", &["t"]);
        first.instance_id = Some("i-1".into());
        let a = c.consumer_heartbeat(0, first, &topics).unwrap();
        let epoch = c.consumer_group("g").unwrap().group_epoch;
        let mut away = beat("a", a.member_epoch, &a.assignment.clone().unwrap());
        away.member_epoch = -2;
        away.instance_id = Some("i-1".into());
        c.consumer_heartbeat(1, away, &topics).unwrap();
        let mut back = join("a2", &["t"]);
        back.instance_id = Some("i-1".into());
        let a2 = c.consumer_heartbeat(2, back, &topics).unwrap();
        assert_eq!(a2.assignment, a.assignment);
        assert_eq!(c.consumer_group("g").unwrap().group_epoch, epoch);
        // A second live member with the same instance id is refused.
        let mut clash = join("a3", &["t"]);
        clash.instance_id = Some("i-1".into());
        assert_eq!(
            c.consumer_heartbeat(3, clash, &topics).unwrap_err(),
            GroupError::UnreleasedInstanceId
        );
    }

    /// Every record the coordinator owes, as the manager writes them.
    fn written(c: &mut Coordinator) -> Vec<ConsumerRecord> {
        c.take_consumer_records(|_| true)
    }

    #[test]
    fn a_new_coordinator_replaying_the_records_keeps_members_epochs_and_assignments() {
        let topics = topics(&[("t", 4)]);
        let names = |id: u128| {
            topics
                .iter()
                .find(|(_, i)| i.id == id)
                .map(|(n, _)| n.clone())
        };
        let mut c = coordinator();
        let mut log: Vec<ConsumerRecord> = Vec::new();
        let mut clients = Vec::new();
        for id in ["a", "b"] {
            let answer = c.consumer_heartbeat(0, join(id, &["t"]), &topics).unwrap();
            log.extend(written(&mut c));
            clients.push(Client {
                id: id.to_string(),
                epoch: answer.member_epoch,
                owned: answer.assignment.unwrap_or_default(),
            });
        }
        for round in 0..4 {
            run(&mut c, &mut clients, &topics, 10 + round);
            log.extend(written(&mut c));
        }
        assert!(clients.iter().all(|c| count(&c.owned) == 2));
        // A third member joins; a is told to give up a partition, and the
        // coordinator moves before a confirms.
        let answer = c
            .consumer_heartbeat(20, join("c", &["t"]), &topics)
            .unwrap();
        log.extend(written(&mut c));
        clients.push(Client {
            id: "c".into(),
            epoch: answer.member_epoch,
            owned: answer.assignment.unwrap_or_default(),
        });
        run(&mut c, &mut clients[..1], &topics, 21);
        log.extend(written(&mut c));
        let mut moved = coordinator();
        for (key, value) in &log {
            let replayed =
                crate::load::replay_with_topics(&mut moved, key, value.as_deref(), 30, &names);
            assert_eq!(replayed, crate::load::Replayed::GroupMetadata);
        }
        let before = c.consumer_group("g").unwrap();
        let after = moved.consumer_group("g").unwrap();
        assert_eq!(after.group_epoch, before.group_epoch);
        assert_eq!(after.assignment_epoch, before.assignment_epoch);
        assert_eq!(after.target, before.target);
        for (id, m) in &before.members {
            let loaded = &after.members[id];
            assert_eq!(
                (
                    loaded.member_epoch,
                    loaded.state,
                    &loaded.assigned,
                    &loaded.revoking
                ),
                (m.member_epoch, m.state, &m.assigned, &m.revoking),
                "{id}"
            );
        }
        // The members carry on with the new coordinator, none fenced, and
        // converge with no partition owned twice.
        for round in 0..5 {
            run(&mut moved, &mut clients, &topics, 40 + round);
        }
        assert_eq!(owned_total(&clients), 4);
        // The group's epoch did not move for the failover itself.
        assert_eq!(
            moved.consumer_group("g").unwrap().group_epoch,
            before.group_epoch
        );
        // A member leaving writes tombstones: replayed, it is gone.
        let leave = ConsumerHeartbeat {
            member_epoch: -1,
            ..beat("c", clients[2].epoch, &clients[2].owned)
        };
        moved.consumer_heartbeat(60, leave, &topics).unwrap();
        let mut again = coordinator();
        for (key, value) in log.iter().chain(&written(&mut moved)) {
            crate::load::replay_with_topics(&mut again, key, value.as_deref(), 70, &names);
        }
        assert!(!again.consumer_group("g").unwrap().members.contains_key("c"));
    }

    #[test]
    fn range_gives_contiguous_ranges_and_uniform_stays_sticky() {
        let subs: BTreeMap<String, BTreeSet<String>> = ["a", "b"]
            .iter()
            .map(|m| (m.to_string(), ["t".to_string()].into()))
            .collect();
        let topics: BTreeMap<String, i32> = [("t".to_string(), 5)].into();
        let out = assign_range(&subs, &topics);
        assert_eq!(out["a"]["t"], [0, 1, 2].into());
        assert_eq!(out["b"]["t"], [3, 4].into());
        let first = assign_uniform(&subs, &topics, &BTreeMap::new());
        let mut three = subs.clone();
        three.insert("c".into(), ["t".to_string()].into());
        let second = assign_uniform(&three, &topics, &first);
        // Nothing moves between a and b: c takes from them.
        for m in ["a", "b"] {
            assert!(second[m]["t"].is_subset(&first[m]["t"]), "{second:?}");
        }
        let counts: Vec<usize> = second.values().map(count).collect();
        assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1);
    }
}
