//! Every bound the storage crate enforces, in one place, with the relations
//! between them checked at compile time. Per-log settings (segment size,
//! caches, flush policy) are in [`crate::config::LogConfig`]; these are the
//! fixed limits around them.

// ---- Space ----

/// Space the logs leave free on their filesystem: a segment write that
/// would take the filesystem below it is refused for want of space (as
/// Redpanda's `storage_min_free_bytes` does). What is kept is what the
/// broker needs to stop and start again on a full disk: checkpoints and
/// index files at close, and the segment bytes a journal replay writes at
/// start (ext4 refuses even writes into preallocated extents when no block
/// at all is free).
pub const SPACE_RESERVE_BYTES: u64 = 4 << 20;

/// How often a log whose write failed for want of space tries it again
/// (appends also retry at once when `statvfs` shows room): a full disk
/// costs one failed fallocate a second, and writes resume within a second
/// of space returning.
pub const SPACE_RETRY_MS: u64 = 1_000;

/// The largest step by which a segment file is grown ahead of its writer
/// (reached once it holds four times this).
pub const PREALLOCATE_STEP_MAX: u64 = 64 << 20;

// ---- Recovery ----

/// Bytes read at a time while scanning a segment.
pub const SCAN_WINDOW_BYTES: usize = 4 << 20;

/// How far past the last valid batch recovery looks for non-zero bytes, to
/// tell a torn or corrupt tail from preallocated space.
pub const TAIL_PROBE_BYTES: usize = 1 << 20;

// ---- Reads ----

/// Bytes a disk read asks for beyond `max_bytes`, to cover the batches the
/// sparse index makes it skip.
pub const READ_SLACK_BYTES: usize = 64 << 10;

/// The most one read from a segment file asks for at once.
pub const READ_WINDOW_BYTES_MAX: usize = 64 << 20;

/// Bytes read ahead at most at once by the logs of one core (context).
pub const READ_AHEAD_BYTES_MAX: usize = 256 << 20;

/// Bound on a stored batch's decompressed records when a timestamp lookup
/// walks them: produce refuses batches that expand past 32 x
/// `max.message.bytes`, at most 256 MiB, so a stored batch stays below.
pub const STORED_DECOMPRESSED_BYTES_MAX: usize = 256 << 20;

/// Recent batches cached by all the logs of one core together: each log
/// keeps at most its fair share of this (and at most its own
/// `strom.cache.bytes`), so a core with many partitions stays bounded.
pub const SHARD_CACHE_BYTES_MAX: usize = 256 << 20;

// ---- Journal ----

/// The unwritten bytes all the logs of a core keep in memory for its
/// journal at most, shared out as `log::shares::journal_keep_bytes` says.
pub const SHARD_JOURNAL_KEPT_BYTES_MAX: u64 = 16 << 20;

/// How many times its `strom.journal.bytes` a log keeps unwritten for the
/// journal at most.
pub const JOURNAL_KEEP_FACTOR: u64 = 4;

/// Largest `strom.journal.bytes`: a round's record must fit well inside a
/// journal chunk.
pub const JOURNAL_BYTES_MAX: u64 = 8 << 20;

/// Capacity of the buffers a journal round's records are encoded into:
/// each is one write. Kept under glibc's mmap threshold (32 MiB), so freed
/// buffers are reused from the heap instead of mapped and faulted in anew.
pub const JOURNAL_BUFFER_BYTES: usize = 4 << 20;

/// The most each of a journal's two chunk files grows to by default
/// (`strom.journal.chunk.bytes.max`).
pub const JOURNAL_CHUNK_BYTES_DEFAULT: u64 = 128 << 20;

/// Bytes of each chunk when a journal is made: an idle or lightly used
/// broker keeps 2 x 4 MiB per core on disk, not 2 x 128 MiB.
pub const JOURNAL_CHUNK_BYTES_START: u64 = 4 << 20;

/// The smallest chunk a journal is made with when space is short; with
/// less room than two of these the journal is skipped.
pub const JOURNAL_CHUNK_BYTES_MIN: u64 = 1 << 20;

/// No record is longer than a chunk may be.
pub const JOURNAL_CHUNK_BYTES_MAX: u64 = 1 << 32;

/// A chunk that fills within this long of being started makes the next
/// chunk twice as large (up to the maximum): the journal grows to what
/// the write rate needs, and a chunk lasts at least this long at the
/// rates it grew for.
pub const JOURNAL_CHUNK_GROW_WITHIN_MS: u64 = 10_000;

/// How long a core goes without a journal after finding too little space
/// for one, before it tries again.
pub const JOURNAL_SKIP_MS: u64 = 10_000;

/// Once this many record bytes wait for a core's next journal write, its
/// logs write their small appends to their segment files instead (by
/// default; see `ContextConfig::journal_queued_bytes_max`). The journal
/// replaces many small writes by one, at the price of moving each byte
/// twice (into the journal, later into its segment). With 1,000
/// partitions at full rate (~8 KiB per partition and request, 8 MiB per
/// request, several requests in flight) journaling all of it beats two
/// segment writes per partition and round. (f) of the benchmark matrix,
/// alternating runs: a 1 MiB bound gave 366/406/393 MB/s, 16 MiB
/// 405/423/436 with 14% less broker CPU per GB; in a second series 16 MiB
/// gave 395/390/384 and 32 MiB 409/453/438. (Journaling those rounds lost
/// 28% when a log writing out its journaled bytes also wrote its partial
/// last page, and rewrote that page alone in its next write.) A larger
/// bound lets a round hold its appends back for longer (32 MiB is ~30 ms
/// of this machine's disk) and takes a chunk faster.
pub const JOURNAL_QUEUED_BYTES_MAX_DEFAULT: usize = 32 << 20;

/// The alignment of every O_DIRECT write (the disk's physical block),
/// which the limits below respect.
pub const PAGE: u64 = 4096;

const _: () = assert!(SPACE_RESERVE_BYTES.is_multiple_of(PAGE));
const _: () = assert!(PREALLOCATE_STEP_MAX.is_multiple_of(PAGE));
const _: () = assert!(TAIL_PROBE_BYTES <= SCAN_WINDOW_BYTES);
const _: () = assert!(READ_SLACK_BYTES < READ_WINDOW_BYTES_MAX);
// One window of a reader always fits in the core's read-ahead budget.
const _: () = assert!(READ_WINDOW_BYTES_MAX <= READ_AHEAD_BYTES_MAX);
const _: () = assert!(JOURNAL_BUFFER_BYTES < 32 << 20);
const _: () = assert!((JOURNAL_BUFFER_BYTES as u64).is_multiple_of(PAGE));
const _: () = assert!(JOURNAL_CHUNK_BYTES_MIN <= JOURNAL_CHUNK_BYTES_START);
const _: () = assert!(JOURNAL_CHUNK_BYTES_START <= JOURNAL_CHUNK_BYTES_DEFAULT);
const _: () = assert!(JOURNAL_CHUNK_BYTES_DEFAULT <= JOURNAL_CHUNK_BYTES_MAX);
// A log hands over at most twice its threshold in one record, and a record
// is at most a quarter of the default chunk.
const _: () = assert!(2 * JOURNAL_BYTES_MAX <= JOURNAL_CHUNK_BYTES_DEFAULT / 4);
// At its largest threshold one log still fits in the core's kept bytes.
const _: () = assert!(JOURNAL_BYTES_MAX <= SHARD_JOURNAL_KEPT_BYTES_MAX);
const _: () = assert!(JOURNAL_KEEP_FACTOR >= 1);
