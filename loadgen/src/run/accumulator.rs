//! What a producer holds per partition: the records of the open batch
//! (`Accumulator`), the batches handed to a lane (`Outgoing`), and how many
//! of those still wait for a request (`Waiting`).

use std::cell::Cell;
use std::ops::Range;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use crate::kafka;

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

/// An accumulator's records taken to become one batch.
pub(super) struct Sealed {
    pub(super) values: Vec<Bytes>,
    pub(super) keys: Vec<Option<Bytes>>,
    pub(super) value_bytes: u64,
    /// The due time of the oldest record.
    pub(super) first_due: Instant,
    /// The e2e sequences of the records.
    pub(super) sequences: Range<u64>,
}

impl Accumulator {
    /// A next record's value: `payload` copied into the arena, which grows
    /// by up to a batch (at most [`ARENA_BYTES_MAX`]) when it runs out.
    pub(super) fn value_from(&mut self, payload: &[u8], batch_bytes: usize) -> BytesMut {
        if self.arena.capacity() < payload.len() {
            self.arena
                .reserve(batch_bytes.max(payload.len()).min(ARENA_BYTES_MAX));
        }
        self.arena.extend_from_slice(payload);
        self.arena.split()
    }

    /// Adds a record due at `due`; whether the batch is now full. Full
    /// when one more record like this one would take the encoded batch
    /// past `batch_bytes`, as Kafka's producer decides (it sizes each
    /// record exactly): values alone up to the batch size, plus the
    /// records' framing, could pass the broker's message size limit
    /// (MESSAGE_TOO_LARGE) when a stalled broker lets a batch fill.
    pub(super) fn append(
        &mut self,
        value: Bytes,
        key: Option<Bytes>,
        due: Instant,
        sequence: u64,
        batch_bytes: usize,
    ) -> bool {
        let index = self.values.len();
        let key_len = key.as_ref().map(Bytes::len);
        let value_len = value.len();
        let record_bytes = match self.next_record {
            Some((k, bytes)) if index > 0 && k == key_len => bytes,
            _ => kafka::record_bytes(index, key_len, value_len),
        };
        if index == 0 {
            self.first_due = Some(due);
            self.first_sequence = sequence;
            self.encoded = kafka::batch_head_bytes();
        }
        self.encoded += record_bytes;
        self.bytes += value_len;
        self.values.push(value);
        self.keys.push(key);
        let next = kafka::record_bytes(index + 1, key_len, value_len);
        self.next_record = Some((key_len, next));
        self.encoded + next > batch_bytes
    }

    /// Takes the records for a batch, leaving the accumulator empty.
    pub(super) fn seal(&mut self) -> Sealed {
        let values = std::mem::take(&mut self.values);
        let keys = std::mem::take(&mut self.keys);
        let count = values.len() as u64;
        let value_bytes = self.bytes as u64;
        self.bytes = 0;
        self.encoded = 0;
        let first_due = self
            .first_due
            .take()
            .expect("a non-empty accumulator has a due time");
        Sealed {
            values,
            keys,
            value_bytes,
            first_due,
            sequences: self.first_sequence..self.first_sequence + count,
        }
    }
}
