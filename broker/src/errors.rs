//! The one place that maps internal errors to Kafka error codes.

use protocol::batch::BatchError;

use storage::StorageError;

pub use protocol::error_codes::*;

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
    #[error("not authorized: {0}")]
    NotAuthorized(String),
}
