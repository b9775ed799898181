//! Kafka's error codes as the broker and its deciding crates answer them,
//! named as Kafka names them (`kafka_protocol`'s `ResponseError`). The
//! broker maps its own error types to these at the handler boundary.

use kafka_protocol::ResponseError;

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
pub const FENCED_MEMBER_EPOCH: i16 = ResponseError::FencedMemberEpoch.code();
pub const UNRELEASED_INSTANCE_ID: i16 = ResponseError::UnreleasedInstanceId.code();
pub const UNSUPPORTED_ASSIGNOR: i16 = ResponseError::UnsupportedAssignor.code();
pub const STALE_MEMBER_EPOCH: i16 = ResponseError::StaleMemberEpoch.code();
pub const INVALID_REGULAR_EXPRESSION: i16 = ResponseError::InvalidRegularExpression.code();
pub const FENCED_INSTANCE_ID: i16 = ResponseError::FencedInstanceId.code();
pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = ResponseError::GroupSubscribedToTopic.code();

// Cluster and admin description APIs (DescribeCluster, DescribeProducers,
// DescribeLogDirs, DescribeTopicPartitions, ListConfigResources).
pub const MISMATCHED_ENDPOINT_TYPE: i16 = ResponseError::MismatchedEndpointType.code();
pub const UNSUPPORTED_ENDPOINT_TYPE: i16 = ResponseError::UnsupportedEndpointType.code();
pub const UNKNOWN_TOPIC_ID: i16 = ResponseError::UnknownTopicId.code();

// Transactions.
pub const PRODUCER_FENCED: i16 = ResponseError::ProducerFenced.code();
pub const CONCURRENT_TRANSACTIONS: i16 = ResponseError::ConcurrentTransactions.code();
pub const INVALID_PRODUCER_ID_MAPPING: i16 = ResponseError::InvalidProducerIdMapping.code();
pub const INVALID_TRANSACTION_TIMEOUT: i16 = ResponseError::InvalidTransactionTimeout.code();
pub const TRANSACTIONAL_ID_NOT_FOUND: i16 = ResponseError::TransactionalIdNotFound.code();
pub const TRANSACTION_COORDINATOR_FENCED: i16 = ResponseError::TransactionCoordinatorFenced.code();
pub const UNSTABLE_OFFSET_COMMIT: i16 = ResponseError::UnstableOffsetCommit.code();
pub const OPERATION_NOT_ATTEMPTED: i16 = ResponseError::OperationNotAttempted.code();
pub const TRANSACTION_ABORTABLE: i16 = ResponseError::TransactionAbortable.code();
pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 =
    ResponseError::TransactionalIdAuthorizationFailed.code();
pub const NETWORK_EXCEPTION: i16 = ResponseError::NetworkException.code();
pub const UNSUPPORTED_SASL_MECHANISM: i16 = ResponseError::UnsupportedSaslMechanism.code();
pub const ILLEGAL_SASL_STATE: i16 = ResponseError::IllegalSaslState.code();
pub const SASL_AUTHENTICATION_FAILED: i16 = ResponseError::SaslAuthenticationFailed.code();
pub const TOPIC_AUTHORIZATION_FAILED: i16 = ResponseError::TopicAuthorizationFailed.code();
pub const GROUP_AUTHORIZATION_FAILED: i16 = ResponseError::GroupAuthorizationFailed.code();
pub const CLUSTER_AUTHORIZATION_FAILED: i16 = ResponseError::ClusterAuthorizationFailed.code();
pub const SECURITY_DISABLED: i16 = ResponseError::SecurityDisabled.code();
pub const RESOURCE_NOT_FOUND: i16 = ResponseError::ResourceNotFound.code();
pub const DUPLICATE_RESOURCE: i16 = ResponseError::DuplicateResource.code();
pub const UNACCEPTABLE_CREDENTIAL: i16 = ResponseError::UnacceptableCredential.code();
pub const FENCED_STATE_EPOCH: i16 = ResponseError::FencedStateEpoch.code();
