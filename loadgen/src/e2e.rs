//! End-to-end accounting. Every record value starts with a header the
//! consumer reads back: producer id (u32), sequence per producer and
//! partition (u64), intended send time (u64 µs since the Unix epoch). The
//! consumer checks each (partition, producer) stream: a sequence seen twice
//! is a duplicate, one lower than the last seen is reordered, and at the end
//! every acknowledged sequence never seen is lost.

use std::collections::HashMap;

use serde::Serialize;

pub const HEADER_LEN: usize = 4 + 8 + 8;

pub fn write_header(out: &mut [u8], producer: u32, sequence: u64, due_us: u64) {
    out[..4].copy_from_slice(&producer.to_be_bytes());
    out[4..12].copy_from_slice(&sequence.to_be_bytes());
    out[12..20].copy_from_slice(&due_us.to_be_bytes());
}

pub fn read_header(value: &[u8]) -> Option<(u32, u64, u64)> {
    if value.len() < HEADER_LEN {
        return None;
    }
    Some((
        u32::from_be_bytes(value[..4].try_into().ok()?),
        u64::from_be_bytes(value[4..12].try_into().ok()?),
        u64::from_be_bytes(value[12..20].try_into().ok()?),
    ))
}

/// One (partition, producer) stream as the consumer saw it.
#[derive(Debug, Default, Clone)]
struct Stream {
    /// Sequences seen, as a growable bitmap.
    seen: Vec<u64>,
    last: Option<u64>,
}

impl Stream {
    fn mark(&mut self, sequence: u64) -> bool {
        let (word, bit) = ((sequence / 64) as usize, sequence % 64);
        if word >= self.seen.len() {
            self.seen.resize(word + 1, 0);
        }
        let fresh = self.seen[word] & (1 << bit) == 0;
        self.seen[word] |= 1 << bit;
        fresh
    }

    fn contains(&self, sequence: u64) -> bool {
        let (word, bit) = ((sequence / 64) as usize, sequence % 64);
        self.seen.get(word).is_some_and(|w| w & (1 << bit) != 0)
    }
}

/// Acknowledged sequence ranges per (topic, partition, producer).
pub type Acknowledged = HashMap<(String, i32, u32), Vec<std::ops::Range<u64>>>;

/// What the consumers saw of the produced records. `received` counts the
/// records of the measured window, as the report's consumed row does, and
/// `received_warmup` those consumed during the warm-up; the other counts
/// are over every record, warm-up included (a record lost in the warm-up
/// is lost).
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct Integrity {
    pub received: u64,
    pub received_warmup: u64,
    pub duplicates: u64,
    pub reordered: u64,
    pub lost: u64,
    pub foreign: u64,
    /// Records whose payload after the header differs from what was sent.
    pub corrupt: u64,
}

/// The consumer side's record of every stream.
#[derive(Debug, Default)]
pub struct Tracker {
    streams: HashMap<(String, i32, u32), Stream>,
    pub integrity: Integrity,
}

impl Tracker {
    /// Accounts one consumed record value, checking every payload byte
    /// after the header against `payload`; returns its intended send time.
    pub fn observe(
        &mut self,
        topic: &str,
        partition: i32,
        value: &[u8],
        payload: &[u8],
    ) -> Option<u64> {
        let Some((producer, sequence, due_us)) = read_header(value) else {
            self.integrity.foreign += 1;
            return None;
        };
        if value.len() != payload.len() || value[HEADER_LEN..] != payload[HEADER_LEN..] {
            self.integrity.corrupt += 1;
        }
        let stream = self
            .streams
            .entry((topic.to_string(), partition, producer))
            .or_default();
        self.integrity.received += 1;
        if !stream.mark(sequence) {
            self.integrity.duplicates += 1;
        } else if stream.last.is_some_and(|last| sequence < last) {
            self.integrity.reordered += 1;
        }
        stream.last = Some(stream.last.map_or(sequence, |l| l.max(sequence)));
        Some(due_us)
    }

    /// Counts acknowledged sequences never seen.
    pub fn finish(&mut self, acknowledged: &Acknowledged) -> Integrity {
        let mut lost = 0;
        for (key, ranges) in acknowledged {
            let stream = self.streams.get(key);
            for range in ranges {
                for sequence in range.clone() {
                    if !stream.is_some_and(|s| s.contains(sequence)) {
                        lost += 1;
                    }
                }
            }
        }
        self.integrity.lost = lost;
        self.integrity.clone()
    }

    /// Counts acknowledged sequences never seen, and moves the
    /// `warmup_records` consumed during the warm-up out of `received`.
    pub fn finish_after_warmup(
        &mut self,
        acknowledged: &Acknowledged,
        warmup_records: u64,
    ) -> Integrity {
        let mut integrity = self.finish(acknowledged);
        integrity.received_warmup = warmup_records.min(integrity.received);
        integrity.received -= integrity.received_warmup;
        integrity
    }

    pub fn merge(&mut self, other: Tracker) {
        for (key, stream) in other.streams {
            let mine = self.streams.entry(key).or_default();
            for (word, bits) in stream.seen.iter().enumerate() {
                if word >= mine.seen.len() {
                    mine.seen.resize(word + 1, 0);
                }
                mine.seen[word] |= bits;
            }
        }
        self.integrity.received += other.integrity.received;
        self.integrity.duplicates += other.integrity.duplicates;
        self.integrity.reordered += other.integrity.reordered;
        self.integrity.foreign += other.integrity.foreign;
        self.integrity.corrupt += other.integrity.corrupt;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(producer: u32, sequence: u64) -> Vec<u8> {
        let mut v = vec![0u8; 32];
        write_header(&mut v, producer, sequence, 1_000 + sequence);
        v
    }

    #[test]
    fn loss_duplicates_and_reordering_are_counted() {
        let mut tracker = Tracker::default();
        let payload = vec![0u8; 32];
        for seq in [0, 1, 2, 2, 4, 3, 6] {
            tracker.observe("t", 0, &value(7, seq), &payload);
        }
        tracker.observe("t", 0, b"short", &payload);
        let mut damaged = value(7, 8);
        damaged[31] = 1;
        tracker.observe("t", 1, &damaged, &payload);
        let acknowledged = HashMap::from([(("t".to_string(), 0, 7), vec![0..3, 3..8])]);
        let result = tracker.finish(&acknowledged);
        assert_eq!(
            result,
            Integrity {
                received: 8,
                received_warmup: 0,
                duplicates: 1,
                reordered: 1,
                lost: 2, // 5 and 7
                foreign: 1,
                corrupt: 1,
            }
        );
    }

    #[test]
    fn warm_up_records_are_checked_but_not_counted_as_received() {
        let mut tracker = Tracker::default();
        let payload = vec![0u8; 32];
        // Ten records, the first four consumed during the warm-up; 2 is
        // never seen.
        for seq in [0, 1, 3, 4, 5, 6, 7, 8, 9] {
            tracker.observe("t", 0, &value(7, seq), &payload);
        }
        let acknowledged = HashMap::from([(("t".to_string(), 0, 7), vec![0..5, 5..10])]);
        let result = tracker.finish_after_warmup(&acknowledged, 4);
        assert_eq!(
            result,
            Integrity {
                received: 5,
                received_warmup: 4,
                lost: 1,
                ..Integrity::default()
            }
        );
    }
}
