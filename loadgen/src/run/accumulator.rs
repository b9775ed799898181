//! What a producer holds per partition: the records of the open batch
//! (`Accumulator`), the batches handed to a lane (`Outgoing`), and how many
//! of those still wait for a request (`Waiting`).

use std::cell::Cell;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

/// A batch on its way to a lane.
pub(super) struct Outgoing {
    pub(super) topic: String,
    pub(super) partition: i32,
    pub(super) bytes: Bytes,
    pub(super) records: u64,
    pub(super) value_bytes: u64,
    /// The due time of the batch's oldest record.
    pub(super) first_due: Instant,
    /// e2e sequences the batch carries.
    pub(super) sequences: std::ops::Range<u64>,
}

/// Batches handed to a lane but not yet put into a request, per partition,
/// shared by a producer and its lanes. While one waits, the partition's
/// next batch stays open and keeps taking records, as the Kafka clients'
/// accumulators do: with `linger.ms=0` and the in-flight window full, they
/// grow one batch per partition instead of queueing a batch of a record or
/// two per send loop (which made requests of one tiny batch each, and the
/// producer stall behind its own queue).
pub(super) struct Waiting {
    per_partition: Vec<Cell<u32>>,
    /// Raised by a lane when it takes a partition's last waiting batch.
    pub(super) drained: glommio::sync::Semaphore,
}

impl Waiting {
    pub(super) fn new(partitions: usize) -> Waiting {
        Waiting {
            per_partition: (0..partitions).map(|_| Cell::new(0)).collect(),
            drained: glommio::sync::Semaphore::new(0),
        }
    }

    pub(super) fn queued(&self, partition: usize) {
        let count = &self.per_partition[partition];
        count.set(count.get() + 1);
    }

    pub(super) fn taken(&self, partition: usize) {
        let count = &self.per_partition[partition];
        count.set(count.get().saturating_sub(1));
        if count.get() == 0 && self.drained.available() == 0 {
            self.drained.signal(1);
        }
    }

    pub(super) fn any_waiting(&self, partition: usize) -> bool {
        self.per_partition[partition].get() > 0
    }
}
/// Records waiting to become a batch for one partition.
#[derive(Default)]
pub(super) struct Accumulator {
    /// Where the next records' values are written: one allocation holds
    /// many values (each a slice of it), not one per record.
    pub(super) arena: BytesMut,
    pub(super) values: Vec<Bytes>,
    pub(super) keys: Vec<Option<Bytes>>,
    /// Value bytes, and the batch's encoded size so far.
    pub(super) bytes: usize,
    pub(super) encoded: usize,
    /// The key length and encoded size of a next record with that key,
    /// worked out by the fullness check: the next append with the same
    /// key length takes it instead of sizing its record again.
    pub(super) next_record: Option<(Option<usize>, usize)>,
    pub(super) first_due: Option<Instant>,
    pub(super) first_sequence: u64,
}

/// The most one accumulator's arena allocates at once.
pub(super) const ARENA_BYTES_MAX: usize = 1 << 20;
