//! `GroupMember`: a member of a consumer group for one topic, behind
//! `strom consume TOPIC --group G`: joins (the leader range-assigns),
//! heartbeats, commits its positions and leaves.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use anyhow::{bail, Context};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    SyncGroupRequest,
};
use protocol::admin::{list_topic_offsets, partitions, EARLIEST, LATEST};
use protocol::client::{check_error, Connection, ERROR_NONE};
use protocol::consumer_protocol::{
    assignment_partitions, encode_assignment, encode_subscription, subscription_topics, Assignment,
    Subscription, PROTOCOL_TYPE,
};
use protocol::kafka_protocol::error::ResponseError;

use super::assignor::range_assign;
use super::{
    commit, committed, coordinator, group_id, text, ConnectArgs, ASSIGNOR, HEARTBEAT_INTERVAL_MS,
    HEARTBEAT_VERSIONS, JOIN_ATTEMPTS_MAX, JOIN_GROUP_VERSIONS, LEAVE_GROUP_VERSIONS,
    REBALANCE_TIMEOUT_MS, SESSION_TIMEOUT_MS, SYNC_GROUP_VERSIONS,
};

/// The consumer protocol versions a member writes: v0 has everything
/// the range assignor needs (no owned partitions, no rack).
const SUBSCRIPTION_VERSION: i16 = 0;
const ASSIGNMENT_VERSION: i16 = 0;

/// A member of a consumer group for one topic (`strom consume --group`).
pub struct GroupMember {
    connect: ConnectArgs,
    group: String,
    topic: String,
    coordinator: Connection,
    member_id: String,
    generation: i32,
    assigned: Vec<i32>,
    /// Raised by the heartbeat task when the coordinator asks to rejoin.
    rejoin: Rc<Cell<bool>>,
    heartbeat: Option<glommio::Task<()>>,
    /// What was last committed, so an idle loop commits nothing.
    last_committed: BTreeMap<i32, i64>,
}

impl GroupMember {
    /// Joins `group` subscribed to `topic` and waits for an assignment.
    pub async fn join(connect: &ConnectArgs, group: &str, topic: &str) -> anyhow::Result<Self> {
        let coordinator = coordinator(connect, group).await?;
        let mut member = GroupMember {
            connect: connect.clone(),
            group: group.to_string(),
            topic: topic.to_string(),
            coordinator,
            member_id: String::new(),
            generation: -1,
            assigned: Vec::new(),
            rejoin: Rc::new(Cell::new(false)),
            heartbeat: None,
            last_committed: BTreeMap::new(),
        };
        member.rejoin().await?;
        Ok(member)
    }

    /// Whether the group rebalances and this member must `rejoin`.
    pub fn rebalance_needed(&self) -> bool {
        self.rejoin.get()
    }

    /// (Re)joins the group and syncs: a new generation and assignment.
    pub async fn rejoin(&mut self) -> anyhow::Result<()> {
        self.heartbeat = None;
        self.rejoin.set(false);
        let join_version = self
            .coordinator
            .version::<JoinGroupRequest>(JOIN_GROUP_VERSIONS)?;
        let sync_version = self
            .coordinator
            .version::<SyncGroupRequest>(SYNC_GROUP_VERSIONS)?;
        for _ in 0..JOIN_ATTEMPTS_MAX {
            let Some(joined) = self.join_once(join_version).await? else {
                continue;
            };
            let Some(assigned) = self.sync_once(&joined, sync_version).await? else {
                continue;
            };
            self.assigned = assigned;
            self.start_heartbeat().await?;
            return Ok(());
        }
        bail!(
            "group {} kept rebalancing: no assignment after {JOIN_ATTEMPTS_MAX} joins",
            self.group
        )
    }

    /// One JoinGroup; `None` when the coordinator asks to join again (a
    /// member id to use, an unknown one, a rebalance racing the join).
    async fn join_once(&mut self, version: i16) -> anyhow::Result<Option<JoinGroupResponse>> {
        let request = JoinGroupRequest::default()
            .with_group_id(group_id(&self.group))
            .with_session_timeout_ms(SESSION_TIMEOUT_MS)
            .with_rebalance_timeout_ms(REBALANCE_TIMEOUT_MS)
            .with_member_id(text(&self.member_id))
            .with_protocol_type(text(PROTOCOL_TYPE))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(text(ASSIGNOR))
                .with_metadata(encode_subscription(
                    &Subscription::to_topics([self.topic.as_str()]),
                    SUBSCRIPTION_VERSION,
                )?)]);
        let joined = self.coordinator.call(&request, version).await?;
        match ResponseError::try_from_code(joined.error_code) {
            None => {}
            Some(ResponseError::MemberIdRequired) => {
                self.member_id = joined.member_id.to_string();
                return Ok(None);
            }
            Some(ResponseError::UnknownMemberId) => {
                self.member_id.clear();
                return Ok(None);
            }
            Some(ResponseError::RebalanceInProgress) => return Ok(None),
            Some(_) => {
                check_error(ApiKey::JoinGroup, joined.error_code, None)
                    .with_context(|| format!("cannot join group {}", self.group))?;
            }
        }
        self.member_id = joined.member_id.to_string();
        self.generation = joined.generation_id;
        Ok(Some(joined))
    }

    /// SyncGroup after a join (the leader assigns first); this member's
    /// partitions of the topic, sorted, or `None` when the group moved on
    /// and the member must join again.
    async fn sync_once(
        &mut self,
        joined: &JoinGroupResponse,
        version: i16,
    ) -> anyhow::Result<Option<Vec<i32>>> {
        let protocol = joined
            .protocol_name
            .as_ref()
            .map(|p| p.to_string())
            .unwrap_or_else(|| ASSIGNOR.to_string());
        let assignments = if joined.leader.as_str() == self.member_id {
            if protocol != ASSIGNOR {
                bail!(
                    "group {} chose assignor {protocol}; strom consume only knows {ASSIGNOR}",
                    self.group
                );
            }
            self.lead(&joined.members).await?
        } else {
            Vec::new()
        };
        let request = SyncGroupRequest::default()
            .with_group_id(group_id(&self.group))
            .with_generation_id(self.generation)
            .with_member_id(text(&self.member_id))
            .with_protocol_type(Some(text(PROTOCOL_TYPE)))
            .with_protocol_name(Some(text(&protocol)))
            .with_assignments(assignments);
        let synced = self.coordinator.call(&request, version).await?;
        match ResponseError::try_from_code(synced.error_code) {
            None => {}
            Some(ResponseError::RebalanceInProgress | ResponseError::IllegalGeneration) => {
                return Ok(None)
            }
            Some(ResponseError::UnknownMemberId) => {
                self.member_id.clear();
                return Ok(None);
            }
            Some(_) => {
                check_error(ApiKey::SyncGroup, synced.error_code, None)
                    .with_context(|| format!("cannot sync group {}", self.group))?;
            }
        }
        let assignment = assignment_partitions(&synced.assignment).unwrap_or_default();
        let mut assigned = assignment.get(&self.topic).cloned().unwrap_or_default();
        assigned.sort_unstable();
        Ok(Some(assigned))
    }

    /// The leader's part: range-assign every member's subscription.
    async fn lead(
        &mut self,
        members: &[kafka_protocol::messages::join_group_response::JoinGroupResponseMember],
    ) -> anyhow::Result<Vec<SyncGroupRequestAssignment>> {
        let mut subscriptions = BTreeMap::new();
        for m in members {
            let topics = subscription_topics(&m.metadata).unwrap_or_default();
            subscriptions.insert(m.member_id.to_string(), topics);
        }
        let mut counts = BTreeMap::new();
        let mut bootstrap = self.connect.connect().await?;
        for topic in subscriptions.values().flatten() {
            if !counts.contains_key(topic) {
                let ids = partitions(&mut bootstrap, topic, false).await?;
                counts.insert(topic.clone(), ids.len() as i32);
            }
        }
        let mut assignments = Vec::with_capacity(subscriptions.len());
        for (member, partitions) in range_assign(&subscriptions, &counts) {
            let assignment = Assignment {
                partitions,
                user_data: None,
            };
            assignments.push(
                SyncGroupRequestAssignment::default()
                    .with_member_id(text(&member))
                    .with_assignment(encode_assignment(&assignment, ASSIGNMENT_VERSION)?),
            );
        }
        Ok(assignments)
    }

    async fn start_heartbeat(&mut self) -> anyhow::Result<()> {
        let connect = self.connect.to(self.coordinator.address().to_string());
        let mut connection = connect.connect().await?;
        let version = connection.version::<HeartbeatRequest>(HEARTBEAT_VERSIONS)?;
        let request = HeartbeatRequest::default()
            .with_group_id(group_id(&self.group))
            .with_generation_id(self.generation)
            .with_member_id(text(&self.member_id));
        let rejoin = self.rejoin.clone();
        // Dropping the task (on rejoin or when the member goes) stops it.
        self.heartbeat = Some(glommio::spawn_local(async move {
            loop {
                glommio::timer::sleep(Duration::from_millis(HEARTBEAT_INTERVAL_MS)).await;
                // Any error, or no answer, means the group moved on.
                let rejoin_needed = match connection.call(&request, version).await {
                    Ok(response) => response.error_code != ERROR_NONE,
                    Err(_) => true,
                };
                if rejoin_needed {
                    rejoin.set(true);
                    return;
                }
            }
        }));
        Ok(())
    }

    /// The offsets to start from: committed, else earliest or latest.
    pub async fn start_positions(
        &mut self,
        from_beginning: bool,
    ) -> anyhow::Result<BTreeMap<i32, i64>> {
        if self.assigned.is_empty() {
            return Ok(BTreeMap::new());
        }
        let assigned = self.assigned.clone();
        let found = committed(
            &mut self.coordinator,
            &self.group,
            Some((&self.topic, &assigned)),
        )
        .await?;
        let mine = found.get(&self.topic).cloned().unwrap_or_default();
        let mut bootstrap = self.connect.connect().await?;
        let reset = list_topic_offsets(
            &mut bootstrap,
            &self.topic,
            &assigned,
            if from_beginning { EARLIEST } else { LATEST },
        )
        .await?;
        Ok(assigned
            .iter()
            .map(|p| {
                let offset = mine.get(p).copied().filter(|o| *o >= 0).unwrap_or(reset[p]);
                (*p, offset)
            })
            .collect())
    }

    /// Commits the positions of the assigned partitions. A rebalance in
    /// the way is not an error: the member rejoins after.
    pub async fn commit(&mut self, positions: &BTreeMap<i32, i64>) -> anyhow::Result<()> {
        if *positions == self.last_committed {
            return Ok(());
        }
        let (group, member, generation, topic) = (
            self.group.clone(),
            self.member_id.clone(),
            self.generation,
            self.topic.clone(),
        );
        match commit(
            &mut self.coordinator,
            &group,
            generation,
            &member,
            &topic,
            positions,
        )
        .await
        {
            Ok(()) => {
                self.last_committed = positions.clone();
                Ok(())
            }
            Err(error) => {
                let retry = error
                    .downcast_ref::<protocol::client::ClientError>()
                    .and_then(protocol::client::ClientError::kafka_error)
                    .is_some_and(|e| {
                        matches!(
                            e,
                            ResponseError::RebalanceInProgress
                                | ResponseError::IllegalGeneration
                                | ResponseError::UnknownMemberId
                        )
                    });
                if retry {
                    self.rejoin.set(true);
                    Ok(())
                } else {
                    Err(error.context(format!("cannot commit offsets of group {group}")))
                }
            }
        }
    }

    /// Commits and leaves the group (no waiting for a session timeout).
    pub async fn finish(mut self, positions: &BTreeMap<i32, i64>) -> anyhow::Result<()> {
        self.commit(positions).await?;
        self.leave().await
    }

    /// Leaves the group without committing.
    pub async fn leave(mut self) -> anyhow::Result<()> {
        self.heartbeat = None;
        let version = self
            .coordinator
            .version::<LeaveGroupRequest>(LEAVE_GROUP_VERSIONS)?;
        let request = LeaveGroupRequest::default().with_group_id(group_id(&self.group));
        // v3+ leaves in batches; before, one member id.
        let request = if version >= 3 {
            request.with_members(vec![
                MemberIdentity::default().with_member_id(text(&self.member_id))
            ])
        } else {
            request.with_member_id(text(&self.member_id))
        };
        let response = self.coordinator.call(&request, version).await?;
        check_error(ApiKey::LeaveGroup, response.error_code, None)?;
        for member in &response.members {
            check_error(ApiKey::LeaveGroup, member.error_code, None)?;
        }
        Ok(())
    }
}
