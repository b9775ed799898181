//! Idempotent producer state of one partition: per producer id the epoch,
//! the last sequence and the last few batches, so retries are answered with
//! their original offsets and gaps or reordering are refused. The state is
//! saved in snapshots (`<offset>.snapshot` in the partition directory) so a
//! restart rebuilds it from the newest snapshot plus the log after it.
//!
//! Transactional producers are idempotent producers whose batches also
//! open a transaction on the partition, ended by a marker (`txn`): the
//! open transactions give the last stable offset, the aborted ones the
//! `aborted_transactions` of a read_committed fetch. Both live in the same
//! table and snapshots, so they are rebuilt the same way.

mod txn;

pub use txn::AbortedTxn;

use std::collections::{BTreeSet, HashMap, VecDeque};

use kafka_protocol::error::ResponseError;

use crate::errors;
use crate::limits::PRODUCER_BATCHES_KEPT;

/// Kafka's answer to a producer the partition has no state for whose first
/// sequence is not 0 (produce v5 and later; older clients know no such code
/// and get OUT_OF_ORDER_SEQUENCE_NUMBER, see `handlers::produce`).
pub const UNKNOWN_PRODUCER_ID: i16 = ResponseError::UnknownProducerId.code();

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BatchRecord {
    first_sequence: i32,
    last_sequence: i32,
    base_offset: i64,
    log_append_time_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ProducerEntry {
    epoch: i16,
    /// The last sequence reserved: ahead of the last batch's while an append
    /// is in flight.
    last_sequence: i32,
    /// Appended batches, oldest first, at most `PRODUCER_BATCHES_KEPT`.
    batches: VecDeque<BatchRecord>,
    /// When the producer last appended, by the broker's clock (batches
    /// re-read at start-up count as seen then, unless they carry a log
    /// append time); `producer.id.expiration.ms` counts from here. Kafka
    /// takes the batch's max timestamp, which is the client's clock for
    /// CreateTime topics: a producer with a clock behind would expire at
    /// once.
    last_timestamp_ms: i64,
    /// The first offset of its open transaction on this partition.
    ongoing_txn: Option<i64>,
    /// The offset of the last transaction marker written for it (-1:
    /// none): a replayed transactional batch at or below it belongs to a
    /// transaction already ended.
    last_marker_offset: i64,
    /// The newest coordinator epoch that wrote a marker for it (-1:
    /// none): a marker from an older coordinator is refused.
    coordinator_epoch: i32,
}

impl ProducerEntry {
    fn new(epoch: i16, last_sequence: i32, last_timestamp_ms: i64) -> Self {
        ProducerEntry {
            epoch,
            last_sequence,
            batches: VecDeque::new(),
            last_timestamp_ms,
            ongoing_txn: None,
            last_marker_offset: -1,
            coordinator_epoch: -1,
        }
    }

    /// True while a reservation is not yet matched by a recorded batch.
    fn has_pending_append(&self) -> bool {
        match self.batches.back() {
            Some(last) => last.last_sequence != self.last_sequence,
            // A producer known only by its last marker has sequence -1
            // until an append reserves one.
            None => self.last_marker_offset < 0 || self.last_sequence != -1,
        }
    }

    /// Whether snapshots keep it: it has batches, a marker fixed its epoch
    /// (so an older epoch stays fenced after a restart), or a coordinator's
    /// write (no sequence) opened its transaction.
    fn kept_in_snapshots(&self) -> bool {
        !self.batches.is_empty() || self.last_marker_offset >= 0 || self.ongoing_txn.is_some()
    }
}
/// What to do with an idempotent batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Append it; its sequence is now reserved.
    Append { previous_last_sequence: Option<i32> },
    /// A retry of a batch already stored at these offsets.
    Duplicate {
        base_offset: i64,
        log_append_time_ms: i64,
    },
    /// Refuse it with this error code.
    Reject(i16),
}

fn next_sequence(sequence: i32) -> i32 {
    if sequence == i32::MAX {
        0
    } else {
        sequence + 1
    }
}

/// The last sequence of a batch that starts at `first` with `records`
/// records, wrapping at i32::MAX as Kafka does.
pub fn last_sequence(first: i32, last_offset_delta: i32) -> i32 {
    ((i64::from(first) + i64::from(last_offset_delta)) % (i64::from(i32::MAX) + 1)) as i32
}

/// One batch read back from the log, for rebuilding state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveredBatch {
    pub producer_id: i64,
    pub epoch: i16,
    pub first_sequence: i32,
    pub last_sequence: i32,
    pub base_offset: i64,
    pub log_append_time_ms: i64,
    pub max_timestamp_ms: i64,
    /// A transactional batch: it opens a transaction if none is open.
    pub transactional: bool,
}

/// One producer's state as DescribeProducers shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerView {
    pub producer_id: i64,
    pub epoch: i16,
    /// The last sequence of its last appended batch.
    pub last_sequence: i32,
    /// When it last appended, by the broker's clock (see `ProducerEntry`).
    pub last_timestamp_ms: i64,
    /// The first offset of its open transaction here (-1: none).
    pub current_txn_start_offset: i64,
    /// The epoch of the coordinator that wrote its last marker here (-1:
    /// none).
    pub coordinator_epoch: i32,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProducerTable {
    producers: HashMap<i64, ProducerEntry>,
    /// The open transactions by first offset: (first offset, producer id).
    ongoing: BTreeSet<(i64, i64)>,
    /// Aborted transactions by marker offset, oldest first.
    aborted: VecDeque<AbortedTxn>,
    /// Producers whose first transactional batch here is being checked
    /// with their coordinator, by the token the check holds. A marker
    /// clears its producer's: a check that raced the end of the
    /// transaction cannot open one.
    verifying: HashMap<i64, u64>,
    next_verification: u64,
}

impl ProducerTable {
    /// Producers tracked.
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// The producers with appended batches, by id. Reservations of appends
    /// still in flight are left out, as the snapshots leave them out.
    pub fn views(&self) -> Vec<ProducerView> {
        let mut views: Vec<ProducerView> = self
            .producers
            .iter()
            .filter_map(|(&producer_id, entry)| {
                let last = entry.batches.back()?;
                Some(ProducerView {
                    producer_id,
                    epoch: entry.epoch,
                    last_sequence: last.last_sequence,
                    last_timestamp_ms: entry.last_timestamp_ms,
                    current_txn_start_offset: entry.ongoing_txn.unwrap_or(-1),
                    coordinator_epoch: entry.coordinator_epoch,
                })
            })
            .collect();
        views.sort_unstable_by_key(|view| view.producer_id);
        views
    }

    /// The base offsets of the batches a cleaning must keep: every
    /// producer's last appended batch, so that its sequence is known after
    /// a restart even once compaction removed its records.
    pub fn last_batch_offsets(&self) -> std::collections::HashSet<u64> {
        self.producers
            .values()
            .filter_map(|entry| entry.batches.back())
            .filter_map(|batch| u64::try_from(batch.base_offset).ok())
            .collect()
    }

    /// Checks a batch's sequence and, when it may be appended, reserves it.
    pub fn check(
        &mut self,
        producer_id: i64,
        epoch: i16,
        first_sequence: i32,
        last_sequence: i32,
    ) -> SequenceCheck {
        let Some(entry) = self.producers.get_mut(&producer_id) else {
            // State survives restarts (snapshots plus the log after them)
            // and is dropped only after `producer.id.expiration.ms` idle, so
            // a producer we do not know that continues a sequence is one
            // whose earlier batches we cannot match a retry against:
            // accepting it could store a retried batch twice.
            if first_sequence != 0 {
                return SequenceCheck::Reject(UNKNOWN_PRODUCER_ID);
            }
            self.producers.insert(
                producer_id,
                ProducerEntry::new(epoch, last_sequence, i64::MIN),
            );
            return SequenceCheck::Append {
                previous_last_sequence: None,
            };
        };
        if epoch < entry.epoch {
            return SequenceCheck::Reject(errors::INVALID_PRODUCER_EPOCH);
        }
        if epoch > entry.epoch {
            if first_sequence != 0 {
                return SequenceCheck::Reject(errors::OUT_OF_ORDER_SEQUENCE_NUMBER);
            }
            entry.epoch = epoch;
            entry.batches.clear();
            let previous = entry.last_sequence;
            entry.last_sequence = last_sequence;
            return SequenceCheck::Append {
                previous_last_sequence: Some(previous),
            };
        }
        if let Some(batch) = entry
            .batches
            .iter()
            .find(|b| b.first_sequence == first_sequence && b.last_sequence == last_sequence)
        {
            return SequenceCheck::Duplicate {
                base_offset: batch.base_offset,
                log_append_time_ms: batch.log_append_time_ms,
            };
        }
        if first_sequence == next_sequence(entry.last_sequence) {
            let previous = entry.last_sequence;
            entry.last_sequence = last_sequence;
            return SequenceCheck::Append {
                previous_last_sequence: Some(previous),
            };
        }
        let behind = i64::from(entry.last_sequence) - i64::from(first_sequence);
        if (0..i64::from(i32::MAX) / 2).contains(&behind) {
            SequenceCheck::Reject(errors::DUPLICATE_SEQUENCE_NUMBER)
        } else {
            SequenceCheck::Reject(errors::OUT_OF_ORDER_SEQUENCE_NUMBER)
        }
    }

    /// Rebuilds state from a batch read back from the log at start-up.
    /// Batches the state already holds (a snapshot taken while they were
    /// being appended) and batches of an older epoch are skipped, so the
    /// log may be replayed from any offset at or below the snapshot's.
    pub fn recover(&mut self, batch: RecoveredBatch) {
        let entry = self
            .producers
            .entry(batch.producer_id)
            .or_insert(ProducerEntry::new(
                batch.epoch,
                batch.last_sequence,
                batch.max_timestamp_ms,
            ));
        if batch.epoch < entry.epoch {
            return;
        }
        if batch.epoch > entry.epoch {
            entry.epoch = batch.epoch;
            entry.batches.clear();
        }
        entry.last_timestamp_ms = entry.last_timestamp_ms.max(batch.max_timestamp_ms);
        if entry
            .batches
            .iter()
            .any(|b| b.base_offset == batch.base_offset)
        {
            return;
        }
        if batch.transactional
            && entry.ongoing_txn.is_none()
            && batch.base_offset > entry.last_marker_offset
        {
            entry.ongoing_txn = Some(batch.base_offset);
            self.ongoing.insert((batch.base_offset, batch.producer_id));
        }
        entry.batches.push_back(BatchRecord {
            first_sequence: batch.first_sequence,
            last_sequence: batch.last_sequence,
            base_offset: batch.base_offset,
            log_append_time_ms: batch.log_append_time_ms,
        });
        entry
            .batches
            .make_contiguous()
            .sort_unstable_by_key(|b| b.base_offset);
        while entry.batches.len() > PRODUCER_BATCHES_KEPT {
            entry.batches.pop_front();
        }
        entry.last_sequence = entry
            .batches
            .back()
            .map_or(batch.last_sequence, |b| b.last_sequence);
    }

    /// Forgets the batches at or after `offset` (the log ends there now: a
    /// snapshot may hold batches past its own offset, see
    /// [`Self::encode_snapshot`]). A producer left with no batch goes: the
    /// state holds only its last few, so its sequence before them is not
    /// known (its next batch is answered as from an unknown producer); a
    /// producer known only by a marker below `offset` stays (its epoch).
    /// Returns how many producers went.
    pub fn forget_from(&mut self, offset: u64) -> usize {
        let offset = i64::try_from(offset).unwrap_or(i64::MAX);
        let before = self.producers.len();
        self.aborted.retain(|txn| txn.last_offset < offset);
        self.producers.retain(|_, entry| {
            if entry.last_marker_offset >= offset {
                // Its marker is gone, so whether its transaction is open
                // is not known here: as with a producer whose batches are
                // all gone, its next batch starts afresh.
                return false;
            }
            if entry.ongoing_txn.is_some_and(|first| first >= offset) {
                entry.ongoing_txn = None;
            }
            let had_batches = !entry.batches.is_empty();
            entry.batches.retain(|b| b.base_offset < offset);
            match entry.batches.back() {
                Some(last) => {
                    entry.last_sequence = last.last_sequence;
                    true
                }
                None if !had_batches && entry.last_marker_offset >= 0 => {
                    entry.last_sequence = -1;
                    true
                }
                None => false,
            }
        });
        self.reindex_ongoing();
        before - self.producers.len()
    }

    /// Records an appended batch so a retry of it is recognised; a
    /// transactional batch opens the producer's transaction here if none is
    /// open.
    #[allow(clippy::too_many_arguments)]
    pub fn appended(
        &mut self,
        producer_id: i64,
        first_sequence: i32,
        last_sequence: i32,
        base_offset: i64,
        log_append_time_ms: i64,
        now_ms: i64,
        transactional: bool,
    ) {
        if let Some(entry) = self.producers.get_mut(&producer_id) {
            if transactional && entry.ongoing_txn.is_none() {
                entry.ongoing_txn = Some(base_offset);
                self.ongoing.insert((base_offset, producer_id));
            }
            if entry.batches.len() == PRODUCER_BATCHES_KEPT {
                entry.batches.pop_front();
            }
            entry.batches.push_back(BatchRecord {
                first_sequence,
                last_sequence,
                base_offset,
                log_append_time_ms,
            });
            entry.last_timestamp_ms = entry.last_timestamp_ms.max(now_ms);
        }
    }

    /// Releases a reservation whose append failed, if nothing came after it.
    pub fn append_failed(
        &mut self,
        producer_id: i64,
        last_sequence: i32,
        previous_last_sequence: Option<i32>,
    ) {
        match previous_last_sequence {
            None => {
                if self
                    .producers
                    .get(&producer_id)
                    .is_some_and(|e| e.batches.is_empty())
                {
                    self.producers.remove(&producer_id);
                }
            }
            Some(previous) => {
                if let Some(entry) = self.producers.get_mut(&producer_id) {
                    if entry.last_sequence == last_sequence {
                        entry.last_sequence = previous;
                    }
                }
            }
        }
    }

    /// Drops producers idle for `expiration_ms` or longer
    /// (`producer.id.expiration.ms`), except those with an append in
    /// flight; returns how many went. Snapshots written earlier keep them.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, entry| {
            entry.has_pending_append()
                || entry.ongoing_txn.is_some()
                || now_ms.saturating_sub(entry.last_timestamp_ms) < expiration_ms
        });
        before - self.producers.len()
    }

    /// The state as a snapshot file's bytes, for a snapshot at `offset`:
    /// every batch below it is in the state (batches at or above it may be
    /// too; replay skips them). Reservations not yet appended are left out:
    /// only appended batches and the sequences they end at.
    pub fn encode_snapshot(&self, offset: u64) -> Vec<u8> {
        let mut ids: Vec<(&i64, &ProducerEntry)> = self
            .producers
            .iter()
            .filter(|(_, entry)| entry.kept_in_snapshots())
            .collect();
        ids.sort_unstable_by_key(|(id, _)| **id);
        let mut out = Vec::with_capacity(
            SNAPSHOT_HEADER_BYTES
                + ids.len() * (SNAPSHOT_ENTRY_BYTES + PRODUCER_BATCHES_KEPT * SNAPSHOT_BATCH_BYTES)
                + 4,
        );
        out.extend_from_slice(SNAPSHOT_MAGIC);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&offset.to_be_bytes());
        out.extend_from_slice(&(ids.len() as u32).to_be_bytes());
        for (id, entry) in ids {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&entry.epoch.to_be_bytes());
            out.extend_from_slice(&entry.last_timestamp_ms.to_be_bytes());
            out.extend_from_slice(&entry.ongoing_txn.unwrap_or(-1).to_be_bytes());
            out.extend_from_slice(&entry.last_marker_offset.to_be_bytes());
            out.extend_from_slice(&entry.coordinator_epoch.to_be_bytes());
            out.push(entry.batches.len() as u8);
            for batch in &entry.batches {
                out.extend_from_slice(&batch.first_sequence.to_be_bytes());
                out.extend_from_slice(&batch.last_sequence.to_be_bytes());
                out.extend_from_slice(&batch.base_offset.to_be_bytes());
                out.extend_from_slice(&batch.log_append_time_ms.to_be_bytes());
            }
        }
        out.extend_from_slice(&(self.aborted.len() as u32).to_be_bytes());
        for txn in &self.aborted {
            out.extend_from_slice(&txn.producer_id.to_be_bytes());
            out.extend_from_slice(&txn.first_offset.to_be_bytes());
            out.extend_from_slice(&txn.last_offset.to_be_bytes());
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Reads a snapshot file's bytes back: its offset and the state. Any
    /// damage (CRC, length, an unknown version, a count out of bounds) is
    /// an error; the caller then tries an older snapshot or the whole log.
    pub fn decode_snapshot(bytes: &[u8]) -> Result<(u64, ProducerTable), SnapshotError> {
        if bytes.len() < SNAPSHOT_HEADER_BYTES + 4 {
            return Err(SnapshotError::Truncated(bytes.len()));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_be_bytes(crc.try_into().expect("4 bytes"));
        let computed = crc32fast::hash(body);
        if stored != computed {
            return Err(SnapshotError::Crc { stored, computed });
        }
        if &body[..4] != SNAPSHOT_MAGIC {
            return Err(SnapshotError::Magic);
        }
        let mut reader = Reader { bytes: &body[4..] };
        let version = u16::from_be_bytes(reader.take()?);
        if !(SNAPSHOT_VERSION_IDEMPOTENT..=SNAPSHOT_VERSION).contains(&version) {
            return Err(SnapshotError::Version(version));
        }
        let with_txns = version >= SNAPSHOT_VERSION_TXNS;
        let with_coordinator_epochs = version >= SNAPSHOT_VERSION;
        let offset = u64::from_be_bytes(reader.take()?);
        let count = u32::from_be_bytes(reader.take()?) as usize;
        if count > reader.bytes.len() / SNAPSHOT_ENTRY_BYTES {
            return Err(SnapshotError::Count(count));
        }
        let mut table = ProducerTable::default();
        for _ in 0..count {
            let id = i64::from_be_bytes(reader.take()?);
            let epoch = i16::from_be_bytes(reader.take()?);
            let last_timestamp_ms = i64::from_be_bytes(reader.take()?);
            let (ongoing, last_marker_offset) = if with_txns {
                (
                    i64::from_be_bytes(reader.take()?),
                    i64::from_be_bytes(reader.take()?),
                )
            } else {
                (-1, -1)
            };
            let coordinator_epoch = if with_coordinator_epochs {
                i32::from_be_bytes(reader.take()?)
            } else {
                -1
            };
            let [batch_count] = reader.take::<1>()?;
            let batch_count = usize::from(batch_count);
            if (batch_count == 0 && last_marker_offset < 0 && ongoing < 0)
                || batch_count > PRODUCER_BATCHES_KEPT
                || id < 0
            {
                return Err(SnapshotError::Entry(id));
            }
            let mut batches = VecDeque::with_capacity(batch_count);
            for _ in 0..batch_count {
                batches.push_back(BatchRecord {
                    first_sequence: i32::from_be_bytes(reader.take()?),
                    last_sequence: i32::from_be_bytes(reader.take()?),
                    base_offset: i64::from_be_bytes(reader.take()?),
                    log_append_time_ms: i64::from_be_bytes(reader.take()?),
                });
            }
            let last_sequence = batches.back().map_or(-1, |b| b.last_sequence);
            let entry = ProducerEntry {
                epoch,
                last_sequence,
                batches,
                last_timestamp_ms,
                ongoing_txn: (ongoing >= 0).then_some(ongoing),
                last_marker_offset,
                coordinator_epoch,
            };
            if table.producers.insert(id, entry).is_some() {
                return Err(SnapshotError::Entry(id));
            }
        }
        if with_txns {
            let count = u32::from_be_bytes(reader.take()?) as usize;
            if count > reader.bytes.len() / SNAPSHOT_ABORTED_BYTES {
                return Err(SnapshotError::Count(count));
            }
            for _ in 0..count {
                table.aborted.push_back(AbortedTxn {
                    producer_id: i64::from_be_bytes(reader.take()?),
                    first_offset: i64::from_be_bytes(reader.take()?),
                    last_offset: i64::from_be_bytes(reader.take()?),
                });
            }
        }
        table.reindex_ongoing();
        if !reader.bytes.is_empty() {
            return Err(SnapshotError::Trailing(reader.bytes.len()));
        }
        Ok((offset, table))
    }
}

const SNAPSHOT_MAGIC: &[u8; 4] = b"STPS";
/// Version 3 adds the coordinator epoch of each producer's last marker;
/// version 2 (each producer's open transaction and last marker, and the
/// aborted transactions) and version 1 (idempotent state only) are read.
const SNAPSHOT_VERSION: u16 = 3;
const SNAPSHOT_VERSION_TXNS: u16 = 2;
const SNAPSHOT_VERSION_IDEMPOTENT: u16 = 1;
/// Producer id, first offset, marker offset of an aborted transaction.
const SNAPSHOT_ABORTED_BYTES: usize = 8 + 8 + 8;
/// Magic, version, offset, producer count.
const SNAPSHOT_HEADER_BYTES: usize = 4 + 2 + 8 + 4;
/// Producer id, epoch, last timestamp, batch count (the least an entry
/// takes, in either version).
const SNAPSHOT_ENTRY_BYTES: usize = 8 + 2 + 8 + 1;
/// First and last sequence, base offset, log append time.
const SNAPSHOT_BATCH_BYTES: usize = 4 + 4 + 8 + 8;

/// Why a snapshot file was not trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("only {0} bytes")]
    Truncated(usize),
    #[error("CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Crc { stored: u32, computed: u32 },
    #[error("not a producer state snapshot")]
    Magic,
    #[error("unknown version {0}")]
    Version(u16),
    #[error("producer count {0} larger than the file")]
    Count(usize),
    #[error("malformed entry for producer {0}")]
    Entry(i64),
    #[error("{0} bytes after the last entry")]
    Trailing(usize),
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        if self.bytes.len() < N {
            return Err(SnapshotError::Truncated(self.bytes.len()));
        }
        let (head, rest) = self.bytes.split_at(N);
        self.bytes = rest;
        Ok(head.try_into().expect("N bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(producer_id: i64, epoch: i16, first: i32, last: i32, base: i64) -> RecoveredBatch {
        RecoveredBatch {
            producer_id,
            epoch,
            first_sequence: first,
            last_sequence: last,
            base_offset: base,
            log_append_time_ms: -1,
            max_timestamp_ms: 1_000,
            transactional: false,
        }
    }

    #[test]
    fn forgetting_from_an_offset_keeps_what_is_below_it() {
        let mut table = ProducerTable::default();
        table.recover(batch(1, 0, 0, 4, 0));
        table.recover(batch(1, 0, 5, 9, 10));
        table.recover(batch(2, 0, 0, 2, 12));
        assert_eq!(table.forget_from(10), 1, "producer 2 had nothing below");
        assert_eq!(table.len(), 1);
        // Producer 1 is back at sequence 4: 5 is next, a retry of its
        // first batch is a duplicate at its offset.
        assert!(matches!(
            table.check(1, 0, 0, 4),
            SequenceCheck::Duplicate { base_offset: 0, .. }
        ));
        assert!(matches!(
            table.check(1, 0, 5, 9),
            SequenceCheck::Append {
                previous_last_sequence: Some(4)
            }
        ));
        assert_eq!(table.forget_from(0), 1);
        assert!(table.is_empty());
    }

    #[test]
    fn views_show_appended_sequences_not_reservations() {
        let mut table = ProducerTable::default();
        assert!(matches!(
            table.check(9, 0, 0, 4),
            SequenceCheck::Append { .. }
        ));
        // Reserved, nothing appended yet: not shown.
        assert_eq!(table.views(), vec![]);
        table.appended(9, 0, 4, 100, -1, 5_000, false);
        assert!(matches!(
            table.check(9, 0, 5, 9),
            SequenceCheck::Append { .. }
        ));
        table.recover(batch(3, 2, 0, 0, 50));
        // Producer 9's second batch is still in flight: its last appended
        // sequence is 4.
        assert_eq!(
            table.views(),
            vec![
                ProducerView {
                    producer_id: 3,
                    epoch: 2,
                    last_sequence: 0,
                    last_timestamp_ms: 1_000,
                    current_txn_start_offset: -1,
                    coordinator_epoch: -1,
                },
                ProducerView {
                    producer_id: 9,
                    epoch: 0,
                    last_sequence: 4,
                    last_timestamp_ms: 5_000,
                    current_txn_start_offset: -1,
                    coordinator_epoch: -1,
                },
            ]
        );
    }

    #[test]
    fn sequences_must_follow_and_retries_are_recognised() {
        let mut table = ProducerTable::default();
        assert!(matches!(
            table.check(7, 0, 0, 4),
            SequenceCheck::Append { .. }
        ));
        table.appended(7, 0, 4, 100, -1, 0, false);
        assert!(matches!(
            table.check(7, 0, 5, 9),
            SequenceCheck::Append { .. }
        ));
        table.appended(7, 5, 9, 105, -1, 0, false);
        assert_eq!(
            table.check(7, 0, 0, 4),
            SequenceCheck::Duplicate {
                base_offset: 100,
                log_append_time_ms: -1
            }
        );
        assert_eq!(
            table.check(7, 0, 12, 13),
            SequenceCheck::Reject(errors::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        assert_eq!(
            table.check(7, 0, 3, 3),
            SequenceCheck::Reject(errors::DUPLICATE_SEQUENCE_NUMBER)
        );
        // A new epoch starts at 0.
        assert_eq!(
            table.check(7, 1, 10, 11),
            SequenceCheck::Reject(errors::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        assert!(matches!(
            table.check(7, 1, 0, 0),
            SequenceCheck::Append { .. }
        ));
        assert_eq!(
            table.check(7, 0, 1, 1),
            SequenceCheck::Reject(errors::INVALID_PRODUCER_EPOCH)
        );
    }

    #[test]
    fn recovered_state_recognises_retries_and_continues() {
        let mut table = ProducerTable::default();
        table.recover(batch(3, 2, 0, 9, 40));
        table.recover(batch(3, 2, 10, 19, 50));
        assert_eq!(
            table.check(3, 2, 10, 19),
            SequenceCheck::Duplicate {
                base_offset: 50,
                log_append_time_ms: -1
            }
        );
        assert!(matches!(
            table.check(3, 2, 20, 20),
            SequenceCheck::Append { .. }
        ));
        assert_eq!(
            table.check(3, 1, 0, 0),
            SequenceCheck::Reject(errors::INVALID_PRODUCER_EPOCH)
        );
    }

    #[test]
    fn sequences_wrap_at_i32_max() {
        assert_eq!(last_sequence(i32::MAX, 0), i32::MAX);
        assert_eq!(last_sequence(i32::MAX, 1), 0);
        let mut table = ProducerTable::default();
        table.recover(batch(1, 0, i32::MAX - 3, i32::MAX - 2, 0));
        assert!(matches!(
            table.check(1, 0, i32::MAX - 1, i32::MAX),
            SequenceCheck::Append { .. }
        ));
        assert!(matches!(
            table.check(1, 0, 0, 3),
            SequenceCheck::Append { .. }
        ));
    }

    #[test]
    fn failed_append_releases_the_reservation() {
        let mut table = ProducerTable::default();
        assert!(matches!(
            table.check(1, 0, 0, 0),
            SequenceCheck::Append { .. }
        ));
        table.appended(1, 0, 0, 0, -1, 0, false);
        let SequenceCheck::Append {
            previous_last_sequence,
        } = table.check(1, 0, 1, 1)
        else {
            panic!()
        };
        table.append_failed(1, 1, previous_last_sequence);
        assert!(matches!(
            table.check(1, 0, 1, 1),
            SequenceCheck::Append { .. }
        ));
    }

    #[test]
    fn unknown_producer_must_start_at_sequence_zero() {
        let mut table = ProducerTable::default();
        assert_eq!(
            table.check(9, 0, 5, 5),
            SequenceCheck::Reject(UNKNOWN_PRODUCER_ID)
        );
        assert!(table.is_empty(), "a refused producer is not tracked");
        assert!(matches!(
            table.check(9, 0, 0, 2),
            SequenceCheck::Append {
                previous_last_sequence: None
            }
        ));
    }

    #[test]
    fn snapshot_round_trip_keeps_every_field_and_leaves_out_reservations() {
        let mut table = ProducerTable::default();
        for i in 0..7 {
            table.recover(batch(1, 3, i * 10, i * 10 + 9, 1_000 + i64::from(i) * 10));
        }
        table.recover(RecoveredBatch {
            log_append_time_ms: 77,
            max_timestamp_ms: 5_000,
            ..batch(2, 0, 0, 0, 2_000)
        });
        // Producer 3 has only a reservation: not in the snapshot.
        assert!(matches!(
            table.check(3, 0, 0, 0),
            SequenceCheck::Append { .. }
        ));
        // Producer 1 reserves 70..=79 on top of its batches: the snapshot
        // records the last appended sequence, 69.
        assert!(matches!(
            table.check(1, 3, 70, 79),
            SequenceCheck::Append { .. }
        ));
        let bytes = table.encode_snapshot(4_242);
        let (offset, mut decoded) = ProducerTable::decode_snapshot(&bytes).expect("valid");
        assert_eq!(offset, 4_242);
        assert_eq!(decoded.len(), 2);
        let one = &decoded.producers[&1];
        assert_eq!(one.epoch, 3);
        assert_eq!(one.last_sequence, 69);
        assert_eq!(one.last_timestamp_ms, 1_000);
        let kept: Vec<i64> = one.batches.iter().map(|b| b.base_offset).collect();
        assert_eq!(kept, vec![1_020, 1_030, 1_040, 1_050, 1_060]);
        assert_eq!(
            decoded.producers[&2].batches[0],
            BatchRecord {
                first_sequence: 0,
                last_sequence: 0,
                base_offset: 2_000,
                log_append_time_ms: 77
            }
        );
        assert_eq!(decoded.producers[&2].last_timestamp_ms, 5_000);
        assert_eq!(
            decoded.check(1, 3, 60, 69),
            SequenceCheck::Duplicate {
                base_offset: 1_060,
                log_append_time_ms: -1
            }
        );
        assert!(matches!(
            decoded.check(1, 3, 70, 79),
            SequenceCheck::Append { .. }
        ));
        assert_eq!(
            decoded.check(3, 0, 1, 1),
            SequenceCheck::Reject(UNKNOWN_PRODUCER_ID)
        );
        let empty = ProducerTable::default().encode_snapshot(0);
        assert_eq!(
            ProducerTable::decode_snapshot(&empty),
            Ok((0, ProducerTable::default()))
        );
    }

    #[test]
    fn a_snapshot_of_the_previous_version_is_read_with_no_coordinator_epoch() {
        let mut table = ProducerTable::default();
        table.recover(batch(1, 0, 0, 4, 10));
        let current = table.encode_snapshot(20);
        // Version 2 is version 3 without each producer's coordinator
        // epoch (the 4 bytes after its last marker offset).
        let entry = SNAPSHOT_HEADER_BYTES;
        let coordinator_epoch = entry + 8 + 2 + 8 + 8 + 8;
        let mut previous = current[..current.len() - 4].to_vec();
        previous.drain(coordinator_epoch..coordinator_epoch + 4);
        previous[4..6].copy_from_slice(&SNAPSHOT_VERSION_TXNS.to_be_bytes());
        let crc = crc32fast::hash(&previous);
        previous.extend_from_slice(&crc.to_be_bytes());
        let (offset, read) = ProducerTable::decode_snapshot(&previous).expect("version 2 is read");
        assert_eq!((offset, read), (20, table));
    }

    #[test]
    fn damaged_snapshots_are_refused() {
        let mut table = ProducerTable::default();
        table.recover(batch(1, 0, 0, 4, 10));
        table.recover(batch(2, 0, 0, 4, 15));
        let bytes = table.encode_snapshot(20);
        for i in 0..bytes.len() {
            for bit in [0x01u8, 0x80] {
                let mut damaged = bytes.clone();
                damaged[i] ^= bit;
                assert!(
                    ProducerTable::decode_snapshot(&damaged).is_err(),
                    "flip {bit:#x} at byte {i} went unnoticed"
                );
            }
        }
        for len in 0..bytes.len() {
            assert!(
                ProducerTable::decode_snapshot(&bytes[..len]).is_err(),
                "cut at {len} went unnoticed"
            );
        }
        // A well-formed file of another version is refused too.
        let mut other = bytes[..bytes.len() - 4].to_vec();
        let newer = SNAPSHOT_VERSION + 1;
        other[4..6].copy_from_slice(&newer.to_be_bytes());
        let crc = crc32fast::hash(&other);
        other.extend_from_slice(&crc.to_be_bytes());
        assert_eq!(
            ProducerTable::decode_snapshot(&other),
            Err(SnapshotError::Version(newer))
        );
    }

    #[test]
    fn replaying_batches_a_snapshot_holds_changes_nothing() {
        let mut table = ProducerTable::default();
        table.recover(batch(1, 0, 0, 4, 10));
        table.recover(batch(1, 0, 5, 9, 15));
        let (_, mut restored) =
            ProducerTable::decode_snapshot(&table.encode_snapshot(10)).expect("valid");
        // The snapshot is named 10 although it holds the batch at 15 (it
        // was in flight when the snapshot was named); replay from 10.
        restored.recover(batch(1, 0, 5, 9, 15));
        restored.recover(batch(1, 0, 10, 14, 20));
        let offsets: Vec<i64> = restored.producers[&1]
            .batches
            .iter()
            .map(|b| b.base_offset)
            .collect();
        assert_eq!(offsets, vec![10, 15, 20]);
        assert_eq!(restored.producers[&1].last_sequence, 14);
        // An older epoch's batch replayed after a newer one is ignored.
        restored.recover(batch(1, 1, 0, 0, 25));
        restored.recover(batch(1, 0, 15, 15, 22));
        assert_eq!(restored.producers[&1].epoch, 1);
        assert_eq!(restored.producers[&1].last_sequence, 0);
    }

    #[test]
    fn idle_producers_expire_but_not_those_appending() {
        let mut table = ProducerTable::default();
        assert!(matches!(
            table.check(1, 0, 0, 0),
            SequenceCheck::Append { .. }
        ));
        table.appended(1, 0, 0, 0, -1, 1_000, false);
        assert!(matches!(
            table.check(2, 0, 0, 0),
            SequenceCheck::Append { .. }
        ));
        table.appended(2, 0, 0, 1, -1, 5_000, false);
        // Producer 3 is between its sequence check and its append.
        assert!(matches!(
            table.check(3, 0, 0, 0),
            SequenceCheck::Append { .. }
        ));
        assert_eq!(table.expire(5_999, 5_000), 0);
        assert_eq!(table.expire(6_000, 5_000), 1);
        assert_eq!(
            table.check(1, 0, 1, 1),
            SequenceCheck::Reject(UNKNOWN_PRODUCER_ID)
        );
        assert!(matches!(
            table.check(2, 0, 1, 1),
            SequenceCheck::Append { .. }
        ));
        assert_eq!(
            table.expire(1_000_000, 5_000),
            0,
            "2 has an append in flight"
        );
        table.appended(2, 1, 1, 2, -1, 10_000, false);
        assert_eq!(table.expire(1_000_000, 5_000), 1);
        assert_eq!(table.len(), 1, "producer 3 still has its append in flight");
    }
}
