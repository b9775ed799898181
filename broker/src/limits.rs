//! Every bound the broker enforces, in one place, with the relations between
//! them checked at compile time.

/// Capacity of each cross-core channel (jobs and replies). Below ~1024 the
/// channels were measured 20x slower on this kind of machine.
pub const SHARD_CHANNEL_CAPACITY: usize = 1024;

/// Requests one connection may have decoded but not yet answered. When the
/// bound is reached the connection stops reading its socket.
pub const CONNECTION_IN_FLIGHT_MAX: usize = 64;

/// Frame bytes allowed on top of `message.max.bytes` for request headers,
/// topic names and the other fields of a produce request.
pub const FRAME_OVERHEAD_BYTES: usize = 100 << 20;

/// Largest frame of any request but Produce. The decoders build a struct
/// per array element, several times the element's wire size, so only
/// Produce (whose bulk is record bytes) gets the full frame limit.
pub const NON_PRODUCE_FRAME_BYTES_MAX: usize = 8 << 20;

/// Longest a Fetch may wait for data, whatever the client asks.
pub const FETCH_WAIT_MS_MAX: u64 = 5_000;

/// Longest a graceful stop may take before the process exits anyway.
pub const SHUTDOWN_MS_MAX: u64 = 10_000;

/// Time left for draining connections within the stop budget; the rest is
/// for closing the logs.
pub const DRAIN_MS_MAX: u64 = 6_000;

/// How long an idle executor polls for work before parking
/// (`strom.spin.before.park.us`). Spinning saves the wake-up of a parked
/// executor (tens of microseconds, milliseconds on a busy VM) at the price
/// of CPU time burnt while idle; see docs/benchmarks.md for both sides.
pub const SPIN_BEFORE_PARK_US_DEFAULT: u64 = 0;
pub const SPIN_BEFORE_PARK_US_MAX: u64 = 10_000;

/// Producer ids taken from the metadata log per allocation.
pub const PRODUCER_ID_BLOCK: i64 = 1000;

/// Recent batches remembered per producer and partition, as Kafka does, so
/// a retried batch is answered with its original offsets.
pub const PRODUCER_BATCHES_KEPT: usize = 5;

/// Offsets at the end of each log scanned at start-up to rebuild
/// idempotent producer state, and the bytes read per step.
pub const PRODUCER_RECOVERY_OFFSETS: u64 = 100_000;
pub const PRODUCER_RECOVERY_READ_BYTES: usize = 4 << 20;

/// Largest partition count a topic may have.
pub const TOPIC_PARTITIONS_MAX: i32 = 10_000;

/// Longest metadata log record accepted when reading it back.
pub const METADATA_RECORD_BYTES_MAX: usize = 16 << 20;

const _: () = assert!(DRAIN_MS_MAX < SHUTDOWN_MS_MAX);
const _: () = assert!(SHARD_CHANNEL_CAPACITY >= 1024);
const _: () = assert!(
    CONNECTION_IN_FLIGHT_MAX >= 5,
    "librdkafka pipelines 5 produce requests per partition"
);
const _: () = assert!(FETCH_WAIT_MS_MAX < DRAIN_MS_MAX);

// Consumer groups (`group/`). Every per-group and per-member structure is
// bounded; together they bound a core's coordinator memory.

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
/// How often each core's coordinator checks session, join, sync and
/// offset-retention deadlines.
pub const GROUP_TICK_MS: u64 = 50;
/// How often each core expires committed offsets of empty groups
/// (Kafka's `offsets.retention.check.interval.ms` is 600000).
pub const OFFSETS_RETENTION_CHECK_MS: u64 = 60_000;
/// Bytes read per step when loading a `__consumer_offsets` partition.
pub const OFFSETS_LOAD_READ_BYTES: usize = 4 << 20;
/// Largest record batch the coordinator writes to `__consumer_offsets`.
pub const OFFSETS_BATCH_BYTES_MAX: usize = 512 << 10;
/// Records a `__consumer_offsets` partition may hold beyond twice its live
/// offsets before the coordinator rewrites the live ones and drops the
/// rest (compaction by snapshot).
pub const OFFSETS_COMPACT_SLACK_RECORDS: u64 = 10_000;

const _: () = assert!(GROUP_MEMBERS_MAX * MEMBER_NAME_BYTES_MAX * 4 <= GROUP_MEMBER_BYTES_MAX);
const _: () = assert!(MEMBER_BYTES_MAX <= GROUP_MEMBER_BYTES_MAX);
const _: () = assert!(GROUP_MEMBER_BYTES_MAX <= CORE_MEMBER_BYTES_MAX);
const _: () = assert!(GROUP_OFFSETS_MAX <= CORE_OFFSETS_MAX);
const _: () = assert!(
    OFFSETS_BATCH_BYTES_MAX >= 2 * (GROUP_ID_BYTES_MAX + 249 + OFFSET_METADATA_BYTES_MAX + 64),
    "one offset record always fits in a batch"
);

// Record validation on the produce path (`handlers/produce.rs`).

/// A compressed batch may expand to this many times the topic's
/// `max.message.bytes` (1 MiB by default: 32 MiB). No client batches more
/// than `max.message.bytes` of records before compressing them except for
/// extremely compressible values; the bound stops a decompression bomb after
/// at most this much work, on the core that received it.
pub const DECOMPRESSION_RATIO_MAX: usize = 32;
/// Ceiling of that bound whatever `max.message.bytes` is set to.
pub const DECOMPRESSED_BATCH_BYTES_MAX: usize = 256 << 20;

const _: () = assert!(DECOMPRESSION_RATIO_MAX >= 1);
