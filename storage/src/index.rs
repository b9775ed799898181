//! Sparse offset and time indexes of one segment, in Kafka's file formats.
//!
//! `.index`: 8-byte entries, big-endian `(last offset - base offset) u32,
//! file position u32`: "the batch at this position ends at this offset".
//! `.timeindex`: 12-byte entries, big-endian `(max timestamp so far i64,
//! relative offset u32)`. Both are kept in memory and written whole when a
//! segment is sealed or the log closes cleanly.

/// One offset index entry, relative to the segment's base offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetEntry {
    pub relative_offset: u32,
    pub position: u32,
}

/// One time index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeEntry {
    pub timestamp: i64,
    pub relative_offset: u32,
}

pub const OFFSET_ENTRY_BYTES: usize = 8;
pub const TIME_ENTRY_BYTES: usize = 12;

/// Why an index file cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    #[error("size {size} is not a multiple of the {entry} byte entry")]
    Size { size: usize, entry: usize },
    #[error("entry {entry} does not increase over the previous one")]
    NotIncreasing { entry: usize },
    #[error("entry {entry} points past the end of the log ({position} >= {log_size})")]
    PastEnd {
        entry: usize,
        position: u64,
        log_size: u64,
    },
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetIndex {
    entries: Vec<OffsetEntry>,
}

impl OffsetIndex {
    pub fn entries(&self) -> &[OffsetEntry] {
        &self.entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn last(&self) -> Option<OffsetEntry> {
        self.entries.last().copied()
    }

    pub fn push(&mut self, entry: OffsetEntry) {
        if let Some(last) = self.entries.last() {
            assert!(
                entry.relative_offset > last.relative_offset && entry.position > last.position,
                "offset index entries must increase: {last:?} then {entry:?}"
            );
        }
        self.entries.push(entry);
    }

    /// Position from which a scan for `relative_offset` starts: that of the
    /// last indexed batch ending strictly before it, else the segment start.
    pub fn lookup(&self, relative_offset: u32) -> u32 {
        let after = self
            .entries
            .partition_point(|e| e.relative_offset < relative_offset);
        match after {
            0 => 0,
            n => self.entries[n - 1].position,
        }
    }

    /// Drops entries for batches at or after `position`.
    pub fn truncate_to_position(&mut self, position: u64) {
        let keep = self
            .entries
            .partition_point(|e| u64::from(e.position) < position);
        self.entries.truncate(keep);
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * OFFSET_ENTRY_BYTES);
        for e in &self.entries {
            out.extend_from_slice(&e.relative_offset.to_be_bytes());
            out.extend_from_slice(&e.position.to_be_bytes());
        }
        out
    }

    /// Decodes and checks an index file against the log's size.
    pub fn decode(bytes: &[u8], log_size: u64) -> Result<Self, IndexError> {
        if !bytes.len().is_multiple_of(OFFSET_ENTRY_BYTES) {
            return Err(IndexError::Size {
                size: bytes.len(),
                entry: OFFSET_ENTRY_BYTES,
            });
        }
        let mut index = Self::default();
        for (i, chunk) in bytes.chunks_exact(OFFSET_ENTRY_BYTES).enumerate() {
            let entry = OffsetEntry {
                relative_offset: u32::from_be_bytes(chunk[..4].try_into().expect("4 bytes")),
                position: u32::from_be_bytes(chunk[4..].try_into().expect("4 bytes")),
            };
            if let Some(last) = index.entries.last() {
                if entry.relative_offset <= last.relative_offset || entry.position <= last.position
                {
                    return Err(IndexError::NotIncreasing { entry: i });
                }
            }
            if u64::from(entry.position) >= log_size {
                return Err(IndexError::PastEnd {
                    entry: i,
                    position: entry.position.into(),
                    log_size,
                });
            }
            index.entries.push(entry);
        }
        Ok(index)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimeIndex {
    entries: Vec<TimeEntry>,
}

impl TimeIndex {
    pub fn entries(&self) -> &[TimeEntry] {
        &self.entries
    }

    pub fn last(&self) -> Option<TimeEntry> {
        self.entries.last().copied()
    }

    /// Adds an entry when the timestamp grows; entries stay increasing in
    /// both fields, as Kafka's time index requires.
    pub fn maybe_push(&mut self, entry: TimeEntry) {
        match self.entries.last() {
            Some(last) if entry.timestamp <= last.timestamp => {}
            Some(last) if entry.relative_offset <= last.relative_offset => {}
            _ => self.entries.push(entry),
        }
    }

    /// Relative offset from which a scan for the first record with a
    /// timestamp at or above `timestamp` starts.
    pub fn lookup(&self, timestamp: i64) -> Option<u32> {
        let below = self.entries.partition_point(|e| e.timestamp < timestamp);
        match below {
            0 => None,
            n => Some(self.entries[n - 1].relative_offset),
        }
    }

    /// Drops entries for offsets at or after `relative_offset`.
    pub fn truncate_to_offset(&mut self, relative_offset: u32) {
        let keep = self
            .entries
            .partition_point(|e| e.relative_offset < relative_offset);
        self.entries.truncate(keep);
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * TIME_ENTRY_BYTES);
        for e in &self.entries {
            out.extend_from_slice(&e.timestamp.to_be_bytes());
            out.extend_from_slice(&e.relative_offset.to_be_bytes());
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, IndexError> {
        if !bytes.len().is_multiple_of(TIME_ENTRY_BYTES) {
            return Err(IndexError::Size {
                size: bytes.len(),
                entry: TIME_ENTRY_BYTES,
            });
        }
        let mut index = Self::default();
        for (i, chunk) in bytes.chunks_exact(TIME_ENTRY_BYTES).enumerate() {
            let entry = TimeEntry {
                timestamp: i64::from_be_bytes(chunk[..8].try_into().expect("8 bytes")),
                relative_offset: u32::from_be_bytes(chunk[8..].try_into().expect("4 bytes")),
            };
            if let Some(last) = index.entries.last() {
                if entry.timestamp <= last.timestamp
                    || entry.relative_offset <= last.relative_offset
                {
                    return Err(IndexError::NotIncreasing { entry: i });
                }
            }
            index.entries.push(entry);
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(pairs: &[(u32, u32)]) -> OffsetIndex {
        let mut index = OffsetIndex::default();
        for &(relative_offset, position) in pairs {
            index.push(OffsetEntry {
                relative_offset,
                position,
            });
        }
        index
    }

    #[test]
    fn offset_lookup_starts_at_the_last_batch_ending_before_the_target() {
        let index = offsets(&[(9, 0), (19, 4200), (29, 8400)]);
        let check = |target, expected| assert_eq!(index.lookup(target), expected, "{target}");
        check(0, 0);
        check(9, 0);
        check(10, 0);
        check(19, 0);
        check(20, 4200);
        check(29, 4200);
        check(30, 8400);
        check(1000, 8400);
    }

    #[test]
    fn offset_index_round_trips_and_rejects_damage() {
        let index = offsets(&[(0, 0), (5, 100), (9, 4300)]);
        let bytes = index.encode();
        assert_eq!(OffsetIndex::decode(&bytes, 5000), Ok(index.clone()));
        assert!(matches!(
            OffsetIndex::decode(&bytes[..7], 5000),
            Err(IndexError::Size { .. })
        ));
        assert!(matches!(
            OffsetIndex::decode(&bytes, 4300),
            Err(IndexError::PastEnd { entry: 2, .. })
        ));
        let mut swapped = bytes.clone();
        swapped[8..16].copy_from_slice(&bytes[16..24]);
        swapped[16..24].copy_from_slice(&bytes[8..16]);
        assert!(matches!(
            OffsetIndex::decode(&swapped, 5000),
            Err(IndexError::NotIncreasing { entry: 2 })
        ));
        let mut truncated = index.clone();
        truncated.truncate_to_position(100);
        assert_eq!(truncated, offsets(&[(0, 0)]));
    }

    #[test]
    fn time_index_keeps_only_growing_timestamps() {
        let mut index = TimeIndex::default();
        for (timestamp, relative_offset) in [(100, 0), (90, 3), (150, 5), (150, 7), (200, 9)] {
            index.maybe_push(TimeEntry {
                timestamp,
                relative_offset,
            });
        }
        let got: Vec<_> = index
            .entries()
            .iter()
            .map(|e| (e.timestamp, e.relative_offset))
            .collect();
        assert_eq!(got, vec![(100, 0), (150, 5), (200, 9)]);
        assert_eq!(index.lookup(50), None);
        assert_eq!(index.lookup(100), None);
        assert_eq!(index.lookup(101), Some(0));
        assert_eq!(index.lookup(175), Some(5));
        assert_eq!(TimeIndex::decode(&index.encode()), Ok(index.clone()));
        index.truncate_to_offset(5);
        assert_eq!(index.entries().len(), 1);
    }
}
