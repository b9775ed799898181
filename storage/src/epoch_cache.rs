//! A partition's leader-epoch cache: for each leader epoch, the first
//! offset written in it. A follower asks its leader where an epoch ended
//! (OffsetForLeaderEpoch) to find where its log diverged. Persisted as
//! Kafka's `leader-epoch-checkpoint` file in the partition directory (text:
//! a version line `0`, the entry count, then one `epoch startOffset` line
//! per entry); this module is the pure part, `log::epochs` the file.

/// The cache's file in a partition directory (Kafka's name and format).
pub const FILE_NAME: &str = "leader-epoch-checkpoint";
/// Kafka's "no epoch" (`UNDEFINED_EPOCH`).
pub const UNDEFINED_EPOCH: i32 = -1;
/// Kafka's "no offset" (`UNDEFINED_EPOCH_OFFSET`).
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;
/// The only version of the file format.
const VERSION: u32 = 0;

/// An epoch and the first offset written in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: u64,
}

/// The entries, epochs strictly increasing and start offsets increasing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochCache {
    entries: Vec<EpochEntry>,
}

impl EpochCache {
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.epoch)
    }

    /// Records that `epoch` starts at `start_offset`, as Kafka does: an
    /// entry that changes nothing (the latest epoch again, at or after its
    /// start) is ignored; otherwise every entry that would break the order
    /// (an epoch at or above `epoch`, or a start at or after
    /// `start_offset`) is dropped first. Negative epochs are ignored.
    /// Returns whether the cache changed.
    pub fn assign(&mut self, epoch: i32, start_offset: u64) -> bool {
        if epoch < 0 {
            return false;
        }
        if let Some(latest) = self.entries.last() {
            if latest.epoch == epoch && latest.start_offset <= start_offset {
                return false;
            }
        }
        self.entries
            .retain(|e| e.epoch < epoch && e.start_offset < start_offset);
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        true
    }

    /// Drops the entries starting at or after `end_offset` (the log was
    /// truncated to end there). Returns whether the cache changed.
    pub fn truncate_from_end(&mut self, end_offset: u64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.start_offset < end_offset);
        self.entries.len() != before
    }

    /// The log now starts at `start_offset`: drops the entries starting at
    /// or before it and puts the last of them back starting there (its
    /// epoch still covers the new first offset). Returns whether the cache
    /// changed.
    pub fn truncate_from_start(&mut self, start_offset: u64) -> bool {
        let below = self
            .entries
            .partition_point(|e| e.start_offset <= start_offset);
        if below == 0 {
            return false;
        }
        let last = self.entries[below - 1];
        if below == 1 && last.start_offset == start_offset {
            return false;
        }
        self.entries.drain(..below);
        self.entries.insert(
            0,
            EpochEntry {
                epoch: last.epoch,
                start_offset,
            },
        );
        true
    }

    /// OffsetForLeaderEpoch: the end of `epoch` in this log as (epoch, end
    /// offset), as Kafka's `LeaderEpochFileCache.endOffsetFor` answers. For
    /// the latest epoch, the log end offset; for an earlier one, the
    /// largest known epoch at or below it and the start offset of the first
    /// larger epoch. For one below the earliest known epoch (its entries
    /// went with the log start), `epoch` itself and the earliest entry's
    /// start: the follower keeps nothing the leader no longer has. Undefined
    /// (`UNDEFINED_EPOCH`, `UNDEFINED_EPOCH_OFFSET`) for an undefined
    /// epoch, one above the latest, or an empty cache.
    pub fn end_offset_for(&self, epoch: i32, log_end_offset: u64) -> (i32, i64) {
        const UNDEFINED: (i32, i64) = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        let Some(latest) = self.entries.last() else {
            return UNDEFINED;
        };
        if epoch == UNDEFINED_EPOCH || epoch > latest.epoch {
            return UNDEFINED;
        }
        if epoch == latest.epoch {
            return (epoch, log_end_offset as i64);
        }
        let higher = self.entries.partition_point(|e| e.epoch <= epoch);
        let end = self.entries[higher].start_offset as i64;
        match higher.checked_sub(1) {
            Some(floor) => (self.entries[floor].epoch, end),
            None => (epoch, end),
        }
    }

    /// The file's text.
    pub fn encode(&self) -> String {
        let mut text = format!("{VERSION}\n{}\n", self.entries.len());
        for e in &self.entries {
            text.push_str(&format!("{} {}\n", e.epoch, e.start_offset));
        }
        text
    }

    /// Parses the file's text, checking the version, the count and the
    /// order of the entries.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut lines = text.lines();
        let mut next = |what: &str| lines.next().ok_or_else(|| format!("missing {what}"));
        let version = next("version line")?;
        if version.trim() != VERSION.to_string() {
            return Err(format!("unknown version `{version}`"));
        }
        let count: usize = next("entry count")?
            .trim()
            .parse()
            .map_err(|e| format!("bad entry count: {e}"))?;
        let mut cache = EpochCache::default();
        for i in 0..count {
            let line = next("entry")?;
            let mut fields = line.split_whitespace();
            let (Some(epoch), Some(offset), None) = (fields.next(), fields.next(), fields.next())
            else {
                return Err(format!("entry {i}: `{line}` is not `epoch offset`"));
            };
            let epoch: i32 = epoch
                .parse()
                .map_err(|e| format!("entry {i}: epoch: {e}"))?;
            let start_offset: u64 = offset
                .parse()
                .map_err(|e| format!("entry {i}: offset: {e}"))?;
            let ordered = cache
                .entries
                .last()
                .is_none_or(|l| l.epoch < epoch && l.start_offset < start_offset);
            if epoch < 0 || !ordered {
                return Err(format!("entry {i}: `{line}` out of order"));
            }
            cache.entries.push(EpochEntry {
                epoch,
                start_offset,
            });
        }
        if lines.any(|l| !l.trim().is_empty()) {
            return Err(format!("more entries than the count {count}"));
        }
        Ok(cache)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[(i32, u64)]) -> EpochCache {
        let mut c = EpochCache::default();
        for &(epoch, start) in entries {
            assert!(c.assign(epoch, start));
        }
        c
    }

    fn pairs(c: &EpochCache) -> Vec<(i32, u64)> {
        c.entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    #[test]
    fn assign_keeps_the_order() {
        let mut c = cache(&[(0, 0), (2, 10)]);
        assert!(!c.assign(2, 15), "the latest epoch again changes nothing");
        assert!(!c.assign(-1, 20), "no epoch");
        assert!(c.assign(3, 20));
        assert_eq!(pairs(&c), [(0, 0), (2, 10), (3, 20)]);
        // An older epoch at a later offset wipes what would break the order.
        assert!(c.assign(1, 12));
        assert_eq!(pairs(&c), [(0, 0), (1, 12)]);
    }

    #[test]
    fn end_offsets_follow_offset_for_leader_epoch() {
        let c = cache(&[(1, 5), (3, 10), (4, 20)]);
        let check = |epoch, expected| assert_eq!(c.end_offset_for(epoch, 30), expected, "{epoch}");
        check(4, (4, 30)); // the latest: the log end
        check(3, (3, 20)); // the start of the next larger epoch
        check(2, (1, 10)); // unknown, between: the floor epoch
        check(1, (1, 10));
        check(0, (0, 5)); // below the earliest known: its start
        check(5, (-1, -1)); // above the latest
        check(-1, (-1, -1));
        assert_eq!(EpochCache::default().end_offset_for(0, 30), (-1, -1));
    }

    #[test]
    fn truncation_from_either_end() {
        let mut c = cache(&[(0, 0), (1, 10), (2, 20)]);
        assert!(!c.truncate_from_end(21));
        assert!(c.truncate_from_end(20));
        assert_eq!(pairs(&c), [(0, 0), (1, 10)]);
        assert!(c.truncate_from_start(15));
        assert_eq!(pairs(&c), [(1, 15)]);
        assert!(!c.truncate_from_start(15));
        assert!(!c.truncate_from_start(3));
        let mut c = cache(&[(0, 0), (1, 10)]);
        assert!(c.truncate_from_start(10));
        assert_eq!(pairs(&c), [(1, 10)]);
    }

    #[test]
    fn the_file_format_is_kafka_s() {
        let c = cache(&[(0, 0), (3, 150)]);
        assert_eq!(c.encode(), "0\n2\n0 0\n3 150\n");
        assert_eq!(EpochCache::parse(&c.encode()), Ok(c));
        assert_eq!(EpochCache::parse("0\n0\n"), Ok(EpochCache::default()));
        for bad in [
            "",
            "1\n0\n",
            "0\nx\n",
            "0\n2\n0 0\n",
            "0\n1\n0\n",
            "0\n2\n3 0\n1 5\n",
            "0\n1\n0 0\n1 1\n",
            "0\n1\n-1 0\n",
        ] {
            assert!(EpochCache::parse(bad).is_err(), "{bad:?}");
        }
    }
}
