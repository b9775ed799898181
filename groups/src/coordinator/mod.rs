//! The classic group protocol as a plain, deterministic state machine: one
//! `Coordinator` per core holds the groups that core coordinates, their
//! members and committed offsets. No I/O and no clock of its own: every
//! call takes `now_ms`, deadlines are checked by `tick`, and a request that
//! must wait (JoinGroup until the join phase ends, SyncGroup until the
//! leader's assignment) is parked under a `WaiterId` that a later call
//! answers through its returned `Replies`. The runtime edge
//! (`group::manager`) turns those into channel sends and records.
//!
//! States follow Kafka's: Empty → PreparingRebalance → CompletingRebalance
//! → Stable, back to PreparingRebalance on any membership change, and Dead
//! when deleted.
//!
//! The files split it by concern: `config` (the broker settings it owns),
//! `messages` (what callers hand in and get back), `state` (one group and
//! its members), `membership` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup
//! and the deadlines), `offsets` (commit, fetch, delete, retention) and
//! `subscription` (decoding a consumer-protocol subscription).

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use bytes::Bytes;

use crate::error::GroupError;
use crate::limits::{GROUPS_PER_CORE_MAX, GROUP_ID_BYTES_MAX, MEMBER_NAME_BYTES_MAX};

mod consumer;
mod membership;
mod messages;
mod migration;
mod offsets;
mod state;
mod subscription;
#[cfg(test)]
pub(crate) mod tests;
mod txn_offsets;

pub use crate::config::{GroupConfig, GROUP_CONFIG_KEYS};
pub use consumer::{
    assign_range, assign_uniform, group_state_name, ConsumerGroup, ConsumerHeartbeat,
    ConsumerHeartbeatAnswer, ConsumerMember, ConsumerRecord, MemberState, Partitions, TopicInfo,
    Topics, ASSIGNORS,
};
pub use messages::*;
pub use state::Group;
pub use subscription::consumer_subscription_topics;
pub use txn_offsets::PendingTxnOffset;

/// Every group one core coordinates.
pub struct Coordinator {
    config: GroupConfig,
    groups: BTreeMap<String, Group>,
    /// Member bytes of every group (bounded by `CORE_MEMBER_BYTES_MAX`).
    member_bytes: usize,
    offsets_count: usize,
    /// Groups whose membership record (or tombstone) is to be written.
    metadata_dirty: BTreeSet<String>,
    /// Seeds member ids; a counter keeps them unique.
    id_seed: u64,
    id_counter: u64,
    /// Offsets committed inside open transactions, by producer id: they
    /// take effect when the transaction's commit marker is written.
    pending_txn_offsets: BTreeMap<i64, Vec<PendingTxnOffset>>,
    /// Consumer-protocol groups whose records are to be written.
    consumer_dirty: BTreeSet<String>,
    /// Records of consumer-protocol groups that are gone (or turned
    /// classic): tombstones, by group.
    consumer_orphans: BTreeMap<String, Vec<ConsumerRecord>>,
    /// Share groups (KIP-932): their members.
    share_groups: BTreeMap<String, crate::share::ShareGroup>,
    /// Records of share groups to be written, by group, in order.
    share_pending: BTreeMap<String, Vec<crate::share::ShareGroupRecord>>,
}

fn too_long(value: &str) -> bool {
    value.len() > MEMBER_NAME_BYTES_MAX
}

impl Coordinator {
    pub fn new(config: GroupConfig, id_seed: u64) -> Self {
        Self {
            config,
            groups: BTreeMap::new(),
            member_bytes: 0,
            offsets_count: 0,
            metadata_dirty: BTreeSet::new(),
            id_seed,
            id_counter: 0,
            pending_txn_offsets: BTreeMap::new(),
            consumer_dirty: BTreeSet::new(),
            consumer_orphans: BTreeMap::new(),
            share_groups: BTreeMap::new(),
            share_pending: BTreeMap::new(),
        }
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    pub fn group(&self, group_id: &str) -> Option<&Group> {
        self.groups.get(group_id)
    }

    pub fn groups(&self) -> impl Iterator<Item = &Group> {
        self.groups.values()
    }

    pub fn member_bytes(&self) -> usize {
        self.member_bytes
    }

    pub fn offsets_count(&self) -> usize {
        self.offsets_count
    }

    fn new_member_id(&mut self, client_id: &str) -> String {
        self.id_counter += 1;
        // A UUID-shaped suffix, as Kafka's member ids have; unique per core
        // through the counter, across restarts through the seed.
        let mixed = (self.id_seed ^ self.id_counter.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let client: String = client_id.chars().take(64).collect();
        format!(
            "{client}-{:08x}-{:04x}-{:04x}-{:012x}",
            (mixed >> 32) as u32,
            (mixed >> 16) as u16,
            mixed as u16,
            self.id_counter & 0xFFFF_FFFF_FFFF
        )
    }

    /// Runs `change` on `group_id`'s group, keeping the core's byte and
    /// offset counts true, queues its membership record when the change
    /// took one, and drops the group once it is Empty with nothing
    /// committed (queueing a tombstone if a record was written).
    fn with_group<R>(&mut self, group_id: &str, change: impl FnOnce(&mut Group) -> R) -> Option<R> {
        let group = self.groups.get_mut(group_id)?;
        let bytes_before = group.member_bytes();
        let offsets_before = group.offsets.len();
        let result = change(group);
        let bytes_after = group.member_bytes();
        let offsets_after = group.offsets.len();
        self.member_bytes = self.member_bytes + bytes_after - bytes_before;
        self.offsets_count = self.offsets_count + offsets_after - offsets_before;
        if std::mem::take(&mut group.metadata_changed) {
            self.metadata_dirty.insert(group_id.to_string());
        }
        if group.consumer.as_ref().is_some_and(|c| c.is_dirty()) {
            self.consumer_dirty.insert(group_id.to_string());
        }
        if (group.state == GroupState::Empty
            && group.offsets.is_empty()
            && group.pending.is_empty())
            || group.state == GroupState::Dead
        {
            self.offsets_count -= group.offsets.len();
            self.member_bytes -= group.member_bytes();
            if group.metadata.is_some() {
                self.metadata_dirty.insert(group_id.to_string());
            }
            if let Some(mut consumer) = group.consumer.take() {
                let mut records = consumer.take_records(group_id);
                records.extend(ConsumerGroup::tombstones(group_id));
                self.consumer_orphans
                    .entry(group_id.to_string())
                    .or_default()
                    .extend(records);
                self.consumer_dirty.insert(group_id.to_string());
            }
            self.groups.remove(group_id);
        }
        Some(result)
    }

    /// The membership records queued for the groups `wanted` names, each
    /// group's latest: its record, or `None` for a tombstone (the group is
    /// gone). The caller writes them, in any order: each group has one key.
    pub fn take_metadata_changes(
        &mut self,
        wanted: impl Fn(&str) -> bool,
    ) -> Vec<(String, Option<Rc<GroupMetadata>>)> {
        let ids: Vec<String> = self
            .metadata_dirty
            .iter()
            .filter(|id| wanted(id))
            .cloned()
            .collect();
        ids.into_iter()
            .map(|id| {
                self.metadata_dirty.remove(&id);
                let metadata = self.groups.get(&id).and_then(|g| g.metadata.clone());
                (id, metadata)
            })
            .collect()
    }

    /// Whether any membership record waits to be written.
    pub fn has_metadata_changes(&self) -> bool {
        !self.metadata_dirty.is_empty()
            || !self.consumer_dirty.is_empty()
            || !self.share_pending.is_empty()
    }

    /// The groups whose membership records wait to be written.
    pub fn metadata_changes(&self) -> impl Iterator<Item = &str> {
        self.metadata_dirty
            .iter()
            .chain(&self.consumer_dirty)
            .chain(self.share_pending.keys())
            .map(String::as_str)
    }

    /// The records of share groups `wanted` names that wait to be
    /// written, in the order they were taken.
    pub fn take_share_records(
        &mut self,
        wanted: impl Fn(&str) -> bool,
    ) -> Vec<crate::share::ShareGroupRecord> {
        let ids: Vec<String> = self
            .share_pending
            .keys()
            .filter(|id| wanted(id))
            .cloned()
            .collect();
        ids.into_iter()
            .flat_map(|id| self.share_pending.remove(&id).unwrap_or_default())
            .collect()
    }

    /// A share group's record loaded from `__consumer_offsets` (`None`: a
    /// tombstone). False when its value does not decode (skipped).
    pub fn load_share_record(
        &mut self,
        key: &crate::share_group_records::ShareGroupKey,
        value: Option<&[u8]>,
        now_ms: u64,
    ) -> bool {
        use crate::share_group_records::ShareGroupKey;
        let group_id = key.group_id();
        if let (ShareGroupKey::Group { .. }, None) = (key, value) {
            self.share_groups.remove(group_id);
            return true;
        }
        if value.is_none() && !self.share_groups.contains_key(group_id) {
            return true;
        }
        let session_timeout_ms = self.config.share.session_timeout_ms;
        self.share_groups
            .entry(group_id.to_string())
            .or_default()
            .load(key, value, now_ms, session_timeout_ms)
    }

    /// The records of consumer-protocol groups `wanted` names that wait
    /// to be written (members, target assignment, epoch; tombstones of
    /// what went), in the order to write them.
    pub fn take_consumer_records(&mut self, wanted: impl Fn(&str) -> bool) -> Vec<ConsumerRecord> {
        let ids: Vec<String> = self
            .consumer_dirty
            .iter()
            .filter(|id| wanted(id))
            .cloned()
            .collect();
        let mut out = Vec::new();
        for id in ids {
            self.consumer_dirty.remove(&id);
            out.extend(self.consumer_orphans.remove(&id).unwrap_or_default());
            if let Some(consumer) = self.groups.get_mut(&id).and_then(|g| g.consumer.as_mut()) {
                out.extend(consumer.take_records(&id));
            }
        }
        out
    }

    /// A consumer-protocol group's record loaded from `__consumer_offsets`
    /// (`None`: a tombstone); `names` resolves topic ids. False when its
    /// value does not decode (skipped).
    pub fn load_consumer_record(
        &mut self,
        key: &crate::consumer_records::ConsumerKey,
        value: Option<&[u8]>,
        names: &dyn Fn(u128) -> Option<String>,
        now_ms: u64,
    ) -> bool {
        let group_id = key.group_id().to_string();
        if !self.groups.contains_key(&group_id) {
            if value.is_none() {
                return true;
            }
            self.groups.insert(group_id.clone(), Group::new(&group_id));
        }
        let session_ms = self.config.consumer.session_timeout_ms;
        self.with_group(&group_id, |group| {
            if group.consumer.is_none() {
                group.consumer = Some(Box::default());
                group.protocol_type = Some("consumer".to_string());
                group.protocol_name = None;
            }
            let consumer = group.consumer.as_mut().expect("consumer group");
            let decoded = consumer.load(key, value, names, now_ms, session_ms);
            group.settle_consumer(now_ms);
            decoded
        })
        .unwrap_or(true)
    }

    /// A membership record loaded from `__consumer_offsets` (`None`: a
    /// tombstone). No checks: the log holds only what was accepted.
    /// Queues nothing to write back.
    pub fn load_group_metadata(
        &mut self,
        group_id: &str,
        metadata: Option<GroupMetadata>,
        now_ms: u64,
    ) {
        if !self.groups.contains_key(group_id) {
            if metadata.is_none() {
                return;
            }
            self.groups
                .insert(group_id.to_string(), Group::new(group_id));
        }
        let dirty_before = self.metadata_dirty.contains(group_id);
        self.with_group(group_id, |group| group.restore(metadata, now_ms));
        if !dirty_before {
            self.metadata_dirty.remove(group_id);
        }
    }

    fn check_group_id(group_id: &str) -> Result<(), GroupError> {
        if group_id.is_empty() || group_id.len() > GROUP_ID_BYTES_MAX {
            Err(GroupError::InvalidGroupId)
        } else {
            Ok(())
        }
    }

    /// Adds an empty group for a join or commit that names a new one, unless
    /// this core already holds as many groups as it may.
    fn add_group(&mut self, group_id: &str) -> Result<(), GroupError> {
        if self.groups.len() >= GROUPS_PER_CORE_MAX {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        self.groups
            .insert(group_id.to_string(), Group::new(group_id));
        Ok(())
    }

    /// DeleteGroups for one group: only an empty group; its offsets go.
    pub fn delete_group(
        &mut self,
        group_id: &str,
        dropped: &mut Vec<DroppedOffset>,
    ) -> Result<(), GroupError> {
        Self::check_group_id(group_id)?;
        let Some(group) = self.groups.get(group_id) else {
            return Err(GroupError::GroupIdNotFound);
        };
        if group.state != GroupState::Empty {
            return Err(GroupError::NonEmptyGroup);
        }
        self.with_group(group_id, |group| {
            for (topic, partition) in group.offsets.keys() {
                dropped.push(DroppedOffset {
                    group_id: group_id.to_string(),
                    topic: topic.clone(),
                    partition: *partition,
                });
            }
            group.state = GroupState::Dead;
        });
        Ok(())
    }

    /// Drops every group `moved` names (their offsets partition is led by
    /// another broker now): their parked joins and syncs are answered
    /// with `error`, so the members look for the new coordinator.
    /// How many groups went.
    pub fn forget(
        &mut self,
        moved: impl Fn(&str) -> bool,
        error: GroupError,
        replies: &mut Replies,
    ) -> usize {
        let gone: Vec<String> = self.groups.keys().filter(|id| moved(id)).cloned().collect();
        // The new coordinator writes their records from now on.
        self.metadata_dirty.retain(|id| !moved(id));
        self.consumer_dirty.retain(|id| !moved(id));
        self.consumer_orphans.retain(|id, _| !moved(id));
        self.share_pending.retain(|id, _| !moved(id));
        self.share_groups.retain(|id, _| !moved(id));
        for group_id in &gone {
            if let Some(mut group) = self.groups.remove(group_id) {
                self.member_bytes -= group.member_bytes();
                self.offsets_count -= group.offsets.len();
                let members: Vec<String> = group.members.keys().cloned().collect();
                for member in members {
                    group.remove_member(&member, replies, error);
                }
            }
        }
        gone.len()
    }

    /// DescribeGroups for one group; an unknown one is Dead.
    pub fn describe(&self, group_id: &str) -> GroupDescription {
        let Some(group) = self.groups.get(group_id) else {
            return GroupDescription {
                group_id: group_id.to_string(),
                state: GroupState::Dead,
                state_name: GroupState::Dead.name(),
                protocol_type: String::new(),
                protocol_name: String::new(),
                generation_id: -1,
                members: Vec::new(),
            };
        };
        if let Some(consumer) = group.consumer() {
            return consumer.describe(group);
        }
        let protocol = group.protocol_name.clone().unwrap_or_default();
        // Kafka shows member metadata and assignments only when Stable.
        let stable = group.state == GroupState::Stable;
        GroupDescription {
            group_id: group_id.to_string(),
            state: group.state,
            state_name: group.state.name(),
            protocol_type: group.protocol_type().to_string(),
            protocol_name: protocol.clone(),
            generation_id: group.generation_id,
            members: group
                .members
                .values()
                .map(|m| MemberDescription {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable {
                        m.metadata_for(&protocol)
                    } else {
                        Bytes::new()
                    },
                    assignment: if stable {
                        m.assignment.clone()
                    } else {
                        Bytes::new()
                    },
                })
                .collect(),
        }
    }

    /// ShareGroupHeartbeat. `topics`: every topic's partition count.
    pub fn share_heartbeat(
        &mut self,
        now_ms: u64,
        request: crate::share::ShareHeartbeat,
        topics: &BTreeMap<String, i32>,
    ) -> Result<crate::share::ShareHeartbeatAnswer, GroupError> {
        use crate::share::ShareRefusal;
        Self::check_group_id(&request.group_id)?;
        if self
            .groups
            .get(&request.group_id)
            .is_some_and(|g| g.state != GroupState::Empty)
        {
            // The id names a consumer group with members.
            return Err(GroupError::InconsistentGroupProtocol);
        }
        if !self.share_groups.contains_key(&request.group_id) {
            if request.member_epoch != 0 {
                return Err(GroupError::UnknownMemberId);
            }
            if self.groups.len() + self.share_groups.len() >= GROUPS_PER_CORE_MAX {
                return Err(GroupError::CoordinatorNotAvailable);
            }
        }
        let config = self.config.share;
        let session_timeout_ms = request
            .session_timeout_ms
            .unwrap_or(config.session_timeout_ms);
        let group_id = request.group_id.clone();
        let member_id = request.member_id.clone();
        let created = !self.share_groups.contains_key(&group_id);
        let group = self.share_groups.entry(group_id.clone()).or_default();
        let epoch_before = group.group_epoch;
        let result = group
            .heartbeat(now_ms, request, topics, session_timeout_ms, config.max_size)
            .map_err(|refusal| match refusal {
                ShareRefusal::InvalidRequest => GroupError::InvalidRequest,
                ShareRefusal::UnknownMemberId => GroupError::UnknownMemberId,
                ShareRefusal::FencedMemberEpoch => GroupError::FencedMemberEpoch,
                ShareRefusal::GroupMaxSizeReached => GroupError::GroupMaxSizeReached,
            });
        if created && result.is_err() {
            self.share_groups.remove(&group_id);
            return result;
        }
        // A member joined, left or changed its subscription: the group's
        // epoch moved, and the records say so before the member is told.
        if group.group_epoch != epoch_before {
            let mut records = match group.members.get(&member_id) {
                Some(member) => {
                    crate::share::ShareGroup::member_records(&group_id, member).to_vec()
                }
                None => crate::share::ShareGroup::member_tombstones(&group_id, &member_id).to_vec(),
            };
            records.push(group.epoch_record(&group_id));
            self.share_pending
                .entry(group_id)
                .or_default()
                .extend(records);
        }
        result
    }

    /// Every share group of this core, by id.
    pub fn share_groups(&self) -> impl Iterator<Item = (&str, &crate::share::ShareGroup)> {
        self.share_groups.iter().map(|(id, g)| (id.as_str(), g))
    }

    /// DeleteGroups of a share group without members: it goes, and its
    /// epoch record's tombstone is queued. Whether there was one.
    pub fn delete_share_group(&mut self, group_id: &str) -> Result<bool, GroupError> {
        match self.share_groups.get(group_id) {
            None => Ok(false),
            Some(group) if !group.members.is_empty() => Err(GroupError::NonEmptyGroup),
            Some(_) => {
                self.share_groups.remove(group_id);
                let key = crate::share_group_records::ShareGroupKey::Group {
                    group_id: group_id.to_string(),
                };
                self.share_pending
                    .entry(group_id.to_string())
                    .or_default()
                    .push((key.encode(), None));
                Ok(true)
            }
        }
    }

    /// A share group, if there is one by that id.
    pub fn share_group(&self, group_id: &str) -> Option<&crate::share::ShareGroup> {
        self.share_groups.get(group_id)
    }

    /// Whether `member_id` is a member of share group `group_id`.
    pub fn is_share_member(&self, group_id: &str, member_id: &str) -> bool {
        self.share_groups
            .get(group_id)
            .is_some_and(|g| g.members.contains_key(member_id))
    }

    /// Share group members silent past their session leave; (group,
    /// member) of each.
    /// The group stays, Empty, until DeleteGroups.
    pub fn expire_share_members(&mut self, now_ms: u64) -> Vec<(String, String)> {
        let mut gone = Vec::new();
        for (id, group) in self.share_groups.iter_mut() {
            let expired = group.expire(now_ms);
            if expired.is_empty() {
                continue;
            }
            let pending = self.share_pending.entry(id.clone()).or_default();
            for member in expired {
                pending.extend(crate::share::ShareGroup::member_tombstones(id, &member));
                gone.push((id.clone(), member));
            }
            pending.push(group.epoch_record(id));
        }
        gone
    }

    /// ListGroups: each group with its protocol type, state and type.
    pub fn list(&self) -> Vec<ListedGroup> {
        self.groups
            .values()
            .map(|g| ListedGroup {
                group_id: g.id.clone(),
                protocol_type: g.protocol_type().to_string(),
                state: match g.consumer() {
                    Some(consumer) => consumer::group_state_name(consumer),
                    None => g.state.name(),
                },
                group_type: g.group_type(),
            })
            .chain(self.share_groups.iter().map(|(id, g)| ListedGroup {
                group_id: id.clone(),
                protocol_type: "share".to_string(),
                state: if g.members.is_empty() {
                    "Empty"
                } else {
                    "Stable"
                },
                group_type: "share",
            }))
            .collect()
    }
}
