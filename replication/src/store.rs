//! Stores for the Raft log: what survives a crash. [`MemoryStore`] keeps it in memory (tests,
//! where the "disk" is the store value that outlives a node); [`crate::file_store::FileStore`]
//! is the durable one.

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::storage::MemStorage;
use raft::Storage;

use crate::Error;

/// A Raft log store: `raft::Storage` for reads, plus the writes the quorum makes durable.
/// Each write is durable when it returns `Ok`.
pub trait LogStore: Storage {
    /// Appends `entries`, first dropping any stored entries at or after `entries[0].index`.
    fn append(&mut self, entries: &[Entry]) -> Result<(), Error>;
    /// Replaces the hard state (term, vote, commit).
    fn set_hard_state(&mut self, hard_state: &HardState) -> Result<(), Error>;
    /// Installs a snapshot, discarding the log it covers.
    fn apply_snapshot(&mut self, snapshot: Snapshot) -> Result<(), Error>;
}

/// An in-memory store. Clones share state: a test keeps one clone as the node's "disk" and
/// builds a new `Quorum` on it after a crash.
#[derive(Clone)]
pub struct MemoryStore {
    inner: MemStorage,
}

impl MemoryStore {
    /// A store for a fresh quorum of `voters`.
    pub fn new(voters: &[u64]) -> Self {
        MemoryStore {
            inner: MemStorage::new_with_conf_state(ConfState::from((voters.to_vec(), Vec::new()))),
        }
    }

    /// The stored hard state.
    pub fn hard_state(&self) -> HardState {
        self.inner.rl().hard_state().clone()
    }
}

impl LogStore for MemoryStore {
    fn append(&mut self, entries: &[Entry]) -> Result<(), Error> {
        self.inner
            .wl()
            .append(entries)
            .map_err(|source| Error::Raft {
                op: "append",
                source,
            })
    }

    fn set_hard_state(&mut self, hard_state: &HardState) -> Result<(), Error> {
        self.inner.wl().set_hardstate(hard_state.clone());
        Ok(())
    }

    fn apply_snapshot(&mut self, snapshot: Snapshot) -> Result<(), Error> {
        self.inner
            .wl()
            .apply_snapshot(snapshot)
            .map_err(|source| Error::Raft {
                op: "apply snapshot",
                source,
            })
    }
}

/// Implements `raft::Storage` for `$store` by asking its in-memory copy,
/// the `MemStorage` in field `$field`: every store answers reads from
/// memory and differs only in what it writes.
macro_rules! storage_reads_from {
    ($store:ty, $field:ident) => {
        impl raft::Storage for $store {
            fn initial_state(&self) -> raft::Result<raft::RaftState> {
                self.$field.initial_state()
            }
            fn entries(
                &self,
                low: u64,
                high: u64,
                max_size: impl Into<Option<u64>>,
                context: raft::GetEntriesContext,
            ) -> raft::Result<Vec<raft::eraftpb::Entry>> {
                self.$field.entries(low, high, max_size, context)
            }
            fn term(&self, index: u64) -> raft::Result<u64> {
                self.$field.term(index)
            }
            fn first_index(&self) -> raft::Result<u64> {
                self.$field.first_index()
            }
            fn last_index(&self) -> raft::Result<u64> {
                self.$field.last_index()
            }
            fn snapshot(
                &self,
                request_index: u64,
                to: u64,
            ) -> raft::Result<raft::eraftpb::Snapshot> {
                self.$field.snapshot(request_index, to)
            }
        }
    };
}
pub(crate) use storage_reads_from;

storage_reads_from!(MemoryStore, inner);
