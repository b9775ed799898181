//! A partition on its owning core: the storage log plus what the broker
//! adds around it (idempotent producer state, timestamp type, replication
//! state). Everything here runs on the owning core; results are plain
//! `Send` values that hop back to the core serving the connection.
//!
//! The high watermark, the `acks=all` wait and the leader epoch come from
//! the partition's [`ReplicaState`]; this file is its edge: it feeds the
//! log's end and durable offsets in and turns the actions into wake-ups.
//! In a cluster the image's partition state (replicas, leader, epochs, ISR)
//! comes in through [`Partition::assign`]; on a single node every partition
//! is led by this node alone (replicas = ISR = [node id], leader epoch 0).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use protocol::batch::{BatchHeader, RecordBatch, HEADER_LEN};

use crate::errors;
use crate::limits::{
    PRODUCER_RECOVERY_READ_BYTES, PRODUCER_SNAPSHOTS_KEPT, PRODUCER_SNAPSHOT_BYTES_MAX,
};
use crate::metadata::PartitionState;
use crate::producer_state::{
    last_sequence, AbortedTxn, ProducerTable, RecoveredBatch, SequenceCheck,
};
use crate::replica::{
    Action, Assignment, IsrProposal, NodeId, ReplicaConfig, ReplicaState, Role, WaiterId,
};
use crate::stages::{self, Stage};
use crate::sync::Condition;
use crate::topic_config::{CleanupPolicy, Compaction, EffectiveConfig, TimestampType};
use storage::epoch_cache::EpochCache;
use storage::{small_file, AppendOptions, Clock, Log, StorageError};

/// This core's count of ISR changes its partitions proposed, and a wake-up
/// for whoever sends them on: an ISR change leaves for the controller at
/// once, not at the next tick.
#[derive(Default)]
pub struct IsrProposals {
    count: Cell<u64>,
    changed: Condition,
}

impl IsrProposals {
    fn note(&self) {
        self.count.set(self.count.get() + 1);
        self.changed.notify_all();
    }

    /// How many were proposed on this core so far.
    pub fn count(&self) -> u64 {
        self.count.get()
    }

    /// Resolves once more than `seen` were proposed on this core.
    pub async fn proposed_after(&self, seen: u64) {
        self.changed.wait_until(|| self.count.get() > seen).await
    }
}

thread_local! {
    /// This core's ISR proposals (each executor is its own thread).
    pub static ISR_PROPOSALS: Rc<IsrProposals> = Rc::default();
}

/// Kafka's ListOffsets special timestamps.
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;
/// The first offset held locally (v8+); without tiered storage every
/// offset is local, so the log start offset.
pub const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
/// The last offset in remote storage (v9+); with none, Kafka answers
/// offset -1 (and leader epoch -1).
pub const LATEST_TIERED_TIMESTAMP: i64 = -5;

pub struct Partition {
    pub topic: String,
    pub index: i32,
    log: Log,
    dir: PathBuf,
    producers: RefCell<ProducerTable>,
    /// Transactional batches of one producer that wait for its first
    /// batch's check with the coordinator, queued in arrival order.
    txn_turns: crate::sync::Turns,
    timestamp_type: Cell<TimestampType>,
    /// `cleanup.policy` and the compaction settings (see `compaction.rs`).
    cleanup: Cell<CleanupPolicy>,
    compaction: Cell<Compaction>,
    /// `producer.id.expiration.ms`.
    producer_id_expiration_ms: i64,
    snapshots: RefCell<SnapshotState>,
    /// One snapshot write at a time (a roll's and the stop's may overlap).
    snapshot_lock: glommio::sync::Semaphore,
    replica: RefCell<ReplicaState>,
    /// The leader epoch up to which this follower's log is known to agree
    /// with its leader's (KIP-101/279); a new epoch asks again.
    reconciled_epoch: Cell<Option<i32>>,
    /// The leader epoch at which a cut below the high watermark was last
    /// refused (logged once per epoch).
    truncation_refused_epoch: Cell<Option<i32>>,
    /// An ISR change the replica state asked for, waiting to be sent to
    /// the active controller (`cluster::replication` takes it).
    isr_outbox: RefCell<Option<IsrProposal>>,
    acks: RefCell<AcksWaiters>,
    /// Raised for every answered `acks=all` waiter.
    acks_answered: Condition,
    /// Raised when the high watermark advances.
    high_watermark_advanced: Condition,
    /// Raised when a follower reports its log start offset, and when the
    /// role changes: DeleteRecords waits on it for the ISR's low watermark.
    low_watermark_changed: Condition,
    /// The high watermark this follower's leader last sent.
    leader_high_watermark: Cell<i64>,
    /// The core's clock: LogAppendTime, producer idle time and expiry.
    clock: Rc<dyn Clock>,
}

/// Who a produced batch comes from.
enum Source {
    /// A client's Produce, in the producer's turn when it is transactional
    /// and queued ([`Partition::produce_in_turn`]).
    Client(Option<InTurn>),
    /// A coordinator's transactional write ([`Partition::append_coordinator_transactional`]).
    Coordinator,
}

/// A transactional batch's turn, and the coordinator's check when the
/// batch opens the producer's transaction.
struct InTurn {
    _turn: crate::sync::Turn,
    verified: Option<u64>,
}

/// Parked `acks=all` produces: ids handed out and answers not yet taken.
#[derive(Default)]
struct AcksWaiters {
    next: WaiterId,
    /// Each answered waiter's code, and when it was answered.
    answered: HashMap<WaiterId, (i16, std::time::Instant)>,
}

/// A parked `acks=all` produce; dropping it (its produce's future dropped
/// midway) takes it out of the replica state.
struct AcksWait<'a> {
    partition: &'a Partition,
    waiter: WaiterId,
}

impl Drop for AcksWait<'_> {
    fn drop(&mut self) {
        self.partition.replica.borrow_mut().cancel_acks(self.waiter);
        self.partition
            .acks
            .borrow_mut()
            .answered
            .remove(&self.waiter);
    }
}

/// An append between its call and its recorded outcome. Dropping it (also
/// when the append's future is dropped midway) ends it, so it cannot hold
/// snapshot offsets back for ever.
struct InFlightAppend<'a> {
    snapshots: &'a RefCell<SnapshotState>,
    id: u64,
}

impl<'a> InFlightAppend<'a> {
    fn begin(snapshots: &'a RefCell<SnapshotState>, log_end: u64) -> Self {
        let mut state = snapshots.borrow_mut();
        let id = state.next_append;
        state.next_append += 1;
        state.in_flight.insert(id, log_end);
        drop(state);
        Self { snapshots, id }
    }
}

impl Drop for InFlightAppend<'_> {
    fn drop(&mut self) {
        self.snapshots.borrow_mut().in_flight.remove(&self.id);
    }
}

/// What naming a snapshot needs: the log end at the start of each append in
/// flight, whose batch may already be in the log but not yet in the state.
#[derive(Default)]
struct SnapshotState {
    next_append: u64,
    in_flight: BTreeMap<u64, u64>,
    /// Segment count after the last append, to notice a roll.
    segments: usize,
}

/// The answer for one partition of a produce request.
#[derive(Debug, Clone, Copy)]
pub struct ProduceOutcome {
    pub error_code: i16,
    pub base_offset: i64,
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
}

impl ProduceOutcome {
    pub fn error(error_code: i16) -> Self {
        Self {
            error_code,
            base_offset: -1,
            log_append_time_ms: -1,
            log_start_offset: -1,
        }
    }
}

/// The answer for one partition of a fetch.
#[derive(Debug, Clone)]
pub struct FetchOutcome {
    pub error_code: i16,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// The last stable offset (the high watermark when no transaction is
    /// open).
    pub last_stable_offset: i64,
    /// For a read_committed fetch, the aborted transactions in the range
    /// returned.
    pub aborted: Vec<AbortedTxn>,
    pub records: Bytes,
}

impl FetchOutcome {
    pub fn error(error_code: i16) -> Self {
        Self {
            error_code,
            high_watermark: -1,
            log_start_offset: -1,
            last_stable_offset: -1,
            aborted: Vec::new(),
            records: Bytes::new(),
        }
    }
}

/// Where a follower's fetch says its copy stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerPosition {
    /// The leader epoch it follows.
    pub leader_epoch: i32,
    /// Its log end: where it fetches from.
    pub fetch_offset: i64,
    /// Where its durable log ends (what `acks=all` counts).
    pub durable_end: i64,
    /// Its log start offset; negative when the fetch carries none.
    pub log_start_offset: i64,
}

/// The answer for one partition of a DeleteRecords request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeleteRecordsOutcome {
    pub error_code: i16,
    /// The least log start offset over the ISR once answered; -1 with an
    /// error other than REQUEST_TIMED_OUT.
    pub low_watermark: i64,
}

impl DeleteRecordsOutcome {
    pub fn error(error_code: i16) -> Self {
        Self {
            error_code,
            low_watermark: -1,
        }
    }
}

/// DeleteRecords' offset for "up to the high watermark".
pub const DELETE_TO_HIGH_WATERMARK: i64 = -1;

/// The answer for one partition of a ListOffsets request.
#[derive(Debug, Clone, Copy)]
pub struct OffsetOutcome {
    pub error_code: i16,
    pub timestamp: i64,
    pub offset: i64,
    /// The leader epoch of the batch holding `offset`; -1 with no offset.
    /// Every batch so far was written in the only epoch there has been,
    /// so the current one.
    pub leader_epoch: i32,
}

impl OffsetOutcome {
    pub fn error(error_code: i16) -> Self {
        Self {
            error_code,
            timestamp: -1,
            offset: -1,
            leader_epoch: -1,
        }
    }
}

/// Why [`Partition::truncate_to`] did not truncate.
#[derive(Debug, thiserror::Error)]
pub enum TruncateError {
    /// A produce is between its append and its producer-state record; a
    /// follower admits none, so only a partition still leading sees this.
    #[error("{appends} append(s) in flight; truncation refused")]
    AppendsInFlight { appends: usize },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

fn io_error(op: &'static str, path: &Path, error: impl Into<std::io::Error>) -> StorageError {
    StorageError::Io {
        op,
        path: path.to_path_buf(),
        position: 0,
        source: error.into(),
    }
}

/// Snapshot files are named by the offset their state covers, zero-padded
/// to 20 digits as Kafka names its `.snapshot` files.
fn snapshot_file_name(offset: u64) -> String {
    format!("{offset:020}.snapshot")
}

fn parse_snapshot_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".snapshot")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The partition directory's snapshots, newest first.
fn list_snapshots(dir: &Path) -> Result<Vec<u64>, StorageError> {
    let entries = std::fs::read_dir(dir).map_err(|e| io_error("list directory", dir, e))?;
    let mut offsets: Vec<u64> = entries
        .flatten()
        .filter_map(|entry| {
            entry
                .file_name()
                .to_str()
                .and_then(parse_snapshot_file_name)
        })
        .collect();
    offsets.sort_unstable_by(|a, b| b.cmp(a));
    Ok(offsets)
}

/// Loads the newest snapshot at or below the log end that is intact;
/// damaged ones are reported loudly and skipped, ones past the log end (a
/// log cut back at recovery) are deleted.
async fn load_newest_snapshot(
    log: &Log,
    dir: &Path,
) -> Result<Option<(u64, ProducerTable)>, StorageError> {
    let end = log.next_offset();
    for offset in list_snapshots(dir)? {
        let path = dir.join(snapshot_file_name(offset));
        if offset > end {
            tracing::warn!(path = %path.display(), log_end = end, "deleting producer state snapshot past the log end");
            small_file::remove(&path).await?;
            continue;
        }
        let size = std::fs::metadata(&path)
            .map_err(|e| io_error("stat", &path, e))?
            .len();
        if size > PRODUCER_SNAPSHOT_BYTES_MAX {
            tracing::error!(path = %path.display(), size, "producer state snapshot larger than any written; not trusted, trying an older one");
            continue;
        }
        let Some(bytes) = small_file::read_whole(&path).await? else {
            continue;
        };
        match ProducerTable::decode_snapshot(&bytes) {
            Ok((stored, table)) if stored == offset => return Ok(Some((offset, table))),
            Ok((stored, _)) => {
                tracing::error!(path = %path.display(), stored, "producer state snapshot names another offset than its file; not trusted, trying an older one");
            }
            Err(error) => {
                tracing::error!(path = %path.display(), %error, "producer state snapshot damaged; not trusted, trying an older one");
            }
        }
    }
    Ok(None)
}

/// Rebuilds idempotent producer state: the newest intact snapshot, then
/// every batch after it (or, without a snapshot, the whole log). Only
/// batch headers are kept; the log is read in steps of
/// `PRODUCER_RECOVERY_READ_BYTES`.
async fn recover_producers(
    log: &Log,
    dir: &Path,
    now_ms: i64,
) -> Result<ProducerTable, StorageError> {
    let end = log.next_offset();
    let (mut table, snapshot) = match load_newest_snapshot(log, dir).await? {
        Some((offset, table)) => (table, Some(offset)),
        None => (ProducerTable::default(), None),
    };
    // A snapshot may hold batches past its offset; those past the log end
    // are gone (a log cut at recovery or by a truncation).
    let forgotten = table.forget_from(end);
    if forgotten > 0 {
        tracing::info!(dir = %dir.display(), log_end = end, producers = forgotten, "producers whose batches are all past the log end forgotten");
    }
    let replay_from = snapshot.unwrap_or(0).max(log.start_offset());
    let mut from = replay_from;
    let mut batches = 0u64;
    // Idle time is the broker's clock: a CreateTime batch's timestamps are
    // the client's (possibly far in the past), so a replayed batch counts
    // as seen now; a LogAppendTime batch carries the broker's append time.
    let now = now_ms;
    while from < end {
        let result = log.read(from, PRODUCER_RECOVERY_READ_BYTES, end).await?;
        let mut bytes = &result.bytes[..];
        while let Ok(header) = BatchHeader::parse(bytes) {
            if header.size() > bytes.len() {
                break;
            }
            if replay_batch(&mut table, &header, &bytes[..header.size()], now) {
                batches += 1;
            }
            bytes = &bytes[header.size()..];
        }
        if result.next_offset <= from {
            break;
        }
        from = result.next_offset;
    }
    forget_cleaned_away_aborts(log, dir, &mut table, replay_from).await?;
    tracing::debug!(dir = %dir.display(), snapshot = snapshot.map_or(-1, |offset| offset as i64), replayed_from = replay_from, log_end = end, idempotent_batches = batches, producers = table.len(), "producer state rebuilt");
    Ok(table)
}

/// Forgets the aborted transactions a snapshot names whose markers the
/// cleaner has removed since (a crash between a cleaning and the
/// snapshot after it): a read_committed fetch naming one would have its
/// client skip the producer's later records. Only a cleaned log can have
/// lost markers, and only below where it was cleaned and the snapshot.
async fn forget_cleaned_away_aborts(
    log: &Log,
    dir: &Path,
    table: &mut ProducerTable,
    replayed_from: u64,
) -> Result<(), StorageError> {
    let cleaned_to = log.cleaned_to().await?;
    let below = cleaned_to.min(replayed_from);
    let mut gone = Vec::new();
    for range in table.aborted_ranges() {
        if range.marker_offset >= below {
            continue;
        }
        let read = log
            .read(range.marker_offset, HEADER_LEN, log.next_offset())
            .await?;
        let present = BatchHeader::parse(&read.bytes).is_ok_and(|header| {
            header.is_control()
                && header.base_offset as u64 == range.marker_offset
                && header.producer_id == range.producer_id
        });
        if !present {
            gone.push((range.producer_id, range.marker_offset));
        }
    }
    if !gone.is_empty() {
        tracing::info!(dir = %dir.display(), aborted = gone.len(), "aborted transactions whose markers were cleaned away forgotten");
        table.forget_aborted(&gone);
    }
    Ok(())
}

fn sorted(ids: &[NodeId]) -> Vec<NodeId> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids
}

/// What the producer state keeps of an idempotent batch read back from a
/// log (at start-up, or as a follower appends it); `None` for batches it
/// does not track. `now_ms` stands for a CreateTime batch's last use.
fn recovered_batch(header: &BatchHeader, now_ms: i64) -> Option<RecoveredBatch> {
    if header.producer_id < 0 || header.is_control() {
        return None;
    }
    let log_append_time = header.is_log_append_time();
    Some(RecoveredBatch {
        producer_id: header.producer_id,
        epoch: header.producer_epoch,
        first_sequence: header.base_sequence,
        last_sequence: last_sequence(header.base_sequence, header.last_offset_delta),
        base_offset: header.base_offset,
        log_append_time_ms: if log_append_time {
            header.max_timestamp
        } else {
            -1
        },
        max_timestamp_ms: if log_append_time {
            header.max_timestamp
        } else {
            now_ms
        },
        transactional: header.is_transactional(),
    })
}

/// Applies a batch read back from a log (at start-up, or as a follower
/// appends it) to the producer state: an idempotent or transactional
/// batch's sequence, or a transaction marker (`batch` whole, header first).
fn replay_batch(
    table: &mut ProducerTable,
    header: &BatchHeader,
    batch: &[u8],
    now_ms: i64,
) -> bool {
    if header.is_control() {
        match protocol::control::end_marker_of(batch) {
            Some(marker) => {
                table.apply_marker(
                    header.producer_id,
                    header.producer_epoch,
                    marker,
                    header.base_offset,
                );
                true
            }
            None => false,
        }
    } else if let Some(recovered) = recovered_batch(header, now_ms) {
        table.recover(recovered);
        true
    } else {
        false
    }
}

/// Writes `bytes` as the snapshot at `offset` durably (temporary file,
/// sync, rename, sync the directory) and keeps the newest
/// `PRODUCER_SNAPSHOTS_KEPT`.
async fn write_snapshot(dir: &Path, offset: u64, bytes: &[u8]) -> Result<(), StorageError> {
    let path = dir.join(snapshot_file_name(offset));
    let tmp = dir.join(format!("{}.tmp", snapshot_file_name(offset)));
    small_file::write_whole(&tmp, bytes).await?;
    glommio::io::rename(&tmp, &path)
        .await
        .map_err(|e| io_error("rename", &path, e))?;
    for old in list_snapshots(dir)?
        .into_iter()
        .skip(PRODUCER_SNAPSHOTS_KEPT)
    {
        small_file::remove(&dir.join(snapshot_file_name(old))).await?;
    }
    small_file::sync_dir(dir).await
}

/// The broker's settings a partition opens with.
#[derive(Debug, Clone, Copy)]
pub struct BrokerSide {
    /// `producer.id.expiration.ms`.
    pub producer_id_expiration_ms: i64,
    /// This broker's id.
    pub node_id: NodeId,
    /// `replica.lag.time.max.ms`.
    pub replica_lag_time_max_ms: u64,
    /// A single node leads its partitions alone from the moment they
    /// open. A cluster member's partition stays offline until the
    /// metadata assigns it ([`Partition::assign`]), its high watermark at
    /// its log start: taken as the log end, records this replica alone
    /// took before a crash would count as committed.
    pub led_alone: bool,
}

/// Where partition `index` of `topic` keeps its log: `<data_dir>/<topic>-<index>`.
pub fn partition_dir(data_dir: &Path, topic: &str, index: i32) -> std::path::PathBuf {
    data_dir.join(format!("{topic}-{index}"))
}

impl Partition {
    /// Opens the partition's log in `<data_dir>/<topic>-<index>`, led by
    /// this node alone until [`Partition::assign`] says otherwise.
    pub async fn open(
        ctx: &storage::Context,
        data_dir: &Path,
        topic: &str,
        index: i32,
        config: &EffectiveConfig,
        broker: BrokerSide,
    ) -> Result<Rc<Partition>, StorageError> {
        let BrokerSide {
            producer_id_expiration_ms,
            node_id,
            replica_lag_time_max_ms,
            led_alone,
        } = broker;
        let log = Log::open(
            ctx,
            partition_dir(data_dir, topic, index),
            config.log.clone(),
        )
        .await?;
        let dir = log.dir().to_path_buf();
        let clock = ctx.clock().clone();
        let mut producers = recover_producers(&log, &dir, clock.wall_ms()).await?;
        let expired = producers.expire(clock.wall_ms(), producer_id_expiration_ms);
        if expired > 0 {
            tracing::info!(topic = %topic, partition = index, expired, "expired idle producers");
        }
        let segments = log.segment_count();
        let mut replica = ReplicaState::new(
            ReplicaConfig {
                local_id: node_id,
                min_insync_replicas: config.min_insync_replicas,
                lag_time_max_ms: replica_lag_time_max_ms,
            },
            log.start_offset(),
            log.next_offset(),
            // Recovery kept only what was durable under the flush policy.
            log.next_offset(),
        );
        if led_alone {
            let mut actions = Vec::new();
            let alone = Assignment {
                leader_epoch: 0,
                partition_epoch: 0,
                replicas: vec![node_id],
                isr: vec![node_id],
            };
            let led = replica.become_leader(alone, clock.monotonic_ms(), &mut actions);
            assert!(led.is_ok(), "a partition led alone is a valid assignment");
        }
        Ok(Rc::new(Partition {
            topic: topic.to_string(),
            index,
            log,
            dir,
            producers: RefCell::new(producers),
            txn_turns: crate::sync::Turns::default(),
            timestamp_type: Cell::new(config.timestamp_type),
            cleanup: Cell::new(config.cleanup),
            compaction: Cell::new(config.compaction),
            producer_id_expiration_ms,
            snapshots: RefCell::new(SnapshotState {
                segments,
                ..SnapshotState::default()
            }),
            snapshot_lock: glommio::sync::Semaphore::new(1),
            replica: RefCell::new(replica),
            reconciled_epoch: Cell::new(None),
            truncation_refused_epoch: Cell::new(None),
            isr_outbox: RefCell::new(None),
            acks: RefCell::new(AcksWaiters::default()),
            acks_answered: Condition::default(),
            high_watermark_advanced: Condition::default(),
            low_watermark_changed: Condition::default(),
            leader_high_watermark: Cell::new(0),
            clock,
        }))
    }

    /// Writes a producer-state snapshot. Its offset is the log end, or the
    /// log end when the oldest append still in flight began if that is
    /// lower: every batch below it is in the state.
    async fn snapshot_producers(&self) {
        let Ok(_permit) = self.snapshot_lock.acquire_permit(1).await else {
            return;
        };
        let (offset, bytes) = {
            let snapshots = self.snapshots.borrow();
            let offset = snapshots
                .in_flight
                .values()
                .copied()
                .min()
                .unwrap_or(u64::MAX)
                .min(self.log.next_offset());
            let mut producers = self.producers.borrow_mut();
            producers.prune_aborted_below(self.log.start_offset() as i64);
            (offset, producers.encode_snapshot(offset))
        };
        match write_snapshot(&self.dir, offset, &bytes).await {
            Ok(()) => {
                tracing::debug!(topic = %self.topic, partition = self.index, offset, bytes = bytes.len(), "producer state snapshot written")
            }
            Err(error) => {
                // The log is intact; the next start replays more of it.
                tracing::error!(topic = %self.topic, partition = self.index, offset, %error, "writing producer state snapshot failed")
            }
        }
    }

    pub fn apply_config(&self, config: &EffectiveConfig) {
        self.log.set_config(config.log.clone());
        self.timestamp_type.set(config.timestamp_type);
        self.cleanup.set(config.cleanup);
        self.compaction.set(config.compaction);
        self.replica
            .borrow_mut()
            .set_min_insync_replicas(config.min_insync_replicas);
    }

    /// In a cluster: takes the replication state the metadata records for
    /// this partition (leader, epochs, replicas, ISR), when it is newer
    /// than the one it has. Led here: becomes (or stays) leader; else a
    /// follower of the recorded leader (-1: none while it is offline).
    /// `may_lead` false (this process's registration is not in the
    /// metadata yet): a leadership the state gives this node is taken as
    /// no leader at all, so the partition answers neither produces nor
    /// followers until the controller has decided on this process.
    pub fn assign(&self, state: &PartitionState, node_id: NodeId, may_lead: bool) {
        let assignment = Assignment {
            leader_epoch: state.leader_epoch,
            partition_epoch: state.partition_epoch,
            replicas: state.replicas.clone(),
            isr: state.isr.clone(),
        };
        let withheld = state.leader == node_id && !may_lead;
        let state = &PartitionState {
            leader: if withheld { -1 } else { state.leader },
            ..state.clone()
        };
        let leading = state.leader == node_id;
        {
            let replica = self.replica.borrow();
            let role_same = match replica.role() {
                Role::Leader => leading,
                Role::Follower { leader_id } => !leading && leader_id == state.leader,
                Role::Offline => false,
            };
            if role_same
                && replica.leader_epoch() == state.leader_epoch
                && replica.partition_epoch() == state.partition_epoch
                && replica.replicas() == state.replicas.as_slice()
                && replica.isr() == sorted(&state.isr)
            {
                return;
            }
        }
        self.observe_log_end();
        let mut actions = Vec::new();
        let result = {
            let mut replica = self.replica.borrow_mut();
            if leading {
                replica.become_leader(assignment, self.clock.monotonic_ms(), &mut actions)
            } else {
                replica.become_follower(state.leader, assignment, &mut actions)
            }
        };
        match result {
            Ok(()) => tracing::info!(
                topic = %self.topic,
                partition = self.index,
                leader = state.leader,
                leader_epoch = state.leader_epoch,
                isr = ?state.isr,
                "{}",
                if leading { "leading" } else { "following" }
            ),
            Err(why) => tracing::warn!(
                topic = %self.topic,
                partition = self.index,
                ?state,
                error = ?why,
                "replication state from the metadata not taken"
            ),
        }
        self.apply(actions);
        // Fetchers waiting here look again: the role may have changed.
        self.high_watermark_advanced.notify_all();
        self.low_watermark_changed.notify_all();
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn index(&self) -> i32 {
        self.index
    }

    /// Whether this follower's log is known to agree with its leader's at
    /// leader epoch `epoch` (it asked with OffsetForLeaderEpoch and cut
    /// what diverged).
    pub fn reconciled_at(&self, epoch: i32) -> bool {
        self.reconciled_epoch.get() == Some(epoch)
    }

    /// Notes a cut below the high watermark refused at leader epoch
    /// `epoch`; true the first time for that epoch.
    pub fn note_truncation_refused(&self, epoch: i32) -> bool {
        self.truncation_refused_epoch.replace(Some(epoch)) != Some(epoch)
    }

    pub fn set_reconciled(&self, epoch: i32) {
        self.reconciled_epoch.set(Some(epoch));
    }

    pub fn clear_reconciled(&self) {
        self.reconciled_epoch.set(None);
    }

    /// The latest leader epoch of this replica's log (-1: none).
    pub fn latest_log_epoch(&self) -> i32 {
        self.log.latest_epoch().unwrap_or(-1)
    }

    /// The local high watermark.
    pub fn follower_log(&self) -> crate::replica::FollowerLog {
        crate::replica::FollowerLog {
            log_end: self.log.next_offset(),
            high_watermark: self.replica.borrow().high_watermark(),
        }
    }

    /// The ISR change waiting to be sent to the controller, taken.
    pub fn take_isr_proposal(&self) -> Option<IsrProposal> {
        self.isr_outbox.borrow_mut().take()
    }

    /// The controller refused the ISR change sent `attempts` times (see
    /// `ReplicaState::isr_change_refused`); whether it is still proposed.
    pub fn isr_change_refused(&self, stale: bool, attempts: u32) -> bool {
        self.replica
            .borrow_mut()
            .isr_change_refused(stale, attempts)
    }

    /// Whether `proposal` is still the ISR change this leader waits for
    /// (no assignment settled it, no other change replaced it).
    pub fn isr_change_pending(&self, proposal: &IsrProposal) -> bool {
        self.replica.borrow().pending_isr() == Some(proposal)
    }

    /// The leader this partition follows, while it is a follower.
    pub fn following(&self) -> Option<(NodeId, i32)> {
        let replica = self.replica.borrow();
        match replica.role() {
            Role::Follower { leader_id } if leader_id >= 0 => {
                Some((leader_id, replica.leader_epoch()))
            }
            _ => None,
        }
    }

    /// Whether this broker leads the partition.
    pub fn is_leader(&self) -> bool {
        self.replica.borrow().role() == Role::Leader
    }

    /// The log end offset: where a follower fetches from next.
    pub fn log_end_offset(&self) -> i64 {
        self.log.next_offset() as i64
    }

    /// Advances the leader's view of time: followers not caught up for
    /// `replica.lag.time.max.ms` are proposed out of the ISR.
    pub fn tick(&self) {
        let mut actions = Vec::new();
        self.replica
            .borrow_mut()
            .tick(self.clock.monotonic_ms(), &mut actions);
        self.apply(actions);
    }

    /// A follower's fetch at the leader: records from `fetch_offset` up to
    /// the log end (not the high watermark; none when `max_bytes` is 0),
    /// after `durable_end` counts as the follower's log end (what it keeps
    /// under its flush policy; at most the fetch offset, as a follower
    /// fetches past what it has synced while its syncs run), which may move
    /// the high watermark and answer `acks=all` produces. The high
    /// watermark it is told is capped at what this leader keeps under its
    /// flush policy. The follower's `log_start_offset` (negative: not
    /// reported) counts toward the low watermark DeleteRecords waits for.
    pub async fn read_for_follower(
        &self,
        replica_id: NodeId,
        position: FollowerPosition,
        max_bytes: usize,
    ) -> FetchOutcome {
        let FollowerPosition {
            leader_epoch,
            fetch_offset,
            durable_end,
            log_start_offset,
        } = position;
        self.observe_log_end();
        let mut actions = Vec::new();
        let taken = self.replica.borrow_mut().follower_fetch(
            replica_id,
            leader_epoch,
            durable_end.clamp(0, fetch_offset.max(0)) as u64,
            self.clock.monotonic_ms(),
            &mut actions,
        );
        self.apply(actions);
        if taken.is_ok() && log_start_offset >= 0 {
            self.replica
                .borrow_mut()
                .follower_log_start(replica_id, log_start_offset as u64);
            self.low_watermark_changed.notify_all();
        }
        // The high watermark counts this leader's own records as they are
        // appended, before its sync; a follower is told it only up to what
        // this leader keeps under its flush policy (what `wait_durable`
        // waits for). Otherwise a leader that crashed before its sync and
        // came back as the only in-sync replica would lead without records
        // a follower holds as committed, and that follower would refuse to
        // truncate below its high watermark.
        let high_watermark = self.high_watermark().min(self.log.kept_offset() as i64);
        let log_start_offset = self.log_start_offset();
        let answer = |error_code, records| FetchOutcome {
            error_code,
            high_watermark,
            log_start_offset,
            last_stable_offset: high_watermark,
            aborted: Vec::new(),
            records,
        };
        if let Err(why) = taken {
            return answer(errors::replica(why), Bytes::new());
        }
        let end = self.log.next_offset();
        if fetch_offset < log_start_offset || fetch_offset as u64 > end {
            return answer(errors::OFFSET_OUT_OF_RANGE, Bytes::new());
        }
        // A fetch asking for no bytes only tells the follower's position.
        if fetch_offset as u64 == end || max_bytes == 0 {
            return answer(errors::NONE, Bytes::new());
        }
        match self.log.read(fetch_offset as u64, max_bytes, end).await {
            Ok(result) => answer(errors::NONE, result.bytes),
            Err(error) => answer(errors::storage_error_code(&error), Bytes::new()),
        }
    }

    /// A follower's append of what its leader sent: each batch keeps the
    /// leader's offsets and epoch (batches below the log end, sent again,
    /// are skipped); the producer state learns the idempotent ones, so a
    /// new leader knows every producer's sequence. Returns once the
    /// batches are in the log, not yet durable: the last offset appended,
    /// if any, for [`Partition::replicated_durable`]. The leader's high
    /// watermark is taken as far as this copy keeps it.
    pub async fn append_replicated(
        &self,
        records: Bytes,
        leader_high_watermark: i64,
    ) -> Result<Option<u64>, i16> {
        let mut last = None;
        for batch in protocol::batch::split_batches(records) {
            let batch = match batch {
                Ok(batch) => batch,
                // A fetch may end in a partial batch: the next fetch gets it.
                Err(protocol::batch::BatchError::Truncated { .. }) => break,
                Err(error) => {
                    tracing::warn!(topic = %self.topic, partition = self.index, %error, "a replicated batch is damaged");
                    return Err(errors::CORRUPT_MESSAGE);
                }
            };
            let header = *batch.header();
            let next = self.log.next_offset() as i64;
            if header.base_offset + i64::from(header.last_offset_delta) < next {
                continue;
            }
            let batch_bytes = if header.is_control() {
                batch.bytes().clone()
            } else {
                Bytes::new()
            };
            match self.log.append_batch_at(batch).await {
                Ok(info) => last = Some(info.last_offset),
                Err(error) => {
                    if error.is_out_of_space() {
                        crate::storage_health::StorageHealth::get().refused_for_space();
                    }
                    if let Some(not_logged) =
                        crate::storage_health::log_now("replicated append failed")
                    {
                        tracing::warn!(topic = %self.topic, partition = self.index, %error, not_logged, "a replicated append failed");
                    }
                    return Err(errors::storage_error_code(&error));
                }
            }
            let bytes = batch_bytes.clone();
            replay_batch(
                &mut self.producers.borrow_mut(),
                &header,
                &bytes,
                self.clock.wall_ms(),
            );
        }
        self.observe_log_end();
        self.leader_high_watermark.set(leader_high_watermark);
        self.take_leader_high_watermark();
        Ok(last)
    }

    /// Logs a wait for durability that failed: an error, unless the log
    /// was closed or deleted meanwhile (the replica moved or the broker
    /// stops), which answers the waiter with a retriable error and is no
    /// fault.
    fn sync_failed(&self, error: &storage::StorageError) {
        if matches!(error, storage::StorageError::Closed { .. }) {
            tracing::debug!(topic = %self.topic, partition = self.index, "a wait for durability ended: the log was closed");
        } else {
            tracing::error!(topic = %self.topic, partition = self.index, %error, "sync failed");
        }
    }

    /// Resolves once a follower's copy is durable under the flush policy
    /// up to `last_offset` (appended by [`Partition::append_replicated`]
    /// at `appended_at`): the replica state learns it, and the leader's
    /// high watermark is taken as far as the copy now keeps it.
    pub async fn replicated_durable(
        &self,
        last_offset: u64,
        appended_at: std::time::Instant,
    ) -> Result<(), i16> {
        if let Err(error) = self.log.wait_durable(last_offset).await {
            if error.is_out_of_space() {
                // As a refused append: this broker leaves the ISRs at once
                // rather than hold every acks=all back until its lag shows.
                crate::storage_health::StorageHealth::get().refused_for_space();
            }
            self.sync_failed(&error);
            return Err(errors::storage_error_code(&error));
        }
        stages::record_since(Stage::FollowerAppendDurable, appended_at);
        self.observe_log_end();
        let mut actions = Vec::new();
        let durable = self.durable_log_end() as u64;
        self.replica
            .borrow_mut()
            .local_durable(durable, &mut actions);
        self.apply(actions);
        self.take_leader_high_watermark();
        Ok(())
    }

    /// Where this copy's durable log ends (what a follower reports to its
    /// leader as its position: `acks=all` counts only what it keeps).
    pub fn durable_log_end(&self) -> i64 {
        self.log.kept_offset().min(self.log.next_offset()) as i64
    }

    /// Takes the last high watermark the leader sent, capped at what this
    /// copy keeps: a follower that crashed before its sync must not come
    /// back believing records committed that it lost.
    fn take_leader_high_watermark(&self) {
        let kept = self.durable_log_end();
        let high_watermark = self.leader_high_watermark.get().min(kept).max(0) as u64;
        let mut actions = Vec::new();
        self.replica
            .borrow_mut()
            .leader_high_watermark(high_watermark, &mut actions);
        self.apply(actions);
    }

    /// The partition's log, for metrics.
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// The idempotent producers this partition knows, read-only.
    pub fn producers(&self) -> Vec<crate::producer_state::ProducerView> {
        self.producers.borrow().views()
    }

    /// What every ISR member has; consumers read below it.
    pub fn high_watermark(&self) -> i64 {
        self.observe_log_end();
        self.replica.borrow().high_watermark() as i64
    }

    /// The replica state's leader epoch: answered by ListOffsets, and
    /// stamped into the batches this broker appends as the leader (the log
    /// notes it in its `leader-epoch-checkpoint`). 0 on a single node.
    pub fn leader_epoch(&self) -> i32 {
        self.replica.borrow().leader_epoch()
    }

    /// Feeds the log's end into the replica state. The log is the truth:
    /// its end moves when an append is assigned offsets, before the append
    /// call returns, and readers see the records from then on.
    fn observe_log_end(&self) {
        let end = self.log.next_offset();
        if end > self.replica.borrow().log_end_offset() {
            let mut actions = Vec::new();
            self.replica.borrow_mut().local_append(end, &mut actions);
            self.apply(actions);
        }
    }

    /// Carries out what the replica state asked for.
    fn apply(&self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::HighWatermarkAdvanced { .. } => self.high_watermark_advanced.notify_all(),
                Action::CompleteAcks { waiter, result } => {
                    let code = errors::replica_outcome(result);
                    let answered = (code, std::time::Instant::now());
                    self.acks.borrow_mut().answered.insert(waiter, answered);
                    self.acks_answered.notify_all();
                }
                Action::ProposeIsr(proposal) => {
                    tracing::info!(topic = %self.topic, partition = self.index, isr = ?proposal.isr, "ISR change proposed");
                    *self.isr_outbox.borrow_mut() = Some(proposal);
                    ISR_PROPOSALS.with(|proposals| proposals.note());
                }
            }
        }
    }

    /// Resolves once `acks=all` holds for the batch ending at
    /// `last_offset`: durable here under the flush policy and below the
    /// high watermark.
    async fn wait_acks_all(&self, last_offset: u64, timeout: Duration) -> Result<(), i16> {
        let started = std::time::Instant::now();
        if let Err(error) = self.log.wait_durable(last_offset).await {
            self.sync_failed(&error);
            return Err(errors::storage_error_code(&error));
        }
        // The stages of a replicated batch (`stages`); led alone there is
        // no replication to time.
        let replicated = self.replica.borrow().isr_len() > 1;
        if replicated {
            stages::record_since(Stage::LeaderLocalDurable, started);
        }
        let durable = std::time::Instant::now();
        self.observe_log_end();
        let waiter = {
            let mut acks = self.acks.borrow_mut();
            acks.next += 1;
            acks.next
        };
        let wait = AcksWait {
            partition: self,
            waiter,
        };
        let mut actions = Vec::new();
        {
            let mut replica = self.replica.borrow_mut();
            replica.local_durable(last_offset + 1, &mut actions);
            replica.await_acks(waiter, last_offset, &mut actions);
        }
        self.apply(actions);
        // Led alone (or with the ISR caught up) the answer is usually
        // there already: no timer then.
        let at_once = self.acks.borrow().answered.contains_key(&waiter);
        let answered = async {
            self.acks_answered
                .wait_until(|| self.acks.borrow().answered.contains_key(&waiter))
                .await;
            true
        };
        let timed_out = async {
            glommio::timer::sleep(timeout).await;
            false
        };
        let in_time = at_once || futures_lite::future::or(answered, timed_out).await;
        let answer = self.acks.borrow_mut().answered.remove(&waiter);
        drop(wait);
        let code = answer.map(|(code, answered_at)| {
            if replicated {
                stages::record(
                    Stage::LeaderIsrWait,
                    answered_at.saturating_duration_since(durable),
                );
                stages::record_since(Stage::AnswerAfterAcks, answered_at);
            }
            code
        });
        match code {
            Some(errors::NONE) => Ok(()),
            Some(code) => Err(code),
            // Kafka's answer when the ISR did not have the records within
            // the request's timeout; they stay appended, and a retry of an
            // idempotent producer is answered once they hold.
            None if !in_time => Err(errors::REQUEST_TIMED_OUT),
            None => Err(errors::UNKNOWN_SERVER_ERROR),
        }
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log.start_offset() as i64
    }

    /// Appends one validated batch; with `acks == -1` returns once
    /// `acks=all` holds (see `replica.rs`; led alone: once durable), or
    /// with REQUEST_TIMED_OUT when it does not within `timeout` (the
    /// request's `timeout_ms`, as Kafka answers).
    pub async fn produce(
        &self,
        batch: RecordBatch,
        acks: i16,
        timeout: Duration,
    ) -> ProduceOutcome {
        self.append_produced(batch, acks, timeout, Source::Client(None))
            .await
    }

    /// Whether a transactional batch of `producer_id` must take its turn
    /// ([`Partition::take_txn_turn`]) before it is appended: the producer
    /// has no transaction open here (its first batch is checked with the
    /// coordinator), or batches before it wait for that check.
    pub fn txn_needs_turn(&self, producer_id: i64) -> bool {
        !self.producers.borrow().in_txn(producer_id) || self.txn_turns.busy(producer_id)
    }

    /// Waits for the batches of `producer_id` before this one. Holding the
    /// turn, the caller learns from [`Partition::start_txn_verification`]
    /// whether the batch still opens a transaction here.
    pub async fn take_txn_turn(&self, producer_id: i64) -> crate::sync::Turn {
        self.txn_turns.take(producer_id).await
    }

    /// With the producer's turn: `None` when its transaction is open here
    /// (nothing to check), else the token of a new check with the
    /// coordinator that a marker written meanwhile voids.
    pub fn start_txn_verification(&self, producer_id: i64) -> Option<u64> {
        let mut producers = self.producers.borrow_mut();
        (!producers.in_txn(producer_id)).then(|| producers.start_verification(producer_id))
    }

    /// Whether the check `token` still stands: no marker of the producer
    /// was written since it began.
    pub fn txn_verification_holds(&self, producer_id: i64, token: u64) -> bool {
        self.producers
            .borrow()
            .verification_holds(producer_id, token)
    }

    /// Forgets a check whose batch is not appended (the coordinator
    /// refused it).
    pub fn end_txn_verification(&self, producer_id: i64, token: u64) {
        self.producers
            .borrow_mut()
            .end_verification(producer_id, token);
    }

    /// Appends a transactional batch in its turn: `verified` names the
    /// coordinator's check when the batch opens the transaction, and the
    /// batch is refused with INVALID_TXN_STATE when a marker of the
    /// producer was written since the check began. The turn passes to the
    /// next batch once this one is in the log (not once replicated).
    pub async fn produce_in_turn(
        &self,
        batch: RecordBatch,
        acks: i16,
        timeout: Duration,
        turn: crate::sync::Turn,
        verified: Option<u64>,
    ) -> ProduceOutcome {
        let source = Source::Client(Some(InTurn {
            _turn: turn,
            verified,
        }));
        self.append_produced(batch, acks, timeout, source).await
    }

    /// Appends a transactional batch a coordinator built (the group
    /// coordinator's offsets committed inside a transaction): no sequence
    /// (Kafka's coordinator writes carry none), but it opens the
    /// producer's transaction here, which the marker ends. Answered as an
    /// `acks=all` produce.
    pub async fn append_coordinator_transactional(
        &self,
        batch: RecordBatch,
        timeout: Duration,
    ) -> ProduceOutcome {
        self.append_produced(batch, -1, timeout, Source::Coordinator)
            .await
    }

    async fn append_produced(
        &self,
        batch: RecordBatch,
        acks: i16,
        timeout: Duration,
        source: Source,
    ) -> ProduceOutcome {
        let from_coordinator = matches!(source, Source::Coordinator);
        let mut in_turn = match source {
            Source::Client(in_turn) => in_turn,
            Source::Coordinator => None,
        };
        let header = *batch.header();
        if let Some(token) = in_turn.as_ref().and_then(|turn| turn.verified) {
            let mut producers = self.producers.borrow_mut();
            let holds = producers.verification_holds(header.producer_id, token);
            producers.end_verification(header.producer_id, token);
            if !holds {
                // The transaction ended while the coordinator was asked: a
                // late write of it must not open another.
                return ProduceOutcome::error(errors::INVALID_TXN_STATE);
            }
        }
        if let Err(why) = self.replica.borrow().admit_produce(acks) {
            return ProduceOutcome::error(errors::replica(why));
        }
        if header.is_control() {
            // Markers are the coordinator's to have written, never a client's.
            return ProduceOutcome::error(errors::INVALID_RECORD);
        }
        if from_coordinator {
            let fenced = self
                .producers
                .borrow()
                .check_coordinator_write(header.producer_id, header.producer_epoch);
            if let Err(code) = fenced {
                return ProduceOutcome::error(code);
            }
        }
        // A transactional producer is an idempotent one whose batches also
        // open a transaction here.
        let idempotent = header.producer_id >= 0 && !from_coordinator;
        let first_sequence = header.base_sequence;
        let last_seq = last_sequence(first_sequence, header.last_offset_delta);
        let mut reservation = None;
        if idempotent {
            let check = self.producers.borrow_mut().check(
                header.producer_id,
                header.producer_epoch,
                first_sequence,
                last_seq,
            );
            match check {
                SequenceCheck::Append {
                    previous_last_sequence,
                } => reservation = Some(previous_last_sequence),
                SequenceCheck::Duplicate {
                    base_offset,
                    log_append_time_ms,
                } => {
                    // A retry is answered as its original would be: with
                    // the original's offsets, and for acks=all only once
                    // the original holds acks=all. The first attempt may
                    // have timed out on the client exactly because the
                    // ISR did not have it yet; answering at once would
                    // acknowledge records only this replica holds.
                    if acks == -1 {
                        let last_offset = base_offset as u64 + header.last_offset_delta as u64;
                        if let Err(code) = self.wait_acks_all(last_offset, timeout).await {
                            return ProduceOutcome::error(code);
                        }
                    }
                    return ProduceOutcome {
                        error_code: errors::NONE,
                        base_offset,
                        log_append_time_ms,
                        log_start_offset: self.log_start_offset(),
                    };
                }
                SequenceCheck::Reject(code) => return ProduceOutcome::error(code),
            }
        } else if header.is_transactional() && header.producer_id < 0 {
            // A transaction needs a producer id.
            return ProduceOutcome::error(errors::INVALID_RECORD);
        }
        let log_append_time_ms = match self.timestamp_type.get() {
            TimestampType::LogAppendTime => Some(self.clock.wall_ms()),
            TimestampType::CreateTime => None,
        };
        let options = AppendOptions {
            leader_epoch: self.leader_epoch(),
            log_append_time_ms,
        };
        // No await between the sequence check and the append call: appends
        // of one partition are ordered as they are called.
        let in_flight = InFlightAppend::begin(&self.snapshots, self.log.next_offset());
        let appended = self.log.append_batch(batch, options).await;
        // The producer's next batch may go: this one is in the log (or
        // refused, its sequence given back below).
        in_turn.take();
        let info = match appended {
            Ok(info) => info,
            Err(error) => {
                drop(in_flight);
                if let Some(previous) = reservation {
                    self.producers.borrow_mut().append_failed(
                        header.producer_id,
                        last_seq,
                        previous,
                    );
                }
                if error.is_out_of_space() {
                    crate::storage_health::StorageHealth::get().refused_for_space();
                }
                if let Some(not_logged) = crate::storage_health::log_now("append failed") {
                    tracing::warn!(topic = %self.topic, partition = self.index, %error, not_logged, "append failed");
                }
                return ProduceOutcome::error(errors::storage_error_code(&error));
            }
        };
        let log_append_time_ms = info.log_append_time_ms.unwrap_or(-1);
        if reservation.is_some() {
            self.producers.borrow_mut().appended(
                header.producer_id,
                first_sequence,
                last_seq,
                info.base_offset as i64,
                log_append_time_ms,
                self.clock.wall_ms(),
                header.is_transactional(),
            );
        } else if from_coordinator && header.is_transactional() {
            self.producers.borrow_mut().begin_txn(
                header.producer_id,
                header.producer_epoch,
                info.base_offset as i64,
            );
        }
        drop(in_flight);
        let rolled = {
            let mut snapshots = self.snapshots.borrow_mut();
            let segments = self.log.segment_count();
            let rolled = segments > snapshots.segments;
            snapshots.segments = segments;
            rolled
        };
        if rolled {
            // A snapshot per segment, as Kafka keeps: a restart replays at
            // most about a segment of log.
            self.snapshot_producers().await;
        }
        self.observe_log_end();
        if acks == -1 {
            if let Err(code) = self.wait_acks_all(info.last_offset, timeout).await {
                return ProduceOutcome::error(code);
            }
        }
        ProduceOutcome {
            error_code: errors::NONE,
            base_offset: info.base_offset as i64,
            log_append_time_ms,
            log_start_offset: self.log_start_offset(),
        }
    }

    /// Reads up to `max_bytes` (the first batch whole even if larger) from
    /// `fetch_offset`, up to the high watermark.
    /// `read_committed`: up to the last stable offset instead, with the
    /// aborted transactions of the range returned.
    pub async fn read(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        read_committed: bool,
    ) -> FetchOutcome {
        let high_watermark = self.high_watermark();
        let last_stable_offset = self.last_stable_offset();
        let log_start_offset = self.log_start_offset();
        let answer = |error_code, records| FetchOutcome {
            error_code,
            high_watermark,
            log_start_offset,
            last_stable_offset,
            aborted: Vec::new(),
            records,
        };
        // Past the log end is out of range; between the high watermark and
        // the log end is not (as Kafka answers): a new leader's high
        // watermark can trail the old leader's until its followers fetch,
        // and a consumer at the old one must wait, not reset.
        if fetch_offset < log_start_offset || fetch_offset > self.log_end_offset() {
            return answer(errors::OFFSET_OUT_OF_RANGE, Bytes::new());
        }
        let upper = if read_committed {
            last_stable_offset
        } else {
            high_watermark
        };
        if fetch_offset >= upper {
            return answer(errors::NONE, Bytes::new());
        }
        match self
            .log
            .read(fetch_offset as u64, max_bytes, upper as u64)
            .await
        {
            Ok(result) => {
                let mut outcome = answer(errors::NONE, result.bytes);
                if read_committed {
                    let end = (result.next_offset as i64).min(upper);
                    outcome.aborted = self.producers.borrow().aborted_between(fetch_offset, end);
                }
                outcome
            }
            Err(error) => answer(errors::storage_error_code(&error), Bytes::new()),
        }
    }

    /// The offset below which every transaction is decided: the first
    /// offset of the oldest open transaction, or the high watermark.
    pub fn last_stable_offset(&self) -> i64 {
        let high_watermark = self.high_watermark();
        self.producers
            .borrow()
            .first_unstable_offset()
            .map_or(high_watermark, |first| first.min(high_watermark))
    }

    /// Writes the marker ending `producer_id`'s transaction (the
    /// coordinator's WriteTxnMarkers) and answers once it holds as an
    /// `acks=all` produce would: on every ISR member, durably.
    pub async fn write_marker(
        &self,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
        marker: protocol::control::Marker,
        timeout: Duration,
    ) -> i16 {
        if let Err(why) = self.replica.borrow().admit_produce(-1) {
            return errors::replica(why);
        }
        let fenced = self
            .producers
            .borrow()
            .check_marker(producer_id, epoch, coordinator_epoch);
        if let Err(code) = fenced {
            if code == errors::TRANSACTION_COORDINATOR_FENCED {
                tracing::info!(topic = %self.topic, partition = self.index, producer_id, coordinator_epoch, "refused a marker from a coordinator older than the last one that wrote for this producer");
            }
            return code;
        }
        let bytes = protocol::control::marker_batch(
            producer_id,
            epoch,
            coordinator_epoch,
            marker,
            self.clock.wall_ms(),
        );
        let batch = match RecordBatch::new(Bytes::from(bytes)) {
            Ok(batch) => batch,
            Err(error) => unreachable!("a marker batch is well formed: {error}"),
        };
        let options = AppendOptions {
            leader_epoch: self.leader_epoch(),
            log_append_time_ms: None,
        };
        let in_flight = InFlightAppend::begin(&self.snapshots, self.log.next_offset());
        let info = match self.log.append_batch(batch, options).await {
            Ok(info) => info,
            Err(error) => {
                drop(in_flight);
                if error.is_out_of_space() {
                    crate::storage_health::StorageHealth::get().refused_for_space();
                }
                tracing::warn!(topic = %self.topic, partition = self.index, producer_id, %error, "writing a transaction marker failed");
                return errors::storage_error_code(&error);
            }
        };
        self.producers.borrow_mut().apply_marker(
            producer_id,
            epoch,
            protocol::control::EndMarker {
                marker,
                coordinator_epoch,
            },
            info.base_offset as i64,
        );
        drop(in_flight);
        self.observe_log_end();
        match self.wait_acks_all(info.last_offset, timeout).await {
            Ok(()) => errors::NONE,
            Err(code) => code,
        }
    }

    /// The transactions open on this partition: (first offset, producer id).
    pub fn open_transactions(&self) -> Vec<(i64, i64)> {
        self.producers.borrow().open_transactions()
    }

    /// Resolves once every offset up to `last_offset` is durable (the
    /// group coordinator answers commits only then).
    pub async fn wait_durable(&self, last_offset: i64) -> Result<(), i16> {
        self.log
            .wait_durable(last_offset.max(0) as u64)
            .await
            .map_err(|error| errors::storage_error_code(&error))
    }

    /// Moves the log start offset forward; segments wholly below it go.
    pub async fn advance_start_offset(&self, offset: i64) -> Result<(), i16> {
        self.log
            .advance_start_offset(offset.max(0) as u64)
            .await
            .map(|_| ())
            .map_err(|error| errors::storage_error_code(&error))
    }

    /// DeleteRecords on the leader: moves the log start to `offset`
    /// ([`DELETE_TO_HIGH_WATERMARK`]: the high watermark), then waits, at
    /// most `timeout`, until every ISR member's log start has reached it
    /// (the followers learn it from their next fetch answer and report
    /// theirs in the fetch after). Answers the low watermark then, or
    /// REQUEST_TIMED_OUT with the one reached so far (the leader's own
    /// start has moved regardless, and the followers still converge).
    /// OFFSET_OUT_OF_RANGE for an offset above the high watermark or
    /// negative (but -1); NOT_LEADER_OR_FOLLOWER when not the leader, or
    /// no longer.
    pub async fn delete_records(&self, offset: i64, timeout: Duration) -> DeleteRecordsOutcome {
        if !self.is_leader() {
            return DeleteRecordsOutcome::error(errors::NOT_LEADER_OR_FOLLOWER);
        }
        let high_watermark = self.high_watermark();
        let target = if offset == DELETE_TO_HIGH_WATERMARK {
            high_watermark
        } else {
            offset
        };
        if target < 0 || target > high_watermark {
            return DeleteRecordsOutcome::error(errors::OFFSET_OUT_OF_RANGE);
        }
        let before = self.log_start_offset();
        if let Err(code) = self.advance_start_offset(target).await {
            return DeleteRecordsOutcome::error(code);
        }
        if target > before {
            tracing::info!(topic = %self.topic, partition = self.index, log_start_before = before, log_start = target, "records deleted");
        }
        let target = target as u64;
        let reached = || {
            let start = self.log.start_offset();
            match self.replica.borrow().low_watermark(start) {
                Some(low) => low >= target,
                // No longer the leader: nothing more to wait for.
                None => true,
            }
        };
        if !reached() {
            let waited = self.low_watermark_changed.wait_until(reached);
            let timed_out = glommio::timer::sleep(timeout);
            futures_lite::future::or(waited, timed_out).await;
        }
        match self.replica.borrow().low_watermark(self.log.start_offset()) {
            None => DeleteRecordsOutcome::error(errors::NOT_LEADER_OR_FOLLOWER),
            Some(low) => DeleteRecordsOutcome {
                error_code: if low >= target {
                    errors::NONE
                } else {
                    errors::REQUEST_TIMED_OUT
                },
                low_watermark: low as i64,
            },
        }
    }

    /// A follower's copy takes the leader's log start (from a fetch
    /// answer), as far as its own high watermark: records below the
    /// leader's start are gone there (DeleteRecords, retention), and a
    /// consumer must not find them here should this replica lead. Below
    /// the high watermark every record is committed, so the cut removes
    /// nothing the leader may still need from this copy. Returns the log
    /// start offset now.
    pub async fn follow_log_start(&self, leader_log_start: i64) -> Result<i64, i16> {
        let start = self.log_start_offset();
        let to = leader_log_start.min(self.high_watermark());
        if to <= start {
            return Ok(start);
        }
        self.advance_start_offset(to).await?;
        tracing::debug!(topic = %self.topic, partition = self.index, log_start_before = start, log_start = to, "follower log start moved to the leader's");
        Ok(self.log_start_offset())
    }

    /// Resolves once the high watermark passes `offset` (a record at
    /// `offset` is readable), or the log closes. Led alone that is when
    /// the log holds it; with followers the high watermark trails the log
    /// end.
    pub async fn wait_for_append(&self, offset: i64) {
        let offset = offset.max(0) as u64;
        self.log.wait_for_append(offset).await;
        if self.high_watermark() as u64 > offset || self.log.next_offset() <= offset {
            // Readable, or woken by the log closing.
            return;
        }
        self.high_watermark_advanced
            .wait_until(|| self.replica.borrow().high_watermark() > offset)
            .await
    }

    /// Resolves once the log holds a record at `offset` (what a follower
    /// long-polls for), or the log closes.
    pub async fn wait_for_log_end(&self, offset: i64) {
        self.log.wait_for_append(offset.max(0) as u64).await;
    }

    /// OffsetForLeaderEpoch on this replica: where `epoch` ends in its
    /// log, as (epoch, end offset) by Kafka's rules (see
    /// [`EpochCache::end_offset_for`]). A leader answers as if its current
    /// epoch started at its log end when no batch carries it yet: Kafka's
    /// leader puts that entry in its cache when it takes leadership, so a
    /// follower asking for an epoch between its last batch's and the
    /// current one learns where the last one ended.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        let replica = self.replica.borrow();
        let current = replica.leader_epoch();
        let leads_an_unwritten_epoch = replica.role() == Role::Leader
            && self
                .log
                .latest_epoch()
                .is_none_or(|latest| latest < current);
        if !leads_an_unwritten_epoch {
            return self.log.end_offset_for(epoch);
        }
        let log_end = self.log.next_offset();
        let mut cache = EpochCache::default();
        for entry in self.log.epoch_entries() {
            cache.assign(entry.epoch, entry.start_offset);
        }
        cache.assign(current, log_end);
        cache.end_offset_for(epoch, log_end)
    }

    /// The OffsetForLeaderEpoch answer for one partition, or its error:
    /// `FENCED_LEADER_EPOCH` when `current_leader_epoch` (negative, -1 as
    /// clients send it: not checked) is older than this replica's, `UNKNOWN_LEADER_EPOCH` when newer,
    /// `NOT_LEADER_OR_FOLLOWER` when this replica does not lead (only the
    /// leader answers, for consumers and followers alike, as Kafka).
    pub fn offset_for_leader_epoch(
        &self,
        current_leader_epoch: i32,
        epoch: i32,
    ) -> Result<(i32, i64), i16> {
        {
            let replica = self.replica.borrow();
            if current_leader_epoch >= 0 {
                if current_leader_epoch < replica.leader_epoch() {
                    return Err(errors::FENCED_LEADER_EPOCH);
                }
                if current_leader_epoch > replica.leader_epoch() {
                    return Err(errors::UNKNOWN_LEADER_EPOCH);
                }
            }
            if replica.role() != Role::Leader {
                return Err(errors::NOT_LEADER_OR_FOLLOWER);
            }
        }
        Ok(self.end_offset_for_epoch(epoch))
    }

    /// Cuts the log back to `offset` (the whole batch holding it goes), for
    /// a follower whose log diverged from its new leader ([`divergence`]
    /// says where). The log's leader-epoch cache is cut with it; the
    /// idempotent producer state is rebuilt as at open (the newest
    /// snapshot at or below the new end, without the batches past it, then
    /// the log after it), so only batches still in the log count; the
    /// replica state's log end and durable offset go back to the new end,
    /// and its high watermark too if it was past it (see
    /// [`ReplicaState::truncated`]). Returns the new log end offset (at or
    /// below `offset` and at or above the log start; the log end when
    /// `offset` is past it).
    ///
    /// The caller is the partition's only writer meanwhile (a follower
    /// admits no produce; its fetcher appends and truncates in turn).
    /// Refused, with nothing done, while a produce's append is in flight.
    ///
    /// [`divergence`]: crate::replica::divergence
    pub async fn truncate_to(&self, offset: u64) -> Result<u64, TruncateError> {
        let appends = self.snapshots.borrow().in_flight.len();
        if appends > 0 {
            return Err(TruncateError::AppendsInFlight { appends });
        }
        let before = self.log.next_offset();
        let new_end = self.log.truncate_to(offset).await?;
        let mut actions = Vec::new();
        self.replica.borrow_mut().truncated(new_end, &mut actions);
        self.apply(actions);
        if new_end < before {
            self.snapshots.borrow_mut().segments = self.log.segment_count();
            // On failure the producer state still holds batches past the
            // cut (a retry of one is answered as a duplicate); the log is
            // cut either way and the next open rebuilds from it.
            let now_ms = self.clock.wall_ms();
            let mut table = recover_producers(&self.log, &self.dir, now_ms).await?;
            table.expire(now_ms, self.producer_id_expiration_ms);
            *self.producers.borrow_mut() = table;
            tracing::info!(topic = %self.topic, partition = self.index, requested = offset, log_end_before = before, log_end = new_end, "partition truncated");
        }
        Ok(new_end)
    }

    /// `read_committed`: the latest offset is the last stable offset.
    pub async fn list_offset(&self, timestamp: i64, read_committed: bool) -> OffsetOutcome {
        let leader_epoch = self.leader_epoch();
        let ok = |timestamp, offset| OffsetOutcome {
            error_code: errors::NONE,
            timestamp,
            offset,
            leader_epoch: if offset < 0 { -1 } else { leader_epoch },
        };
        match timestamp {
            LATEST_TIMESTAMP if read_committed => ok(-1, self.last_stable_offset()),
            LATEST_TIMESTAMP => ok(-1, self.high_watermark()),
            EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => ok(-1, self.log_start_offset()),
            LATEST_TIERED_TIMESTAMP => ok(-1, -1),
            MAX_TIMESTAMP => match self.log.max_timestamp_record().await {
                Ok(Some(found)) => ok(found.timestamp, found.offset as i64),
                Ok(None) => ok(-1, -1),
                Err(error) => OffsetOutcome::error(errors::storage_error_code(&error)),
            },
            t if t >= 0 => match self.log.offset_for_timestamp(t).await {
                Ok(Some(found)) => ok(found.timestamp, found.offset as i64),
                Ok(None) => ok(-1, -1),
                Err(error) => OffsetOutcome::error(errors::storage_error_code(&error)),
            },
            _ => OffsetOutcome::error(errors::INVALID_REQUEST),
        }
    }

    /// This broker no longer holds the partition: produces waiting for
    /// `acks=all` here are answered NOT_LEADER_OR_FOLLOWER (the client
    /// finds the new leader) instead of waiting for followers that no
    /// longer fetch from this replica.
    fn stop_replicating(&self) {
        let mut actions = Vec::new();
        self.replica.borrow_mut().stop(&mut actions);
        self.apply(actions);
        self.low_watermark_changed.notify_all();
    }

    /// Closes the log cleanly (synced and checkpointed, so the next start
    /// scans nothing).
    pub async fn close(&self) {
        self.stop_replicating();
        if let Err(error) = self.log.close().await {
            tracing::error!(topic = %self.topic, partition = self.index, %error, "closing log failed");
            return;
        }
        // At the log end, so the next start replays nothing.
        self.snapshot_producers().await;
    }

    /// Stops the log and removes its directory.
    pub async fn delete(&self) {
        self.stop_replicating();
        if let Err(error) = self.log.delete().await {
            tracing::error!(topic = %self.topic, partition = self.index, %error, "deleting log failed");
        }
    }

    /// `cleanup.policy` and the compaction settings it runs with.
    pub fn cleanup(&self) -> (CleanupPolicy, Compaction) {
        (self.cleanup.get(), self.compaction.get())
    }

    /// What of the log a cleaning may touch now: sealed segments below the
    /// last stable offset (a record that may still be truncated must not
    /// make an older value of its key go, nor a record of a transaction
    /// that may still abort).
    pub async fn cleanable(&self, now_ms: i64) -> Option<storage::Cleanable> {
        let below = u64::try_from(self.last_stable_offset()).ok()?;
        let min_lag_ms = self.compaction.get().min_lag_ms;
        self.log.cleanable(below, now_ms, min_lag_ms).await.ok()
    }

    /// One cleaning of this partition's log (see `storage::log::clean`),
    /// keeping every idempotent producer's last batch, removing aborted
    /// transactions' records and, once `delete.retention.ms` is up, the
    /// markers of transactions with nothing left (which leave the aborted
    /// transactions a read_committed fetch names).
    pub async fn clean(
        &self,
        now_ms: i64,
        key_map_entries_max: usize,
        io_bytes_per_second: f64,
    ) -> storage::Result<Option<storage::CleanOutcome>> {
        let Ok(below) = u64::try_from(self.last_stable_offset()) else {
            return Ok(None);
        };
        let compaction = self.compaction.get();
        let options = storage::CleanOptions {
            clean_below: below,
            now_ms,
            min_compaction_lag_ms: compaction.min_lag_ms,
            delete_retention_ms: compaction.delete_retention_ms,
            key_map_entries_max,
            keep_batches: self.producers.borrow().last_batch_offsets(),
            aborted: self.producers.borrow().aborted_ranges(),
            io_bytes_per_second,
        };
        let outcome = self.log.clean(&options).await?;
        if let Some(outcome) = &outcome {
            if !outcome.markers_removed.is_empty() {
                self.producers
                    .borrow_mut()
                    .forget_aborted(&outcome.markers_removed);
                // The snapshot stops naming them; were it to fail, the next
                // start finds their markers gone (`recover_producers`).
                self.snapshot_producers().await;
            }
        }
        Ok(outcome)
    }

    /// Deletes segments past the retention limits.
    /// Also drops producers idle past `producer.id.expiration.ms`.
    pub async fn enforce_retention(&self) {
        let now_ms = self.clock.wall_ms();
        let expired = self
            .producers
            .borrow_mut()
            .expire(now_ms, self.producer_id_expiration_ms);
        if expired > 0 {
            tracing::info!(topic = %self.topic, partition = self.index, expired, "expired idle producers");
        }
        if !self.cleanup.get().delete {
            // compact only: old segments go through the cleaner, not retention.
            return;
        }
        match self.log.enforce_retention().await {
            Ok(outcome) if outcome.segments_deleted > 0 => {
                tracing::info!(topic = %self.topic, partition = self.index, segments = outcome.segments_deleted, bytes = outcome.bytes_deleted, "retention deleted segments");
            }
            Ok(_) => {}
            Err(error) => {
                tracing::error!(topic = %self.topic, partition = self.index, %error, "retention failed")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use protocol::batch::build::patterned;
    use protocol::batch::compute_crc;
    use storage::LogConfig;

    use super::*;
    use crate::producer_state::ProducerView;

    const BASE_TIMESTAMP_MS: i64 = 1_700_000_000_000;
    const NODE: NodeId = 1;
    const EXPIRATION_MS: i64 = 7 * 24 * 3_600_000;
    /// An acks=all wait in tests that is never meant to run out.
    const TEST_TIMEOUT: Duration = Duration::from_secs(60);

    /// A batch of `count` records; from producer `producer_id` (epoch 0)
    /// starting at `first_sequence` unless the id is -1.
    fn batch(count: usize, producer_id: i64, first_sequence: i32) -> RecordBatch {
        let mut bytes = patterned(BASE_TIMESTAMP_MS, count, 16, first_sequence as u64);
        if producer_id >= 0 {
            bytes[43..51].copy_from_slice(&producer_id.to_be_bytes());
            bytes[51..53].copy_from_slice(&0i16.to_be_bytes());
            bytes[53..57].copy_from_slice(&first_sequence.to_be_bytes());
            let crc = compute_crc(&bytes);
            bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        }
        RecordBatch::new(Bytes::from(bytes)).expect("a valid batch")
    }

    async fn produce(partition: &Partition, batch: RecordBatch) -> (i16, i64) {
        let outcome = partition.produce(batch, -1, TEST_TIMEOUT).await;
        (outcome.error_code, outcome.base_offset)
    }

    fn lead(partition: &Partition, epoch: i32) {
        lead_with(partition, epoch, vec![NODE]);
    }

    /// Leads at `epoch` with every one of `replicas` in the ISR.
    fn lead_with(partition: &Partition, epoch: i32, replicas: Vec<NodeId>) {
        let mut actions = Vec::new();
        let assignment = Assignment {
            leader_epoch: epoch,
            partition_epoch: epoch,
            isr: replicas.clone(),
            replicas,
        };
        partition
            .replica
            .borrow_mut()
            .become_leader(assignment, 0, &mut actions)
            .expect("leadership accepted");
        partition.apply(actions);
    }

    /// Follows `leader` at `epoch`, both in the ISR.
    fn follow(partition: &Partition, leader: NodeId, epoch: i32) {
        let mut actions = Vec::new();
        let assignment = Assignment {
            leader_epoch: epoch,
            partition_epoch: epoch,
            replicas: vec![NODE, leader],
            isr: vec![NODE, leader],
        };
        partition
            .replica
            .borrow_mut()
            .become_follower(leader, assignment, &mut actions)
            .expect("follows");
        partition.apply(actions);
    }

    fn epochs(partition: &Partition) -> Vec<(i32, u64)> {
        partition
            .log()
            .epoch_entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    fn sequences(partition: &Partition) -> Vec<(i64, i32)> {
        let mut views: Vec<(i64, i32)> = partition
            .producers()
            .iter()
            .map(|v: &ProducerView| (v.producer_id, v.last_sequence))
            .collect();
        views.sort_unstable();
        views
    }

    /// Runs `test` on a glommio executor with a fresh data directory.
    fn run<F, Fut>(test: F)
    where
        F: FnOnce(PathBuf) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + 'static,
    {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().to_path_buf();
        glommio::LocalExecutorBuilder::default()
            .spawn(move || test(data_dir))
            .unwrap()
            .join()
            .unwrap();
    }

    async fn open(data_dir: &Path) -> Rc<Partition> {
        let config = EffectiveConfig {
            log: LogConfig::default(),
            timestamp_type: TimestampType::CreateTime,
            min_insync_replicas: 1,
            cleanup: CleanupPolicy {
                delete: true,
                compact: false,
            },
            compaction: Compaction::default(),
        };
        Partition::open(
            &storage::Context::default(),
            data_dir,
            "t",
            0,
            &config,
            BrokerSide {
                producer_id_expiration_ms: EXPIRATION_MS,
                node_id: NODE,
                replica_lag_time_max_ms: crate::replica::REPLICA_LAG_TIME_MAX_MS_DEFAULT,
                led_alone: true,
            },
        )
        .await
        .unwrap()
    }

    #[test]
    fn acks_all_answers_request_timed_out_and_a_removed_replica_fails_its_waiters() {
        run(|data_dir| async move {
            let p = open(&data_dir).await;
            // Follower 2 is in the ISR and never fetches: acks=all cannot hold.
            lead_with(&p, 1, vec![NODE, 2]);
            let short = Duration::from_millis(50);
            let first = p.produce(batch(3, 7, 0), -1, short).await;
            assert_eq!(first.error_code, errors::REQUEST_TIMED_OUT);
            assert_eq!(p.log_end_offset(), 3, "the records stay appended");
            assert_eq!(p.high_watermark(), 0);
            // The client's retry of the same batch: not acknowledged either.
            let retry = p.produce(batch(3, 7, 0), -1, short).await;
            assert_eq!(retry.error_code, errors::REQUEST_TIMED_OUT);
            assert_eq!(p.log_end_offset(), 3, "a duplicate is not appended again");
            // acks=1 does not wait for the ISR.
            let leader_only = p.produce(batch(2, -1, 0), 1, short).await;
            assert_eq!((leader_only.error_code, leader_only.base_offset), (0, 3));

            // A produce parked for the ISR when the partition leaves this
            // broker is answered at once, not at its timeout.
            let parked = glommio::spawn_local({
                let p = p.clone();
                async move { p.produce(batch(2, 7, 3), -1, TEST_TIMEOUT).await }
            })
            .detach();
            glommio::timer::sleep(Duration::from_millis(20)).await;
            let started = std::time::Instant::now();
            p.delete().await;
            let outcome = parked.await.expect("the produce finished");
            assert_eq!(outcome.error_code, errors::NOT_LEADER_OR_FOLLOWER);
            assert!(started.elapsed() < Duration::from_secs(5));
        });
    }

    #[test]
    fn delete_records_waits_for_the_isr_followers_log_starts() {
        run(|data_dir| async move {
            let p = open(&data_dir).await;
            lead_with(&p, 1, vec![NODE, 2]);
            assert_eq!(
                p.produce(batch(10, -1, 0), 1, TEST_TIMEOUT)
                    .await
                    .error_code,
                0
            );
            // Follower 2 fetches from where its copy stands.
            let report = |log_end_offset: i64, log_start_offset: i64| {
                let position = FollowerPosition {
                    leader_epoch: 1,
                    fetch_offset: log_end_offset,
                    durable_end: log_end_offset,
                    log_start_offset,
                };
                let p = p.clone();
                async move {
                    let outcome = p.read_for_follower(2, position, 0).await;
                    assert_eq!(outcome.error_code, errors::NONE);
                    outcome.log_start_offset
                }
            };
            assert_eq!(report(10, 0).await, 0);
            assert_eq!(p.high_watermark(), 10);
            let short = Duration::from_millis(50);
            let refused = DeleteRecordsOutcome::error(errors::OFFSET_OUT_OF_RANGE);
            assert_eq!(
                p.delete_records(11, short).await,
                refused,
                "above the high watermark"
            );
            assert_eq!(
                p.delete_records(-2, short).await,
                refused,
                "negative, not -1"
            );
            assert_eq!(p.log_start_offset(), 0, "refusals move nothing");

            // The follower does not report in time: the leader's start has
            // moved all the same, and the answer says how far the ISR is.
            let timed_out = p.delete_records(4, short).await;
            assert_eq!(
                timed_out,
                DeleteRecordsOutcome {
                    error_code: errors::REQUEST_TIMED_OUT,
                    low_watermark: 0
                }
            );
            assert_eq!(p.log_start_offset(), 4);
            assert_eq!(
                report(10, 0).await,
                4,
                "the follower is told the leader's start"
            );

            // Answered once the follower's start reaches the offset.
            let waiting = glommio::spawn_local({
                let p = p.clone();
                async move { p.delete_records(6, TEST_TIMEOUT).await }
            })
            .detach();
            glommio::timer::sleep(Duration::from_millis(20)).await;
            report(10, 5).await;
            glommio::timer::sleep(Duration::from_millis(20)).await;
            let started = std::time::Instant::now();
            report(10, 6).await;
            let answered = waiting.await.expect("answered");
            assert_eq!(
                answered,
                DeleteRecordsOutcome {
                    error_code: 0,
                    low_watermark: 6
                }
            );
            assert!(started.elapsed() < Duration::from_secs(5));

            // -1: up to the high watermark.
            let waiting = glommio::spawn_local({
                let p = p.clone();
                async move {
                    p.delete_records(DELETE_TO_HIGH_WATERMARK, TEST_TIMEOUT)
                        .await
                }
            })
            .detach();
            glommio::timer::sleep(Duration::from_millis(20)).await;
            report(10, 10).await;
            let answered = waiting.await.expect("answered");
            assert_eq!(
                answered,
                DeleteRecordsOutcome {
                    error_code: 0,
                    low_watermark: 10
                }
            );
            // Below the start: nothing moves, the start is the answer.
            assert_eq!(
                p.delete_records(3, short).await,
                DeleteRecordsOutcome {
                    error_code: 0,
                    low_watermark: 10
                }
            );

            // A deletion waiting when the partition leaves this broker is
            // answered at once; a replica that does not lead refuses.
            assert_eq!(
                p.produce(batch(2, -1, 0), 1, TEST_TIMEOUT).await.error_code,
                0
            );
            report(12, 10).await;
            assert_eq!(p.high_watermark(), 12);
            let parked = glommio::spawn_local({
                let p = p.clone();
                async move { p.delete_records(12, TEST_TIMEOUT).await }
            })
            .detach();
            glommio::timer::sleep(Duration::from_millis(20)).await;
            let started = std::time::Instant::now();
            p.delete().await;
            let not_leader = DeleteRecordsOutcome::error(errors::NOT_LEADER_OR_FOLLOWER);
            assert_eq!(parked.await.expect("answered"), not_leader);
            assert!(started.elapsed() < Duration::from_secs(5));
            assert_eq!(p.delete_records(12, short).await, not_leader);
        });
    }

    #[test]
    fn a_follower_takes_its_leader_s_log_start_up_to_its_high_watermark() {
        run(|data_dir| async move {
            let p = open(&data_dir).await;
            follow(&p, 2, 1);
            let last = p
                .append_replicated(batch(6, -1, 0).into_bytes(), 4)
                .await
                .expect("appended");
            p.replicated_durable(last.expect("records appended"), std::time::Instant::now())
                .await
                .expect("durable");
            assert_eq!((p.log_end_offset(), p.high_watermark()), (6, 4));
            // Between the high watermark and the log end: nothing yet, not
            // out of range (a consumer waits there after a leader change).
            let waiting = p.read(5, 1 << 20, false).await;
            assert_eq!(
                (waiting.error_code, waiting.records.len()),
                (errors::NONE, 0)
            );
            assert_eq!(
                p.read(7, 1 << 20, false).await.error_code,
                errors::OFFSET_OUT_OF_RANGE
            );
            assert_eq!(p.follow_log_start(2).await, Ok(2));
            assert_eq!(p.follow_log_start(1).await, Ok(2), "never back");
            assert_eq!(
                p.follow_log_start(6).await,
                Ok(4),
                "not past its high watermark"
            );
            assert_eq!(p.log_start_offset(), 4);
            assert_eq!(
                p.read(3, 1 << 20, false).await.error_code,
                errors::OFFSET_OUT_OF_RANGE
            );
        });
    }

    #[test]
    fn the_leader_answers_where_each_epoch_ends() {
        run(|data_dir| async move {
            let p = open(&data_dir).await;
            assert_eq!(
                p.offset_for_leader_epoch(-1, 0),
                Ok((0, 0)),
                "empty: epoch 0 starts at 0"
            );
            assert_eq!(produce(&p, batch(5, -1, 0)).await, (0, 0));
            assert_eq!(produce(&p, batch(3, -1, 0)).await, (0, 5));
            assert_eq!(p.offset_for_leader_epoch(0, 0), Ok((0, 8)));
            assert_eq!(
                p.offset_for_leader_epoch(-1, 1),
                Ok((-1, -1)),
                "above the current"
            );
            assert_eq!(p.offset_for_leader_epoch(-1, -1), Ok((-1, -1)));
            assert_eq!(
                p.offset_for_leader_epoch(1, 0),
                Err(errors::UNKNOWN_LEADER_EPOCH)
            );
            // A new leadership, nothing written in it yet: epoch 0 ends
            // where epoch 2 starts, at the log end.
            lead(&p, 2);
            assert_eq!(
                p.offset_for_leader_epoch(1, 0),
                Err(errors::FENCED_LEADER_EPOCH)
            );
            assert_eq!(
                p.offset_for_leader_epoch(3, 0),
                Err(errors::UNKNOWN_LEADER_EPOCH)
            );
            assert_eq!(p.offset_for_leader_epoch(2, 0), Ok((0, 8)));
            assert_eq!(p.offset_for_leader_epoch(2, 1), Ok((0, 8)));
            assert_eq!(p.offset_for_leader_epoch(2, 2), Ok((2, 8)));
            assert_eq!(epochs(&p), [(0, 0)], "nothing written in epoch 2 yet");
            assert_eq!(produce(&p, batch(2, -1, 0)).await, (0, 8));
            assert_eq!(epochs(&p), [(0, 0), (2, 8)]);
            assert_eq!(p.offset_for_leader_epoch(-1, 1), Ok((0, 8)));
            assert_eq!(p.offset_for_leader_epoch(-1, 2), Ok((2, 10)));
            // A follower answers nothing; its own cache still serves
            // its side of the comparison.
            follow(&p, 2, 3);
            assert_eq!(
                p.offset_for_leader_epoch(3, 2),
                Err(errors::NOT_LEADER_OR_FOLLOWER)
            );
            assert_eq!(
                p.end_offset_for_epoch(3),
                (-1, -1),
                "no virtual epoch on a follower"
            );
            assert_eq!(p.end_offset_for_epoch(2), (2, 10));
            p.close().await;
        });
    }

    #[test]
    fn truncation_takes_the_log_epochs_and_producer_state_back() {
        run(|data_dir| async move {
            let p = open(&data_dir).await;
            assert_eq!(produce(&p, batch(5, 7, 0)).await, (0, 0));
            assert_eq!(produce(&p, batch(3, -1, 0)).await, (0, 5));
            lead(&p, 2);
            assert_eq!(produce(&p, batch(3, 7, 5)).await, (0, 8));
            assert_eq!(produce(&p, batch(2, 9, 0)).await, (0, 11));
            assert_eq!(epochs(&p), [(0, 0), (2, 8)]);
            assert_eq!(sequences(&p), [(7, 7), (9, 1)]);
            assert_eq!(p.high_watermark(), 13);
            // A snapshot named 8 holding batches at and after 8 (as
            // one taken with an append in flight may): the truncation
            // must not trust what it holds past the cut.
            let snapshot = p.producers.borrow().encode_snapshot(8);
            write_snapshot(&p.dir, 8, &snapshot).await.unwrap();

            // Offset 9 is inside the batch at 8: the whole batch goes.
            assert_eq!(p.truncate_to(9).await.unwrap(), 8);
            assert_eq!(p.log().next_offset(), 8);
            assert_eq!(p.high_watermark(), 8, "clamped to the new end");
            assert_eq!(p.replica.borrow().log_end_offset(), 8);
            assert_eq!(p.replica.borrow().durable_offset(), 8);
            assert_eq!(epochs(&p), [(0, 0)]);
            assert_eq!(
                sequences(&p),
                [(7, 4)],
                "producer 9 only had batches past the cut"
            );
            assert_eq!(p.read(8, 1 << 20, false).await.records.len(), 0);
            assert_eq!(
                p.read(9, 1 << 20, false).await.error_code,
                errors::OFFSET_OUT_OF_RANGE
            );

            // Past the log end: nothing to cut.
            assert_eq!(p.truncate_to(100).await.unwrap(), 8);

            // Appends continue: the cut batches are new again, not
            // duplicates; a retry of a kept one is still a duplicate.
            assert_eq!(produce(&p, batch(5, 7, 0)).await, (0, 0));
            assert_eq!(produce(&p, batch(3, 7, 5)).await, (0, 8));
            assert_eq!(produce(&p, batch(2, 9, 0)).await, (0, 11));
            assert_eq!(epochs(&p), [(0, 0), (2, 8)]);
            assert_eq!(sequences(&p), [(7, 7), (9, 1)]);
            assert_eq!(p.high_watermark(), 13);
            assert_eq!(p.offset_for_leader_epoch(2, 0), Ok((0, 8)));
            p.close().await;

            // What a restart finds agrees.
            let p = open(&data_dir).await;
            assert_eq!(p.log().next_offset(), 13);
            assert_eq!(epochs(&p), [(0, 0), (2, 8)]);
            assert_eq!(sequences(&p), [(7, 7), (9, 1)]);
            p.close().await;
        });
    }
}
