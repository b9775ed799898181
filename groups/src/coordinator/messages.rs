//! What callers hand the coordinator and what it answers: decoded
//! requests, responses, parked-request replies and descriptions.

use bytes::Bytes;

use crate::error::GroupError;

/// Identifies a parked JoinGroup or SyncGroup request.
pub type WaiterId = u64;

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
    /// The topics the metadata has, for a group that turned
    /// consumer-protocol while it has classic members (the coordinator
    /// assigns their partitions); `None` where unknown.
    pub topics: Option<super::Topics>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinResponse {
    pub error: Option<GroupError>,
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
    pub fn error(error: GroupError, member_id: &str) -> Self {
        Self {
            error: Some(error),
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
    pub error: Option<GroupError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResponse {
    pub fn error(error: GroupError) -> Self {
        Self {
            error: Some(error),
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
    /// Kafka's name of the state: the classic state's, or for a
    /// consumer-protocol group its own (`Assigning`, `Reconciling`, ...).
    pub state_name: &'static str,
    pub protocol_type: String,
    pub protocol_name: String,
    pub generation_id: i32,
    pub members: Vec<MemberDescription>,
}

/// A group's membership as `__consumer_offsets` keeps it (Kafka's
/// GroupMetadataValue): taken when a rebalance completes (the group is
/// Stable with its assignments) and when the group becomes Empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadata {
    /// `""` for a group without one, as Kafka writes it.
    pub protocol_type: String,
    pub generation_id: i32,
    pub protocol_name: Option<String>,
    pub leader_id: Option<String>,
    /// When the group entered the state the record was taken in (-1:
    /// unknown, as in records before Kafka's version 2).
    pub state_timestamp_ms: i64,
    pub members: Vec<MemberMetadata>,
}

/// One member in a [`GroupMetadata`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberMetadata {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// The member's metadata for the group's protocol.
    pub subscription: Bytes,
    pub assignment: Bytes,
}

/// An offset the coordinator dropped (retention, deletion): the manager
/// writes a tombstone for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedOffset {
    pub group_id: String,
    pub topic: String,
    pub partition: i32,
}

/// A group as ListGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    /// Kafka's name of its state ("Stable", "Reconciling", ...).
    pub state: &'static str,
    /// "classic" or "consumer".
    pub group_type: &'static str,
}
