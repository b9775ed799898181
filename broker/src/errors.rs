//! The one place that maps internal errors to Kafka error codes.

use kafka_protocol::ResponseError;
use protocol::batch::BatchError;

use storage::StorageError;

pub const NONE: i16 = 0;
pub const OFFSET_OUT_OF_RANGE: i16 = ResponseError::OffsetOutOfRange.code();
pub const CORRUPT_MESSAGE: i16 = ResponseError::CorruptMessage.code();
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = ResponseError::UnknownTopicOrPartition.code();
pub const NOT_LEADER_OR_FOLLOWER: i16 = ResponseError::NotLeaderOrFollower.code();
pub const MESSAGE_TOO_LARGE: i16 = ResponseError::MessageTooLarge.code();
pub const INVALID_TOPIC_EXCEPTION: i16 = ResponseError::InvalidTopicException.code();
pub const INVALID_REQUIRED_ACKS: i16 = ResponseError::InvalidRequiredAcks.code();
pub const TOPIC_ALREADY_EXISTS: i16 = ResponseError::TopicAlreadyExists.code();
pub const INVALID_PARTITIONS: i16 = ResponseError::InvalidPartitions.code();
pub const INVALID_REPLICATION_FACTOR: i16 = ResponseError::InvalidReplicationFactor.code();
pub const INVALID_REPLICA_ASSIGNMENT: i16 = ResponseError::InvalidReplicaAssignment.code();
pub const NO_REASSIGNMENT_IN_PROGRESS: i16 = ResponseError::NoReassignmentInProgress.code();
pub const INVALID_CONFIG: i16 = ResponseError::InvalidConfig.code();
pub const INVALID_REQUEST: i16 = ResponseError::InvalidRequest.code();
pub const UNSUPPORTED_VERSION: i16 = ResponseError::UnsupportedVersion.code();
pub const INVALID_RECORD: i16 = ResponseError::InvalidRecord.code();
pub const KAFKA_STORAGE_ERROR: i16 = ResponseError::KafkaStorageError.code();
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = ResponseError::OutOfOrderSequenceNumber.code();
pub const DUPLICATE_SEQUENCE_NUMBER: i16 = ResponseError::DuplicateSequenceNumber.code();
pub const INVALID_PRODUCER_EPOCH: i16 = ResponseError::InvalidProducerEpoch.code();
pub const TOPIC_DELETION_DISABLED: i16 = ResponseError::TopicDeletionDisabled.code();
pub const POLICY_VIOLATION: i16 = ResponseError::PolicyViolation.code();
pub const UNKNOWN_SERVER_ERROR: i16 = ResponseError::UnknownServerError.code();
pub const NOT_CONTROLLER: i16 = ResponseError::NotController.code();
pub const REQUEST_TIMED_OUT: i16 = ResponseError::RequestTimedOut.code();
pub const DUPLICATE_VOTER: i16 = ResponseError::DuplicateVoter.code();
pub const VOTER_NOT_FOUND: i16 = ResponseError::VoterNotFound.code();
pub const INVALID_UPDATE_VERSION: i16 = ResponseError::InvalidUpdateVersion.code();
pub const INELIGIBLE_REPLICA: i16 = ResponseError::IneligibleReplica.code();
pub const ELECTION_NOT_NEEDED: i16 = ResponseError::ElectionNotNeeded.code();
pub const PREFERRED_LEADER_NOT_AVAILABLE: i16 = ResponseError::PreferredLeaderNotAvailable.code();
pub const ELIGIBLE_LEADERS_NOT_AVAILABLE: i16 = ResponseError::EligibleLeadersNotAvailable.code();
pub const INVALID_TXN_STATE: i16 = ResponseError::InvalidTxnState.code();
pub const NOT_ENOUGH_REPLICAS: i16 = ResponseError::NotEnoughReplicas.code();
pub const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 =
    ResponseError::NotEnoughReplicasAfterAppend.code();
pub const FENCED_LEADER_EPOCH: i16 = ResponseError::FencedLeaderEpoch.code();
pub const UNKNOWN_LEADER_EPOCH: i16 = ResponseError::UnknownLeaderEpoch.code();

/// A record batch that failed validation.
pub fn batch_error_code(error: &BatchError) -> i16 {
    match error {
        BatchError::CrcMismatch { .. } => CORRUPT_MESSAGE,
        _ => INVALID_RECORD,
    }
}

/// A storage failure as the client sees it.
pub fn storage_error_code(error: &StorageError) -> i16 {
    match error {
        StorageError::OffsetOutOfRange { .. } => OFFSET_OUT_OF_RANGE,
        StorageError::BatchTooLarge { .. } => MESSAGE_TOO_LARGE,
        StorageError::InvalidBatch(batch) => batch_error_code(batch),
        StorageError::Closed { .. } => NOT_LEADER_OR_FOLLOWER,
        // A full disk: Kafka's clients retry KAFKA_STORAGE_ERROR, and the
        // log takes writes again once space returns.
        StorageError::NoSpace { .. } => KAFKA_STORAGE_ERROR,
        _ => KAFKA_STORAGE_ERROR,
    }
}

// Consumer groups (`group/`).
pub const OFFSET_METADATA_TOO_LARGE: i16 = ResponseError::OffsetMetadataTooLarge.code();
pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = ResponseError::CoordinatorLoadInProgress.code();
pub const COORDINATOR_NOT_AVAILABLE: i16 = ResponseError::CoordinatorNotAvailable.code();
pub const NOT_COORDINATOR: i16 = ResponseError::NotCoordinator.code();
pub const ILLEGAL_GENERATION: i16 = ResponseError::IllegalGeneration.code();
pub const INCONSISTENT_GROUP_PROTOCOL: i16 = ResponseError::InconsistentGroupProtocol.code();
pub const INVALID_GROUP_ID: i16 = ResponseError::InvalidGroupId.code();
pub const UNKNOWN_MEMBER_ID: i16 = ResponseError::UnknownMemberId.code();
pub const INVALID_SESSION_TIMEOUT: i16 = ResponseError::InvalidSessionTimeout.code();
pub const REBALANCE_IN_PROGRESS: i16 = ResponseError::RebalanceInProgress.code();
pub const INVALID_COMMIT_OFFSET_SIZE: i16 = ResponseError::InvalidCommitOffsetSize.code();
pub const NON_EMPTY_GROUP: i16 = ResponseError::NonEmptyGroup.code();
pub const GROUP_ID_NOT_FOUND: i16 = ResponseError::GroupIdNotFound.code();
pub const MEMBER_ID_REQUIRED: i16 = ResponseError::MemberIdRequired.code();
pub const GROUP_MAX_SIZE_REACHED: i16 = ResponseError::GroupMaxSizeReached.code();
pub const FENCED_INSTANCE_ID: i16 = ResponseError::FencedInstanceId.code();
pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = ResponseError::GroupSubscribedToTopic.code();

// Cluster and admin description APIs (DescribeCluster, DescribeProducers,
// DescribeLogDirs, DescribeTopicPartitions, ListConfigResources).
pub const MISMATCHED_ENDPOINT_TYPE: i16 = ResponseError::MismatchedEndpointType.code();
pub const UNSUPPORTED_ENDPOINT_TYPE: i16 = ResponseError::UnsupportedEndpointType.code();
pub const UNKNOWN_TOPIC_ID: i16 = ResponseError::UnknownTopicId.code();

/// The code a client gets for a partition this node does not serve.
pub fn not_served(why: replication::metadata::NotServed) -> i16 {
    match why {
        replication::metadata::NotServed::UnknownTopicOrPartition => UNKNOWN_TOPIC_OR_PARTITION,
        replication::metadata::NotServed::NotLeaderOrFollower => NOT_LEADER_OR_FOLLOWER,
    }
}

/// The code a client gets for a change the controller refused.
pub fn refused(why: replication::placement::Refused) -> i16 {
    use replication::placement::Refused;
    match why {
        Refused::ElectionNotNeeded => ELECTION_NOT_NEEDED,
        Refused::EligibleLeadersNotAvailable => ELIGIBLE_LEADERS_NOT_AVAILABLE,
        Refused::FencedLeaderEpoch => FENCED_LEADER_EPOCH,
        Refused::IneligibleReplica => INELIGIBLE_REPLICA,
        Refused::InvalidReplicaAssignment => INVALID_REPLICA_ASSIGNMENT,
        Refused::InvalidRequest => INVALID_REQUEST,
        Refused::InvalidUpdateVersion => INVALID_UPDATE_VERSION,
        Refused::NoReassignmentInProgress => NO_REASSIGNMENT_IN_PROGRESS,
        Refused::PreferredLeaderNotAvailable => PREFERRED_LEADER_NOT_AVAILABLE,
        Refused::UnknownTopicOrPartition => UNKNOWN_TOPIC_OR_PARTITION,
    }
}

/// The code a client or follower gets for what the replica state refused.
pub fn replica(why: replication::replica::ReplicaError) -> i16 {
    use replication::replica::ReplicaError;
    match why {
        ReplicaError::InvalidRequest => INVALID_REQUEST,
        ReplicaError::NotLeaderOrFollower => NOT_LEADER_OR_FOLLOWER,
        ReplicaError::FencedLeaderEpoch => FENCED_LEADER_EPOCH,
        ReplicaError::UnknownLeaderEpoch => UNKNOWN_LEADER_EPOCH,
        ReplicaError::OffsetOutOfRange => OFFSET_OUT_OF_RANGE,
        ReplicaError::NotEnoughReplicas => NOT_ENOUGH_REPLICAS,
        ReplicaError::NotEnoughReplicasAfterAppend => NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    }
}

/// [`replica`] of a parked produce's outcome (NONE when it holds).
pub fn replica_outcome(result: Result<(), replication::replica::ReplicaError>) -> i16 {
    result.map_or_else(replica, |()| NONE)
}

/// Why a connection was closed by the broker.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("bad frame: {0}")]
    Frame(#[from] protocol::frame::FrameError),
    #[error("bad request: {0}")]
    Codec(#[from] protocol::codec::CodecError),
    #[error("{api_key:?} v{api_version} is not supported")]
    UnsupportedVersion {
        api_key: kafka_protocol::messages::ApiKey,
        api_version: i16,
    },
    #[error("{api_key:?} is not supported")]
    UnsupportedApi {
        api_key: kafka_protocol::messages::ApiKey,
    },
    #[error(
        "request of api key {api_key} and {frame_bytes} bytes exceeds the limit for non-produce requests"
    )]
    RequestTooLarge { api_key: i16, frame_bytes: usize },
    #[error("request handler failed")]
    HandlerGone,
}
