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

/// Defaults of the connection memory budgets (docs/broker.md, "Memory
/// under hostile clients"). Kafka's `queued.max.request.bytes` is unbounded
/// by default; Strom bounds it, and bounds responses as well.
pub const QUEUED_REQUEST_BYTES_DEFAULT: usize = 256 << 20;
pub const QUEUED_RESPONSE_BYTES_DEFAULT: usize = 256 << 20;
pub const CONNECTION_RESPONSE_BYTES_DEFAULT: usize = 64 << 20;
/// Smallest budget accepted for any of them.
pub const QUEUED_BYTES_MIN: usize = 1 << 20;
/// Frames up to this size are admitted beyond a full request budget, one
/// per connection, so that heartbeats, metadata and small produce requests
/// are still served while large frames wait for budget.
pub const SMALL_FRAME_BYTES_MAX: usize = 64 << 10;
/// A frame is received into memory this much at a time, so a frame that
/// was announced but not sent costs its budget, not its memory.
pub const FRAME_RECEIVE_STEP_BYTES: usize = 64 << 10;
/// Kafka's `connections.max.idle.ms` default.
pub const CONNECTION_IDLE_MS_DEFAULT: u64 = 600_000;
/// How long a request's frame may take to arrive once it is admitted.
pub const REQUEST_RECEIVE_TIMEOUT_MS_DEFAULT: u64 = 30_000;

/// Largest frame of any request but Produce. The decoders build a struct
/// per array element, several times the element's wire size, so only
/// Produce (whose bulk is record bytes) gets the full frame limit.
pub const NON_PRODUCE_FRAME_BYTES_MAX: usize = 8 << 20;
/// Largest frame a connection of a SASL listener may send before it
/// authenticates (Kafka's `sasl.server.max.receive.size` default): an
/// unauthenticated client costs the broker little.
pub const UNAUTHENTICATED_FRAME_BYTES_MAX: usize = 512 << 10;

/// Longest a Fetch may wait for data, whatever the client asks.
pub const FETCH_WAIT_MS_MAX: u64 = 5_000;

/// Most partitions `__transaction_state` may be created with.
pub const TRANSACTION_STATE_PARTITIONS_MAX: i32 = 1_000;

/// How long a transaction marker may wait for its partition's in-sync
/// replicas (Kafka's `request.timeout.ms` for the coordinator's
/// WriteTxnMarkers); a marker not written by then is sent again.
pub const TXN_MARKERS_WAIT_MS: u64 = 30_000;

/// Longest a DeleteRecords waits for the ISR's log starts, whatever the
/// client's `timeout_ms` (a broker that stops answers it at once).
pub const DELETE_RECORDS_WAIT_MS_MAX: u64 = 60_000;
const _: () = assert!(
    DELETE_RECORDS_WAIT_MS_MAX >= 30_000,
    "clients' default request timeout"
);

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

/// Bounds of `strom.journal.chunk.bytes.max`: a chunk holds records of up
/// to a quarter of it, and two of them sit on disk per core.
pub const JOURNAL_CHUNK_BYTES_MIN: u64 = 1 << 20;
pub const JOURNAL_CHUNK_BYTES_MAX: u64 = 1 << 30;

/// Producer ids taken from the metadata log per allocation.
pub const PRODUCER_ID_BLOCK: i64 = 1000;

/// Recent batches remembered per producer and partition, as Kafka does, so
/// a retried batch is answered with its original offsets.
pub const PRODUCER_BATCHES_KEPT: usize = 5;

/// Bytes read per step when the log after the newest producer-state
/// snapshot (or the whole log, without one) is replayed at start-up: the
/// replay is unbounded in offsets, bounded in memory by this.
pub const PRODUCER_RECOVERY_READ_BYTES: usize = 4 << 20;

/// Largest partition count a topic may have.
pub const TOPIC_PARTITIONS_MAX: i32 = 10_000;

/// Longest metadata log record accepted when reading it back.
pub const METADATA_RECORD_BYTES_MAX: usize = 16 << 20;
/// Metadata writes waiting for the writer thread. One is enough: the
/// controller proposes one change at a time, and waits for it.
pub const METADATA_WRITES_QUEUED_MAX: usize = 1;

const _: () = assert!(DRAIN_MS_MAX < SHUTDOWN_MS_MAX);
const _: () = assert!(METADATA_WRITES_QUEUED_MAX >= 1);

/// Work queued for a voter's quorum thread (Raft messages, heartbeats,
/// proposals); a Raft message that finds it full is dropped (Raft resends).
pub const QUORUM_INBOX_MAX: usize = 4096;
const _: () = assert!(SHARD_CHANNEL_CAPACITY >= 1024);
const _: () = assert!(
    CONNECTION_IN_FLIGHT_MAX >= 5,
    "librdkafka pipelines 5 produce requests per partition"
);
const _: () = assert!(FETCH_WAIT_MS_MAX < DRAIN_MS_MAX);
const _: () = assert!(SMALL_FRAME_BYTES_MAX < QUEUED_BYTES_MIN);
const _: () = assert!(CONNECTION_RESPONSE_BYTES_DEFAULT <= QUEUED_RESPONSE_BYTES_DEFAULT);
const _: () = assert!(
    FETCH_WAIT_MS_MAX < CONNECTION_IDLE_MS_DEFAULT,
    "a long-polling fetch never looks idle"
);

// Consumer groups (`group/`): the coordinator's own bounds live with it
// (`groups::limits`); these are the runtime edge's.

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
/// How long a write to `__consumer_offsets` waits for the ISR (Kafka's
/// `offsets.commit.timeout.ms` default); then the commit fails with
/// COORDINATOR_NOT_AVAILABLE and the client retries.
pub const OFFSETS_COMMIT_TIMEOUT_MS: u64 = 5_000;
/// Records a `__consumer_offsets` partition may hold beyond twice its live
/// offsets before the coordinator rewrites the live ones and drops the
/// rest (compaction by snapshot).
pub const OFFSETS_COMPACT_SLACK_RECORDS: u64 = 10_000;

const _: () = assert!(groups::limits::OFFSETS_PARTITIONS_MAX == TOPIC_PARTITIONS_MAX);
const _: () = assert!(
    OFFSETS_BATCH_BYTES_MAX
        >= 2 * (groups::limits::GROUP_ID_BYTES_MAX
            + 249
            + groups::limits::OFFSET_METADATA_BYTES_MAX
            + 64),
    "one offset record always fits in a batch"
);

// Producer-state snapshots (`partition.rs`).

/// Producer-state snapshots kept per partition (one is written at each
/// segment roll and at a clean stop). More than one, so a damaged newest
/// snapshot falls back to an older one instead of a whole-log replay.
pub const PRODUCER_SNAPSHOTS_KEPT: usize = 3;
/// `producer.id.expiration.ms` default (Kafka's): producers idle this long
/// are dropped from a partition's state.
pub const PRODUCER_ID_EXPIRATION_MS_DEFAULT: i64 = 86_400_000;
/// Largest producer-state snapshot read back: the state of 1M producers;
/// a larger file is taken as damaged rather than loaded into memory.
pub const PRODUCER_SNAPSHOT_BYTES_MAX: u64 = 1 << 30;

const _: () = assert!(PRODUCER_SNAPSHOTS_KEPT >= 2);
const _: () = assert!(PRODUCER_BATCHES_KEPT <= u8::MAX as usize);

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

/// Most directory entries one disk-usage measurement visits (a data dir
/// of 10,000 partitions has ~60,000).
pub const DISK_USAGE_ENTRIES_MAX: usize = 1_000_000;

/// Most partitions one DescribeTopicPartitions answer holds, whatever the
/// client asks for (Kafka's `max.request.partition.size.limit` default);
/// the rest follow through the cursor.
pub const DESCRIBE_TOPIC_PARTITIONS_MAX: i32 = 2000;

// Forwarding to other brokers (load-balancer mode), per destination
// broker and per core.

/// Request bytes forwarded and not yet answered; a part that does not fit
/// waits (and so does its client connection).
pub const FORWARD_IN_FLIGHT_BYTES_MAX: usize = 64 << 20;
/// Forwarded requests handed to the pipelined connection and not yet sent.
pub const FORWARD_QUEUE_MAX: usize = 256;
/// Connections that carry forwarded fetches, each one fetch at a time (a
/// long poll must not hold up another client's answer).
pub const FORWARD_FETCH_CONNECTIONS_MAX: usize = 16;
/// Connections that carry other requests to a broker that may wait there
/// (share-state reads and writes, forwarded share fetches, transaction
/// markers, DeleteRecords), per destination broker and core, each one
/// request at a time.
pub const FORWARD_CALL_CONNECTIONS_MAX: usize = 16;
/// Connections that carry forwarded group coordinator requests, per
/// destination broker and core, each one request at a time (a JoinGroup
/// waits for the whole group).
pub const FORWARD_GROUP_CONNECTIONS_MAX: usize = 64;
/// The largest answer a broker takes from another for a request it
/// forwarded whole (admin and group requests).
pub const FORWARDED_ANSWER_BYTES_MAX: usize = 64 << 20;
/// How long a forwarded Produce, ListOffsets or OffsetForLeaderEpoch may
/// take at the leader before the part is answered NOT_LEADER_OR_FOLLOWER.
pub const FORWARD_TIMEOUT_MS: u64 = 30_000;
/// Connecting to another broker (forwarded parts, admin requests).
pub const FORWARD_CONNECT_TIMEOUT_MS: u64 = 2_000;
const _: () = assert!(FORWARD_IN_FLIGHT_BYTES_MAX >= (1 << 20));
