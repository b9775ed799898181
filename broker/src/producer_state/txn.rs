//! Transactions on one partition: a transactional producer's first batch
//! after its last marker opens its transaction here; the marker the
//! coordinator has the leader write (commit or abort) ends it. The first
//! offset of the oldest open transaction bounds what read_committed
//! consumers see (the last stable offset); an aborted transaction is
//! remembered, by its first and marker offsets, so that a read_committed
//! fetch can name the aborted ranges it returns (Kafka's `.txnindex`).

use protocol::control::{EndMarker, Marker};

use super::{ProducerEntry, ProducerTable};
use crate::errors;

/// An aborted transaction: its producer, its first offset on this
/// partition and the offset of its abort marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
}

impl ProducerTable {
    /// Rebuilds the index of open transactions from the producers.
    pub(super) fn reindex_ongoing(&mut self) {
        self.ongoing = self
            .producers
            .iter()
            .filter_map(|(&id, entry)| entry.ongoing_txn.map(|first| (first, id)))
            .collect();
    }

    /// The first offset of the oldest open transaction: the last stable
    /// offset when it is below the high watermark.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.first().map(|&(first, _)| first)
    }

    /// Whether a marker for `producer_id` at `epoch`, sent by the
    /// coordinator at `coordinator_epoch`, may be written. A marker older
    /// than the producer's epoch here is a zombie's
    /// (INVALID_PRODUCER_EPOCH); one from an older coordinator than the
    /// last that wrote a marker for the producer comes from a deposed
    /// coordinator that may not know how the transaction ended
    /// (TRANSACTION_COORDINATOR_FENCED). Kafka refuses both.
    pub fn check_marker(
        &self,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<(), i16> {
        self.check_coordinator_write(producer_id, epoch)?;
        match self.producers.get(&producer_id) {
            Some(entry) if coordinator_epoch < entry.coordinator_epoch => {
                Err(errors::TRANSACTION_COORDINATOR_FENCED)
            }
            _ => Ok(()),
        }
    }

    /// Whether a group coordinator may write `producer_id`'s transactional
    /// offsets at `epoch`: not at an epoch older than the producer's here.
    pub fn check_coordinator_write(&self, producer_id: i64, epoch: i16) -> Result<(), i16> {
        match self.producers.get(&producer_id) {
            Some(entry) if epoch < entry.epoch => Err(errors::INVALID_PRODUCER_EPOCH),
            _ => Ok(()),
        }
    }

    /// Ends `producer_id`'s transaction with the marker appended at
    /// `offset` (also when it is read back from the log: applying a marker
    /// twice changes nothing). A marker at a newer epoch (the coordinator
    /// fenced the producer) moves the producer to it, its sequence
    /// starting again at 0. The producer remembers the newest coordinator
    /// epoch that wrote a marker for it.
    pub fn apply_marker(&mut self, producer_id: i64, epoch: i16, marker: EndMarker, offset: i64) {
        self.verifying.remove(&producer_id);
        let entry = self
            .producers
            .entry(producer_id)
            .or_insert_with(|| ProducerEntry::new(epoch, -1, i64::MIN));
        if offset <= entry.last_marker_offset || epoch < entry.epoch {
            return;
        }
        if epoch > entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
            entry.last_sequence = -1;
        }
        entry.last_marker_offset = offset;
        entry.coordinator_epoch = entry.coordinator_epoch.max(marker.coordinator_epoch);
        if let Some(first) = entry.ongoing_txn.take() {
            self.ongoing.remove(&(first, producer_id));
            if marker.marker == Marker::Abort {
                self.aborted.push_back(AbortedTxn {
                    producer_id,
                    first_offset: first,
                    last_offset: offset,
                });
            }
        }
    }

    /// Whether `producer_id` has a transaction open here.
    pub fn in_txn(&self, producer_id: i64) -> bool {
        self.producers
            .get(&producer_id)
            .is_some_and(|entry| entry.ongoing_txn.is_some())
    }

    /// Starts checking with the coordinator that this partition is in
    /// `producer_id`'s transaction; the token names the check.
    pub fn start_verification(&mut self, producer_id: i64) -> u64 {
        self.next_verification += 1;
        self.verifying.insert(producer_id, self.next_verification);
        self.next_verification
    }

    /// Whether the check `token` still stands: no marker of the producer
    /// was written since it started.
    pub fn verification_holds(&self, producer_id: i64, token: u64) -> bool {
        self.verifying.get(&producer_id) == Some(&token)
    }

    /// Forgets the check `token` (its batch was appended or refused).
    pub fn end_verification(&mut self, producer_id: i64, token: u64) {
        if self.verification_holds(producer_id, token) {
            self.verifying.remove(&producer_id);
        }
    }

    /// Opens `producer_id`'s transaction at `offset` (a coordinator's
    /// transactional write, which carries no sequence) unless one is open.
    pub fn begin_txn(&mut self, producer_id: i64, epoch: i16, offset: i64) {
        let entry = self
            .producers
            .entry(producer_id)
            .or_insert_with(|| ProducerEntry::new(epoch, -1, i64::MIN));
        entry.epoch = entry.epoch.max(epoch);
        if entry.ongoing_txn.is_none() && offset > entry.last_marker_offset {
            entry.ongoing_txn = Some(offset);
            self.ongoing.insert((offset, producer_id));
        }
    }

    /// The aborted transactions a read_committed fetch of
    /// `[fetch_offset, upper)` must name: those whose marker is at or after
    /// the fetch offset and whose first offset is below the upper bound.
    pub fn aborted_between(&self, fetch_offset: i64, upper: i64) -> Vec<AbortedTxn> {
        // Kept in marker order: skip those that ended before the fetch.
        let from = self
            .aborted
            .partition_point(|txn| txn.last_offset < fetch_offset);
        self.aborted
            .range(from..)
            .filter(|txn| txn.first_offset < upper)
            .copied()
            .collect()
    }

    /// Forgets aborted transactions whose marker is below the log start.
    pub fn prune_aborted_below(&mut self, log_start: i64) {
        while self
            .aborted
            .front()
            .is_some_and(|txn| txn.last_offset < log_start)
        {
            self.aborted.pop_front();
        }
    }

    /// The aborted transactions, as the cleaner takes them.
    pub fn aborted_ranges(&self) -> Vec<storage::AbortedRange> {
        self.aborted
            .iter()
            .map(|txn| storage::AbortedRange {
                producer_id: txn.producer_id,
                first_offset: txn.first_offset.max(0) as u64,
                marker_offset: txn.last_offset.max(0) as u64,
            })
            .collect()
    }

    /// Forgets the aborted transactions whose markers, `(producer id,
    /// offset)`, the cleaner removed (with every record of them).
    pub fn forget_aborted(&mut self, markers: &[(i64, u64)]) {
        let gone: std::collections::HashSet<(i64, i64)> = markers
            .iter()
            .map(|&(producer_id, offset)| (producer_id, offset as i64))
            .collect();
        self.aborted
            .retain(|txn| !gone.contains(&(txn.producer_id, txn.last_offset)));
    }

    /// The open transactions, oldest first: (first offset, producer id).
    pub fn open_transactions(&self) -> Vec<(i64, i64)> {
        self.ongoing.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{RecoveredBatch, SequenceCheck};
    use super::*;

    fn end(marker: Marker, coordinator_epoch: i32) -> EndMarker {
        EndMarker {
            marker,
            coordinator_epoch,
        }
    }

    fn txn_batch(producer_id: i64, epoch: i16, first: i32, last: i32, base: i64) -> RecoveredBatch {
        RecoveredBatch {
            producer_id,
            epoch,
            first_sequence: first,
            last_sequence: last,
            base_offset: base,
            log_append_time_ms: -1,
            max_timestamp_ms: 1_000,
            transactional: true,
        }
    }

    #[test]
    fn a_marker_written_during_a_check_with_the_coordinator_voids_it() {
        let mut table = ProducerTable::default();
        assert!(!table.in_txn(7));
        let first = table.start_verification(7);
        assert!(table.verification_holds(7, first));
        table.apply_marker(7, 0, end(Marker::Abort, 0), 3);
        assert!(!table.verification_holds(7, first));
        // A later check gets a token of its own; ending an older one
        // leaves it standing.
        let second = table.start_verification(7);
        assert_ne!(first, second);
        table.end_verification(7, first);
        assert!(table.verification_holds(7, second));
        table.end_verification(7, second);
        assert!(!table.verification_holds(7, second));
        table.recover(txn_batch(7, 0, 0, 0, 10));
        assert!(table.in_txn(7));
    }

    #[test]
    fn open_transactions_bound_the_stable_offset_and_aborts_are_remembered() {
        let mut table = ProducerTable::default();
        table.recover(txn_batch(1, 0, 0, 4, 10));
        table.recover(txn_batch(2, 0, 0, 1, 15));
        table.recover(txn_batch(1, 0, 5, 9, 17));
        assert_eq!(table.first_unstable_offset(), Some(10));
        table.apply_marker(1, 0, end(Marker::Abort, 0), 27);
        assert_eq!(table.first_unstable_offset(), Some(15));
        table.apply_marker(2, 0, end(Marker::Commit, 0), 28);
        assert_eq!(table.first_unstable_offset(), None);
        let aborted = AbortedTxn {
            producer_id: 1,
            first_offset: 10,
            last_offset: 27,
        };
        assert_eq!(table.aborted_between(0, 100), vec![aborted]);
        assert_eq!(table.aborted_between(27, 100), vec![aborted]);
        assert_eq!(table.aborted_between(28, 100), vec![]);
        assert_eq!(table.aborted_between(0, 10), vec![]);
        // Applying the marker again (replayed from the log) changes nothing.
        table.apply_marker(1, 0, end(Marker::Abort, 0), 27);
        assert_eq!(table.aborted_between(0, 100).len(), 1);
        // A batch replayed from before the marker opens nothing.
        table.recover(txn_batch(1, 0, 5, 9, 17));
        assert_eq!(table.first_unstable_offset(), None);
        table.prune_aborted_below(28);
        assert_eq!(table.aborted_between(0, 100), vec![]);
    }

    #[test]
    fn a_marker_at_a_newer_epoch_fences_the_producer_and_an_older_one_is_refused() {
        let mut table = ProducerTable::default();
        table.recover(txn_batch(5, 3, 0, 2, 0));
        assert_eq!(
            table.check_marker(5, 2, 0),
            Err(errors::INVALID_PRODUCER_EPOCH)
        );
        assert_eq!(table.check_marker(5, 4, 0), Ok(()));
        table.apply_marker(5, 4, end(Marker::Abort, 0), 3);
        assert_eq!(
            table.check(5, 3, 3, 3),
            SequenceCheck::Reject(errors::INVALID_PRODUCER_EPOCH)
        );
        assert!(matches!(
            table.check(5, 4, 0, 0),
            SequenceCheck::Append { .. }
        ));
    }

    #[test]
    fn a_marker_from_a_coordinator_older_than_the_last_one_is_refused_also_after_a_restart() {
        let mut table = ProducerTable::default();
        table.recover(txn_batch(5, 0, 0, 0, 0));
        // Nobody wrote a marker yet: any coordinator may.
        assert_eq!(table.check_marker(5, 0, 0), Ok(()));
        table.apply_marker(5, 0, end(Marker::Commit, 4), 1);
        assert_eq!(
            table.check_marker(5, 0, 3),
            Err(errors::TRANSACTION_COORDINATOR_FENCED)
        );
        assert_eq!(table.check_marker(5, 0, 4), Ok(()));
        // A stale marker read back (a follower copying the log) does not
        // move the epoch back.
        table.apply_marker(5, 0, end(Marker::Abort, 2), 2);
        let (_, restarted) =
            ProducerTable::decode_snapshot(&table.encode_snapshot(3)).expect("valid");
        assert_eq!(
            restarted.check_marker(5, 0, 3),
            Err(errors::TRANSACTION_COORDINATOR_FENCED)
        );
        // DescribeProducers names it.
        assert_eq!(restarted.views()[0].coordinator_epoch, 4);
    }

    #[test]
    fn snapshots_keep_open_and_aborted_transactions() {
        let mut table = ProducerTable::default();
        table.recover(txn_batch(1, 0, 0, 0, 0));
        table.apply_marker(1, 0, end(Marker::Abort, 0), 1);
        table.recover(txn_batch(1, 0, 1, 1, 2));
        table.recover(txn_batch(2, 0, 0, 0, 3));
        let bytes = table.encode_snapshot(4);
        let (offset, restored) = ProducerTable::decode_snapshot(&bytes).unwrap();
        assert_eq!(offset, 4);
        assert_eq!(restored.first_unstable_offset(), Some(2));
        assert_eq!(restored.open_transactions(), vec![(2, 1), (3, 2)]);
        assert_eq!(
            restored.aborted_between(0, 10),
            table.aborted_between(0, 10)
        );
    }

    #[test]
    fn a_cut_below_a_marker_forgets_its_producer_and_the_abort() {
        let mut table = ProducerTable::default();
        table.recover(txn_batch(1, 0, 0, 0, 0));
        table.apply_marker(1, 0, end(Marker::Abort, 0), 5);
        table.recover(txn_batch(2, 0, 0, 0, 6));
        table.forget_from(5);
        assert_eq!(table.aborted_between(0, 10), vec![]);
        assert_eq!(
            table.len(),
            0,
            "producer 1 is unknown, producer 2's batch is gone"
        );
        assert_eq!(table.first_unstable_offset(), None);
    }
}
