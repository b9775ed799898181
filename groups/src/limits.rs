//! The coordinator's bounds. Every per-group and per-member structure is
//! bounded; together they bound a core's coordinator memory.

/// Groups one core coordinates (with members or committed offsets). A new
/// group beyond it is refused with COORDINATOR_NOT_AVAILABLE.
pub const GROUPS_PER_CORE_MAX: usize = 10_000;
/// Longest group id (Kafka sets none; the id is in every offset record).
pub const GROUP_ID_BYTES_MAX: usize = 1_024;
/// Upper bound of `group.max.size` (members plus members still to rejoin
/// with the id MEMBER_ID_REQUIRED gave them).
pub const GROUP_MEMBERS_MAX: usize = 1_000;
/// Longest member id, group instance id, client id or protocol name kept.
pub const MEMBER_NAME_BYTES_MAX: usize = 1_024;
/// Protocols (assignors) one member may offer.
pub const MEMBER_PROTOCOLS_MAX: usize = 16;
/// A member's protocol metadata (all protocols) plus its assignment.
/// Beyond it a JoinGroup or SyncGroup gets INVALID_REQUEST.
pub const MEMBER_BYTES_MAX: usize = 1 << 20;
/// Member bytes of all members of one group.
pub const GROUP_MEMBER_BYTES_MAX: usize = 16 << 20;
/// Member bytes of all groups on one core.
pub const CORE_MEMBER_BYTES_MAX: usize = 256 << 20;
/// Committed offsets kept per group; commits beyond get
/// INVALID_COMMIT_OFFSET_SIZE.
pub const GROUP_OFFSETS_MAX: usize = 100_000;
/// Committed offsets kept per core.
pub const CORE_OFFSETS_MAX: usize = 2_000_000;
/// `offset.metadata.max.bytes` (Kafka's default): longer commit metadata
/// gets OFFSET_METADATA_TOO_LARGE.
pub const OFFSET_METADATA_BYTES_MAX: usize = 4_096;
/// Upper bound of `offsets.topic.num.partitions` (the broker's bound on a
/// topic's partitions).
pub const OFFSETS_PARTITIONS_MAX: i32 = 10_000;

const _: () = assert!(GROUP_MEMBERS_MAX * MEMBER_NAME_BYTES_MAX * 4 <= GROUP_MEMBER_BYTES_MAX);
const _: () = assert!(MEMBER_BYTES_MAX <= GROUP_MEMBER_BYTES_MAX);
const _: () = assert!(GROUP_MEMBER_BYTES_MAX <= CORE_MEMBER_BYTES_MAX);
const _: () = assert!(GROUP_OFFSETS_MAX <= CORE_OFFSETS_MAX);
