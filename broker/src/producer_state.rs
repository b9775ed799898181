//! Idempotent producer state of one partition: per producer id the epoch,
//! the last sequence and the last few batches, so retries are answered with
//! their original offsets and gaps or reordering are refused.

use std::collections::{HashMap, VecDeque};

use crate::errors;
use crate::limits::PRODUCER_BATCHES_KEPT;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BatchRecord {
    first_sequence: i32,
    last_sequence: i32,
    base_offset: i64,
    log_append_time_ms: i64,
}

#[derive(Debug)]
struct ProducerEntry {
    epoch: i16,
    last_sequence: i32,
    batches: VecDeque<BatchRecord>,
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

#[derive(Debug, Default)]
pub struct ProducerTable {
    producers: HashMap<i64, ProducerEntry>,
}

impl ProducerTable {
    /// Checks a batch's sequence and, when it may be appended, reserves it.
    pub fn check(
        &mut self,
        producer_id: i64,
        epoch: i16,
        first_sequence: i32,
        last_sequence: i32,
    ) -> SequenceCheck {
        let Some(entry) = self.producers.get_mut(&producer_id) else {
            // Unknown producer: a new one, or one whose state predates this
            // process. Accept and start tracking.
            self.producers.insert(
                producer_id,
                ProducerEntry {
                    epoch,
                    last_sequence,
                    batches: VecDeque::new(),
                },
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
    pub fn recover(
        &mut self,
        producer_id: i64,
        epoch: i16,
        first_sequence: i32,
        last_sequence: i32,
        base_offset: i64,
        log_append_time_ms: i64,
    ) {
        let entry = self.producers.entry(producer_id).or_insert(ProducerEntry {
            epoch,
            last_sequence,
            batches: VecDeque::new(),
        });
        if epoch != entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        entry.last_sequence = last_sequence;
        if entry.batches.len() == PRODUCER_BATCHES_KEPT {
            entry.batches.pop_front();
        }
        entry.batches.push_back(BatchRecord {
            first_sequence,
            last_sequence,
            base_offset,
            log_append_time_ms,
        });
    }

    /// Records an appended batch so a retry of it is recognised.
    pub fn appended(
        &mut self,
        producer_id: i64,
        first_sequence: i32,
        last_sequence: i32,
        base_offset: i64,
        log_append_time_ms: i64,
    ) {
        if let Some(entry) = self.producers.get_mut(&producer_id) {
            if entry.batches.len() == PRODUCER_BATCHES_KEPT {
                entry.batches.pop_front();
            }
            entry.batches.push_back(BatchRecord {
                first_sequence,
                last_sequence,
                base_offset,
                log_append_time_ms,
            });
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_must_follow_and_retries_are_recognised() {
        let mut table = ProducerTable::default();
        assert!(matches!(
            table.check(7, 0, 0, 4),
            SequenceCheck::Append { .. }
        ));
        table.appended(7, 0, 4, 100, -1);
        assert!(matches!(
            table.check(7, 0, 5, 9),
            SequenceCheck::Append { .. }
        ));
        table.appended(7, 5, 9, 105, -1);
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
        table.recover(3, 2, 0, 9, 40, -1);
        table.recover(3, 2, 10, 19, 50, -1);
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
        table.appended(1, 0, 0, 0, -1);
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
}
