//! Why the coordinator refused a request: its own error type, mapped to
//! Kafka's error codes only where an answer is encoded (the broker's
//! handlers, the simulator's clients).

use protocol::error_codes as codes;

/// A coordinator's refusal, one variant per Kafka error it answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// The group is being unloaded or moved, or this core holds as many
    /// groups as it may: the client looks for the coordinator again.
    #[error("the coordinator is not available")]
    CoordinatorNotAvailable,
    /// The coordinator is still reading its offsets partition's log.
    #[error("the coordinator is loading its groups")]
    CoordinatorLoadInProgress,
    /// The group's offsets partition is led elsewhere now.
    #[error("this broker is not the group's coordinator")]
    NotCoordinator,
    #[error("the group id is empty or too long")]
    InvalidGroupId,
    #[error("no such group")]
    GroupIdNotFound,
    #[error("the group still has members")]
    NonEmptyGroup,
    #[error("the group still consumes the topic")]
    GroupSubscribedToTopic,
    #[error("the member is not in the group")]
    UnknownMemberId,
    #[error("a new member must join again with the member id it was given")]
    MemberIdRequired,
    #[error("the member's generation is not the group's")]
    IllegalGeneration,
    #[error("the group is rebalancing")]
    RebalanceInProgress,
    #[error("another member holds this static member's instance id")]
    FencedInstanceId,
    #[error("the member's protocols do not match the group's")]
    InconsistentGroupProtocol,
    #[error("the group has as many members as it may")]
    GroupMaxSizeReached,
    #[error("the session timeout is outside the broker's bounds")]
    InvalidSessionTimeout,
    #[error("the committed offset's metadata is too large")]
    OffsetMetadataTooLarge,
    #[error("the committed offsets do not fit")]
    InvalidCommitOffsetSize,
    #[error("the request is malformed")]
    InvalidRequest,
    /// A transactional commit from a producer epoch a newer one fenced.
    #[error("the producer was fenced by a newer one with the same transactional id")]
    ProducerFenced,
    /// Offsets committed in a transaction whose coordinator does not have
    /// the group's `__consumer_offsets` partition in it (no
    /// AddOffsetsToTxn first, or the transaction has ended).
    #[error("the group's offsets partition is not in the producer's transaction")]
    InvalidTxnState,
    /// A consumer-protocol member's epoch is not the group's view of it:
    /// it must give up its partitions and join again.
    #[error("the member's epoch is fenced")]
    FencedMemberEpoch,
    #[error("a live member still holds this static member's instance id")]
    UnreleasedInstanceId,
    #[error("the server-side assignor is not supported")]
    UnsupportedAssignor,
    /// An offset commit from a consumer-protocol member at an epoch that
    /// is not its current one.
    #[error("the member's epoch is stale")]
    StaleMemberEpoch,
    #[error("the subscription's regular expression is not valid")]
    InvalidRegularExpression,
}

impl GroupError {
    /// Kafka's error code for this refusal.
    pub const fn code(self) -> i16 {
        match self {
            GroupError::CoordinatorNotAvailable => codes::COORDINATOR_NOT_AVAILABLE,
            GroupError::NotCoordinator => codes::NOT_COORDINATOR,
            GroupError::CoordinatorLoadInProgress => codes::COORDINATOR_LOAD_IN_PROGRESS,
            GroupError::InvalidGroupId => codes::INVALID_GROUP_ID,
            GroupError::GroupIdNotFound => codes::GROUP_ID_NOT_FOUND,
            GroupError::NonEmptyGroup => codes::NON_EMPTY_GROUP,
            GroupError::GroupSubscribedToTopic => codes::GROUP_SUBSCRIBED_TO_TOPIC,
            GroupError::UnknownMemberId => codes::UNKNOWN_MEMBER_ID,
            GroupError::MemberIdRequired => codes::MEMBER_ID_REQUIRED,
            GroupError::IllegalGeneration => codes::ILLEGAL_GENERATION,
            GroupError::RebalanceInProgress => codes::REBALANCE_IN_PROGRESS,
            GroupError::FencedInstanceId => codes::FENCED_INSTANCE_ID,
            GroupError::InconsistentGroupProtocol => codes::INCONSISTENT_GROUP_PROTOCOL,
            GroupError::GroupMaxSizeReached => codes::GROUP_MAX_SIZE_REACHED,
            GroupError::InvalidSessionTimeout => codes::INVALID_SESSION_TIMEOUT,
            GroupError::OffsetMetadataTooLarge => codes::OFFSET_METADATA_TOO_LARGE,
            GroupError::InvalidCommitOffsetSize => codes::INVALID_COMMIT_OFFSET_SIZE,
            GroupError::FencedMemberEpoch => codes::FENCED_MEMBER_EPOCH,
            GroupError::UnreleasedInstanceId => codes::UNRELEASED_INSTANCE_ID,
            GroupError::UnsupportedAssignor => codes::UNSUPPORTED_ASSIGNOR,
            GroupError::StaleMemberEpoch => codes::STALE_MEMBER_EPOCH,
            GroupError::InvalidRegularExpression => codes::INVALID_REGULAR_EXPRESSION,
            GroupError::InvalidRequest => codes::INVALID_REQUEST,
            GroupError::ProducerFenced => codes::PRODUCER_FENCED,
            GroupError::InvalidTxnState => codes::INVALID_TXN_STATE,
        }
    }

    /// Kafka's error code for an outcome: NONE when it succeeded.
    pub fn code_of<T>(outcome: &Result<T, GroupError>) -> i16 {
        match outcome {
            Ok(_) => codes::NONE,
            Err(error) => error.code(),
        }
    }

    /// Kafka's error code for an optional refusal: NONE for none.
    pub fn code_or_none(error: Option<GroupError>) -> i16 {
        error.map_or(codes::NONE, GroupError::code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_has_its_own_kafka_code() {
        let all = [
            GroupError::CoordinatorNotAvailable,
            GroupError::NotCoordinator,
            GroupError::CoordinatorLoadInProgress,
            GroupError::InvalidGroupId,
            GroupError::GroupIdNotFound,
            GroupError::NonEmptyGroup,
            GroupError::GroupSubscribedToTopic,
            GroupError::UnknownMemberId,
            GroupError::MemberIdRequired,
            GroupError::IllegalGeneration,
            GroupError::RebalanceInProgress,
            GroupError::FencedInstanceId,
            GroupError::InconsistentGroupProtocol,
            GroupError::GroupMaxSizeReached,
            GroupError::InvalidSessionTimeout,
            GroupError::OffsetMetadataTooLarge,
            GroupError::InvalidCommitOffsetSize,
            GroupError::InvalidRequest,
            GroupError::ProducerFenced,
            GroupError::InvalidTxnState,
        ];
        let codes: std::collections::BTreeSet<i16> = all.iter().map(|e| e.code()).collect();
        assert_eq!(codes.len(), all.len(), "two refusals share a code");
        assert!(!codes.contains(&codes::NONE));
        assert_eq!(GroupError::code_of::<()>(&Ok(())), codes::NONE);
        assert_eq!(
            GroupError::code_of::<()>(&Err(GroupError::RebalanceInProgress)),
            codes::REBALANCE_IN_PROGRESS
        );
    }
}
