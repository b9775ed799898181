//! One group and its members: membership bookkeeping, protocol
//! selection and the rebalance phases' transitions.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use bytes::Bytes;

use crate::error::GroupError;

use super::messages::*;
use super::subscription::consumer_subscription_topics;

#[derive(Debug, Clone)]
pub(super) struct Member {
    pub(super) member_id: String,
    pub(super) group_instance_id: Option<String>,
    pub(super) client_id: String,
    pub(super) client_host: String,
    pub(super) session_timeout_ms: u64,
    pub(super) rebalance_timeout_ms: u64,
    pub(super) protocols: Vec<(String, Bytes)>,
    pub(super) assignment: Bytes,
    pub(super) join_waiter: Option<WaiterId>,
    pub(super) sync_waiter: Option<WaiterId>,
    /// The generation whose SyncGroup this member sent.
    pub(super) synced_generation: i32,
    pub(super) session_deadline_ms: u64,
}

impl Member {
    pub(super) fn bytes(&self) -> usize {
        self.protocols.iter().map(|(_, m)| m.len()).sum::<usize>() + self.assignment.len()
    }

    pub(super) fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    pub(super) fn same_protocols(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }
}

#[derive(Debug, Clone)]
pub struct Group {
    pub(super) id: String,
    pub(super) state: GroupState,
    pub(super) generation_id: i32,
    pub(super) protocol_type: Option<String>,
    pub(super) protocol_name: Option<String>,
    pub(super) leader_id: Option<String>,
    pub(super) members: BTreeMap<String, Member>,
    /// group.instance.id → member id of static members.
    pub(super) instances: HashMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, until they rejoin.
    pub(super) pending: BTreeMap<String, u64>,
    /// PreparingRebalance: when the join phase ends whoever has rejoined.
    pub(super) join_deadline_ms: u64,
    /// The first rebalance of an empty group waits at least until here.
    pub(super) initial_delay_until_ms: Option<u64>,
    /// When the initial delay started (it never extends past the rebalance timeout).
    pub(super) initial_delay_started_ms: u64,
    /// CompletingRebalance: members that have not synced by then are removed.
    pub(super) sync_deadline_ms: u64,
    /// When the group last became Empty (offset retention counts from it).
    pub(super) empty_since_ms: Option<u64>,
    pub(super) offsets: BTreeMap<(String, i32), CommittedOffset>,
    /// The membership `__consumer_offsets` holds for the group (or will,
    /// once the manager writes it); `None`: no record, or a tombstone.
    pub(super) metadata: Option<Rc<GroupMetadata>>,
    /// `metadata` was taken anew and is not yet queued for writing.
    pub(super) metadata_changed: bool,
    /// A consumer-protocol group's members and assignments (KIP-848);
    /// `None` for a classic group.
    pub(super) consumer: Option<Box<super::consumer::ConsumerGroup>>,
}

impl Group {
    pub(super) fn new(id: &str) -> Self {
        Self {
            id: id.to_string(),
            state: GroupState::Empty,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader_id: None,
            members: BTreeMap::new(),
            instances: HashMap::new(),
            pending: BTreeMap::new(),
            join_deadline_ms: 0,
            initial_delay_until_ms: None,
            initial_delay_started_ms: 0,
            sync_deadline_ms: 0,
            empty_since_ms: None,
            offsets: BTreeMap::new(),
            metadata: None,
            metadata_changed: false,
            consumer: None,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn state(&self) -> GroupState {
        self.state
    }

    pub fn generation_id(&self) -> i32 {
        self.generation_id
    }

    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    pub fn protocol_type(&self) -> &str {
        self.protocol_type.as_deref().unwrap_or("")
    }

    pub fn offsets(&self) -> &BTreeMap<(String, i32), CommittedOffset> {
        &self.offsets
    }

    /// The membership record `__consumer_offsets` holds for the group.
    pub fn metadata(&self) -> Option<&Rc<GroupMetadata>> {
        self.metadata.as_ref()
    }

    pub(super) fn member_bytes(&self) -> usize {
        self.members.values().map(Member::bytes).sum::<usize>() + self.consumer_bytes()
    }

    /// "consumer" for a consumer-protocol group, else "classic".
    pub fn group_type(&self) -> &'static str {
        if self.consumer.is_some() {
            "consumer"
        } else {
            "classic"
        }
    }

    /// The consumer-protocol part, for a consumer-protocol group.
    pub fn consumer(&self) -> Option<&super::consumer::ConsumerGroup> {
        self.consumer.as_deref()
    }

    /// Takes the group's membership for `__consumer_offsets`, as Kafka
    /// stores it once a rebalance completes or the group becomes Empty:
    /// each member with its metadata for the selected protocol.
    pub(super) fn take_metadata(&mut self, now_ms: u64) {
        let protocol = self.protocol_name.clone();
        let members = self
            .members
            .values()
            .map(|m| MemberMetadata {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                rebalance_timeout_ms: i32::try_from(m.rebalance_timeout_ms).unwrap_or(i32::MAX),
                session_timeout_ms: i32::try_from(m.session_timeout_ms).unwrap_or(i32::MAX),
                subscription: protocol
                    .as_deref()
                    .map(|p| m.metadata_for(p))
                    .unwrap_or_default(),
                assignment: m.assignment.clone(),
            })
            .collect();
        self.metadata = Some(Rc::new(GroupMetadata {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation_id: self.generation_id,
            protocol_name: protocol,
            leader_id: self.leader_id.clone(),
            state_timestamp_ms: i64::try_from(now_ms).unwrap_or(i64::MAX),
            members,
        }));
        self.metadata_changed = true;
    }

    /// The group as a `__consumer_offsets` record leaves it (`None`: a
    /// tombstone), Kafka's way: Empty without members, otherwise Stable
    /// with the members, whose sessions run from `now_ms` (a member that
    /// does not heartbeat the new coordinator expires and the rest
    /// rebalance). Offsets stay.
    pub(super) fn restore(&mut self, metadata: Option<GroupMetadata>, now_ms: u64) {
        self.members.clear();
        self.instances.clear();
        self.pending.clear();
        self.initial_delay_until_ms = None;
        self.metadata_changed = false;
        let Some(metadata) = metadata else {
            *self = Self {
                offsets: std::mem::take(&mut self.offsets),
                ..Self::new(&self.id)
            };
            return;
        };
        self.generation_id = metadata.generation_id;
        self.protocol_type =
            (!metadata.protocol_type.is_empty()).then(|| metadata.protocol_type.clone());
        self.protocol_name = metadata.protocol_name.clone();
        self.leader_id = metadata.leader_id.clone();
        if let Some(protocol) = self.protocol_name.clone() {
            for m in &metadata.members {
                let session_timeout_ms = m.session_timeout_ms.max(0) as u64;
                // Records before Kafka's version 1 have no rebalance timeout.
                let rebalance_timeout_ms = if m.rebalance_timeout_ms < 0 {
                    session_timeout_ms
                } else {
                    m.rebalance_timeout_ms as u64
                };
                if let Some(instance) = &m.group_instance_id {
                    self.instances.insert(instance.clone(), m.member_id.clone());
                }
                self.members.insert(
                    m.member_id.clone(),
                    Member {
                        member_id: m.member_id.clone(),
                        group_instance_id: m.group_instance_id.clone(),
                        client_id: m.client_id.clone(),
                        client_host: m.client_host.clone(),
                        session_timeout_ms,
                        rebalance_timeout_ms,
                        protocols: vec![(protocol.clone(), m.subscription.clone())],
                        assignment: m.assignment.clone(),
                        join_waiter: None,
                        sync_waiter: None,
                        synced_generation: metadata.generation_id,
                        session_deadline_ms: now_ms + session_timeout_ms,
                    },
                );
            }
        }
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.protocol_name = None;
            self.leader_id = None;
            self.empty_since_ms = u64::try_from(metadata.state_timestamp_ms).ok();
        } else {
            self.state = GroupState::Stable;
            self.empty_since_ms = None;
            if !self
                .leader_id
                .as_ref()
                .is_some_and(|id| self.members.contains_key(id))
            {
                self.leader_id = self.members.keys().next().cloned();
            }
        }
        self.metadata = Some(Rc::new(metadata));
    }

    /// Topics the members subscribe to, when they speak the consumer
    /// protocol (its subscription lists them); `None` if not decodable.
    pub fn subscribed_topics(&self) -> Option<Vec<String>> {
        if self.protocol_type() != "consumer" {
            return None;
        }
        let protocol = self.protocol_name.as_deref()?;
        let mut topics = Vec::new();
        for member in self.members.values() {
            topics.extend(consumer_subscription_topics(
                &member.metadata_for(protocol),
            )?);
        }
        topics.sort();
        topics.dedup();
        Some(topics)
    }

    pub(super) fn is_full(&self, max_size: usize) -> bool {
        self.members.len() + self.pending.len() >= max_size
    }

    /// The protocols every member (and the candidate) supports.
    pub(super) fn common_protocols(
        &self,
        except: Option<&str>,
        candidate: Option<&[(String, Bytes)]>,
    ) -> Vec<String> {
        let mut lists: Vec<Vec<&String>> = self
            .members
            .values()
            .filter(|m| Some(m.member_id.as_str()) != except)
            .map(|m| m.protocols.iter().map(|(n, _)| n).collect())
            .collect();
        if let Some(protocols) = candidate {
            lists.push(protocols.iter().map(|(n, _)| n).collect());
        }
        let Some(first) = lists.first() else {
            return Vec::new();
        };
        first
            .iter()
            .filter(|name| lists.iter().all(|list| list.contains(name)))
            .map(|name| (*name).clone())
            .collect()
    }

    /// Each member votes for its most preferred common protocol; most
    /// votes wins, ties go to the protocol earlier in the leader's list.
    pub(super) fn select_protocol(&self) -> Option<String> {
        let common = self.common_protocols(None, None);
        let mut votes: Vec<(usize, &String)> = common.iter().map(|name| (0, name)).collect();
        for member in self.members.values() {
            if let Some((name, _)) = member.protocols.iter().find(|(n, _)| common.contains(n)) {
                if let Some(slot) = votes.iter_mut().find(|(_, n)| *n == name) {
                    slot.0 += 1;
                }
            }
        }
        let best = votes.iter().map(|(count, _)| *count).max()?;
        votes
            .iter()
            .find(|(count, _)| *count == best)
            .map(|(_, name)| (*name).clone())
    }

    pub(super) fn rebalance_timeout_ms(&self) -> u64 {
        self.members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0)
    }

    pub(super) fn all_joined(&self) -> bool {
        self.pending.is_empty() && self.members.values().all(|m| m.join_waiter.is_some())
    }

    pub(super) fn fenced(&self, member_id: &str, instance_id: Option<&str>) -> bool {
        match instance_id.and_then(|i| self.instances.get(i)) {
            Some(owner) => owner != member_id,
            None => false,
        }
    }

    pub(super) fn remove_member(
        &mut self,
        member_id: &str,
        replies: &mut Replies,
        error: GroupError,
    ) {
        if let Some(member) = self.members.remove(member_id) {
            if let Some(instance) = &member.group_instance_id {
                if self.instances.get(instance).map(String::as_str) == Some(member_id) {
                    self.instances.remove(instance);
                }
            }
            if let Some(waiter) = member.join_waiter {
                replies.push((waiter, Reply::Join(JoinResponse::error(error, member_id))));
            }
            if let Some(waiter) = member.sync_waiter {
                replies.push((waiter, Reply::Sync(SyncResponse::error(error))));
            }
        }
        if self.leader_id.as_deref() == Some(member_id) {
            self.leader_id = self.members.keys().next().cloned();
        }
    }

    pub(super) fn prepare_rebalance(&mut self, now_ms: u64, delay_ms: u64, replies: &mut Replies) {
        if self.state == GroupState::CompletingRebalance {
            for member in self.members.values_mut() {
                member.assignment = Bytes::new();
                if let Some(waiter) = member.sync_waiter.take() {
                    replies.push((
                        waiter,
                        Reply::Sync(SyncResponse::error(GroupError::RebalanceInProgress)),
                    ));
                }
            }
        }
        if self.state == GroupState::Empty && delay_ms > 0 {
            self.initial_delay_until_ms = Some(now_ms + delay_ms);
            self.initial_delay_started_ms = now_ms;
        }
        self.state = GroupState::PreparingRebalance;
        self.join_deadline_ms = now_ms + self.rebalance_timeout_ms();
    }

    /// A new member joined during the initial delay: wait another delay,
    /// but never past the rebalance timeout.
    pub(super) fn extend_initial_delay(&mut self, now_ms: u64, delay_ms: u64) {
        if let Some(until) = self.initial_delay_until_ms {
            let cap = self.initial_delay_started_ms + self.rebalance_timeout_ms();
            self.initial_delay_until_ms = Some((now_ms + delay_ms).min(cap).max(until));
        }
    }

    /// Ends the join phase if everyone has rejoined (after the initial
    /// delay) or the rebalance timeout has passed.
    pub(super) fn try_complete_join(&mut self, now_ms: u64, replies: &mut Replies) {
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        if let Some(until) = self.initial_delay_until_ms {
            if now_ms < until {
                return;
            }
            self.initial_delay_until_ms = None;
        }
        if !self.all_joined() && now_ms < self.join_deadline_ms {
            return;
        }
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| m.join_waiter.is_none())
            .map(|m| m.member_id.clone())
            .collect();
        for member_id in gone {
            self.remove_member(&member_id, replies, GroupError::UnknownMemberId);
        }
        self.pending.clear();
        self.generation_id += 1;
        if self.members.is_empty() {
            // Kafka keeps the protocol type of an Empty group: ListGroups
            // still says `consumer`, and clients do not take the group
            // for a simple (assign-only) one.
            self.state = GroupState::Empty;
            self.protocol_name = None;
            self.leader_id = None;
            self.empty_since_ms = Some(now_ms);
            self.take_metadata(now_ms);
            return;
        }
        self.protocol_name = self.select_protocol();
        let leader = match &self.leader_id {
            Some(id) if self.members.contains_key(id) => id.clone(),
            _ => self.members.keys().next().expect("members").clone(),
        };
        self.leader_id = Some(leader.clone());
        self.state = GroupState::CompletingRebalance;
        self.sync_deadline_ms = now_ms + self.rebalance_timeout_ms();
        let protocol = self.protocol_name.clone().unwrap_or_default();
        let everyone: Vec<JoinMember> = self
            .members
            .values()
            .map(|m| JoinMember {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                metadata: m.metadata_for(&protocol),
            })
            .collect();
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for member_id in ids {
            let response = self.join_response(&member_id, member_id == leader, &everyone);
            let member = self.members.get_mut(&member_id).expect("member");
            member.session_deadline_ms = now_ms + member.session_timeout_ms;
            if let Some(waiter) = member.join_waiter.take() {
                replies.push((waiter, Reply::Join(response)));
            }
        }
    }

    pub(super) fn join_response(
        &self,
        member_id: &str,
        with_members: bool,
        all: &[JoinMember],
    ) -> JoinResponse {
        JoinResponse {
            error: None,
            generation_id: self.generation_id,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader_id.clone().unwrap_or_default(),
            member_id: member_id.to_string(),
            members: if with_members {
                all.to_vec()
            } else {
                Vec::new()
            },
            skip_assignment: false,
        }
    }

    pub(super) fn current_members(&self) -> Vec<JoinMember> {
        let protocol = self.protocol_name.clone().unwrap_or_default();
        self.members
            .values()
            .map(|m| JoinMember {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                metadata: m.metadata_for(&protocol),
            })
            .collect()
    }

    pub(super) fn became_empty_check(&mut self, now_ms: u64) {
        if self.members.is_empty() && self.state != GroupState::Dead {
            let was_empty = self.state == GroupState::Empty;
            if !was_empty {
                self.generation_id += 1;
            }
            // The protocol type stays, as in Kafka (see `try_complete_join`).
            self.state = GroupState::Empty;
            self.protocol_name = None;
            self.leader_id = None;
            self.initial_delay_until_ms = None;
            self.empty_since_ms = Some(now_ms);
            if !was_empty {
                self.take_metadata(now_ms);
            }
        }
    }

    /// A member left or expired: the rest rebalance.
    pub(super) fn member_gone(&mut self, now_ms: u64, replies: &mut Replies) {
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                if self.members.is_empty() && self.pending.is_empty() {
                    self.prepare_rebalance(now_ms, 0, replies);
                    self.became_empty_check(now_ms);
                } else {
                    self.prepare_rebalance(now_ms, 0, replies);
                    self.try_complete_join(now_ms, replies);
                }
            }
            GroupState::PreparingRebalance => self.try_complete_join(now_ms, replies),
            GroupState::Empty | GroupState::Dead => {}
        }
    }
}
