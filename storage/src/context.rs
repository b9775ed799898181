//! The per-core storage context: what the logs of one core (one glommio
//! executor) share. Its journal registry (one journal per data directory),
//! its filesystem sync sharer (one `syncfs` group per filesystem), the
//! budgets its logs divide among themselves (batch cache, journal, read
//! ahead) and its [`Clock`]. The broker makes one per core and opens every
//! log of that core with it; a test can run several on one executor, each
//! behaving as a core of its own.
//!
//! A `Context` is a cheap handle (an `Rc`); clones share everything. It is
//! not `Send`: it lives and dies with its core.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::rc::Rc;

use crate::clock::{Clock, SystemClock};
use crate::fs_sync::FsSyncs;
use crate::journal::{self, Registry};
use crate::limits::{JOURNAL_CHUNK_BYTES_DEFAULT, JOURNAL_QUEUED_BYTES_MAX_DEFAULT};

/// The settings of a context that are not per log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextConfig {
    /// The size each of the journal's two chunk files may grow to
    /// (`strom.journal.chunk.bytes.max`; rounded up to a page, at least
    /// 1 MiB).
    pub journal_chunk_bytes_max: u64,
    /// Record bytes that may wait for the journal's next write before the
    /// logs write small appends to their segments instead (see
    /// [`JOURNAL_QUEUED_BYTES_MAX_DEFAULT`]).
    pub journal_queued_bytes_max: usize,
}

impl Default for ContextConfig {
    fn default() -> Self {
        Self {
            journal_chunk_bytes_max: JOURNAL_CHUNK_BYTES_DEFAULT,
            journal_queued_bytes_max: JOURNAL_QUEUED_BYTES_MAX_DEFAULT,
        }
    }
}

/// One core's storage context; clones share it.
#[derive(Clone)]
pub struct Context {
    shared: Rc<Shared>,
}

pub(crate) struct Shared {
    pub(crate) clock: Rc<dyn Clock>,
    pub(crate) journals: Registry,
    pub(crate) fs_syncs: Rc<FsSyncs>,
    /// Logs open with this context (their cache and journal shares).
    pub(crate) open_logs: Cell<usize>,
    /// Bytes being read ahead by this context's logs.
    pub(crate) read_ahead_bytes: Cell<usize>,
    /// Devices probed for glommio's polled-I/O check (see
    /// `file::probe_device`).
    pub(crate) probed_devices: RefCell<HashSet<u64>>,
}

impl Default for Context {
    /// The system clock and the default settings.
    fn default() -> Self {
        Self::new(ContextConfig::default(), Rc::new(SystemClock::default()))
    }
}

impl Context {
    pub fn new(config: ContextConfig, clock: Rc<dyn Clock>) -> Self {
        let fs_syncs = Rc::new(FsSyncs::default());
        let journals = Registry::new(
            config.journal_chunk_bytes_max,
            config.journal_queued_bytes_max,
            fs_syncs.clone(),
        );
        Self {
            shared: Rc::new(Shared {
                clock,
                journals,
                fs_syncs,
                open_logs: Cell::new(0),
                read_ahead_bytes: Cell::new(0),
                probed_devices: RefCell::new(HashSet::new()),
            }),
        }
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// The core's clock.
    pub fn clock(&self) -> &Rc<dyn Clock> {
        &self.shared.clock
    }

    /// What this context's journals did so far.
    pub fn journal_counts(&self) -> journal::Counts {
        self.shared.journals.counts()
    }

    /// Record bytes waiting for this context's next journal writes.
    pub fn journal_queued_bytes(&self) -> usize {
        self.shared.journals.queued_bytes()
    }

    /// `syncfs` calls finished for this context's logs, over every
    /// filesystem.
    pub fn filesystem_syncs(&self) -> u64 {
        self.shared.fs_syncs.finished()
    }

    /// Logs open with this context.
    pub fn open_logs(&self) -> usize {
        self.shared.open_logs.get()
    }

    /// Bytes of the read-ahead budget ([`crate::limits::READ_AHEAD_BYTES_MAX`])
    /// in use.
    pub fn read_ahead_bytes(&self) -> usize {
        self.shared.read_ahead_bytes.get()
    }
}
