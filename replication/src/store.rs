//! Stores for the Raft log: what survives a crash. [`MemoryStore`] keeps it in memory (tests,
//! where the "disk" is the store value that outlives a node); [`crate::file_store::FileStore`]
//! is the durable one. Both answer raft's reads from a `LogCache`, the log as it is in memory:
//! the latest snapshot with its data, the entries after it, hard and conf state.

use std::sync::{Arc, RwLock, RwLockReadGuard};

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};

use crate::Error;

/// A Raft log store: `raft::Storage` for reads, plus the writes the quorum makes durable.
/// Each write is durable when it returns `Ok`.
pub trait LogStore: raft::Storage {
    /// Appends `entries`, first dropping any stored entries at or after `entries[0].index`.
    fn append(&mut self, entries: &[Entry]) -> Result<(), Error>;
    /// Replaces the hard state (term, vote, commit).
    fn set_hard_state(&mut self, hard_state: &HardState) -> Result<(), Error>;
    /// Installs a snapshot a leader sent: it replaces the whole log (raft-rs installs one only
    /// when this node's log does not hold the snapshot's last entry).
    fn apply_snapshot(&mut self, snapshot: Snapshot) -> Result<(), Error>;
    /// Records a snapshot of this node's own applied state, then drops the entries it covers
    /// and keeps the later ones. The snapshot's index is in the log, with the snapshot's term.
    fn compact(&mut self, snapshot: Snapshot) -> Result<(), Error>;
    /// The latest snapshot, with its data; `None` before the first.
    fn latest_snapshot(&self) -> Option<Snapshot>;
    /// Encoded bytes of the entries after the latest snapshot, up to and including `index`.
    fn log_bytes_through(&self, index: u64) -> u64;
}

/// The log as a store holds it in memory. Invariants: `entries[i].index` is
/// `snapshot_index + 1 + i`; `bytes_through[i]` is the encoded size of `entries[..=i]`.
#[derive(Clone)]
pub(crate) struct LogCache {
    hard_state: HardState,
    conf_state: ConfState,
    /// Index 0: no snapshot yet.
    snapshot: Snapshot,
    entries: Vec<Entry>,
    bytes_through: Vec<u64>,
}

impl LogCache {
    /// The log of a fresh quorum of `voters`: empty, no snapshot.
    pub fn new(voters: &[u64]) -> Self {
        LogCache {
            hard_state: HardState::default(),
            conf_state: ConfState::from((voters.to_vec(), Vec::new())),
            snapshot: Snapshot::default(),
            entries: Vec::new(),
            bytes_through: Vec::new(),
        }
    }

    /// The index of the last entry the latest snapshot covers (0: none).
    pub fn snapshot_index(&self) -> u64 {
        self.snapshot.get_metadata().index
    }

    /// The term of that entry (0: none).
    pub fn snapshot_term(&self) -> u64 {
        self.snapshot.get_metadata().term
    }

    fn first(&self) -> u64 {
        self.snapshot_index() + 1
    }

    fn last(&self) -> u64 {
        self.snapshot_index() + self.entries.len() as u64
    }

    /// The stored hard state.
    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    /// The entries after the latest snapshot, in index order.
    pub fn entries_after_snapshot(&self) -> &[Entry] {
        &self.entries
    }

    /// The latest snapshot, with its data.
    pub fn latest_snapshot(&self) -> Option<&Snapshot> {
        (self.snapshot_index() > 0).then_some(&self.snapshot)
    }

    /// Encoded bytes of the entries after the snapshot, through `index` (clamped to the log).
    pub fn log_bytes_through(&self, index: u64) -> u64 {
        if index <= self.snapshot_index() || self.entries.is_empty() {
            return 0;
        }
        let position = (index.min(self.last()) - self.first()) as usize;
        self.bytes_through[position]
    }

    /// Appends `entries`, dropping stored entries at or after the first one's index.
    ///
    /// Panics if that index is covered by the snapshot (committed entries never change) or
    /// leaves a gap after the last entry.
    pub fn append(&mut self, entries: &[Entry]) {
        let Some(head) = entries.first() else {
            return;
        };
        assert!(
            head.index >= self.first() && head.index <= self.last() + 1,
            "append at {} to a log of [{}, {}]",
            head.index,
            self.first(),
            self.last()
        );
        let keep = (head.index - self.first()) as usize;
        self.entries.truncate(keep);
        self.bytes_through.truncate(keep);
        let mut total = self.bytes_through.last().copied().unwrap_or(0);
        for (offset, entry) in entries.iter().enumerate() {
            assert_eq!(
                entry.index,
                head.index + offset as u64,
                "entries are contiguous"
            );
            total += u64::from(entry.compute_size());
            self.entries.push(entry.clone());
            self.bytes_through.push(total);
        }
    }

    pub fn set_hard_state(&mut self, hard_state: HardState) {
        self.hard_state = hard_state;
    }

    /// Installs a snapshot a leader sent: the log becomes the snapshot alone. The hard state's
    /// commit moves up to the snapshot (its entries are committed); a term below the
    /// snapshot's moves up too, with no vote in the new term.
    ///
    /// Panics if the snapshot is not newer than the current one.
    pub fn install(&mut self, snapshot: Snapshot) {
        let meta = snapshot.get_metadata();
        assert!(
            meta.index > self.snapshot_index(),
            "install snapshot at {} over one at {}",
            meta.index,
            self.snapshot_index()
        );
        if self.hard_state.term < meta.term {
            self.hard_state.term = meta.term;
            self.hard_state.vote = 0;
        }
        self.hard_state.commit = self.hard_state.commit.max(meta.index);
        self.conf_state = meta.get_conf_state().clone();
        self.entries.clear();
        self.bytes_through.clear();
        self.snapshot = snapshot;
    }

    /// Checks that `snapshot` may compact this log: newer than the current snapshot, at an
    /// entry of the log, with that entry's term.
    pub fn check_compaction(&self, snapshot: &Snapshot) -> Result<(), String> {
        let meta = snapshot.get_metadata();
        if meta.index <= self.snapshot_index() || meta.index > self.last() {
            return Err(format!(
                "snapshot at {} outside the log after the snapshot ({}, {}]",
                meta.index,
                self.snapshot_index(),
                self.last()
            ));
        }
        let term = self.entries[(meta.index - self.first()) as usize].term;
        if term != meta.term {
            return Err(format!(
                "snapshot at {} has term {}, the entry term {term}",
                meta.index, meta.term
            ));
        }
        Ok(())
    }

    /// Records `snapshot` of this log and drops the entries it covers, keeping the later ones.
    ///
    /// Panics unless [`LogCache::check_compaction`] accepts it.
    pub fn compact(&mut self, snapshot: Snapshot) {
        if let Err(reason) = self.check_compaction(&snapshot) {
            panic!("compaction: {reason}");
        }
        let dropped = (snapshot.get_metadata().index - self.snapshot_index()) as usize;
        let dropped_bytes = self.bytes_through[dropped - 1];
        self.entries.drain(..dropped);
        self.bytes_through.drain(..dropped);
        for bytes in &mut self.bytes_through {
            *bytes -= dropped_bytes;
        }
        // A restart starts from the snapshot's configuration, then applies the changes after.
        self.conf_state = snapshot.get_metadata().get_conf_state().clone();
        self.snapshot = snapshot;
    }
}

impl raft::Storage for LogCache {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        // raft-rs's contract: asking past the last entry is a bug of the caller.
        assert!(
            high <= self.last() + 1,
            "entries [{low}, {high}) past the last index {}",
            self.last()
        );
        let low_position = (low - self.first()) as usize;
        let high_position = (high - self.first()) as usize;
        let mut entries = self.entries[low_position..high_position.max(low_position)].to_vec();
        raft::util::limit_size(&mut entries, max_size.into());
        Ok(entries)
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        if index == self.snapshot_index() {
            return Ok(self.snapshot_term());
        }
        if index < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if index > self.last() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(self.entries[(index - self.first()) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    /// The latest snapshot with its data (raft-rs's `MemStorage` makes one without data). A
    /// leader asks for one only when a follower needs entries the snapshot covers, so there
    /// is one then; a request past it (a follower asking for a newer one) must wait.
    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        if self.snapshot_index() == 0 || self.snapshot_index() < request_index {
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(self.snapshot.clone())
    }
}

/// An in-memory store. Clones share state: a test keeps one clone as the node's "disk" and
/// builds a new `Quorum` on it after a crash.
#[derive(Clone)]
pub struct MemoryStore {
    log: Arc<RwLock<LogCache>>,
}

impl MemoryStore {
    /// A store for a fresh quorum of `voters`.
    pub fn new(voters: &[u64]) -> Self {
        MemoryStore {
            log: Arc::new(RwLock::new(LogCache::new(voters))),
        }
    }

    /// The stored hard state.
    pub fn hard_state(&self) -> HardState {
        self.log().hard_state().clone()
    }

    fn log(&self) -> RwLockReadGuard<'_, LogCache> {
        self.log.read().expect("no writer panicked")
    }

    fn log_mut(&self) -> std::sync::RwLockWriteGuard<'_, LogCache> {
        self.log.write().expect("no writer panicked")
    }
}

impl LogStore for MemoryStore {
    fn append(&mut self, entries: &[Entry]) -> Result<(), Error> {
        self.log_mut().append(entries);
        Ok(())
    }

    fn set_hard_state(&mut self, hard_state: &HardState) -> Result<(), Error> {
        self.log_mut().set_hard_state(hard_state.clone());
        Ok(())
    }

    fn apply_snapshot(&mut self, snapshot: Snapshot) -> Result<(), Error> {
        self.log_mut().install(snapshot);
        Ok(())
    }

    fn compact(&mut self, snapshot: Snapshot) -> Result<(), Error> {
        self.log_mut().compact(snapshot);
        Ok(())
    }

    fn latest_snapshot(&self) -> Option<Snapshot> {
        self.log().latest_snapshot().cloned()
    }

    fn log_bytes_through(&self, index: u64) -> u64 {
        self.log().log_bytes_through(index)
    }
}

/// Implements `raft::Storage` for `$store` by asking the `LogCache` its method `$log`
/// returns: every store answers reads from memory and differs only in what it writes.
macro_rules! storage_reads_from {
    ($store:ty, $log:ident) => {
        impl raft::Storage for $store {
            fn initial_state(&self) -> raft::Result<raft::RaftState> {
                raft::Storage::initial_state(&*self.$log())
            }
            fn entries(
                &self,
                low: u64,
                high: u64,
                max_size: impl Into<Option<u64>>,
                context: raft::GetEntriesContext,
            ) -> raft::Result<Vec<raft::eraftpb::Entry>> {
                raft::Storage::entries(&*self.$log(), low, high, max_size, context)
            }
            fn term(&self, index: u64) -> raft::Result<u64> {
                raft::Storage::term(&*self.$log(), index)
            }
            fn first_index(&self) -> raft::Result<u64> {
                raft::Storage::first_index(&*self.$log())
            }
            fn last_index(&self) -> raft::Result<u64> {
                raft::Storage::last_index(&*self.$log())
            }
            fn snapshot(
                &self,
                request_index: u64,
                to: u64,
            ) -> raft::Result<raft::eraftpb::Snapshot> {
                raft::Storage::snapshot(&*self.$log(), request_index, to)
            }
        }
    };
}
pub(crate) use storage_reads_from;

storage_reads_from!(MemoryStore, log);
