//! JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the deadline checks
//! (`tick`) that drive a group through its rebalance phases.

use bytes::Bytes;

use crate::error::GroupError;
use crate::limits::{
    CORE_MEMBER_BYTES_MAX, GROUP_MEMBER_BYTES_MAX, MEMBER_BYTES_MAX, MEMBER_PROTOCOLS_MAX,
};

use super::messages::*;
use super::state::{Group, Member};
use super::{too_long, Coordinator, GroupConfig};

impl Coordinator {
    /// JoinGroup.
    pub fn join(
        &mut self,
        now_ms: u64,
        request: JoinRequest,
        waiter: WaiterId,
        replies: &mut Replies,
    ) -> Answer<JoinResponse> {
        let fail = |code: GroupError| Answer::Now(JoinResponse::error(code, &request.member_id));
        if let Err(code) = Self::check_group_id(&request.group_id) {
            return fail(code);
        }
        let session = request.session_timeout_ms;
        if session < 0
            || (session as u64) < self.config.min_session_timeout_ms
            || (session as u64) > self.config.max_session_timeout_ms
        {
            return fail(GroupError::InvalidSessionTimeout);
        }
        if too_long(&request.member_id)
            || request.group_instance_id.as_deref().is_some_and(too_long)
            || request.protocols.len() > MEMBER_PROTOCOLS_MAX
            || request.protocols.iter().any(|(name, _)| too_long(name))
            || too_long(&request.protocol_type)
        {
            return fail(GroupError::InvalidRequest);
        }
        let metadata_bytes: usize = request.protocols.iter().map(|(_, m)| m.len()).sum();
        if metadata_bytes > MEMBER_BYTES_MAX {
            return fail(GroupError::InvalidRequest);
        }
        if request.protocol_type.is_empty() || request.protocols.is_empty() {
            return fail(GroupError::InconsistentGroupProtocol);
        }
        let exists = self.groups.contains_key(&request.group_id);
        if let Some(group) = self.groups.get_mut(&request.group_id) {
            // A consumer-protocol group turns classic again once empty;
            // with members, a classic member joins it as one of them.
            match group.consumer.as_ref() {
                Some(consumer) if !consumer.members.is_empty() => {
                    return Answer::Now(self.classic_join(now_ms, request));
                }
                Some(_) => {
                    let mut consumer = group.consumer.take().expect("consumer group");
                    group.protocol_type = None;
                    let mut records = consumer.take_records(&request.group_id);
                    records.extend(super::ConsumerGroup::tombstones(&request.group_id));
                    self.consumer_orphans
                        .entry(request.group_id.clone())
                        .or_default()
                        .extend(records);
                    self.consumer_dirty.insert(request.group_id.clone());
                }
                None => {}
            }
        }
        if !exists {
            if !request.member_id.is_empty() {
                return fail(GroupError::UnknownMemberId);
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
            return Answer::Now(SyncResponse::error(GroupError::InvalidRequest));
        }
        if self
            .groups
            .get(&request.group_id)
            .is_some_and(|g| g.consumer.is_some())
        {
            return Answer::Now(
                self.classic_sync(now_ms, &request)
                    .unwrap_or_else(SyncResponse::error),
            );
        }
        let core_bytes_left = CORE_MEMBER_BYTES_MAX.saturating_sub(self.member_bytes);
        let group_id = request.group_id.clone();
        self.with_group(&group_id, |group| {
            sync_group(group, now_ms, request, waiter, core_bytes_left, replies)
        })
        .unwrap_or(Answer::Now(SyncResponse::error(
            GroupError::UnknownMemberId,
        )))
    }

    /// Heartbeat.
    pub fn heartbeat(
        &mut self,
        now_ms: u64,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        Self::check_group_id(group_id)?;
        // No bytes or offsets change and no group empties: no accounting.
        let Some(group) = self.groups.get_mut(group_id) else {
            return Err(GroupError::UnknownMemberId);
        };
        if group.consumer.is_some() {
            return self.classic_heartbeat(now_ms, group_id, generation_id, member_id);
        }
        {
            if group.fenced(member_id, group_instance_id) {
                return Err(GroupError::FencedInstanceId);
            }
            let Some(member) = group.members.get_mut(member_id) else {
                return Err(GroupError::UnknownMemberId);
            };
            match group.state {
                GroupState::Dead => Err(GroupError::CoordinatorNotAvailable),
                GroupState::Empty => Err(GroupError::UnknownMemberId),
                _ if generation_id != group.generation_id => Err(GroupError::IllegalGeneration),
                GroupState::PreparingRebalance => {
                    member.session_deadline_ms = now_ms + member.session_timeout_ms;
                    Err(GroupError::RebalanceInProgress)
                }
                GroupState::CompletingRebalance | GroupState::Stable => {
                    member.session_deadline_ms = now_ms + member.session_timeout_ms;
                    Ok(())
                }
            }
        }
    }

    /// LeaveGroup: one outcome per member given as (member id, group
    /// instance id). An unknown group answers UNKNOWN_MEMBER_ID for each.
    pub fn leave(
        &mut self,
        now_ms: u64,
        group_id: &str,
        leaving: &[(String, Option<String>)],
        replies: &mut Replies,
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        Self::check_group_id(group_id)?;
        if self
            .groups
            .get(group_id)
            .is_some_and(|g| g.consumer.is_some())
        {
            return Ok(self.classic_leave(now_ms, group_id, leaving, replies));
        }
        let unknown = vec![Err(GroupError::UnknownMemberId); leaving.len()];
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
                                codes.push(Err(GroupError::FencedInstanceId));
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
                            group.remove_member(&id, replies, GroupError::UnknownMemberId);
                            removed = true;
                            codes.push(Ok(()));
                        }
                        None if group.pending.remove(member_id).is_some() => {
                            removed = true;
                            codes.push(Ok(()));
                        }
                        None => codes.push(Err(GroupError::UnknownMemberId)),
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
        self.tick_consumer_groups(now_ms);
        self.expire_share_members(now_ms);
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
                        group.remove_member(&member_id, replies, GroupError::RebalanceInProgress);
                        gone = true;
                    }
                }
                for member_id in expired {
                    group.remove_member(&member_id, replies, GroupError::UnknownMemberId);
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
    if let Err(code) = check_join(group, &request, core_bytes_left) {
        return Answer::Now(JoinResponse::error(code, &request.member_id));
    }
    let session_timeout_ms = request.session_timeout_ms as u64;
    let Some(new_id) = new_member_id else {
        return join_known_member(group, config, now_ms, request, waiter, replies);
    };
    if let Some(instance) = request.group_instance_id.clone() {
        if let Some(old_id) = group.instances.get(&instance).cloned() {
            let rejoin = StaticRejoin {
                instance,
                old_id,
                new_id,
            };
            return rejoin_static_member(group, now_ms, &request, rejoin, waiter, replies);
        }
    }
    if group.is_full(config.max_size) {
        return Answer::Now(JoinResponse::error(GroupError::GroupMaxSizeReached, ""));
    }
    if request.require_known_member_id && request.group_instance_id.is_none() {
        group
            .pending
            .insert(new_id.clone(), now_ms + session_timeout_ms);
        return Answer::Now(JoinResponse::error(GroupError::MemberIdRequired, &new_id));
    }
    add_member(group, config, now_ms, request, new_id, waiter, replies);
    Answer::Parked
}

/// Refusals of a JoinGroup before anything changes: a dead group, a
/// protocol type or protocols the group does not share, member metadata
/// over the group's or the core's bound.
fn check_join(
    group: &Group,
    request: &JoinRequest,
    core_bytes_left: usize,
) -> Result<(), GroupError> {
    if group.state == GroupState::Dead {
        return Err(GroupError::CoordinatorNotAvailable);
    }
    // The protocol type and at least one protocol must match the group's.
    if !group.members.is_empty() {
        if group.protocol_type.as_deref() != Some(request.protocol_type.as_str()) {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        if group
            .common_protocols(Some(&request.member_id), Some(&request.protocols))
            .is_empty()
        {
            return Err(GroupError::InconsistentGroupProtocol);
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
        return Err(GroupError::InvalidRequest);
    }
    Ok(())
}

/// A static member coming back with a new process under a new member id.
struct StaticRejoin {
    instance: String,
    old_id: String,
    new_id: String,
}

/// The new member id replaces the old one, keeping the assignment; the
/// old process's parked requests are fenced.
fn rejoin_static_member(
    group: &mut Group,
    now_ms: u64,
    request: &JoinRequest,
    rejoin: StaticRejoin,
    waiter: WaiterId,
    replies: &mut Replies,
) -> Answer<JoinResponse> {
    let StaticRejoin {
        instance,
        old_id,
        new_id,
    } = rejoin;
    let session_timeout_ms = request.session_timeout_ms as u64;
    let rebalance_timeout_ms = (request.rebalance_timeout_ms.max(0) as u64).max(session_timeout_ms);
    let mut member = group.members.remove(&old_id).expect("static member");
    if let Some(w) = member.join_waiter.take() {
        replies.push((
            w,
            Reply::Join(JoinResponse::error(GroupError::FencedInstanceId, &old_id)),
        ));
    }
    if let Some(w) = member.sync_waiter.take() {
        replies.push((
            w,
            Reply::Sync(SyncResponse::error(GroupError::FencedInstanceId)),
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
    match group.state {
        GroupState::Stable if !protocols_changed => {
            // The new member id replaces the old one in the group's
            // record, as Kafka persists it.
            group.take_metadata(now_ms);
            let member = group.members.get_mut(&new_id).expect("member");
            member.synced_generation = -1;
            if request.supports_skip_assignment {
                // KIP-814: the leader learns it leads, with the members,
                // and that the assignment stands.
                let leads = group.leader_id.as_deref() == Some(new_id.as_str());
                let members = group.current_members();
                let mut response = group.join_response(&new_id, leads, &members);
                response.skip_assignment = leads;
                Answer::Now(response)
            } else {
                // Before v9 Kafka names the leader as it was before the
                // replacement: a restarted static leader acts as a
                // follower and does not assign without members.
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
    }
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
        return Answer::Now(JoinResponse::error(
            GroupError::FencedInstanceId,
            &member_id,
        ));
    }
    if !group.members.contains_key(&member_id)
        || matches!(group.state, GroupState::Empty | GroupState::Dead)
    {
        return Answer::Now(JoinResponse::error(GroupError::UnknownMemberId, &member_id));
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
                        GroupError::RebalanceInProgress,
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
    let fail = |code: GroupError| Answer::Now(SyncResponse::error(code));
    if let Err(code) = check_sync(group, &request) {
        return fail(code);
    }
    match group.state {
        GroupState::Empty | GroupState::Dead => fail(GroupError::UnknownMemberId),
        GroupState::PreparingRebalance => fail(GroupError::RebalanceInProgress),
        GroupState::Stable => {
            let generation = group.generation_id;
            let member = group.members.get_mut(&request.member_id).expect("member");
            member.session_deadline_ms = now_ms + member.session_timeout_ms;
            member.synced_generation = generation;
            let assignment = member.assignment.clone();
            Answer::Now(sync_ok(group, assignment))
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
                        Reply::Sync(SyncResponse::error(GroupError::RebalanceInProgress)),
                    ));
                }
            }
            if is_leader {
                if let Err(code) =
                    apply_assignment(group, now_ms, request, core_bytes_left, replies)
                {
                    return fail(code);
                }
            }
            Answer::Parked
        }
    }
}

/// Refusals of a SyncGroup: a fenced static member, an unknown member, a
/// generation or protocol that is not the group's.
fn check_sync(group: &Group, request: &SyncRequest) -> Result<(), GroupError> {
    if group.fenced(&request.member_id, request.group_instance_id.as_deref()) {
        return Err(GroupError::FencedInstanceId);
    }
    if !group.members.contains_key(&request.member_id) {
        return Err(GroupError::UnknownMemberId);
    }
    if request.generation_id != group.generation_id {
        return Err(GroupError::IllegalGeneration);
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
        return Err(GroupError::InconsistentGroupProtocol);
    }
    Ok(())
}

fn sync_ok(group: &Group, assignment: Bytes) -> SyncResponse {
    SyncResponse {
        error: None,
        protocol_type: group.protocol_type.clone(),
        protocol_name: group.protocol_name.clone(),
        assignment,
    }
}

/// The leader's SyncGroup during CompletingRebalance: stores every
/// member's assignment (within the group's and the core's bounds), makes
/// the group Stable, takes its metadata for `__consumer_offsets` and
/// answers every parked SyncGroup.
fn apply_assignment(
    group: &mut Group,
    now_ms: u64,
    request: SyncRequest,
    core_bytes_left: usize,
    replies: &mut Replies,
) -> Result<(), GroupError> {
    let added: usize = request
        .assignments
        .iter()
        .filter(|(id, _)| group.members.contains_key(id))
        .map(|(_, a)| a.len())
        .sum();
    if group.member_bytes() + added > GROUP_MEMBER_BYTES_MAX || added > core_bytes_left {
        let member = group.members.get_mut(&request.member_id).expect("member");
        member.sync_waiter = None;
        return Err(GroupError::InvalidRequest);
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
    group.take_metadata(now_ms);
    let answers: Vec<(WaiterId, Bytes)> = group
        .members
        .values_mut()
        .filter_map(|m| m.sync_waiter.take().map(|w| (w, m.assignment.clone())))
        .collect();
    for (w, assignment) in answers {
        replies.push((w, Reply::Sync(sync_ok(group, assignment))));
    }
    Ok(())
}
