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

/// How long an executor spins before parking; cross-core wake-ups of a
/// parked executor cost milliseconds on VMs.
pub const SPIN_BEFORE_PARK_US: u64 = 200;

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
