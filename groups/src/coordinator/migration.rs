//! A group moving between the classic and the consumer protocol while it
//! has members (KIP-848's upgrade path, `group.consumer.migration.policy`).
//!
//! Upgrade: a consumer-protocol member joining a classic consumer group
//! turns it into a consumer-protocol group. Each classic member becomes a
//! member of it at the classic generation as its epoch, owning what its
//! last SyncGroup gave it, and keeps speaking the classic protocol: its
//! JoinGroup is answered at once with its epoch (it is never the leader,
//! it assigns nothing), its SyncGroup with its partitions as the
//! coordinator reconciles them, and its Heartbeat with
//! REBALANCE_IN_PROGRESS while it has partitions to give up or to get,
//! which makes it join again. Its JoinGroup reports what it still owns
//! (a cooperative member's subscription lists them; an eager member has
//! given up everything before it joins), so partitions move only once
//! their owner let them go, as for consumer-protocol members.
//!
//! Downgrade: once the last consumer-protocol member has left and
//! classic members remain, the group turns classic again with them (at
//! the group epoch as its generation, each member's partitions as its
//! assignment) and rebalances the classic way.
//!
//! Both ways the group's committed offsets stay, and the records of the
//! kind it left get tombstones.

use bytes::Bytes;
use protocol::consumer_protocol::{self as wire, Assignment};

use crate::error::GroupError;

use super::consumer::{
    remove_member, ClassicMember, ConsumerGroup, ConsumerMember, ConsumerRecord, MemberState,
    Partitions, ASSIGNORS,
};
use super::messages::*;
use super::state::{Group, Member};
use super::Coordinator;

/// Partitions as the consumer protocol's codec lists them.
fn listed(partitions: &Partitions) -> wire::TopicPartitions {
    partitions
        .iter()
        .filter(|(_, ps)| !ps.is_empty())
        .map(|(t, ps)| (t.clone(), ps.iter().copied().collect()))
        .collect()
}

fn partitions_of(listed: &wire::TopicPartitions) -> Partitions {
    listed
        .iter()
        .filter(|(_, ps)| !ps.is_empty())
        .map(|(t, ps)| (t.clone(), ps.iter().copied().collect()))
        .collect()
}

/// A classic member's subscription in its preferred protocol that
/// decodes: (protocol name, subscription).
fn subscription_of(protocols: &[(String, Bytes)]) -> Option<(String, wire::Subscription)> {
    protocols.iter().find_map(|(name, metadata)| {
        wire::decode_subscription(metadata)
            .ok()
            .map(|(_, subscription)| (name.clone(), subscription))
    })
}

impl Group {
    /// Whether this classic group may turn consumer now: it has members
    /// of the consumer protocol type, none waiting on a join or a sync.
    pub(super) fn upgradable(&self) -> bool {
        self.consumer.is_none()
            && !self.members.is_empty()
            && self.protocol_type.as_deref() == Some(wire::PROTOCOL_TYPE)
            && self.state == GroupState::Stable
    }

    /// Turns this classic group into a consumer-protocol group with its
    /// members, each at the generation as its epoch with the partitions
    /// its last SyncGroup gave it.
    pub(super) fn upgrade(&mut self, now_ms: u64) {
        let generation = self.generation_id;
        let protocol = self.protocol_name.clone().unwrap_or_default();
        let mut consumer = ConsumerGroup {
            group_epoch: generation,
            assignment_epoch: generation,
            loaded: true,
            ..ConsumerGroup::default()
        };
        for member in std::mem::take(&mut self.members).into_values() {
            let topics =
                wire::subscription_topics(&member.metadata_for(&protocol)).unwrap_or_default();
            let assigned = wire::assignment_partitions(&member.assignment)
                .map(|p| partitions_of(&p))
                .unwrap_or_default();
            consumer
                .target
                .insert(member.member_id.clone(), assigned.clone());
            consumer.dirty.members.insert(member.member_id.clone());
            consumer.members.insert(
                member.member_id.clone(),
                ConsumerMember {
                    member_id: member.member_id,
                    instance_id: member.group_instance_id,
                    rack_id: None,
                    client_id: member.client_id,
                    client_host: member.client_host,
                    rebalance_timeout_ms: member.rebalance_timeout_ms,
                    subscribed_names: topics.into_iter().collect(),
                    subscribed_regex: None,
                    compiled_regex: None,
                    server_assignor: None,
                    member_epoch: generation,
                    previous_member_epoch: -1,
                    state: MemberState::Stable,
                    assigned,
                    revoking: Partitions::new(),
                    session_deadline_ms: now_ms + member.session_timeout_ms,
                    revocation_deadline_ms: None,
                    away: false,
                    classic: Some(ClassicMember {
                        protocols: member.protocols,
                        session_timeout_ms: member.session_timeout_ms,
                    }),
                },
            );
        }
        consumer.dirty.target = true;
        consumer.dirty.epoch = true;
        self.instances.clear();
        self.pending.clear();
        self.leader_id = None;
        self.protocol_name = None;
        self.protocol_type = Some(wire::PROTOCOL_TYPE.to_string());
        self.consumer = Some(Box::new(consumer));
        // The classic membership record goes: a tombstone.
        if self.metadata.take().is_some() {
            self.metadata_changed = true;
        }
    }

    /// Turns this consumer-protocol group, whose members all speak the
    /// classic protocol now, into a classic group with them, and starts a
    /// classic rebalance. The consumer-protocol records to tombstone.
    pub(super) fn downgrade(&mut self, now_ms: u64, replies: &mut Replies) -> Vec<ConsumerRecord> {
        let mut consumer = self.consumer.take().expect("a consumer-protocol group");
        let mut records = consumer.take_records(&self.id);
        for member_id in consumer.members.keys() {
            records.extend(ConsumerGroup::member_tombstones(&self.id, member_id));
        }
        records.extend(ConsumerGroup::tombstones(&self.id));
        // The generation its members are at (they reconciled to it), so
        // their next heartbeat says REBALANCE_IN_PROGRESS rather than
        // ILLEGAL_GENERATION.
        self.generation_id = consumer
            .members
            .values()
            .map(|m| m.member_epoch)
            .max()
            .unwrap_or(consumer.group_epoch);
        self.protocol_type = Some(wire::PROTOCOL_TYPE.to_string());
        for member in consumer.members.into_values() {
            let classic = member.classic.expect("only classic members remain");
            let assignment = wire::encode_assignment(
                &Assignment {
                    partitions: listed(&member.assigned),
                    user_data: None,
                },
                0,
            )
            .unwrap_or_default();
            if let Some(instance) = &member.instance_id {
                self.instances
                    .insert(instance.clone(), member.member_id.clone());
            }
            self.members.insert(
                member.member_id.clone(),
                Member {
                    member_id: member.member_id,
                    group_instance_id: member.instance_id,
                    client_id: member.client_id,
                    client_host: member.client_host,
                    session_timeout_ms: classic.session_timeout_ms,
                    rebalance_timeout_ms: member
                        .rebalance_timeout_ms
                        .max(classic.session_timeout_ms),
                    protocols: classic.protocols,
                    assignment,
                    join_waiter: None,
                    sync_waiter: None,
                    synced_generation: self.generation_id,
                    session_deadline_ms: now_ms + classic.session_timeout_ms,
                },
            );
        }
        self.protocol_name = self.select_protocol();
        self.leader_id = self.members.keys().next().cloned();
        self.state = GroupState::Stable;
        self.empty_since_ms = None;
        // The members learn of it at their next heartbeat and join the
        // classic way.
        self.prepare_rebalance(now_ms, 0, replies);
        records
    }
}

impl ConsumerGroup {
    /// Whether the members left all speak the classic protocol.
    fn only_classic_members(&self) -> bool {
        !self.members.is_empty() && self.members.values().all(|m| m.classic.is_some())
    }

    /// Tombstones for a member's three records.
    pub(super) fn member_tombstones(group_id: &str, member_id: &str) -> Vec<ConsumerRecord> {
        use crate::consumer_records::ConsumerKey;
        [
            ConsumerKey::CurrentAssignment {
                group_id: group_id.to_string(),
                member_id: member_id.to_string(),
            },
            ConsumerKey::TargetMember {
                group_id: group_id.to_string(),
                member_id: member_id.to_string(),
            },
            ConsumerKey::Member {
                group_id: group_id.to_string(),
                member_id: member_id.to_string(),
            },
        ]
        .into_iter()
        .map(|key| (key.encode(), None))
        .collect()
    }
}

impl Coordinator {
    /// After a consumer-protocol member left `group_id`: the group turns
    /// classic when only classic members remain and the policy allows.
    pub(super) fn maybe_downgrade(&mut self, group_id: &str, now_ms: u64, replies: &mut Replies) {
        if !self.config.consumer.migration_policy.downgrades() {
            return;
        }
        let Some(group) = self.groups.get_mut(group_id) else {
            return;
        };
        if !group
            .consumer()
            .is_some_and(ConsumerGroup::only_classic_members)
        {
            return;
        }
        let records = group.downgrade(now_ms, replies);
        self.consumer_orphans
            .entry(group_id.to_string())
            .or_default()
            .extend(records);
        self.consumer_dirty.insert(group_id.to_string());
        // Keeps the coordinator's counts and queues true.
        self.with_group(group_id, |_| ());
    }

    /// JoinGroup of a classic member into a consumer-protocol group with
    /// members: answered at once.
    pub(super) fn classic_join(&mut self, now_ms: u64, request: JoinRequest) -> JoinResponse {
        let refused = |code: GroupError| JoinResponse::error(code, &request.member_id);
        if request.protocol_type != wire::PROTOCOL_TYPE
            || self.config.consumer.migration_policy == crate::config::MigrationPolicy::Disabled
        {
            return refused(GroupError::InconsistentGroupProtocol);
        }
        let Some((protocol, subscription)) = subscription_of(&request.protocols) else {
            return refused(GroupError::InconsistentGroupProtocol);
        };
        let config = self.config.consumer.clone();
        let default_assignor = config
            .assignors
            .first()
            .cloned()
            .unwrap_or_else(|| ASSIGNORS[0].to_string());
        let member_id = if request.member_id.is_empty() {
            let id = self.new_member_id(&request.client_id);
            if request.require_known_member_id && request.group_instance_id.is_none() {
                // The member joins again with it (as with a classic group).
                return JoinResponse::error(GroupError::MemberIdRequired, &id);
            }
            id
        } else {
            request.member_id.clone()
        };
        let group_id = request.group_id.clone();
        let answer = self.with_group(&group_id, |group| {
            let consumer = group.consumer.as_mut().expect("a consumer-protocol group");
            // A static member back under a new id takes its place.
            if let Some(instance) = &request.group_instance_id {
                let holder = consumer
                    .members
                    .values()
                    .find(|m| m.instance_id.as_ref() == Some(instance) && m.member_id != member_id)
                    .map(|m| (m.member_id.clone(), m.classic.is_some() || m.away));
                match holder {
                    Some((_, false)) => return Err(GroupError::UnreleasedInstanceId),
                    Some((old_id, true)) => {
                        let mut member = consumer.members.remove(&old_id).expect("member");
                        if let Some(target) = consumer.target.remove(&old_id) {
                            consumer.target.insert(member_id.clone(), target);
                        }
                        consumer.dirty.gone.insert(old_id);
                        consumer.dirty.target = true;
                        member.member_id = member_id.clone();
                        member.away = false;
                        consumer.members.insert(member_id.clone(), member);
                    }
                    None => {}
                }
            }
            let mut changed = false;
            if !consumer.members.contains_key(&member_id) {
                if consumer.members.len() >= config.max_size {
                    return Err(GroupError::GroupMaxSizeReached);
                }
                consumer.members.insert(
                    member_id.clone(),
                    ConsumerMember {
                        rack_id: subscription.rack_id.clone(),
                        ..ConsumerMember::new(&member_id, request.group_instance_id.clone())
                    },
                );
                changed = true;
            }
            let member = consumer.members.get_mut(&member_id).expect("member");
            let recorded = member.recorded();
            let session_timeout_ms = request.session_timeout_ms.max(0) as u64;
            member.client_id = request.client_id.clone();
            member.client_host = request.client_host.clone();
            member.rebalance_timeout_ms = request.rebalance_timeout_ms.max(0) as u64;
            member.session_deadline_ms = now_ms + session_timeout_ms;
            member.classic = Some(ClassicMember {
                protocols: request.protocols.clone(),
                session_timeout_ms,
            });
            let topics: std::collections::BTreeSet<String> =
                subscription.topics.iter().cloned().collect();
            if topics != member.subscribed_names {
                member.subscribed_names = topics;
                changed = true;
            }
            let topics = request
                .topics
                .clone()
                .unwrap_or_else(|| consumer.last_topics.clone());
            consumer.refresh_target(&topics, &default_assignor, changed);
            // What it still owns: a cooperative member lists them, an
            // eager one has given up everything before joining.
            let owned = partitions_of(&subscription.owned_partitions);
            consumer.reconcile(&member_id, Some(&owned), now_ms);
            let member = &consumer.members[&member_id];
            if member.recorded() != recorded {
                consumer.dirty.gone.remove(&member_id);
                consumer.dirty.members.insert(member_id.clone());
            }
            Ok(JoinResponse {
                error: None,
                generation_id: member.member_epoch,
                protocol_type: Some(wire::PROTOCOL_TYPE.to_string()),
                protocol_name: Some(protocol),
                // No leader: the coordinator assigns.
                leader: String::new(),
                member_id: member_id.clone(),
                members: Vec::new(),
                skip_assignment: false,
            })
        });
        match answer {
            Some(Ok(response)) => response,
            Some(Err(code)) => JoinResponse::error(code, &member_id),
            None => JoinResponse::error(GroupError::UnknownMemberId, &member_id),
        }
    }

    /// SyncGroup of a classic member of a consumer-protocol group: its
    /// partitions as reconciled.
    pub(super) fn classic_sync(
        &mut self,
        now_ms: u64,
        request: &SyncRequest,
    ) -> Result<SyncResponse, GroupError> {
        let group = self
            .groups
            .get_mut(&request.group_id)
            .ok_or(GroupError::UnknownMemberId)?;
        let consumer = group.consumer.as_mut().expect("a consumer-protocol group");
        let member = consumer
            .members
            .get_mut(&request.member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        let Some(classic) = &member.classic else {
            return Err(GroupError::InconsistentGroupProtocol);
        };
        if request.generation_id != member.member_epoch {
            return Err(GroupError::IllegalGeneration);
        }
        member.session_deadline_ms = now_ms + classic.session_timeout_ms;
        let protocol = request
            .protocol_name
            .clone()
            .or_else(|| subscription_of(&classic.protocols).map(|(name, _)| name));
        let assignment = wire::encode_assignment(
            &Assignment {
                partitions: listed(&member.assigned),
                user_data: None,
            },
            0,
        )
        .unwrap_or_default();
        Ok(SyncResponse {
            error: None,
            protocol_type: Some(wire::PROTOCOL_TYPE.to_string()),
            protocol_name: protocol,
            assignment,
        })
    }

    /// Heartbeat of a classic member of a consumer-protocol group:
    /// REBALANCE_IN_PROGRESS while it has partitions to give up or get.
    pub(super) fn classic_heartbeat(
        &mut self,
        now_ms: u64,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
    ) -> Result<(), GroupError> {
        let group = self
            .groups
            .get_mut(group_id)
            .ok_or(GroupError::UnknownMemberId)?;
        let consumer = group.consumer.as_mut().expect("a consumer-protocol group");
        let (assignment_epoch, group_epoch) = (consumer.assignment_epoch, consumer.group_epoch);
        let member = consumer
            .members
            .get_mut(member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        let Some(classic) = &member.classic else {
            return Err(GroupError::InconsistentGroupProtocol);
        };
        if generation_id != member.member_epoch {
            return Err(GroupError::IllegalGeneration);
        }
        member.session_deadline_ms = now_ms + classic.session_timeout_ms;
        let target = consumer.target.get(member_id);
        let behind = group_epoch > assignment_epoch
            || member.member_epoch != assignment_epoch
            || member.state != MemberState::Stable
            || target.is_some_and(|t| *t != member.assigned);
        if behind {
            Err(GroupError::RebalanceInProgress)
        } else {
            Ok(())
        }
    }

    /// LeaveGroup of classic members of a consumer-protocol group.
    pub(super) fn classic_leave(
        &mut self,
        now_ms: u64,
        group_id: &str,
        leaving: &[(String, Option<String>)],
        replies: &mut Replies,
    ) -> Vec<Result<(), GroupError>> {
        let codes = self
            .with_group(group_id, |group| {
                let consumer = group.consumer.as_mut().expect("a consumer-protocol group");
                let codes = leaving
                    .iter()
                    .map(|(member_id, instance)| {
                        let found = match instance {
                            Some(instance) => consumer
                                .members
                                .values()
                                .find(|m| m.instance_id.as_ref() == Some(instance))
                                .map(|m| m.member_id.clone()),
                            None => consumer
                                .members
                                .contains_key(member_id)
                                .then(|| member_id.clone()),
                        };
                        match found {
                            Some(id) => {
                                remove_member(consumer, &id);
                                Ok(())
                            }
                            None => Err(GroupError::UnknownMemberId),
                        }
                    })
                    .collect();
                group.settle_consumer(now_ms);
                codes
            })
            .unwrap_or_else(|| vec![Err(GroupError::UnknownMemberId); leaving.len()]);
        self.maybe_downgrade(group_id, now_ms, replies);
        codes
    }
}

#[cfg(test)]
mod tests {
    use super::super::{
        CommitPartition, CommittedOffset, Committer, ConsumerHeartbeat, TopicInfo, Topics,
    };
    use super::*;
    use crate::config::GroupConfig;

    /// Consumer-protocol member x joining group g, subscribed to t.
    fn join_x() -> ConsumerHeartbeat {
        ConsumerHeartbeat {
            group_id: "g".into(),
            member_id: "x".into(),
            member_epoch: 0,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: Some(vec!["t".into()]),
            owned: Some(Partitions::new()),
            ..Default::default()
        }
    }

    fn topics() -> Topics {
        [(
            "t".to_string(),
            TopicInfo {
                id: 5,
                partitions: 4,
            },
        )]
        .into()
    }

    fn subscription(owned: &[i32]) -> Bytes {
        let mut subscription = wire::Subscription::to_topics(["t"]);
        if !owned.is_empty() {
            subscription
                .owned_partitions
                .insert("t".to_string(), owned.to_vec());
        }
        wire::encode_subscription(&subscription, 1).unwrap()
    }

    fn classic_join(member_id: &str, owned: &[i32]) -> JoinRequest {
        JoinRequest {
            group_id: "g".into(),
            member_id: member_id.into(),
            group_instance_id: None,
            client_id: "classic".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), subscription(owned))],
            require_known_member_id: false,
            supports_skip_assignment: false,
            topics: Some(topics()),
        }
    }

    fn sync(
        c: &mut Coordinator,
        member_id: &str,
        generation: i32,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncResponse {
        let request = SyncRequest {
            group_id: "g".into(),
            generation_id: generation,
            member_id: member_id.into(),
            group_instance_id: None,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignments,
        };
        let mut replies = Vec::new();
        match c.sync(1_000, request, 2, &mut replies) {
            Answer::Now(response) => response,
            Answer::Parked => match replies.pop() {
                Some((_, Reply::Sync(response))) => response,
                other => panic!("parked: {other:?}"),
            },
        }
    }

    fn assigned(bytes: &Bytes) -> Vec<i32> {
        wire::assignment_partitions(bytes)
            .and_then(|p| p.get("t").cloned())
            .unwrap_or_default()
    }

    #[test]
    fn a_classic_group_turns_consumer_with_its_members_and_back() {
        let config = GroupConfig {
            initial_rebalance_delay_ms: 0,
            ..GroupConfig::default()
        };
        let mut c = Coordinator::new(config, 3);
        // A classic member alone, owning the four partitions.
        let mut replies = Vec::new();
        let answer = c.join(1_000, classic_join("", &[]), 1, &mut replies);
        let joined = match answer {
            Answer::Now(r) => r,
            Answer::Parked => match replies.pop() {
                Some((_, Reply::Join(r))) => r,
                other => panic!("{other:?}"),
            },
        };
        assert_eq!(joined.error, None, "{joined:?}");
        let generation = joined.generation_id;
        let a = joined.member_id.clone();
        let all = wire::encode_assignment(
            &Assignment {
                partitions: [("t".to_string(), vec![0, 1, 2, 3])].into(),
                user_data: None,
            },
            0,
        )
        .unwrap();
        let synced = sync(&mut c, &a, generation, vec![(a.clone(), all)]);
        assert_eq!(assigned(&synced.assignment), [0, 1, 2, 3]);
        assert_eq!(c.group("g").unwrap().group_type(), "classic");

        // A consumer-protocol member joins: the group turns consumer with
        // a in it, still owning its partitions until it gives them up.
        let x = c.consumer_heartbeat(2_000, join_x(), &topics()).unwrap();
        assert_eq!(c.group("g").unwrap().group_type(), "consumer");
        assert_eq!(x.assignment, Some(Partitions::new()), "a still owns them");
        let group = c.consumer_group("g").unwrap();
        assert!(group.double_owned().is_empty());
        assert!(group.members[&a].classic.is_some());
        // a hears of it at its heartbeat, gives up everything (eager) and
        // joins again: answered at once, no leader, at the new epoch.
        assert_eq!(
            c.heartbeat(2_100, "g", generation, &a, None),
            Err(GroupError::RebalanceInProgress)
        );
        let rejoined = match c.join(2_200, classic_join(&a, &[]), 3, &mut Vec::new()) {
            Answer::Now(r) => r,
            Answer::Parked => panic!("parked"),
        };
        assert_eq!(rejoined.error, None, "{rejoined:?}");
        assert_eq!(rejoined.leader, "");
        assert!(rejoined.generation_id > generation);
        let a_now = sync(&mut c, &a, rejoined.generation_id, Vec::new());
        assert_eq!(assigned(&a_now.assignment).len(), 2);
        // x gets the other two.
        let x2 = c
            .consumer_heartbeat(
                2_300,
                ConsumerHeartbeat {
                    group_id: "g".into(),
                    member_id: "x".into(),
                    member_epoch: x.member_epoch,
                    rebalance_timeout_ms: -1,
                    owned: Some(Partitions::new()),
                    ..Default::default()
                },
                &topics(),
            )
            .unwrap();
        assert_eq!(x2.assignment.as_ref().map(|p| p["t"].len()), Some(2));
        assert!(c.consumer_group("g").unwrap().double_owned().is_empty());
        assert_eq!(
            c.heartbeat(2_400, "g", rejoined.generation_id, &a, None),
            Ok(())
        );
        // Both commit at their epochs.
        let offset = CommittedOffset {
            offset: 7,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 0,
        };
        for (member, epoch) in [(a.as_str(), rejoined.generation_id), ("x", x2.member_epoch)] {
            let committer = Committer {
                group_id: "g".into(),
                generation_id: epoch,
                member_id: member.into(),
                group_instance_id: None,
            };
            let part = CommitPartition {
                topic: "t".into(),
                partition: 0,
                offset: offset.clone(),
            };
            assert_eq!(
                c.commit(2_500, &committer, &[part]),
                Ok(vec![Ok(())]),
                "{member}"
            );
        }
        // The records keep a as a classic member.
        let records = c.take_consumer_records(|_| true);
        let mut moved = Coordinator::new(GroupConfig::default(), 4);
        let names = |id: u128| (id == 5).then(|| "t".to_string());
        for (key, value) in &records {
            crate::load::replay_with_topics(&mut moved, key, value.as_deref(), 3_000, &names);
        }
        let loaded = moved.consumer_group("g").unwrap();
        assert_eq!(
            loaded.members[&a]
                .classic
                .as_ref()
                .map(|c| c.protocols.len()),
            Some(1)
        );
        assert_eq!(
            loaded.members[&a].assigned,
            c.consumer_group("g").unwrap().members[&a].assigned
        );

        // x leaves: only a classic member is left, the group turns
        // classic again and rebalances the classic way.
        c.consumer_heartbeat(
            3_000,
            ConsumerHeartbeat {
                group_id: "g".into(),
                member_id: "x".into(),
                member_epoch: -1,
                rebalance_timeout_ms: -1,
                ..Default::default()
            },
            &topics(),
        )
        .unwrap();
        let group = c.group("g").unwrap();
        assert_eq!(group.group_type(), "classic");
        assert_eq!(group.state(), GroupState::PreparingRebalance);
        assert_eq!(
            c.heartbeat(3_100, "g", rejoined.generation_id, &a, None),
            Err(GroupError::RebalanceInProgress)
        );
        // The consumer-protocol records end in tombstones: replayed, no
        // consumer-protocol group is left.
        let mut again = Coordinator::new(GroupConfig::default(), 5);
        for (key, value) in records.iter().chain(&c.take_consumer_records(|_| true)) {
            crate::load::replay_with_topics(&mut again, key, value.as_deref(), 4_000, &names);
        }
        assert!(again.consumer_group("g").is_none());
    }

    #[test]
    fn with_migration_disabled_a_group_with_members_keeps_its_protocol() {
        let mut config = GroupConfig {
            initial_rebalance_delay_ms: 0,
            ..GroupConfig::default()
        };
        config.consumer.migration_policy = crate::config::MigrationPolicy::Disabled;
        let mut c = Coordinator::new(config, 3);
        let mut replies = Vec::new();
        let _ = c.join(1_000, classic_join("", &[]), 1, &mut replies);
        let refused = c.consumer_heartbeat(2_000, join_x(), &topics());
        assert_eq!(refused, Err(GroupError::GroupIdNotFound));
        assert_eq!(c.group("g").unwrap().group_type(), "classic");
    }
}
