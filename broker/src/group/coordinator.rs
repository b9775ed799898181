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

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

use crate::errors;
use crate::limits::{
    CORE_MEMBER_BYTES_MAX, CORE_OFFSETS_MAX, GROUPS_PER_CORE_MAX, GROUP_ID_BYTES_MAX,
    GROUP_MEMBERS_MAX, GROUP_MEMBER_BYTES_MAX, GROUP_OFFSETS_MAX, MEMBER_BYTES_MAX,
    MEMBER_NAME_BYTES_MAX, MEMBER_PROTOCOLS_MAX, OFFSET_METADATA_BYTES_MAX,
};

/// Identifies a parked JoinGroup or SyncGroup request.
pub type WaiterId = u64;

/// Group settings (Kafka's broker names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.initial.rebalance.delay.ms`: how long the first rebalance of
    /// an empty group waits for more members.
    pub initial_rebalance_delay_ms: u64,
    /// `group.max.size`.
    pub max_size: usize,
    /// `group.min.session.timeout.ms`, `group.max.session.timeout.ms`.
    pub min_session_timeout_ms: u64,
    pub max_session_timeout_ms: u64,
    /// `offsets.topic.num.partitions`.
    pub offsets_partitions: i32,
    /// `offsets.retention.minutes`, in ms.
    pub offsets_retention_ms: u64,
}

impl Default for GroupConfig {
    fn default() -> Self {
        Self {
            initial_rebalance_delay_ms: 3_000,
            max_size: GROUP_MEMBERS_MAX,
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            offsets_partitions: 50,
            offsets_retention_ms: 7 * 24 * 60 * 60 * 1000,
        }
    }
}

/// The broker config keys this module owns.
pub const GROUP_CONFIG_KEYS: &[&str] = &[
    "group.initial.rebalance.delay.ms",
    "group.max.size",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "offsets.topic.num.partitions",
    "offsets.retention.minutes",
];

impl GroupConfig {
    /// Applies one of [`GROUP_CONFIG_KEYS`]; the error is the reason.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let number = || -> Result<u64, String> {
            value
                .trim()
                .parse::<u64>()
                .map_err(|e| format!("expected a non-negative integer: {e}"))
        };
        match key {
            "group.initial.rebalance.delay.ms" => self.initial_rebalance_delay_ms = number()?,
            "group.max.size" => {
                let size = number()?;
                if size == 0 || size > GROUP_MEMBERS_MAX as u64 {
                    return Err(format!("must be between 1 and {GROUP_MEMBERS_MAX}"));
                }
                self.max_size = size as usize;
            }
            "group.min.session.timeout.ms" => self.min_session_timeout_ms = number()?,
            "group.max.session.timeout.ms" => self.max_session_timeout_ms = number()?,
            "offsets.topic.num.partitions" => {
                let count = number()?;
                if count == 0 || count > crate::limits::TOPIC_PARTITIONS_MAX as u64 {
                    return Err("must be between 1 and 10000".to_string());
                }
                self.offsets_partitions = count as i32;
            }
            "offsets.retention.minutes" => {
                let minutes = number()?;
                if minutes == 0 {
                    return Err("must be positive".to_string());
                }
                self.offsets_retention_ms = minutes.saturating_mul(60_000);
            }
            _ => return Err(format!("`{key}` is not a group setting")),
        }
        if self.min_session_timeout_ms > self.max_session_timeout_ms {
            return Err(
                "group.min.session.timeout.ms is above group.max.session.timeout.ms".into(),
            );
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The name DescribeGroups and ListGroups use.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// A JoinGroup request, decoded.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a new member first gets MEMBER_ID_REQUIRED.
    pub require_known_member_id: bool,
    /// JoinGroup v9+ (KIP-814): a static leader rejoining a Stable group
    /// gets the members with `skip_assignment`, keeping the assignment.
    pub supports_skip_assignment: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinResponse {
    pub error_code: i16,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Only the leader gets the members (with their metadata for the
    /// selected protocol).
    pub members: Vec<JoinMember>,
    /// The leader must not compute a new assignment (JoinGroup v9+).
    pub skip_assignment: bool,
}

impl JoinResponse {
    pub fn error(error_code: i16, member_id: &str) -> Self {
        Self {
            error_code,
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
            skip_assignment: false,
        }
    }
}

#[derive(Debug, Clone)]
pub struct SyncRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignments: Vec<(String, Bytes)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncResponse {
    pub error_code: i16,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResponse {
    pub fn error(error_code: i16) -> Self {
        Self {
            error_code,
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// An answer to a parked request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Join(JoinResponse),
    Sync(SyncResponse),
}

/// Answers for parked requests, produced by any call.
pub type Replies = Vec<(WaiterId, Reply)>;

/// What a JoinGroup or SyncGroup call did: answered now, or parked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<T> {
    Now(T),
    Parked,
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

/// One partition of an OffsetCommit.
#[derive(Debug, Clone)]
pub struct CommitPartition {
    pub topic: String,
    pub partition: i32,
    pub offset: CommittedOffset,
}

/// Who commits: a group member (generation ≥ 0) or an `assign()` consumer
/// (generation -1, empty member id).
#[derive(Debug, Clone)]
pub struct Committer {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

/// A member as DescribeGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    pub group_id: String,
    pub state: GroupState,
    pub protocol_type: String,
    pub protocol_name: String,
    pub generation_id: i32,
    pub members: Vec<MemberDescription>,
}

/// An offset the coordinator dropped (retention, deletion): the manager
/// writes a tombstone for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedOffset {
    pub group_id: String,
    pub topic: String,
    pub partition: i32,
}

#[derive(Debug, Clone)]
struct Member {
    member_id: String,
    group_instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout_ms: u64,
    rebalance_timeout_ms: u64,
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    join_waiter: Option<WaiterId>,
    sync_waiter: Option<WaiterId>,
    /// The generation whose SyncGroup this member sent.
    synced_generation: i32,
    session_deadline_ms: u64,
}

impl Member {
    fn bytes(&self) -> usize {
        self.protocols.iter().map(|(_, m)| m.len()).sum::<usize>() + self.assignment.len()
    }

    fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    fn same_protocols(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }
}

#[derive(Debug, Clone)]
pub struct Group {
    id: String,
    state: GroupState,
    generation_id: i32,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    leader_id: Option<String>,
    members: BTreeMap<String, Member>,
    /// group.instance.id → member id of static members.
    instances: HashMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, until they rejoin.
    pending: BTreeMap<String, u64>,
    /// PreparingRebalance: when the join phase ends whoever has rejoined.
    join_deadline_ms: u64,
    /// The first rebalance of an empty group waits at least until here.
    initial_delay_until_ms: Option<u64>,
    /// When the initial delay started (it never extends past the rebalance timeout).
    initial_delay_started_ms: u64,
    /// CompletingRebalance: members that have not synced by then are removed.
    sync_deadline_ms: u64,
    /// When the group last became Empty (offset retention counts from it).
    empty_since_ms: Option<u64>,
    offsets: BTreeMap<(String, i32), CommittedOffset>,
}

impl Group {
    fn new(id: &str) -> Self {
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

    fn member_bytes(&self) -> usize {
        self.members.values().map(Member::bytes).sum()
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

    fn is_full(&self, max_size: usize) -> bool {
        self.members.len() + self.pending.len() >= max_size
    }

    /// The protocols every member (and the candidate) supports.
    fn common_protocols(
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
    fn select_protocol(&self) -> Option<String> {
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

    fn rebalance_timeout_ms(&self) -> u64 {
        self.members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0)
    }

    fn all_joined(&self) -> bool {
        self.pending.is_empty() && self.members.values().all(|m| m.join_waiter.is_some())
    }

    fn fenced(&self, member_id: &str, instance_id: Option<&str>) -> bool {
        match instance_id.and_then(|i| self.instances.get(i)) {
            Some(owner) => owner != member_id,
            None => false,
        }
    }

    fn remove_member(&mut self, member_id: &str, replies: &mut Replies, error_code: i16) {
        if let Some(member) = self.members.remove(member_id) {
            if let Some(instance) = &member.group_instance_id {
                if self.instances.get(instance).map(String::as_str) == Some(member_id) {
                    self.instances.remove(instance);
                }
            }
            if let Some(waiter) = member.join_waiter {
                replies.push((
                    waiter,
                    Reply::Join(JoinResponse::error(error_code, member_id)),
                ));
            }
            if let Some(waiter) = member.sync_waiter {
                replies.push((waiter, Reply::Sync(SyncResponse::error(error_code))));
            }
        }
        if self.leader_id.as_deref() == Some(member_id) {
            self.leader_id = self.members.keys().next().cloned();
        }
    }

    fn prepare_rebalance(&mut self, now_ms: u64, delay_ms: u64, replies: &mut Replies) {
        if self.state == GroupState::CompletingRebalance {
            for member in self.members.values_mut() {
                member.assignment = Bytes::new();
                if let Some(waiter) = member.sync_waiter.take() {
                    replies.push((
                        waiter,
                        Reply::Sync(SyncResponse::error(errors::REBALANCE_IN_PROGRESS)),
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
    fn extend_initial_delay(&mut self, now_ms: u64, delay_ms: u64) {
        if let Some(until) = self.initial_delay_until_ms {
            let cap = self.initial_delay_started_ms + self.rebalance_timeout_ms();
            self.initial_delay_until_ms = Some((now_ms + delay_ms).min(cap).max(until));
        }
    }

    /// Ends the join phase if everyone has rejoined (after the initial
    /// delay) or the rebalance timeout has passed.
    fn try_complete_join(&mut self, now_ms: u64, replies: &mut Replies) {
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
            self.remove_member(&member_id, replies, errors::UNKNOWN_MEMBER_ID);
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

    fn join_response(
        &self,
        member_id: &str,
        with_members: bool,
        all: &[JoinMember],
    ) -> JoinResponse {
        JoinResponse {
            error_code: errors::NONE,
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

    fn current_members(&self) -> Vec<JoinMember> {
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

    fn became_empty_check(&mut self, now_ms: u64) {
        if self.members.is_empty() && self.state != GroupState::Dead {
            if self.state != GroupState::Empty {
                self.generation_id += 1;
            }
            // The protocol type stays, as in Kafka (see `try_complete_join`).
            self.state = GroupState::Empty;
            self.protocol_name = None;
            self.leader_id = None;
            self.initial_delay_until_ms = None;
            self.empty_since_ms = Some(now_ms);
        }
    }

    /// A member left or expired: the rest rebalance.
    fn member_gone(&mut self, now_ms: u64, replies: &mut Replies) {
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

/// The topics of a consumer-protocol subscription (version i16, topics
/// array of strings, ...). `None` if it does not decode.
pub fn consumer_subscription_topics(metadata: &[u8]) -> Option<Vec<String>> {
    protocol::consumer_protocol::subscription_topics(metadata)
}

/// Every group one core coordinates.
pub struct Coordinator {
    config: GroupConfig,
    groups: BTreeMap<String, Group>,
    /// Member bytes of every group (bounded by `CORE_MEMBER_BYTES_MAX`).
    member_bytes: usize,
    offsets_count: usize,
    /// Seeds member ids; a counter keeps them unique.
    id_seed: u64,
    id_counter: u64,
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
            id_seed,
            id_counter: 0,
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
    /// offset counts true, and drops the group once it is Empty with
    /// nothing committed.
    fn with_group<R>(&mut self, group_id: &str, change: impl FnOnce(&mut Group) -> R) -> Option<R> {
        let group = self.groups.get_mut(group_id)?;
        let bytes_before = group.member_bytes();
        let offsets_before = group.offsets.len();
        let result = change(group);
        let bytes_after = group.member_bytes();
        let offsets_after = group.offsets.len();
        self.member_bytes = self.member_bytes + bytes_after - bytes_before;
        self.offsets_count = self.offsets_count + offsets_after - offsets_before;
        if (group.state == GroupState::Empty
            && group.offsets.is_empty()
            && group.pending.is_empty())
            || group.state == GroupState::Dead
        {
            self.offsets_count -= group.offsets.len();
            self.member_bytes -= group.member_bytes();
            self.groups.remove(group_id);
        }
        Some(result)
    }

    fn check_group_id(group_id: &str) -> Result<(), i16> {
        if group_id.is_empty() || group_id.len() > GROUP_ID_BYTES_MAX {
            Err(errors::INVALID_GROUP_ID)
        } else {
            Ok(())
        }
    }

    /// JoinGroup.
    pub fn join(
        &mut self,
        now_ms: u64,
        request: JoinRequest,
        waiter: WaiterId,
        replies: &mut Replies,
    ) -> Answer<JoinResponse> {
        let fail = |code: i16| Answer::Now(JoinResponse::error(code, &request.member_id));
        if let Err(code) = Self::check_group_id(&request.group_id) {
            return fail(code);
        }
        let session = request.session_timeout_ms;
        if session < 0
            || (session as u64) < self.config.min_session_timeout_ms
            || (session as u64) > self.config.max_session_timeout_ms
        {
            return fail(errors::INVALID_SESSION_TIMEOUT);
        }
        if too_long(&request.member_id)
            || request.group_instance_id.as_deref().is_some_and(too_long)
            || request.protocols.len() > MEMBER_PROTOCOLS_MAX
            || request.protocols.iter().any(|(name, _)| too_long(name))
            || too_long(&request.protocol_type)
        {
            return fail(errors::INVALID_REQUEST);
        }
        let metadata_bytes: usize = request.protocols.iter().map(|(_, m)| m.len()).sum();
        if metadata_bytes > MEMBER_BYTES_MAX {
            return fail(errors::INVALID_REQUEST);
        }
        if request.protocol_type.is_empty() || request.protocols.is_empty() {
            return fail(errors::INCONSISTENT_GROUP_PROTOCOL);
        }
        let exists = self.groups.contains_key(&request.group_id);
        if !exists {
            if !request.member_id.is_empty() {
                return fail(errors::UNKNOWN_MEMBER_ID);
            }
            if let Err(code) = self.add_group(&request.group_id) {
                return fail(code);
            }
        }
        let core_bytes_left = CORE_MEMBER_BYTES_MAX.saturating_sub(self.member_bytes);
        let config = self.config.clone();
        let new_member_id = if request.member_id.is_empty() {
            Some(self.new_member_id(&request.client_id))
        } else {
            None
        };
        let group_id = request.group_id.clone();
        self.with_group(&group_id, |group| {
            join_group(
                group,
                &config,
                now_ms,
                request,
                new_member_id,
                waiter,
                core_bytes_left,
                replies,
            )
        })
        .expect("group exists")
    }

    /// SyncGroup.
    pub fn sync(
        &mut self,
        now_ms: u64,
        request: SyncRequest,
        waiter: WaiterId,
        replies: &mut Replies,
    ) -> Answer<SyncResponse> {
        if let Err(code) = Self::check_group_id(&request.group_id) {
            return Answer::Now(SyncResponse::error(code));
        }
        let assignment_bytes: usize = request.assignments.iter().map(|(_, a)| a.len()).sum();
        if assignment_bytes > GROUP_MEMBER_BYTES_MAX
            || request
                .assignments
                .iter()
                .any(|(_, a)| a.len() > MEMBER_BYTES_MAX)
        {
            return Answer::Now(SyncResponse::error(errors::INVALID_REQUEST));
        }
        let core_bytes_left = CORE_MEMBER_BYTES_MAX.saturating_sub(self.member_bytes);
        let group_id = request.group_id.clone();
        self.with_group(&group_id, |group| {
            sync_group(group, now_ms, request, waiter, core_bytes_left, replies)
        })
        .unwrap_or(Answer::Now(SyncResponse::error(errors::UNKNOWN_MEMBER_ID)))
    }

    /// Heartbeat.
    pub fn heartbeat(
        &mut self,
        now_ms: u64,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> i16 {
        if let Err(code) = Self::check_group_id(group_id) {
            return code;
        }
        // No bytes or offsets change and no group empties: no accounting.
        let Some(group) = self.groups.get_mut(group_id) else {
            return errors::UNKNOWN_MEMBER_ID;
        };
        {
            if group.fenced(member_id, group_instance_id) {
                return errors::FENCED_INSTANCE_ID;
            }
            let Some(member) = group.members.get_mut(member_id) else {
                return errors::UNKNOWN_MEMBER_ID;
            };
            match group.state {
                GroupState::Dead => errors::COORDINATOR_NOT_AVAILABLE,
                GroupState::Empty => errors::UNKNOWN_MEMBER_ID,
                _ if generation_id != group.generation_id => errors::ILLEGAL_GENERATION,
                GroupState::PreparingRebalance => {
                    member.session_deadline_ms = now_ms + member.session_timeout_ms;
                    errors::REBALANCE_IN_PROGRESS
                }
                GroupState::CompletingRebalance | GroupState::Stable => {
                    member.session_deadline_ms = now_ms + member.session_timeout_ms;
                    errors::NONE
                }
            }
        }
    }

    /// LeaveGroup: one error code per member given as (member id, group
    /// instance id). An unknown group answers UNKNOWN_MEMBER_ID for each.
    pub fn leave(
        &mut self,
        now_ms: u64,
        group_id: &str,
        leaving: &[(String, Option<String>)],
        replies: &mut Replies,
    ) -> Result<Vec<i16>, i16> {
        Self::check_group_id(group_id)?;
        let unknown = vec![errors::UNKNOWN_MEMBER_ID; leaving.len()];
        Ok(self
            .with_group(group_id, |group| {
                let mut codes = Vec::with_capacity(leaving.len());
                let mut removed = false;
                for (member_id, instance_id) in leaving {
                    let target = match instance_id {
                        Some(instance) => match group.instances.get(instance) {
                            Some(owner) if member_id.is_empty() || owner == member_id => {
                                Some(owner.clone())
                            }
                            Some(_) => {
                                codes.push(errors::FENCED_INSTANCE_ID);
                                continue;
                            }
                            None => None,
                        },
                        None => group
                            .members
                            .contains_key(member_id)
                            .then(|| member_id.clone()),
                    };
                    match target {
                        Some(id) => {
                            group.remove_member(&id, replies, errors::UNKNOWN_MEMBER_ID);
                            removed = true;
                            codes.push(errors::NONE);
                        }
                        None if group.pending.remove(member_id).is_some() => {
                            removed = true;
                            codes.push(errors::NONE);
                        }
                        None => codes.push(errors::UNKNOWN_MEMBER_ID),
                    }
                }
                if removed {
                    group.member_gone(now_ms, replies);
                }
                codes
            })
            .unwrap_or(unknown))
    }

    /// Checks the deadlines of groups with members or pending ids:
    /// pending ids, sessions, the join phase and the sync phase.
    pub fn tick(&mut self, now_ms: u64, replies: &mut Replies) {
        let ids: Vec<String> = self
            .groups
            .values()
            .filter(|g| !g.members.is_empty() || !g.pending.is_empty())
            .map(|g| g.id.clone())
            .collect();
        for id in ids {
            self.with_group(&id, |group| {
                let before = group.pending.len();
                group.pending.retain(|_, deadline| *deadline > now_ms);
                let mut gone = before != group.pending.len();
                let expired: Vec<String> = group
                    .members
                    .values()
                    .filter(|m| m.join_waiter.is_none() && m.session_deadline_ms <= now_ms)
                    .map(|m| m.member_id.clone())
                    .collect();
                if group.state == GroupState::CompletingRebalance
                    && group.sync_deadline_ms <= now_ms
                {
                    let unsynced: Vec<String> = group
                        .members
                        .values()
                        .filter(|m| m.synced_generation != group.generation_id)
                        .map(|m| m.member_id.clone())
                        .collect();
                    for member_id in unsynced {
                        group.remove_member(&member_id, replies, errors::REBALANCE_IN_PROGRESS);
                        gone = true;
                    }
                }
                for member_id in expired {
                    group.remove_member(&member_id, replies, errors::UNKNOWN_MEMBER_ID);
                    gone = true;
                }
                if gone {
                    group.member_gone(now_ms, replies);
                } else {
                    group.try_complete_join(now_ms, replies);
                }
            });
        }
    }

    /// Offset retention: the offsets of Empty groups expire
    /// `offsets.retention.minutes` after the group became empty (after
    /// their commit when that is unknown, as after a restart). Returns them
    /// for tombstones; a group left with nothing goes.
    pub fn expire_offsets(&mut self, now_ms: u64) -> Vec<DroppedOffset> {
        let retention_ms = self.config.offsets_retention_ms as i64;
        let ids: Vec<String> = self
            .groups
            .values()
            .filter(|g| g.state == GroupState::Empty && !g.offsets.is_empty())
            .map(|g| g.id.clone())
            .collect();
        let mut dropped = Vec::new();
        let now = now_ms as i64;
        for id in ids {
            self.with_group(&id, |group| {
                let empty_since = group.empty_since_ms.map(|ms| ms as i64);
                group.offsets.retain(|(topic, partition), offset| {
                    let base = empty_since.unwrap_or(offset.commit_timestamp_ms);
                    let keep = now < base.saturating_add(retention_ms);
                    if !keep {
                        dropped.push(DroppedOffset {
                            group_id: group.id.clone(),
                            topic: topic.clone(),
                            partition: *partition,
                        });
                    }
                    keep
                });
            });
        }
        dropped
    }

    /// Adds an empty group for a join or commit that names a new one, unless
    /// this core already holds as many groups as it may.
    fn add_group(&mut self, group_id: &str) -> Result<(), i16> {
        if self.groups.len() >= GROUPS_PER_CORE_MAX {
            return Err(errors::COORDINATOR_NOT_AVAILABLE);
        }
        self.groups
            .insert(group_id.to_string(), Group::new(group_id));
        Ok(())
    }

    /// OffsetCommit: checks the committer, then applies every partition
    /// it may commit. Returns one error code per partition (in order).
    pub fn commit(
        &mut self,
        now_ms: u64,
        committer: &Committer,
        partitions: &[CommitPartition],
    ) -> Result<Vec<i16>, i16> {
        Self::check_group_id(&committer.group_id)?;
        if !self.groups.contains_key(&committer.group_id) {
            if committer.generation_id >= 0 {
                // OffsetCommit v9+'s answer; the handler gives older
                // versions ILLEGAL_GENERATION, as Kafka does.
                return Err(errors::GROUP_ID_NOT_FOUND);
            }
            self.add_group(&committer.group_id)?;
        }
        let core_offsets_left = CORE_OFFSETS_MAX.saturating_sub(self.offsets_count);
        self.with_group(&committer.group_id, |group| {
            let allowed = if group.state == GroupState::Dead {
                Err(errors::COORDINATOR_NOT_AVAILABLE)
            } else if group.fenced(&committer.member_id, committer.group_instance_id.as_deref()) {
                Err(errors::FENCED_INSTANCE_ID)
            } else if committer.generation_id < 0 && group.state == GroupState::Empty {
                Ok(())
            } else if group.state == GroupState::CompletingRebalance {
                Err(errors::REBALANCE_IN_PROGRESS)
            } else if !group.members.contains_key(&committer.member_id) {
                Err(errors::UNKNOWN_MEMBER_ID)
            } else if committer.generation_id != group.generation_id {
                Err(errors::ILLEGAL_GENERATION)
            } else {
                Ok(())
            };
            allowed?;
            if let Some(member) = group.members.get_mut(&committer.member_id) {
                member.session_deadline_ms = now_ms + member.session_timeout_ms;
            }
            let mut added = 0usize;
            let codes = partitions
                .iter()
                .map(|p| {
                    if p.offset.metadata.len() > OFFSET_METADATA_BYTES_MAX {
                        return errors::OFFSET_METADATA_TOO_LARGE;
                    }
                    let key = (p.topic.clone(), p.partition);
                    if !group.offsets.contains_key(&key) {
                        if group.offsets.len() >= GROUP_OFFSETS_MAX || added >= core_offsets_left {
                            return errors::INVALID_COMMIT_OFFSET_SIZE;
                        }
                        added += 1;
                    }
                    group.offsets.insert(key, p.offset.clone());
                    errors::NONE
                })
                .collect();
            Ok(codes)
        })
        .expect("group exists")
    }

    /// Offsets loaded from `__consumer_offsets` (no checks; the log holds
    /// only what was accepted). `None` is a tombstone.
    pub fn load_offset(
        &mut self,
        group_id: &str,
        topic: &str,
        partition: i32,
        offset: Option<CommittedOffset>,
    ) {
        if !self.groups.contains_key(group_id) {
            if offset.is_none() {
                return;
            }
            self.groups
                .insert(group_id.to_string(), Group::new(group_id));
        }
        self.with_group(group_id, |group| match offset {
            Some(offset) => {
                group.offsets.insert((topic.to_string(), partition), offset);
            }
            None => {
                group.offsets.remove(&(topic.to_string(), partition));
            }
        });
    }

    /// OffsetFetch: the committed offset of each partition asked, or of
    /// every partition with `None`.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        wanted: Option<&[(String, i32)]>,
    ) -> Vec<((String, i32), Option<CommittedOffset>)> {
        let group = self.groups.get(group_id);
        match wanted {
            Some(wanted) => wanted
                .iter()
                .map(|key| (key.clone(), group.and_then(|g| g.offsets.get(key)).cloned()))
                .collect(),
            None => group
                .map(|g| {
                    g.offsets
                        .iter()
                        .map(|(key, offset)| (key.clone(), Some(offset.clone())))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// OffsetDelete: drops the offsets of topics no member subscribes to.
    /// Group-level error, or one code per partition.
    pub fn delete_offsets(
        &mut self,
        group_id: &str,
        partitions: &[(String, i32)],
        dropped: &mut Vec<DroppedOffset>,
    ) -> Result<Vec<i16>, i16> {
        Self::check_group_id(group_id)?;
        let Some(group) = self.groups.get(group_id) else {
            return Err(errors::GROUP_ID_NOT_FOUND);
        };
        let subscribed = if group.state == GroupState::Empty {
            Vec::new()
        } else {
            match group.subscribed_topics() {
                Some(topics) => topics,
                None => return Err(errors::NON_EMPTY_GROUP),
            }
        };
        self.with_group(group_id, |group| {
            partitions
                .iter()
                .map(|(topic, partition)| {
                    if subscribed.contains(topic) {
                        return errors::GROUP_SUBSCRIBED_TO_TOPIC;
                    }
                    if group.offsets.remove(&(topic.clone(), *partition)).is_some() {
                        dropped.push(DroppedOffset {
                            group_id: group_id.to_string(),
                            topic: topic.clone(),
                            partition: *partition,
                        });
                    }
                    errors::NONE
                })
                .collect()
        })
        .ok_or(errors::GROUP_ID_NOT_FOUND)
    }

    /// DeleteGroups for one group: only an empty group; its offsets go.
    pub fn delete_group(&mut self, group_id: &str, dropped: &mut Vec<DroppedOffset>) -> i16 {
        if let Err(code) = Self::check_group_id(group_id) {
            return code;
        }
        let Some(group) = self.groups.get(group_id) else {
            return errors::GROUP_ID_NOT_FOUND;
        };
        if group.state != GroupState::Empty {
            return errors::NON_EMPTY_GROUP;
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
        errors::NONE
    }

    /// DescribeGroups for one group; an unknown one is Dead.
    pub fn describe(&self, group_id: &str) -> GroupDescription {
        let Some(group) = self.groups.get(group_id) else {
            return GroupDescription {
                group_id: group_id.to_string(),
                state: GroupState::Dead,
                protocol_type: String::new(),
                protocol_name: String::new(),
                generation_id: -1,
                members: Vec::new(),
            };
        };
        let protocol = group.protocol_name.clone().unwrap_or_default();
        // Kafka shows member metadata and assignments only when Stable.
        let stable = group.state == GroupState::Stable;
        GroupDescription {
            group_id: group_id.to_string(),
            state: group.state,
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

    /// ListGroups: (group id, protocol type, state).
    pub fn list(&self) -> Vec<(String, String, GroupState)> {
        self.groups
            .values()
            .map(|g| (g.id.clone(), g.protocol_type().to_string(), g.state))
            .collect()
    }
}

#[allow(clippy::too_many_arguments)]
fn join_group(
    group: &mut Group,
    config: &GroupConfig,
    now_ms: u64,
    request: JoinRequest,
    new_member_id: Option<String>,
    waiter: WaiterId,
    core_bytes_left: usize,
    replies: &mut Replies,
) -> Answer<JoinResponse> {
    let fail = |code: i16| Answer::Now(JoinResponse::error(code, &request.member_id));
    if group.state == GroupState::Dead {
        return fail(errors::COORDINATOR_NOT_AVAILABLE);
    }
    // The protocol type and at least one protocol must match the group's.
    if !group.members.is_empty() {
        if group.protocol_type.as_deref() != Some(request.protocol_type.as_str()) {
            return fail(errors::INCONSISTENT_GROUP_PROTOCOL);
        }
        if group
            .common_protocols(Some(&request.member_id), Some(&request.protocols))
            .is_empty()
        {
            return fail(errors::INCONSISTENT_GROUP_PROTOCOL);
        }
    }
    let metadata_bytes: usize = request.protocols.iter().map(|(_, m)| m.len()).sum();
    let previous_bytes = group
        .members
        .get(&request.member_id)
        .map(Member::bytes)
        .unwrap_or(0);
    if group.member_bytes() - previous_bytes + metadata_bytes > GROUP_MEMBER_BYTES_MAX
        || metadata_bytes.saturating_sub(previous_bytes) > core_bytes_left
    {
        return fail(errors::INVALID_REQUEST);
    }
    let session_timeout_ms = request.session_timeout_ms as u64;
    let rebalance_timeout_ms = (request.rebalance_timeout_ms.max(0) as u64).max(session_timeout_ms);

    let Some(new_id) = new_member_id else {
        return join_known_member(group, config, now_ms, request, waiter, replies);
    };

    // A static member coming back with a new process: it replaces the old
    // member id, keeping its assignment.
    if let Some(instance) = request.group_instance_id.clone() {
        if let Some(old_id) = group.instances.get(&instance).cloned() {
            let mut member = group.members.remove(&old_id).expect("static member");
            if let Some(w) = member.join_waiter.take() {
                replies.push((
                    w,
                    Reply::Join(JoinResponse::error(errors::FENCED_INSTANCE_ID, &old_id)),
                ));
            }
            if let Some(w) = member.sync_waiter.take() {
                replies.push((
                    w,
                    Reply::Sync(SyncResponse::error(errors::FENCED_INSTANCE_ID)),
                ));
            }
            let protocols_changed = !member.same_protocols(&request.protocols);
            let previous_leader = group.leader_id.clone().unwrap_or_default();
            member.member_id = new_id.clone();
            member.client_id = request.client_id.clone();
            member.client_host = request.client_host.clone();
            member.session_timeout_ms = session_timeout_ms;
            member.rebalance_timeout_ms = rebalance_timeout_ms;
            member.protocols = request.protocols.clone();
            member.session_deadline_ms = now_ms + session_timeout_ms;
            group.instances.insert(instance, new_id.clone());
            if group.leader_id.as_deref() == Some(old_id.as_str()) {
                group.leader_id = Some(new_id.clone());
            }
            group.members.insert(new_id.clone(), member);
            return match group.state {
                GroupState::Stable if !protocols_changed => {
                    let member = group.members.get_mut(&new_id).expect("member");
                    member.synced_generation = -1;
                    if request.supports_skip_assignment {
                        // KIP-814: the leader learns it leads, with the
                        // members, and that the assignment stands.
                        let leads = group.leader_id.as_deref() == Some(new_id.as_str());
                        let members = group.current_members();
                        let mut response = group.join_response(&new_id, leads, &members);
                        response.skip_assignment = leads;
                        Answer::Now(response)
                    } else {
                        // Before v9 Kafka names the leader as it was before
                        // the replacement: a restarted static leader acts as
                        // a follower and does not assign without members.
                        let mut response = group.join_response(&new_id, false, &[]);
                        response.leader = previous_leader;
                        Answer::Now(response)
                    }
                }
                GroupState::PreparingRebalance => {
                    group.members.get_mut(&new_id).expect("member").join_waiter = Some(waiter);
                    group.try_complete_join(now_ms, replies);
                    Answer::Parked
                }
                _ => {
                    group.prepare_rebalance(now_ms, 0, replies);
                    group.members.get_mut(&new_id).expect("member").join_waiter = Some(waiter);
                    group.try_complete_join(now_ms, replies);
                    Answer::Parked
                }
            };
        }
    }
    if group.is_full(config.max_size) {
        return Answer::Now(JoinResponse::error(errors::GROUP_MAX_SIZE_REACHED, ""));
    }
    if request.require_known_member_id && request.group_instance_id.is_none() {
        group
            .pending
            .insert(new_id.clone(), now_ms + session_timeout_ms);
        return Answer::Now(JoinResponse::error(errors::MEMBER_ID_REQUIRED, &new_id));
    }
    add_member(group, config, now_ms, request, new_id, waiter, replies);
    Answer::Parked
}

fn add_member(
    group: &mut Group,
    config: &GroupConfig,
    now_ms: u64,
    request: JoinRequest,
    member_id: String,
    waiter: WaiterId,
    replies: &mut Replies,
) {
    let session_timeout_ms = request.session_timeout_ms as u64;
    let rebalance_timeout_ms = (request.rebalance_timeout_ms.max(0) as u64).max(session_timeout_ms);
    if group.members.is_empty() {
        group.protocol_type = Some(request.protocol_type.clone());
    }
    if let Some(instance) = &request.group_instance_id {
        group.instances.insert(instance.clone(), member_id.clone());
    }
    group.members.insert(
        member_id.clone(),
        Member {
            member_id: member_id.clone(),
            group_instance_id: request.group_instance_id,
            client_id: request.client_id,
            client_host: request.client_host,
            session_timeout_ms,
            rebalance_timeout_ms,
            protocols: request.protocols,
            assignment: Bytes::new(),
            join_waiter: Some(waiter),
            sync_waiter: None,
            synced_generation: -1,
            session_deadline_ms: now_ms + session_timeout_ms,
        },
    );
    if group.leader_id.is_none() {
        group.leader_id = Some(member_id);
    }
    match group.state {
        GroupState::PreparingRebalance => {
            group.join_deadline_ms = group
                .join_deadline_ms
                .max(now_ms + rebalance_timeout_ms.min(group.rebalance_timeout_ms()));
            group.extend_initial_delay(now_ms, config.initial_rebalance_delay_ms);
        }
        _ => group.prepare_rebalance(now_ms, config.initial_rebalance_delay_ms, replies),
    }
    group.try_complete_join(now_ms, replies);
}

fn join_known_member(
    group: &mut Group,
    config: &GroupConfig,
    now_ms: u64,
    request: JoinRequest,
    waiter: WaiterId,
    replies: &mut Replies,
) -> Answer<JoinResponse> {
    let member_id = request.member_id.clone();
    if group.pending.remove(&member_id).is_some() {
        // The id MEMBER_ID_REQUIRED handed out: now it joins for real.
        add_member(group, config, now_ms, request, member_id, waiter, replies);
        return Answer::Parked;
    }
    if group.fenced(&member_id, request.group_instance_id.as_deref()) {
        return Answer::Now(JoinResponse::error(errors::FENCED_INSTANCE_ID, &member_id));
    }
    if !group.members.contains_key(&member_id)
        || matches!(group.state, GroupState::Empty | GroupState::Dead)
    {
        return Answer::Now(JoinResponse::error(errors::UNKNOWN_MEMBER_ID, &member_id));
    }
    let is_leader = group.leader_id.as_deref() == Some(member_id.as_str());
    let member = group.members.get_mut(&member_id).expect("member");
    let same = member.same_protocols(&request.protocols);
    member.session_timeout_ms = request.session_timeout_ms as u64;
    member.rebalance_timeout_ms =
        (request.rebalance_timeout_ms.max(0) as u64).max(member.session_timeout_ms);
    member.session_deadline_ms = now_ms + member.session_timeout_ms;
    member.client_id = request.client_id;
    member.client_host = request.client_host;
    match group.state {
        GroupState::PreparingRebalance => {
            member.protocols = request.protocols;
            if let Some(old) = member.join_waiter.replace(waiter) {
                replies.push((
                    old,
                    Reply::Join(JoinResponse::error(
                        errors::REBALANCE_IN_PROGRESS,
                        &member_id,
                    )),
                ));
            }
            group.try_complete_join(now_ms, replies);
            Answer::Parked
        }
        GroupState::CompletingRebalance if same => {
            let all = if is_leader {
                group.current_members()
            } else {
                Vec::new()
            };
            Answer::Now(group.join_response(&member_id, is_leader, &all))
        }
        GroupState::Stable if same && !is_leader => {
            Answer::Now(group.join_response(&member_id, false, &[]))
        }
        _ => {
            member.protocols = request.protocols;
            group.prepare_rebalance(now_ms, 0, replies);
            group
                .members
                .get_mut(&member_id)
                .expect("member")
                .join_waiter = Some(waiter);
            group.try_complete_join(now_ms, replies);
            Answer::Parked
        }
    }
}

fn sync_group(
    group: &mut Group,
    now_ms: u64,
    request: SyncRequest,
    waiter: WaiterId,
    core_bytes_left: usize,
    replies: &mut Replies,
) -> Answer<SyncResponse> {
    let fail = |code: i16| Answer::Now(SyncResponse::error(code));
    if group.fenced(&request.member_id, request.group_instance_id.as_deref()) {
        return fail(errors::FENCED_INSTANCE_ID);
    }
    if !group.members.contains_key(&request.member_id) {
        return fail(errors::UNKNOWN_MEMBER_ID);
    }
    if request.generation_id != group.generation_id {
        return fail(errors::ILLEGAL_GENERATION);
    }
    if request
        .protocol_type
        .as_ref()
        .is_some_and(|t| Some(t) != group.protocol_type.as_ref())
        || request
            .protocol_name
            .as_ref()
            .is_some_and(|n| Some(n) != group.protocol_name.as_ref())
    {
        return fail(errors::INCONSISTENT_GROUP_PROTOCOL);
    }
    let ok = |group: &Group, assignment: Bytes| SyncResponse {
        error_code: errors::NONE,
        protocol_type: group.protocol_type.clone(),
        protocol_name: group.protocol_name.clone(),
        assignment,
    };
    match group.state {
        GroupState::Empty | GroupState::Dead => fail(errors::UNKNOWN_MEMBER_ID),
        GroupState::PreparingRebalance => fail(errors::REBALANCE_IN_PROGRESS),
        GroupState::Stable => {
            let generation = group.generation_id;
            let member = group.members.get_mut(&request.member_id).expect("member");
            member.session_deadline_ms = now_ms + member.session_timeout_ms;
            member.synced_generation = generation;
            let assignment = member.assignment.clone();
            Answer::Now(ok(group, assignment))
        }
        GroupState::CompletingRebalance => {
            let generation = group.generation_id;
            let is_leader = group.leader_id.as_deref() == Some(request.member_id.as_str());
            {
                let member = group.members.get_mut(&request.member_id).expect("member");
                member.session_deadline_ms = now_ms + member.session_timeout_ms;
                member.synced_generation = generation;
                if let Some(old) = member.sync_waiter.replace(waiter) {
                    replies.push((
                        old,
                        Reply::Sync(SyncResponse::error(errors::REBALANCE_IN_PROGRESS)),
                    ));
                }
            }
            if is_leader {
                let added: usize = request
                    .assignments
                    .iter()
                    .filter(|(id, _)| group.members.contains_key(id))
                    .map(|(_, a)| a.len())
                    .sum();
                if group.member_bytes() + added > GROUP_MEMBER_BYTES_MAX || added > core_bytes_left
                {
                    let member = group.members.get_mut(&request.member_id).expect("member");
                    member.sync_waiter = None;
                    return fail(errors::INVALID_REQUEST);
                }
                // Members the leader left out get an empty assignment.
                for member in group.members.values_mut() {
                    member.assignment = Bytes::new();
                }
                for (member_id, assignment) in request.assignments {
                    if let Some(member) = group.members.get_mut(&member_id) {
                        member.assignment = assignment;
                    }
                }
                group.state = GroupState::Stable;
                let answers: Vec<(WaiterId, Bytes)> = group
                    .members
                    .values_mut()
                    .filter_map(|m| m.sync_waiter.take().map(|w| (w, m.assignment.clone())))
                    .collect();
                for (w, assignment) in answers {
                    replies.push((w, Reply::Sync(ok(group, assignment))));
                }
            }
            Answer::Parked
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: i32 = 10_000;
    const REBALANCE: i32 = 30_000;

    fn config(delay_ms: u64) -> GroupConfig {
        GroupConfig {
            initial_rebalance_delay_ms: delay_ms,
            ..GroupConfig::default()
        }
    }

    fn join_request(member_id: &str, instance: Option<&str>, protocols: &[&str]) -> JoinRequest {
        JoinRequest {
            group_id: "g".to_string(),
            member_id: member_id.to_string(),
            group_instance_id: instance.map(str::to_string),
            client_id: "client".to_string(),
            client_host: "/127.0.0.1".to_string(),
            session_timeout_ms: SESSION,
            rebalance_timeout_ms: REBALANCE,
            protocol_type: "consumer".to_string(),
            protocols: protocols
                .iter()
                .map(|p| (p.to_string(), Bytes::from(format!("meta-{p}-{member_id}"))))
                .collect(),
            require_known_member_id: true,
            supports_skip_assignment: false,
        }
    }

    /// Drives a coordinator and remembers every reply by waiter.
    struct Harness {
        coordinator: Coordinator,
        now_ms: u64,
        next_waiter: WaiterId,
        replies: HashMap<WaiterId, Reply>,
    }

    impl Harness {
        fn new(delay_ms: u64) -> Self {
            Self {
                coordinator: Coordinator::new(config(delay_ms), 7),
                now_ms: 1_000_000,
                next_waiter: 0,
                replies: HashMap::new(),
            }
        }

        fn absorb(&mut self, replies: Replies) {
            for (waiter, reply) in replies {
                assert!(
                    self.replies.insert(waiter, reply).is_none(),
                    "answered twice"
                );
            }
        }

        fn join(&mut self, request: JoinRequest) -> (WaiterId, Answer<JoinResponse>) {
            self.next_waiter += 1;
            let mut replies = Vec::new();
            let answer =
                self.coordinator
                    .join(self.now_ms, request, self.next_waiter, &mut replies);
            self.absorb(replies);
            (self.next_waiter, answer)
        }

        /// A new dynamic member: MEMBER_ID_REQUIRED, then the real join.
        fn join_new(&mut self, protocols: &[&str]) -> (String, WaiterId) {
            let (_, first) = self.join(join_request("", None, protocols));
            let Answer::Now(response) = first else {
                panic!("a new member is answered at once")
            };
            assert_eq!(response.error_code, errors::MEMBER_ID_REQUIRED);
            assert!(!response.member_id.is_empty());
            let (waiter, _) = self.join(join_request(&response.member_id, None, protocols));
            (response.member_id, waiter)
        }

        fn sync(
            &mut self,
            member_id: &str,
            generation: i32,
            assignments: &[(&str, &str)],
        ) -> (WaiterId, Answer<SyncResponse>) {
            self.next_waiter += 1;
            let mut replies = Vec::new();
            let request = SyncRequest {
                group_id: "g".to_string(),
                generation_id: generation,
                member_id: member_id.to_string(),
                group_instance_id: None,
                protocol_type: Some("consumer".to_string()),
                protocol_name: None,
                assignments: assignments
                    .iter()
                    .map(|(m, a)| (m.to_string(), Bytes::from(a.to_string())))
                    .collect(),
            };
            let answer =
                self.coordinator
                    .sync(self.now_ms, request, self.next_waiter, &mut replies);
            self.absorb(replies);
            (self.next_waiter, answer)
        }

        fn tick(&mut self, advance_ms: u64) -> Vec<DroppedOffset> {
            self.now_ms += advance_ms;
            let mut replies = Vec::new();
            self.coordinator.tick(self.now_ms, &mut replies);
            self.absorb(replies);
            self.coordinator.expire_offsets(self.now_ms)
        }

        fn join_reply(&self, waiter: WaiterId) -> JoinResponse {
            match self.replies.get(&waiter) {
                Some(Reply::Join(response)) => response.clone(),
                other => panic!("waiter {waiter}: {other:?}"),
            }
        }

        fn sync_reply(&self, waiter: WaiterId) -> SyncResponse {
            match self.replies.get(&waiter) {
                Some(Reply::Sync(response)) => response.clone(),
                other => panic!("waiter {waiter}: {other:?}"),
            }
        }

        fn state(&self) -> GroupState {
            self.coordinator
                .group("g")
                .map(|g| g.state())
                .unwrap_or(GroupState::Dead)
        }

        fn heartbeat(&mut self, member_id: &str, generation: i32) -> i16 {
            self.coordinator
                .heartbeat(self.now_ms, "g", generation, member_id, None)
        }
    }

    /// Two members join, the leader assigns, both get their share.
    fn stable_pair(h: &mut Harness) -> (String, String, i32) {
        // Without an initial delay the first member gets generation 1 alone.
        let (a, first) = h.join_new(&["range", "roundrobin"]);
        assert_eq!(h.join_reply(first).generation_id, 1);
        assert_eq!(h.join_reply(first).members.len(), 1);
        let (b, wb) = h.join_new(&["roundrobin", "range"]);
        assert_eq!(h.state(), GroupState::PreparingRebalance);
        let (wa, _) = h.join(join_request(&a, None, &["range", "roundrobin"]));
        let ra = h.join_reply(wa);
        let rb = h.join_reply(wb);
        assert_eq!(ra.error_code, errors::NONE);
        assert_eq!(ra.generation_id, rb.generation_id);
        assert_eq!(h.state(), GroupState::CompletingRebalance);
        let (leader, follower, leader_reply) = if ra.leader == a {
            (a.clone(), b.clone(), ra.clone())
        } else {
            (b.clone(), a.clone(), rb.clone())
        };
        assert_eq!(
            leader_reply.members.len(),
            2,
            "the leader gets every member"
        );
        let follower_reply = if ra.leader == a { rb } else { ra };
        assert!(follower_reply.members.is_empty());
        let generation = leader_reply.generation_id;
        let (wf, early) = h.sync(&follower, generation, &[]);
        assert_eq!(early, Answer::Parked, "a follower waits for the leader");
        let (wl, _) = h.sync(&leader, generation, &[(&leader, "L"), (&follower, "F")]);
        assert_eq!(h.state(), GroupState::Stable);
        assert_eq!(h.sync_reply(wf).assignment, Bytes::from("F"));
        assert_eq!(h.sync_reply(wl).assignment, Bytes::from("L"));
        (leader, follower, generation)
    }

    #[test]
    fn two_members_rebalance_to_stable_with_their_assignments() {
        let mut h = Harness::new(0);
        let (leader, follower, generation) = stable_pair(&mut h);
        assert_eq!(h.heartbeat(&leader, generation), errors::NONE);
        assert_eq!(h.heartbeat(&follower, generation), errors::NONE);
        assert_eq!(
            h.heartbeat(&follower, generation - 1),
            errors::ILLEGAL_GENERATION
        );
        assert_eq!(
            h.heartbeat("stranger", generation),
            errors::UNKNOWN_MEMBER_ID
        );
        // A late sync in Stable gets the stored assignment, never empty.
        let (_, late) = h.sync(&follower, generation, &[]);
        let Answer::Now(late) = late else { panic!() };
        assert_eq!(late.assignment, Bytes::from("F"));
    }

    #[test]
    fn protocol_selection_takes_the_most_preferred_common_protocol() {
        let mut h = Harness::new(100);
        let (a, wa) = h.join_new(&["cooperative-sticky", "range"]);
        let (_, _) = h.join_new(&["range", "cooperative-sticky", "roundrobin"]);
        let (_, _) = h.join_new(&["cooperative-sticky"]);
        assert!(
            !h.replies.contains_key(&wa),
            "the initial delay holds the join"
        );
        h.tick(200);
        let reply = h.join_reply(wa);
        assert_eq!(reply.protocol_name.as_deref(), Some("cooperative-sticky"));
        let _ = a;
        // A member with nothing in common is refused.
        let (_, answer) = h.join(join_request("", None, &["other"]));
        let Answer::Now(refused) = answer else {
            panic!()
        };
        assert_eq!(refused.error_code, errors::INCONSISTENT_GROUP_PROTOCOL);
    }

    #[test]
    fn heartbeat_tells_members_to_rejoin_when_a_member_joins() {
        let mut h = Harness::new(0);
        let (leader, follower, generation) = stable_pair(&mut h);
        let (_, wc) = h.join_new(&["range"]);
        assert_eq!(h.state(), GroupState::PreparingRebalance);
        assert_eq!(
            h.heartbeat(&leader, generation),
            errors::REBALANCE_IN_PROGRESS
        );
        let (wl, _) = h.join(join_request(&leader, None, &["range", "roundrobin"]));
        assert!(!h.replies.contains_key(&wl), "waits for the others");
        let (wf, _) = h.join(join_request(&follower, None, &["roundrobin", "range"]));
        for w in [wl, wf, wc] {
            let reply = h.join_reply(w);
            assert_eq!(reply.error_code, errors::NONE);
            assert_eq!(reply.generation_id, generation + 1);
            assert_eq!(reply.protocol_name.as_deref(), Some("range"));
        }
    }

    #[test]
    fn a_member_that_misses_its_session_is_removed_and_the_rest_rebalance() {
        let mut h = Harness::new(0);
        let (leader, follower, generation) = stable_pair(&mut h);
        for _ in 0..3 {
            h.tick(SESSION as u64 / 4);
            assert_eq!(h.heartbeat(&leader, generation), errors::NONE);
        }
        assert_eq!(h.state(), GroupState::Stable);
        h.tick(SESSION as u64 / 4);
        assert_eq!(
            h.state(),
            GroupState::PreparingRebalance,
            "the follower expired"
        );
        assert_eq!(
            h.heartbeat(&follower, generation),
            errors::UNKNOWN_MEMBER_ID
        );
        assert_eq!(
            h.heartbeat(&leader, generation),
            errors::REBALANCE_IN_PROGRESS
        );
        let (w, _) = h.join(join_request(&leader, None, &["range"]));
        let reply = h.join_reply(w);
        assert_eq!(reply.generation_id, generation + 1);
        assert_eq!(reply.members.len(), 1);
        assert_eq!(reply.leader, leader);
    }

    #[test]
    fn members_that_do_not_rejoin_are_dropped_at_the_rebalance_timeout() {
        let mut h = Harness::new(0);
        let (leader, follower, generation) = stable_pair(&mut h);
        let (_, wc) = h.join_new(&["range"]);
        let (wl, _) = h.join(join_request(&leader, None, &["range"]));
        // The follower keeps heartbeating but never rejoins.
        let mut waited = 0;
        while !h.replies.contains_key(&wl) {
            h.tick(1_000);
            waited += 1_000;
            h.heartbeat(&follower, generation);
            assert!(waited <= REBALANCE as u64 + 1_000, "join phase never ended");
        }
        assert!(waited >= REBALANCE as u64 - 1_000);
        assert_eq!(
            h.join_reply(wl).members.len() + h.join_reply(wc).members.len(),
            2
        );
        assert_eq!(
            h.heartbeat(&follower, generation + 1),
            errors::UNKNOWN_MEMBER_ID
        );
    }

    #[test]
    fn leave_group_batches_and_empties_the_group() {
        let mut h = Harness::new(0);
        let (leader, follower, _) = stable_pair(&mut h);
        let mut replies = Vec::new();
        let codes = h
            .coordinator
            .leave(
                h.now_ms,
                "g",
                &[
                    (leader.clone(), None),
                    ("nobody".to_string(), None),
                    (follower.clone(), None),
                ],
                &mut replies,
            )
            .unwrap();
        assert_eq!(
            codes,
            vec![errors::NONE, errors::UNKNOWN_MEMBER_ID, errors::NONE]
        );
        assert!(
            h.coordinator.group("g").is_none(),
            "empty with no offsets: gone"
        );
        let codes = h
            .coordinator
            .leave(h.now_ms, "g", &[(leader, None)], &mut replies);
        assert_eq!(codes, Ok(vec![errors::UNKNOWN_MEMBER_ID]));
        assert_eq!(
            h.coordinator.leave(h.now_ms, "", &[], &mut replies),
            Err(errors::INVALID_GROUP_ID)
        );
    }

    #[test]
    fn initial_rebalance_delay_waits_for_more_members() {
        let mut h = Harness::new(3_000);
        let (_, wa) = h.join_new(&["range"]);
        h.tick(1_000);
        assert!(!h.replies.contains_key(&wa));
        let (_, wb) = h.join_new(&["range"]);
        h.tick(2_500);
        assert!(
            !h.replies.contains_key(&wa),
            "the delay restarted with the second member"
        );
        h.tick(600);
        assert_eq!(h.join_reply(wa).generation_id, 1);
        assert_eq!(h.join_reply(wb).generation_id, 1);
    }

    #[test]
    fn static_member_restart_within_the_session_keeps_the_generation() {
        let mut h = Harness::new(100);
        let (w1, _) = h.join(join_request("", Some("inst-1"), &["range"]));
        let (w2, _) = h.join(join_request("", Some("inst-2"), &["range"]));
        h.tick(200);
        let r1 = h.join_reply(w1);
        let r2 = h.join_reply(w2);
        let generation = r1.generation_id;
        let leader = r1.leader.clone();
        for r in [&r1, &r2] {
            let assignments: Vec<(String, String)> = if r.member_id == leader {
                vec![
                    (r1.member_id.clone(), "A1".into()),
                    (r2.member_id.clone(), "A2".into()),
                ]
            } else {
                vec![]
            };
            let refs: Vec<(&str, &str)> = assignments
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect();
            h.sync(&r.member_id, generation, &refs);
        }
        assert_eq!(h.state(), GroupState::Stable);
        // inst-2 restarts: new process, no member id, same instance id.
        let (_, answer) = h.join(join_request("", Some("inst-2"), &["range"]));
        let Answer::Now(rejoined) = answer else {
            panic!("no rebalance for a static rejoin")
        };
        assert_eq!(rejoined.error_code, errors::NONE);
        assert_eq!(rejoined.generation_id, generation);
        assert_ne!(rejoined.member_id, r2.member_id);
        assert_eq!(h.state(), GroupState::Stable);
        let (_, synced) = h.sync(&rejoined.member_id, generation, &[]);
        let Answer::Now(synced) = synced else {
            panic!()
        };
        assert_eq!(synced.assignment, Bytes::from("A2"), "keeps its partitions");
        // The old process is fenced.
        let code =
            h.coordinator
                .heartbeat(h.now_ms, "g", generation, &r2.member_id, Some("inst-2"));
        assert_eq!(code, errors::FENCED_INSTANCE_ID);
        assert_eq!(h.heartbeat(&r1.member_id, generation), errors::NONE);
    }

    #[test]
    fn a_restarted_static_leader_follows_before_v9_and_skips_assignment_from_v9() {
        let mut h = Harness::new(100);
        let (w1, _) = h.join(join_request("", Some("inst-1"), &["range"]));
        let (w2, _) = h.join(join_request("", Some("inst-2"), &["range"]));
        h.tick(200);
        let r1 = h.join_reply(w1);
        let r2 = h.join_reply(w2);
        let generation = r1.generation_id;
        let leader = r1.leader.clone();
        let instance = if leader == r1.member_id {
            "inst-1"
        } else {
            "inst-2"
        };
        h.sync(&r1.member_id, generation, &[]);
        h.sync(&r2.member_id, generation, &[]);
        assert_eq!(h.state(), GroupState::Stable);
        // v8: the leader named is the one before the restart.
        let (_, answer) = h.join(join_request("", Some(instance), &["range"]));
        let Answer::Now(old) = answer else {
            panic!("no rebalance for a static rejoin")
        };
        assert_eq!(
            (old.error_code, old.generation_id),
            (errors::NONE, generation)
        );
        assert_eq!(old.leader, leader);
        assert_ne!(old.member_id, leader);
        assert!(old.members.is_empty() && !old.skip_assignment);
        // v9: it leads, gets the members, and keeps the assignment.
        let mut request = join_request("", Some(instance), &["range"]);
        request.supports_skip_assignment = true;
        let (_, answer) = h.join(request);
        let Answer::Now(new) = answer else {
            panic!("no rebalance for a static rejoin")
        };
        assert_eq!(new.leader, new.member_id);
        assert_eq!(new.members.len(), 2);
        assert!(new.skip_assignment);
        assert_eq!(h.state(), GroupState::Stable);
    }

    #[test]
    fn join_errors_follow_kafka() {
        let mut h = Harness::new(0);
        let mut bad = join_request("", None, &["range"]);
        bad.group_id = String::new();
        assert!(
            matches!(h.join(bad).1, Answer::Now(r) if r.error_code == errors::INVALID_GROUP_ID)
        );
        let mut bad = join_request("", None, &["range"]);
        bad.session_timeout_ms = 10;
        assert!(
            matches!(h.join(bad).1, Answer::Now(r) if r.error_code == errors::INVALID_SESSION_TIMEOUT)
        );
        let bad = join_request("made-up", None, &["range"]);
        assert!(
            matches!(h.join(bad).1, Answer::Now(r) if r.error_code == errors::UNKNOWN_MEMBER_ID)
        );
        let mut bad = join_request("", None, &["range"]);
        bad.protocols = vec![("range".into(), Bytes::from(vec![0u8; MEMBER_BYTES_MAX + 1]))];
        assert!(matches!(h.join(bad).1, Answer::Now(r) if r.error_code == errors::INVALID_REQUEST));
        let bad = join_request("", None, &[]);
        assert!(
            matches!(h.join(bad).1, Answer::Now(r) if r.error_code == errors::INCONSISTENT_GROUP_PROTOCOL)
        );
        assert_eq!(h.coordinator.member_bytes(), 0);
    }

    #[test]
    fn group_max_size_counts_members_waiting_for_their_id() {
        let mut h = Harness::new(0);
        h.coordinator.config.max_size = 2;
        h.join_new(&["range"]);
        h.join_new(&["range"]);
        let (_, answer) = h.join(join_request("", None, &["range"]));
        assert!(matches!(answer, Answer::Now(r) if r.error_code == errors::GROUP_MAX_SIZE_REACHED));
        // Pending ids expire after a session.
        h.tick(0);
        let mut h = Harness::new(0);
        h.coordinator.config.max_size = 1;
        let (_, first) = h.join(join_request("", None, &["range"]));
        assert!(matches!(first, Answer::Now(r) if r.error_code == errors::MEMBER_ID_REQUIRED));
        h.tick(SESSION as u64 + 1);
        let (_, again) = h.join(join_request("", None, &["range"]));
        assert!(matches!(again, Answer::Now(r) if r.error_code == errors::MEMBER_ID_REQUIRED));
    }

    #[test]
    fn sync_errors_follow_kafka() {
        let mut h = Harness::new(0);
        let (leader, _, generation) = stable_pair(&mut h);
        let (_, a) = h.sync("stranger", generation, &[]);
        assert_eq!(
            a,
            Answer::Now(SyncResponse::error(errors::UNKNOWN_MEMBER_ID))
        );
        let (_, a) = h.sync(&leader, generation + 5, &[]);
        assert_eq!(
            a,
            Answer::Now(SyncResponse::error(errors::ILLEGAL_GENERATION))
        );
        // During a rebalance a sync is refused.
        h.join_new(&["range"]);
        let (_, a) = h.sync(&leader, generation, &[]);
        assert_eq!(
            a,
            Answer::Now(SyncResponse::error(errors::REBALANCE_IN_PROGRESS))
        );
    }

    #[test]
    fn commits_check_the_member_and_assign_consumers_commit_with_generation_minus_one() {
        let mut h = Harness::new(0);
        let offset = |o: i64| CommittedOffset {
            offset: o,
            leader_epoch: -1,
            metadata: "m".into(),
            commit_timestamp_ms: 5,
        };
        let simple = Committer {
            group_id: "g".into(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
        };
        let parts = vec![CommitPartition {
            topic: "t".into(),
            partition: 0,
            offset: offset(10),
        }];
        assert_eq!(
            h.coordinator.commit(h.now_ms, &simple, &parts),
            Ok(vec![errors::NONE])
        );
        assert_eq!(
            h.coordinator.fetch_offsets("g", None),
            vec![(("t".to_string(), 0), Some(offset(10)))]
        );
        let (leader, _, generation) = stable_pair(&mut h);
        assert_eq!(
            h.coordinator.commit(h.now_ms, &simple, &parts),
            Err(errors::UNKNOWN_MEMBER_ID)
        );
        let member = Committer {
            member_id: leader.clone(),
            generation_id: generation - 1,
            ..simple.clone()
        };
        assert_eq!(
            h.coordinator.commit(h.now_ms, &member, &parts),
            Err(errors::ILLEGAL_GENERATION)
        );
        let member = Committer {
            generation_id: generation,
            ..member
        };
        let parts = vec![CommitPartition {
            topic: "t".into(),
            partition: 0,
            offset: offset(20),
        }];
        assert_eq!(
            h.coordinator.commit(h.now_ms, &member, &parts),
            Ok(vec![errors::NONE])
        );
        let fetched = h
            .coordinator
            .fetch_offsets("g", Some(&[("t".into(), 0), ("t".into(), 1)]));
        assert_eq!(fetched[0].1.as_ref().unwrap().offset, 20);
        assert_eq!(fetched[1].1, None);
        let mut big = offset(1);
        big.metadata = "x".repeat(OFFSET_METADATA_BYTES_MAX + 1);
        let parts = vec![CommitPartition {
            topic: "t".into(),
            partition: 1,
            offset: big,
        }];
        assert_eq!(
            h.coordinator.commit(h.now_ms, &member, &parts),
            Ok(vec![errors::OFFSET_METADATA_TOO_LARGE])
        );
        let unknown_group = Committer {
            group_id: "other".into(),
            ..member
        };
        assert_eq!(
            h.coordinator.commit(h.now_ms, &unknown_group, &[]),
            Err(errors::GROUP_ID_NOT_FOUND)
        );
    }

    #[test]
    fn offsets_of_an_empty_group_expire_after_retention() {
        let mut h = Harness::new(0);
        h.coordinator.config.offsets_retention_ms = 60_000;
        let simple = Committer {
            group_id: "g".into(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
        };
        let parts = vec![CommitPartition {
            topic: "t".into(),
            partition: 3,
            offset: CommittedOffset {
                offset: 1,
                leader_epoch: -1,
                metadata: String::new(),
                commit_timestamp_ms: h.now_ms as i64,
            },
        }];
        h.coordinator.commit(h.now_ms, &simple, &parts).unwrap();
        assert!(h.tick(59_000).is_empty());
        let dropped = h.tick(2_000);
        assert_eq!(
            dropped,
            vec![DroppedOffset {
                group_id: "g".into(),
                topic: "t".into(),
                partition: 3
            }]
        );
        assert!(h.coordinator.group("g").is_none());
        assert_eq!(h.coordinator.offsets_count(), 0);
    }

    #[test]
    fn delete_group_and_offsets_refuse_active_groups() {
        let mut h = Harness::new(0);
        let mut dropped = Vec::new();
        assert_eq!(
            h.coordinator.delete_group("g", &mut dropped),
            errors::GROUP_ID_NOT_FOUND
        );
        let (leader, _, generation) = stable_pair(&mut h);
        assert_eq!(
            h.coordinator.delete_group("g", &mut dropped),
            errors::NON_EMPTY_GROUP
        );
        let member = Committer {
            group_id: "g".into(),
            generation_id: generation,
            member_id: leader,
            group_instance_id: None,
        };
        let offset = CommittedOffset {
            offset: 1,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 0,
        };
        let parts = vec![CommitPartition {
            topic: "t".into(),
            partition: 0,
            offset,
        }];
        h.coordinator.commit(h.now_ms, &member, &parts).unwrap();
        // Test metadata is not a consumer subscription: refuse.
        assert_eq!(
            h.coordinator
                .delete_offsets("g", &[("t".into(), 0)], &mut dropped),
            Err(errors::NON_EMPTY_GROUP)
        );
        assert_eq!(h.coordinator.describe("g").state, GroupState::Stable);
        assert_eq!(h.coordinator.describe("nope").state, GroupState::Dead);
    }

    #[test]
    fn an_emptied_group_keeps_its_protocol_type_as_kafka_does() {
        let mut h = Harness::new(0);
        let (leader, follower, generation) = stable_pair(&mut h);
        let member = Committer {
            group_id: "g".into(),
            generation_id: generation,
            member_id: leader.clone(),
            group_instance_id: None,
        };
        let parts = vec![CommitPartition {
            topic: "t".into(),
            partition: 0,
            offset: CommittedOffset {
                offset: 1,
                leader_epoch: -1,
                metadata: String::new(),
                commit_timestamp_ms: 0,
            },
        }];
        h.coordinator.commit(h.now_ms, &member, &parts).unwrap();
        let mut replies = Vec::new();
        let leaving = [(leader, None), (follower, None)];
        h.coordinator
            .leave(h.now_ms, "g", &leaving, &mut replies)
            .unwrap();
        h.absorb(replies);
        assert_eq!(h.state(), GroupState::Empty);
        let listed = h.coordinator.list();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].1, "consumer");
        assert_eq!(h.coordinator.describe("g").protocol_type, "consumer");
    }

    #[test]
    fn without_initial_delay_consumers_starting_together_share_the_first_generation() {
        let mut h = Harness::new(0);
        let protocols = ["range"];
        let id_of = |answer: Answer<JoinResponse>| match answer {
            Answer::Now(response) => {
                assert_eq!(response.error_code, errors::MEMBER_ID_REQUIRED);
                response.member_id
            }
            Answer::Parked => panic!("a new member is answered at once"),
        };
        let (_, first) = h.join(join_request("", None, &protocols));
        let a = id_of(first);
        let (_, first) = h.join(join_request("", None, &protocols));
        let b = id_of(first);
        // `a` joins with its id while `b` holds one: the join phase waits
        // for `b` instead of giving `a` a generation alone, which `b`'s
        // join would end at once with a rebalance (a revoke for `a`).
        let (wa, answer) = h.join(join_request(&a, None, &protocols));
        assert!(matches!(answer, Answer::Parked));
        assert!(!h.replies.contains_key(&wa));
        let (wb, _) = h.join(join_request(&b, None, &protocols));
        let (ra, rb) = (h.join_reply(wa), h.join_reply(wb));
        assert_eq!((ra.error_code, rb.error_code), (errors::NONE, errors::NONE));
        assert_eq!((ra.generation_id, rb.generation_id), (1, 1));
        assert_eq!(
            ra.members.len() + rb.members.len(),
            2,
            "the leader sees both"
        );
        // A consumer that arrives after the first generation formed starts
        // the next one, as in Kafka, where a 0 ms initial delay ends at once.
        let (c, wc) = h.join_new(&protocols);
        assert!(
            !h.replies.contains_key(&wc),
            "{c} waits for the others to rejoin"
        );
        assert_eq!(h.state(), GroupState::PreparingRebalance);
    }

    #[test]
    fn consumer_subscriptions_decode() {
        let mut meta = vec![0u8, 1];
        meta.extend_from_slice(&2i32.to_be_bytes());
        for t in ["ab", "c"] {
            meta.extend_from_slice(&(t.len() as i16).to_be_bytes());
            meta.extend_from_slice(t.as_bytes());
        }
        meta.extend_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(
            consumer_subscription_topics(&meta),
            Some(vec!["ab".into(), "c".into()])
        );
        assert_eq!(consumer_subscription_topics(&meta[..5]), None);
        assert_eq!(
            consumer_subscription_topics(&[0, 1, 0x7f, 0xff, 0xff, 0xff]),
            None
        );
    }

    #[test]
    fn memory_stays_bounded_under_a_flood_of_joins() {
        let mut h = Harness::new(0);
        h.coordinator.config.max_size = 50;
        for _ in 0..10_000 {
            let (_, answer) = h.join(join_request("", None, &["range"]));
            if let Answer::Now(r) = answer {
                assert!(
                    r.error_code == errors::MEMBER_ID_REQUIRED
                        || r.error_code == errors::GROUP_MAX_SIZE_REACHED
                );
            }
        }
        assert!(h.coordinator.group("g").unwrap().pending.len() <= 50);
        h.tick(SESSION as u64 + 1);
        assert!(
            h.coordinator.group("g").is_none(),
            "every pending id expired"
        );
    }
}
