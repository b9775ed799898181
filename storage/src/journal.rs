//! The core's journal: one O_DIRECT write and one `fdatasync` per sync round
//! make the small appends of every partition of a core (of a storage
//! [`crate::Context`]) durable, instead of one write per partition into its
//! segment file.
//!
//! A log under `flush.policy=always` whose appends stay small leaves them
//! in memory (the batch cache serves readers) and, with each append, asks
//! its context's journal for the next round ([`Journal::want`]); the round
//! takes the bytes of every log that asked as it starts, each as a record:
//! segment path, file position, bytes (group commit: appends made while a
//! round runs go into the next one). A log a round cannot take hands its
//! record over from a sync round of its own ([`Journal::enqueue`]). The
//! segment files are written later, in large writes, when a log has
//! gathered enough, rolls, closes, or the journal needs the space back.
//!
//! On disk a journal is two chunk files, `__journal/<n>-0.journal` and
//! `<n>-1.journal`, used in turn. Each starts with a header page holding the
//! chunk's sequence number; records follow, each carrying that number and a
//! CRC. Every write ends on a page boundary (a padding record fills the
//! rest of its last page), so the next write starts on a fresh page and
//! the records of a round go out from the buffer they were encoded into.
//! When the active chunk is full the journal moves to the other one,
//! which must be *retired* first: every log with records in it has written
//! those bytes to its segment file and a `syncfs` made them durable. The
//! chunk just left is retired in the background at once, so appends only
//! wait for it when a whole chunk fills before that finishes.
//!
//! At start, before any log of a data directory opens, [`replay_unless_live`]
//! applies every valid record of every journal found there to its segment
//! file (in chunk order; a *tombstone* record, written before a log is
//! deleted or truncated, cancels its earlier records) and then removes the
//! journals. Segment recovery then scans the files as after any crash:
//! replay only puts back bytes that were acknowledged.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom, Write};

use std::path::{Path, PathBuf};
use std::rc::{Rc, Weak};
use std::sync::Mutex;

use glommio::io::{DmaBuffer, DmaFile};
use tracing::{info, warn};

use crate::error::{IoContext, Result, StorageError};
use crate::file::{self, PAGE};
use crate::fs_sync::FsSyncs;
use crate::group_commit::GroupCommit;
use crate::limits::{
    JOURNAL_BUFFER_BYTES, JOURNAL_CHUNK_BYTES_MAX, JOURNAL_CHUNK_BYTES_MIN,
    JOURNAL_CHUNK_BYTES_START, JOURNAL_CHUNK_GROW_WITHIN_MS, JOURNAL_SKIP_MS,
};
use crate::signal::Signal;

/// Directory of the journals inside a data directory.
pub const DIR_NAME: &str = "__journal";
const MAGIC: &[u8; 8] = b"STROMJNL";
/// Version 2 added padding records (version 1 journals are still read).
const VERSION: u32 = 2;
/// Record frame: length, CRC, chunk sequence, kind, path length.
const RECORD_HEAD: usize = 4 + 4 + 8 + 1 + 2;
const KIND_DATA: u8 = 1;
const KIND_TOMBSTONE: u8 = 2;
/// Fills the rest of a write's last page; replay skips it.
const KIND_PAD: u8 = 3;
/// The most a padding record takes: the rest of a page, or a page more
/// when that rest is shorter than a record's head.
const PAD_MAX: usize = PAGE as usize + RECORD_HEAD;

/// One context's journals (one per data directory) and the bounds they
/// share.
pub(crate) struct Registry {
    journals: RefCell<HashMap<PathBuf, Rc<Journal>>>,
    /// Data directories whose journal a task of this context is creating;
    /// `created` wakes the tasks that wait for it.
    creating: RefCell<HashSet<PathBuf>>,
    created: Signal,
    /// The journals this context keeps, by data directory and journal
    /// number: live (see [`LIVE`]) until the registry is dropped with its
    /// context, or its thread ends.
    live: RefCell<Vec<(PathBuf, u64)>>,
    budget: Rc<Budget>,
    fs_syncs: Rc<FsSyncs>,
}

/// The bounds a context's journals share.
struct Budget {
    /// The size chunks may grow to.
    chunk_bytes_max: Cell<u64>,
    /// The smaller chunk of the context's journal, or the size its next
    /// journal starts with: what bounds a record.
    chunk_bytes_now: Cell<u64>,
    /// Record bytes queued for the next writes of the context's journals.
    queued: Cell<usize>,
    queued_max: Cell<usize>,
    /// Until then the context makes no journal: the last attempt found too
    /// little space, and logs sync their own segment files meanwhile.
    skipped_until: Cell<Option<std::time::Instant>>,
}

impl Budget {
    /// Whether the context has no journal for want of space, for now.
    fn skipped(&self) -> bool {
        match self.skipped_until.get() {
            Some(until) if std::time::Instant::now() < until => true,
            Some(_) => {
                self.skipped_until.set(None);
                false
            }
            None => false,
        }
    }

    /// The largest record a log may hand over in one round: a quarter of
    /// the smaller chunk, so a record always fits in an empty one.
    fn record_bytes_max(&self) -> u64 {
        self.chunk_bytes_now.get() / 4
    }

    /// Capacity of a record buffer: [`JOURNAL_BUFFER_BYTES`], or less with
    /// small chunks (a buffer is written into one chunk).
    fn buffer_bytes(&self) -> usize {
        JOURNAL_BUFFER_BYTES.min((self.record_bytes_max() as usize).max(PAGE as usize))
    }

    /// Notes that the context goes without a journal for
    /// [`JOURNAL_SKIP_MS`].
    fn skip_for_a_while(&self) {
        self.skipped_until.set(Some(
            std::time::Instant::now() + std::time::Duration::from_millis(JOURNAL_SKIP_MS),
        ));
    }
}

impl Registry {
    /// `chunk_bytes_max` is rounded up to a page, at least
    /// [`JOURNAL_CHUNK_BYTES_MIN`].
    pub(crate) fn new(
        chunk_bytes_max: u64,
        queued_bytes_max: usize,
        fs_syncs: Rc<FsSyncs>,
    ) -> Self {
        let chunk_bytes_max = file::align_up(chunk_bytes_max.max(JOURNAL_CHUNK_BYTES_MIN));
        Self {
            journals: RefCell::new(HashMap::new()),
            creating: RefCell::new(HashSet::new()),
            created: Signal::default(),
            live: RefCell::new(Vec::new()),
            budget: Rc::new(Budget {
                chunk_bytes_max: Cell::new(chunk_bytes_max),
                chunk_bytes_now: Cell::new(chunk_bytes_max.min(JOURNAL_CHUNK_BYTES_START)),
                queued: Cell::new(0),
                queued_max: Cell::new(queued_bytes_max),
                skipped_until: Cell::new(None),
            }),
            fs_syncs,
        }
    }

    /// Whether the context's next journal write has room for more records
    /// (see [`crate::limits::JOURNAL_QUEUED_BYTES_MAX_DEFAULT`]).
    pub(crate) fn has_room(&self) -> bool {
        self.budget.queued.get() < self.budget.queued_max.get() && !self.budget.skipped()
    }

    /// The largest record a log may hand over in one round.
    pub(crate) fn record_bytes_max(&self) -> u64 {
        self.budget.record_bytes_max()
    }

    /// Record bytes waiting for the next journal writes.
    pub(crate) fn queued_bytes(&self) -> usize {
        self.budget.queued.get()
    }

    /// What the context's journals did so far.
    pub(crate) fn counts(&self) -> Counts {
        self.journals
            .borrow()
            .values()
            .fold(Counts::default(), |c, j| {
                let s = j.state.borrow();
                Counts {
                    records: c.records + s.records,
                    writes: c.writes + s.writes,
                    bytes: c.bytes + s.bytes,
                }
            })
    }

    /// The context's journal for `data_dir`, created on first use.
    pub(crate) async fn for_data_dir(&self, data_dir: &Path) -> Result<Rc<Journal>> {
        self.created
            .wait_until(|| !self.creating.borrow().contains(data_dir))
            .await;
        if let Some(found) = self.existing(data_dir) {
            return Ok(found);
        }
        if self.budget.skipped() {
            return Err(skip(
                &self.budget,
                data_dir,
                file::free_bytes(data_dir).unwrap_or(0),
            ));
        }
        self.creating.borrow_mut().insert(data_dir.to_path_buf());
        let result = self.create(data_dir).await;
        self.creating.borrow_mut().remove(data_dir);
        self.created.notify_all();
        result
    }

    /// The context's journal for `data_dir`, if one was created.
    pub(crate) fn existing(&self, data_dir: &Path) -> Option<Rc<Journal>> {
        self.journals.borrow().get(data_dir).cloned()
    }
}

impl Drop for Registry {
    /// The context is gone: its journal files are a crashed process's now,
    /// for the next log opening there to replay.
    fn drop(&mut self) {
        end_live(&self.live.borrow());
    }
}

thread_local! {
    /// The journals kept on this thread, whose liveness ends with the
    /// thread at the latest. glommio leaks the tasks of an executor that
    /// ended (a crash, for the tests), and with them the logs that hold
    /// their context: the context may never drop, so its registry's own
    /// `Drop` cannot be all. Not per-core state: only the thread's end.
    static THREAD_LIVE: ThreadLive = const { ThreadLive(RefCell::new(Vec::new())) };
}

/// The journals kept on this thread, by data directory and number.
struct ThreadLive(RefCell<Vec<(PathBuf, u64)>>);

impl Drop for ThreadLive {
    /// The thread is gone: its journal files are a crashed process's now.
    fn drop(&mut self) {
        end_live(&self.0.borrow());
    }
}

/// Notes journal `id` in `data_dir` as live.
fn mark_live(data_dir: &Path, id: u64) {
    LIVE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .entry(data_dir.to_path_buf())
        .or_default()
        .insert(id);
}

/// Ends the liveness of `journals` (ending it twice is harmless).
fn end_live(journals: &[(PathBuf, u64)]) {
    if let Some(map) = LIVE.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        for (dir, id) in journals {
            if let Some(ids) = map.get_mut(dir) {
                ids.remove(id);
                if ids.is_empty() {
                    map.remove(dir);
                }
            }
        }
    }
}

/// Journal numbers handed out in this process (file names stay unique when
/// several cores journal into one data directory). Process-wide: the
/// names must differ across every context of the process.
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Data directories where this process keeps a journal: their journal
/// files are live and must not be replayed. Process-wide on purpose: the
/// first log a core opens in a data directory replays the journals found
/// there, and must not replay (and remove) the live journal another core
/// (another context, on another thread) has just created there.
static LIVE: Mutex<Option<HashMap<PathBuf, HashSet<u64>>>> = Mutex::new(None);

/// What a context's journals did so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Records (one per log per round, and tombstones) written.
    pub records: u64,
    /// Writes, each followed by an `fdatasync`.
    pub writes: u64,
    /// Record bytes written.
    pub bytes: u64,
}

/// A log with records in a chunk, and what retiring the chunk needs of it.
pub(crate) trait Participant {
    /// Asks the log at once to write out every byte up to `offset` to its
    /// segment files; the future resolves when it has (or the log no longer
    /// needs it: closed, truncated, deleted, failed).
    fn write_out(self: Rc<Self>, offset: u64) -> futures_lite::future::BoxedLocal<()>;

    /// Called as a round starts, for a log that asked with
    /// [`Journal::want`]: puts every byte of the log not yet durable into
    /// this round (through [`Journal::enqueue`]) and returns true, or
    /// returns false when it cannot (the log then syncs its own way).
    fn capture(self: Rc<Self>, journal: &Journal) -> bool;

    /// The round that took what `capture` put in has ended: its records
    /// are durable, or the round failed with this message. Also told to a
    /// log that asked for a round the journal can no longer run.
    fn round_ended(&self, outcome: std::result::Result<(), &str>);
}

struct Chunk {
    file: Rc<DmaFile>,
    path: PathBuf,
    capacity: u64,
    /// Sequence number in the header; 0 before first use.
    seq: u64,
    /// Next record position.
    end: u64,
    /// Logs with records here, and the offset each must have written out.
    participants: Vec<(Weak<dyn Participant>, u64)>,
    /// Free: nothing here is needed any more (or never was).
    free: bool,
    /// When the chunk was last started (its header written).
    started: std::time::Instant,
}

struct State {
    chunks: [Chunk; 2],
    active: usize,
    next_seq: u64,
    /// Encoded records waiting for the next write.
    pending: Pending,
    pending_participants: Vec<(Weak<dyn Participant>, u64)>,
    /// Logs whose bytes the next round takes as it starts.
    wanted: Vec<Weak<dyn Participant>>,
    /// A task runs rounds while logs want them.
    driving: bool,
    records: u64,
    writes: u64,
    bytes: u64,
}

/// One context's journal for one data directory.
pub(crate) struct Journal {
    data_dir: PathBuf,
    /// The bounds shared with the context's other journals.
    budget: Rc<Budget>,
    fs_syncs: Rc<FsSyncs>,
    state: RefCell<State>,
    /// One write (with its sync) at a time; its signal also tells of
    /// chunks retired.
    group: GroupCommit,
}

/// A record of one log for the next journal write.
pub(crate) enum Record<'a, F: FnOnce(&mut [u8])> {
    /// `len` bytes, which `fill` writes, belong at `position` in the segment
    /// file `path` (relative to the data directory).
    Data {
        path: &'a str,
        position: u64,
        len: usize,
        fill: F,
    },
    /// Earlier records for files under `dir` are void.
    Tombstone { dir: &'a str },
}

/// A tombstone's type: it has no bytes to fill.
pub(crate) type NoFill = fn(&mut [u8]);

impl<'a> Record<'a, NoFill> {
    pub(crate) fn tombstone(dir: &'a str) -> Self {
        Record::Tombstone { dir }
    }
}

impl<F: FnOnce(&mut [u8])> Record<'_, F> {
    /// Bytes the record takes.
    fn encoded_len(&self) -> usize {
        match self {
            Record::Data { path, len, .. } => RECORD_HEAD + path.len() + 8 + len,
            Record::Tombstone { dir } => RECORD_HEAD + dir.len(),
        }
    }

    /// Writes the record into `out` (exactly [`Record::encoded_len`]
    /// bytes), its bytes filled in place; CRC and sequence are set when it
    /// is written ([`seal`]).
    fn encode(self, out: &mut [u8]) {
        let (kind, path) = match &self {
            Record::Data { path, .. } => (KIND_DATA, *path),
            Record::Tombstone { dir } => (KIND_TOMBSTONE, *dir),
        };
        encode_head(out, kind, path);
        if let Record::Data { position, fill, .. } = self {
            let at = RECORD_HEAD + path.len();
            out[at..at + 8].copy_from_slice(&position.to_le_bytes());
            fill(&mut out[at + 8..]);
        }
    }
}

/// A record's head: length (all of `out`), CRC and sequence (zero until
/// [`seal`]), kind, path.
fn encode_head(out: &mut [u8], kind: u8, path: &str) {
    let len = out.len() as u32;
    out[..4].copy_from_slice(&len.to_le_bytes());
    out[4..16].fill(0);
    out[16] = kind;
    out[17..19].copy_from_slice(&(path.len() as u16).to_le_bytes());
    out[RECORD_HEAD..RECORD_HEAD + path.len()].copy_from_slice(path.as_bytes());
}

/// Stamps an encoded record with its chunk's sequence and its CRC.
fn seal(record: &mut [u8], seq: u64) {
    record[8..16].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32fast::hash(&record[8..]);
    record[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// Bytes a write of `len` record bytes takes on disk: up to the next page,
/// or a page more when the rest is too short for a padding record.
fn padded_len(len: usize) -> usize {
    let padded = file::align_up(len as u64) as usize;
    if padded > len && padded - len < RECORD_HEAD {
        padded + PAGE as usize
    } else {
        padded
    }
}

/// Seals the records of `buffer[..len]` (starting at `starts`) and pads
/// them to [`padded_len`] with a padding record; returns that length.
fn seal_all(buffer: &mut DmaBuffer, len: usize, starts: &[usize], seq: u64) -> usize {
    let out = buffer.as_bytes_mut();
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(len);
        seal(&mut out[start..end], seq);
    }
    let padded = padded_len(len);
    if padded > len {
        encode_pad(&mut out[len..padded], seq);
    }
    padded
}

/// Writes all of `buffer` at `position`.
async fn write_whole(file: Rc<DmaFile>, buffer: DmaBuffer, position: u64) -> std::io::Result<()> {
    let padded = buffer.len();
    match file.write_at(buffer, position).await {
        Ok(written) if written == padded => Ok(()),
        Ok(_) => Err(std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            "short journal write",
        )),
        Err(e) => Err(e.into()),
    }
}

/// A sealed padding record filling all of `out` (at least a record head).
fn encode_pad(out: &mut [u8], seq: u64) {
    encode_head(out, KIND_PAD, "");
    out[RECORD_HEAD..].fill(0);
    seal(out, seq);
}

/// Records waiting for the next write, encoded straight into memory that
/// write can send as it is (aligned for O_DIRECT): a round's bytes are
/// copied once, from the logs' caches into these buffers.
#[derive(Default)]
struct Pending {
    buffers: Vec<RecordBuffer>,
    /// Record bytes in all of them.
    len: usize,
}

/// Encoded records in one buffer, written as one O_DIRECT write.
struct RecordBuffer {
    buffer: DmaBuffer,
    /// Bytes the records take.
    len: usize,
    /// Where each record starts.
    starts: Vec<usize>,
}

impl Pending {
    /// `n` more bytes, for a record to be encoded into: at the end of the
    /// last buffer, or in a new one. A buffer keeps room for a padding
    /// record after its records.
    fn extend(&mut self, n: usize, buffer_bytes: usize) -> &mut [u8] {
        let fits = self
            .buffers
            .last()
            .is_some_and(|b| b.len + n + PAD_MAX <= b.buffer.len());
        if !fits {
            let capacity = (n + PAD_MAX).max(buffer_bytes);
            self.buffers.push(RecordBuffer {
                buffer: glommio::allocate_dma_buffer(file::align_up(capacity as u64) as usize),
                len: 0,
                starts: Vec::new(),
            });
        }
        self.len += n;
        let last = self.buffers.last_mut().expect("pushed above");
        let at = last.len;
        last.starts.push(at);
        last.len += n;
        &mut last.buffer.as_bytes_mut()[at..at + n]
    }
}

fn header_page(seq: u64) -> Vec<u8> {
    let mut page = vec![0u8; PAGE as usize];
    page[..8].copy_from_slice(MAGIC);
    page[8..12].copy_from_slice(&VERSION.to_le_bytes());
    page[12..20].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32fast::hash(&page[..20]);
    page[20..24].copy_from_slice(&crc.to_le_bytes());
    page
}

/// Notes that the context goes without a journal for [`JOURNAL_SKIP_MS`],
/// and the error saying why.
fn skip(budget: &Budget, data_dir: &Path, free: u64) -> StorageError {
    budget.skip_for_a_while();
    warn!(dir = %data_dir.display(), free_bytes = free, "journal skipped: too little space; logs sync their own segments");
    StorageError::NoSpace {
        op: "create journal",
        path: data_dir.join(DIR_NAME),
        position: 0,
        source: std::io::Error::new(
            std::io::ErrorKind::StorageFull,
            format!("{free} bytes free, too few for two journal chunks"),
        ),
    }
}

impl Registry {
    async fn create(&self, data_dir: &Path) -> Result<Rc<Journal>> {
        let dir = data_dir.join(DIR_NAME);
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Noted before the files exist, so a log opening with another
        // context (another core) never replays (and removes) them.
        mark_live(data_dir, id);
        self.live.borrow_mut().push((data_dir.to_path_buf(), id));
        THREAD_LIVE.with(|t| t.0.borrow_mut().push((data_dir.to_path_buf(), id)));
        // The two chunks take at most a quarter of what is free beside the
        // reserve, or none is made: a journal must not be what fills the
        // disk, and the segments it is written out to need the rest.
        let free = file::free_bytes(data_dir).unwrap_or(u64::MAX);
        let fits = file::align_down(free.saturating_sub(file::SPACE_RESERVE_BYTES) / 8);
        let capacity = self.budget.chunk_bytes_now.get().min(fits);
        if capacity < JOURNAL_CHUNK_BYTES_MIN {
            return Err(skip(&self.budget, data_dir, free));
        }
        std::fs::create_dir_all(&dir).ctx("create directory", &dir, 0)?;
        let mut chunks = Vec::with_capacity(2);
        for k in 0..2 {
            let path = dir.join(format!("{id}-{k}.journal"));
            let file = file::open_rw(&path).await?;
            file.truncate(0).await.ctx("truncate", &path, 0)?;
            // Reserve the space now: a journal write never fails for want
            // of it. An empty header marks the chunk unused.
            if let Err(e) = file::preallocate(&file, &path, 0, capacity).await {
                if e.is_out_of_space() {
                    let _ = file.close().await;
                    for k in 0..2 {
                        let _ = std::fs::remove_file(dir.join(format!("{id}-{k}.journal")));
                    }
                    self.budget.skip_for_a_while();
                }
                return Err(e);
            }
            // Chunk 1 starts as the active one, unused: the first write
            // moves to chunk 0 and writes its header.
            chunks.push(Chunk {
                file: Rc::new(file),
                path,
                capacity,
                seq: 0,
                end: PAGE,
                participants: Vec::new(),
                free: true,
                started: std::time::Instant::now(),
            });
        }
        file::sync_dir(&dir).await?;
        self.budget.chunk_bytes_now.set(capacity);
        let [a, b]: [Chunk; 2] = chunks.try_into().ok().expect("two chunks");
        let journal = Rc::new(Journal {
            data_dir: data_dir.to_path_buf(),
            budget: self.budget.clone(),
            fs_syncs: self.fs_syncs.clone(),
            state: RefCell::new(State {
                chunks: [a, b],
                active: 1,
                next_seq: 1,
                pending: Pending::default(),
                pending_participants: Vec::new(),
                wanted: Vec::new(),
                driving: false,
                records: 0,
                writes: 0,
                bytes: 0,
            }),
            // A write abandoned half way took records nobody can account
            // for: the journal fails rather than guess.
            group: GroupCommit::new("journal write", true),
        });
        self.journals
            .borrow_mut()
            .insert(data_dir.to_path_buf(), journal.clone());
        info!(dir = %dir.display(), id, chunk_bytes = capacity, "journal created");
        Ok(journal)
    }
}

impl Journal {
    /// Path of a log's file relative to the data directory.
    pub(crate) fn relative<'p>(&self, path: &'p Path) -> Option<&'p str> {
        path.strip_prefix(&self.data_dir).ok()?.to_str()
    }

    /// Adds `record` to the next write; [`Journal::durable`] with the
    /// returned round resolves once a write holding it is durable.
    /// `participant` must write out up to its offset before the chunk
    /// holding the record can be reused.
    pub(crate) fn enqueue<F: FnOnce(&mut [u8])>(
        &self,
        record: Record<'_, F>,
        participant: Option<(Weak<dyn Participant>, u64)>,
    ) -> std::io::Result<u64> {
        let need = self.group.next_round()?;
        let mut state = self.state.borrow_mut();
        let added = record.encoded_len();
        record.encode(state.pending.extend(added, self.budget.buffer_bytes()));
        self.budget.queued.set(self.budget.queued.get() + added);
        if let Some(p) = participant {
            state.pending_participants.push(p);
        }
        Ok(need)
    }

    /// Resolves once write round `need` (from [`Journal::enqueue`]) is
    /// durable.
    pub(crate) async fn durable(self: &Rc<Self>, need: u64) -> std::io::Result<()> {
        self.group.wait_for(need, || self.write_pending()).await
    }

    /// Asks for `log`'s bytes to go into the next round, which takes them
    /// as it starts ([`Participant::capture`]) and tells the log when they
    /// are durable ([`Participant::round_ended`]). Nobody waits for the
    /// round here: a task of the journal runs rounds while logs want them.
    /// Bytes appended while a round runs so go into the very next one; a
    /// log that handed over a record when its own sync round started
    /// (see [`Journal::enqueue`]) often missed it, as that start came
    /// only after the previous round had woken it.
    pub(crate) fn want(self: &Rc<Self>, log: Weak<dyn Participant>) -> std::io::Result<()> {
        self.group.next_round()?;
        let start = {
            let mut state = self.state.borrow_mut();
            state.wanted.push(log);
            !std::mem::replace(&mut state.driving, true)
        };
        if start {
            // glommio runs a spawned task's first poll at once.
            glommio::spawn_local(self.clone().drive()).detach();
        }
        Ok(())
    }

    /// Runs rounds until no log wants one. Each round starts once every
    /// task ready to run has run: the other partitions of the request
    /// being appended, and requests that arrived meanwhile, join it.
    async fn drive(self: Rc<Self>) {
        loop {
            futures_lite::future::yield_now().await;
            if self.state.borrow().wanted.is_empty() {
                self.state.borrow_mut().driving = false;
                return;
            }
            let outcome = match self.group.next_round() {
                Ok(need) => self.durable(need).await,
                Err(e) => Err(e),
            };
            if let Err(e) = outcome {
                // The group failed: no round will take what is wanted.
                let wanted = std::mem::take(&mut self.state.borrow_mut().wanted);
                let message = e.to_string();
                for log in wanted.iter().filter_map(Weak::upgrade) {
                    log.round_ended(Err(&message));
                }
            }
        }
    }

    /// Writes every pending record (moving to the other chunk when the
    /// active one is full) and syncs, after taking the bytes of the logs
    /// that want this round; tells those logs how it ended.
    async fn write_pending(self: &Rc<Self>) -> std::io::Result<()> {
        let wanted = std::mem::take(&mut self.state.borrow_mut().wanted);
        let mut captured = Captured(Vec::with_capacity(wanted.len()));
        for log in wanted.iter().filter_map(Weak::upgrade) {
            if log.clone().capture(self) {
                captured.0.push(log);
            }
        }
        let outcome = self.write_queued().await;
        let message = outcome.as_ref().err().map(|e| e.to_string());
        for log in std::mem::take(&mut captured.0) {
            log.round_ended(message.as_deref().map_or(Ok(()), Err));
        }
        outcome
    }

    /// Writes every pending record (moving to the other chunk when the
    /// active one is full) and syncs.
    async fn write_queued(self: &Rc<Self>) -> std::io::Result<()> {
        let (pending, participants) = {
            let mut state = self.state.borrow_mut();
            let pending = std::mem::take(&mut state.pending);
            let queued = &self.budget.queued;
            queued.set(queued.get().saturating_sub(pending.len));
            (pending, std::mem::take(&mut state.pending_participants))
        };
        // Whoever has records in a chunk must write them out before it is
        // reused; a write that moves on to the other chunk notes its
        // participants on both.
        {
            let mut state = self.state.borrow_mut();
            let active = state.active;
            if state.chunks[active].seq != 0 {
                state.chunks[active]
                    .participants
                    .extend(participants.iter().cloned());
            }
        }
        let mut buffers = pending.buffers.into_iter().peekable();
        while buffers.peek().is_some() {
            // The buffers that fit in the active chunk, each padded to a
            // page, go out together, then one sync.
            let (mut room, capacity) = {
                let state = self.state.borrow();
                let chunk = &state.chunks[state.active];
                let room = if chunk.seq == 0 {
                    0
                } else {
                    chunk.capacity - chunk.end
                };
                (room, chunk.capacity)
            };
            let mut batch = Vec::new();
            while let Some(next) = buffers.peek() {
                let padded = padded_len(next.len) as u64;
                if padded > room {
                    break;
                }
                room -= padded;
                batch.push(buffers.next().expect("peeked"));
            }
            if batch.is_empty() {
                let len = buffers.peek().map_or(0, |b| b.len);
                if padded_len(len) as u64 > capacity - PAGE {
                    return Err(std::io::Error::other(format!(
                        "{len} bytes of journal records do not fit in a chunk of {capacity}"
                    )));
                }
                self.switch_chunk().await?;
                let mut state = self.state.borrow_mut();
                let active = state.active;
                state.chunks[active]
                    .participants
                    .extend(participants.iter().cloned());
                continue;
            }
            self.write_records(batch).await?;
        }
        Ok(())
    }

    /// Writes `buffers` one after the other at the active chunk's end, each
    /// padded to a page (all submitted at once), then syncs the chunk.
    async fn write_records(&self, buffers: Vec<RecordBuffer>) -> std::io::Result<()> {
        let (file, path, start, writes) = {
            let state = self.state.borrow();
            let chunk = &state.chunks[state.active];
            debug_assert_eq!(chunk.end % PAGE, 0, "journal writes start on a page");
            let mut position = chunk.end;
            let mut writes = Vec::with_capacity(buffers.len());
            for RecordBuffer {
                mut buffer,
                len,
                starts,
            } in buffers
            {
                let padded = seal_all(&mut buffer, len, &starts, chunk.seq);
                buffer.trim_to_size(padded);
                writes.push((position, buffer, len, starts.len()));
                position += padded as u64;
            }
            (chunk.file.clone(), chunk.path.clone(), chunk.end, writes)
        };
        let (mut end, mut records, mut bytes) = (start, 0, 0);
        for (position, buffer, len, count) in &writes {
            end = position + buffer.len() as u64;
            records += *count as u64;
            bytes += *len as u64;
        }
        // A round's buffers go out side by side: all but the last from
        // tasks of their own, the last (usually the only one) from here.
        let mut writes = writes
            .into_iter()
            .map(|(position, buffer, _, _)| (position, buffer));
        let last = writes.next_back().expect("write_records gets a buffer");
        let tasks: Vec<_> = writes
            .map(|(position, buffer)| {
                glommio::spawn_local(write_whole(file.clone(), buffer, position))
            })
            .collect();
        let mut outcome = write_whole(file.clone(), last.1, last.0).await;
        for task in tasks {
            let other = task.await;
            outcome = outcome.and(other);
        }
        outcome.map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("journal write to {}: {e}", path.display()),
            )
        })?;
        file.fdatasync().await?;
        let mut state = self.state.borrow_mut();
        state.writes += 1;
        state.records += records;
        state.bytes += bytes;
        let active = state.active;
        state.chunks[active].end = end;
        Ok(())
    }

    /// Moves to the other chunk once it is retired, writes its new header,
    /// and starts retiring the one left.
    async fn switch_chunk(self: &Rc<Self>) -> std::io::Result<()> {
        let other = 1 - self.state.borrow().active;
        self.group
            .signal()
            .wait_until(|| self.state.borrow().chunks[other].free || self.group.failure().is_some())
            .await;
        self.grow_before_use(other).await;
        let (left, seq, file, path) = {
            if let Some(message) = self.group.failure() {
                return Err(std::io::Error::other(message));
            }
            let mut state = self.state.borrow_mut();
            let seq = state.next_seq;
            state.next_seq += 1;
            let left = state.active;
            state.active = other;
            let chunk = &mut state.chunks[other];
            chunk.seq = seq;
            chunk.end = PAGE;
            chunk.free = false;
            chunk.participants.clear();
            chunk.started = std::time::Instant::now();
            (left, seq, chunk.file.clone(), chunk.path.clone())
        };
        // The header goes out before any record of the new sequence; the
        // records' write syncs both. Until then the chunk's old records
        // (all retired) fail the sequence check.
        let mut buffer = file.alloc_dma_buffer(PAGE as usize);
        buffer.as_bytes_mut().copy_from_slice(&header_page(seq));
        let written = file.write_at(buffer, 0).await?;
        if written != PAGE as usize {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                format!("short journal header write to {}", path.display()),
            ));
        }
        let journal = self.clone();
        glommio::spawn_local(async move {
            journal.retire(left).await;
        })
        .detach();
        Ok(())
    }

    /// Doubles free chunk `k` (up to the context's maximum, and as space
    /// allows) when the active chunk filled within [`JOURNAL_CHUNK_GROW_WITHIN_MS`]
    /// of its start. A chunk that cannot grow stays as it is.
    async fn grow_before_use(&self, k: usize) {
        let (file, path, capacity, want) = {
            let state = self.state.borrow();
            let filled = &state.chunks[state.active];
            let chunk = &state.chunks[k];
            let want =
                (2 * filled.capacity.max(chunk.capacity)).min(self.budget.chunk_bytes_max.get());
            if want <= chunk.capacity
                || filled.seq == 0
                || filled.started.elapsed().as_millis() >= u128::from(JOURNAL_CHUNK_GROW_WITHIN_MS)
            {
                return;
            }
            (chunk.file.clone(), chunk.path.clone(), chunk.capacity, want)
        };
        let Some(size) = file::preallocation_size(&path, capacity, capacity, want) else {
            return;
        };
        if size <= capacity
            || file::preallocate(&file, &path, capacity, size)
                .await
                .is_err()
        {
            return;
        }
        let mut state = self.state.borrow_mut();
        state.chunks[k].capacity = size;
        let smaller = state.chunks[0].capacity.min(state.chunks[1].capacity);
        self.budget.chunk_bytes_now.set(smaller);
        info!(path = %path.display(), chunk_bytes = size, "journal chunk grown");
    }

    /// Waits until every log with records in chunk `k` has written them to
    /// its segment, syncs the filesystem, and marks `k` free.
    async fn retire(&self, k: usize) {
        let participants = std::mem::take(&mut self.state.borrow_mut().chunks[k].participants);
        // One entry per log: the highest offset it must write out.
        let mut by_log: HashMap<*const (), (Rc<dyn Participant>, u64)> = HashMap::new();
        for (weak, offset) in participants {
            let Some(log) = weak.upgrade() else { continue };
            let key = Rc::as_ptr(&log) as *const ();
            let entry = by_log.entry(key).or_insert((log, offset));
            entry.1 = entry.1.max(offset);
        }
        let waits: Vec<_> = by_log
            .values()
            .map(|(log, offset)| log.clone().write_out(*offset))
            .collect();
        for wait in waits {
            wait.await;
        }
        drop(by_log);
        let result = match self.fs_syncs.for_dir(&self.data_dir) {
            Ok(sync) => sync.sync().await,
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => {
                self.state.borrow_mut().chunks[k].free = true;
                self.group.signal().notify_all();
            }
            Err(e) => {
                warn!(error = %e, "journal: could not sync the filesystem to retire a chunk");
                self.group
                    .fail(format!("syncfs failed while retiring a journal chunk: {e}"));
            }
        }
    }
}

/// The logs whose bytes a running round took: told the round failed
/// should it be abandoned before it ends.
struct Captured(Vec<Rc<dyn Participant>>);

impl Drop for Captured {
    fn drop(&mut self) {
        for log in self.0.drain(..) {
            log.round_ended(Err("a journal write was abandoned"));
        }
    }
}

impl Drop for Journal {
    /// Records never written no longer count against the context's room.
    fn drop(&mut self) {
        let queued = self.state.get_mut().pending.len;
        let budget = &self.budget.queued;
        budget.set(budget.get().saturating_sub(queued));
    }
}

/// What replaying a data directory's journals did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReplayReport {
    pub journals: usize,
    pub records: u64,
    pub bytes: u64,
    /// Records whose segment file no longer exists (deleted by retention).
    pub skipped: u64,
}

/// Replays the journals of `data_dir` before a log there opens, unless this
/// process journals there itself (then they are its own, live journals, and
/// every earlier one was replayed before the first was created).
pub(crate) fn replay_unless_live(data_dir: &Path) -> Result<()> {
    let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    if live.as_ref().is_some_and(|map| map.contains_key(data_dir)) {
        return Ok(());
    }
    let report = replay(data_dir)?;
    if report.journals > 0 {
        info!(
            data_dir = %data_dir.display(),
            journals = report.journals,
            records = report.records,
            bytes = report.bytes,
            skipped = report.skipped,
            "journal replayed into the segment files"
        );
    }
    drop(live);
    Ok(())
}

enum Op {
    Data {
        path: String,
        position: u64,
        bytes: Vec<u8>,
    },
    Tombstone {
        dir: String,
    },
}

/// One chunk file as replay read it.
struct ChunkRead {
    path: PathBuf,
    seq: u64,
    version: u32,
    ops: Vec<Op>,
    /// End of the valid records.
    end: u64,
    /// Why the records end at `end` when that is not a clean end (a
    /// write that did not end on a page, a damaged record of this
    /// chunk's sequence), and whether a valid record of the sequence
    /// follows at a later page (a later write: then the damage is not a
    /// torn tail).
    damage: Option<String>,
    valid_after: Option<u64>,
}

/// Why a chunk's header page is not a valid header, or `Ok(None)` for a
/// chunk never used (all zeros).
fn check_header(page: &[u8]) -> std::result::Result<Option<(u64, u32)>, String> {
    if page.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    if &page[..8] != MAGIC {
        return Err("the header page has no journal magic".to_string());
    }
    let crc = u32::from_le_bytes(page[20..24].try_into().expect("4 bytes"));
    if crc != crc32fast::hash(&page[..20]) {
        return Err("the header's CRC does not match".to_string());
    }
    let version = u32::from_le_bytes(page[8..12].try_into().expect("4 bytes"));
    if !(1..=VERSION).contains(&version) {
        return Err(format!(
            "journal version {version} is not known (this build reads 1 to {VERSION})"
        ));
    }
    let seq = u64::from_le_bytes(page[12..20].try_into().expect("8 bytes"));
    Ok(Some((seq, version)))
}

/// The record at `position` of `file` if it is a valid one of sequence
/// `seq` (checked with its CRC).
fn valid_record_at(file: &std::fs::File, position: u64, seq: u64) -> bool {
    use std::os::unix::fs::FileExt;
    let mut head = [0u8; RECORD_HEAD];
    if file.read_exact_at(&mut head, position).is_err() {
        return false;
    }
    let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
    if len < RECORD_HEAD
        || len as u64 > JOURNAL_CHUNK_BYTES_MAX
        || u64::from_le_bytes(head[8..16].try_into().expect("8 bytes")) != seq
    {
        return false;
    }
    let mut record = vec![0u8; len];
    if file.read_exact_at(&mut record, position).is_err() {
        return false;
    }
    let crc = u32::from_le_bytes(record[4..8].try_into().expect("4 bytes"));
    crc == crc32fast::hash(&record[8..])
}

/// Reads one chunk file: its sequence number and valid records, up to the
/// first record that is torn, damaged, of another sequence, or not there.
/// `None` for a chunk never used; an error for a damaged header, which
/// may stand before acknowledged records.
fn read_chunk(path: &Path) -> Result<Option<ChunkRead>> {
    let file = std::fs::File::open(path).ctx("open", path, 0)?;
    let file_bytes = file.metadata().ctx("stat", path, 0)?.len();
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let corrupt = |position: u64, reason: String| StorageError::Corrupt {
        path: path.to_path_buf(),
        position,
        reason,
    };
    let mut header = vec![0u8; PAGE as usize];
    let header_bytes = (file_bytes as usize).min(PAGE as usize);
    reader
        .read_exact(&mut header[..header_bytes])
        .ctx("read", path, 0)?;
    if header_bytes < PAGE as usize {
        // Created but never written (the header goes out as a whole page).
        if header[..header_bytes].iter().all(|&b| b == 0) {
            return Ok(None);
        }
        return Err(corrupt(
            0,
            format!("journal chunk of {file_bytes} bytes, shorter than its header page"),
        ));
    }
    let (seq, version) = match check_header(&header) {
        Ok(Some(header)) => header,
        Ok(None) => {
            // A chunk never used is all zeros: records after a blank
            // header mean the header was lost.
            let mut first = [0u8; 4];
            let blank = match reader.read_exact(&mut first) {
                Ok(()) => first == [0; 4],
                Err(_) => true,
            };
            if blank {
                return Ok(None);
            }
            return Err(corrupt(
                0,
                "the header page is blank but records follow it; acknowledged records may \
                 be in this chunk"
                    .to_string(),
            ));
        }
        Err(reason) => {
            return Err(corrupt(
                0,
                format!(
                    "{reason}; acknowledged records may be in this chunk, so it is not skipped"
                ),
            ))
        }
    };
    let mut ops = Vec::new();
    let mut position = PAGE;
    // Why the records stopped, when the stop is not a clean end.
    let mut damage: Option<String> = None;
    loop {
        let mut len = [0u8; 4];
        if reader.read_exact(&mut len).is_err() {
            break;
        }
        let len = u32::from_le_bytes(len) as usize;
        // At a page start, an impossible length (beyond the file, too) is
        // what an earlier use of the chunk left there: every write of
        // this use starts on a page, so it is the end of this use's
        // records (a valid record of this use after it is caught below).
        // Inside a page it can only be damage.
        let past_the_file = len as u64 > file_bytes.saturating_sub(position);
        if len < RECORD_HEAD || len as u64 > JOURNAL_CHUNK_BYTES_MAX || past_the_file {
            if len != 0 && !position.is_multiple_of(PAGE) {
                damage = Some(if past_the_file {
                    format!("record of {len} bytes runs past the end of the file")
                } else {
                    format!("record length {len} is not possible")
                });
            }
            break;
        }
        let mut record = vec![0u8; len];
        record[..4].copy_from_slice(&(len as u32).to_le_bytes());
        if reader.read_exact(&mut record[4..]).is_err() {
            damage = Some(format!(
                "record of {len} bytes runs past the end of the file"
            ));
            break;
        }
        let crc = u32::from_le_bytes(record[4..8].try_into().expect("4 bytes"));
        let record_seq = u64::from_le_bytes(record[8..16].try_into().expect("8 bytes"));
        if crc != crc32fast::hash(&record[8..]) {
            if record_seq == seq || !position.is_multiple_of(PAGE) {
                damage = Some("record CRC does not match".to_string());
            }
            break;
        }
        if record_seq != seq {
            // A record of the chunk's earlier use: the end of this one's.
            break;
        }
        let kind = record[16];
        let path_len = u16::from_le_bytes(record[17..19].try_into().expect("2 bytes")) as usize;
        if RECORD_HEAD + path_len > len {
            damage = Some(format!("path of {path_len} bytes runs past the record"));
            break;
        }
        let Ok(name) = std::str::from_utf8(&record[19..19 + path_len]) else {
            damage = Some("path is not UTF-8".to_string());
            break;
        };
        let rest = &record[19 + path_len..];
        match kind {
            KIND_DATA if rest.len() >= 8 => ops.push(Op::Data {
                path: name.to_string(),
                position: u64::from_le_bytes(rest[..8].try_into().expect("8 bytes")),
                bytes: rest[8..].to_vec(),
            }),
            KIND_TOMBSTONE => ops.push(Op::Tombstone {
                dir: name.to_string(),
            }),
            KIND_PAD => {}
            _ => {
                // Its CRC matched: written so by a build that knows more.
                return Err(corrupt(
                    position,
                    format!("record kind {kind} is not known"),
                ));
            }
        }
        position += len as u64;
    }
    // Every version 2 write ends on a page: valid records that end inside
    // one were cut short (torn) or damaged.
    if damage.is_none() && version >= 2 && !position.is_multiple_of(PAGE) && position < file_bytes {
        damage = Some("the records end inside a page".to_string());
    }
    // A valid record of this sequence at a later page is a later write:
    // the records before it were acknowledged.
    let file = reader.get_ref();
    let first_page = (position / PAGE + 1) * PAGE;
    let valid_after = (first_page..file_bytes)
        .step_by(PAGE as usize)
        .find(|&q| valid_record_at(file, q, seq));
    tracing::debug!(path = %path.display(), seq, records = ops.len(), end = position, "journal chunk read");
    Ok(Some(ChunkRead {
        path: path.to_path_buf(),
        seq,
        version,
        ops,
        end: position,
        damage,
        valid_after,
    }))
}

/// Checks the chunks of one journal (sorted by sequence): the records of
/// each must end cleanly, except a torn tail of the last one (a write
/// that was never acknowledged), which is cut with a warning.
fn check_chunks(chunks: &[ChunkRead]) -> Result<()> {
    let last_seq = chunks.iter().map(|c| c.seq).max();
    for chunk in chunks {
        let corrupt = |reason: String| StorageError::Corrupt {
            path: chunk.path.clone(),
            position: chunk.end,
            reason,
        };
        if let Some(later) = chunk.valid_after {
            return Err(corrupt(format!(
                "{}; valid records of the chunk follow at byte {later}, so this is not a torn \
                 write and acknowledged records would be lost by skipping it",
                chunk.damage.as_deref().unwrap_or("the records stop")
            )));
        }
        let Some(damage) = &chunk.damage else {
            continue;
        };
        if Some(chunk.seq) != last_seq {
            return Err(corrupt(format!(
                "{damage}; the journal moved on to a later chunk, so every write to this one \
                 completed and was acknowledged"
            )));
        }
        warn!(
            path = %chunk.path.display(),
            position = chunk.end,
            version = chunk.version,
            reason = %damage,
            "journal: cutting a torn tail (the last write, never acknowledged)"
        );
    }
    Ok(())
}

/// Applies every journal of `data_dir` to its segment files, syncs them and
/// removes the journals.
pub fn replay(data_dir: &Path) -> Result<ReplayReport> {
    let dir = data_dir.join(DIR_NAME);
    let mut report = ReplayReport::default();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(report),
        Err(e) => return Err(StorageError::io("list", &dir, 0, e)),
    };
    // Journal number → its chunk files.
    let mut journals: HashMap<String, Vec<PathBuf>> = HashMap::new();
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.ctx("list", &dir, 0)?;
        let path = entry.path();
        files.push(path.clone());
        let name = entry.file_name().to_string_lossy().to_string();
        if let Some(stem) = name.strip_suffix(".journal") {
            if let Some((id, _)) = stem.rsplit_once('-') {
                journals.entry(id.to_string()).or_default().push(path);
            }
        }
    }
    // Every chunk is read and checked before any record is applied: a
    // damaged journal leaves the segment files as they were.
    let mut read_journals = Vec::with_capacity(journals.len());
    for chunks in journals.values() {
        let mut read = Vec::new();
        for path in chunks {
            if let Some(chunk) = read_chunk(path)? {
                read.push(chunk);
            }
        }
        read.sort_by_key(|chunk| chunk.seq);
        check_chunks(&read)?;
        read_journals.push(read);
    }
    let mut touched: HashMap<PathBuf, std::fs::File> = HashMap::new();
    for read in read_journals {
        report.journals += 1;
        let ops: Vec<Op> = read.into_iter().flat_map(|chunk| chunk.ops).collect();
        // A tombstone voids the records before it under its directory.
        let mut live = vec![true; ops.len()];
        for (i, op) in ops.iter().enumerate() {
            if let Op::Tombstone { dir } = op {
                let prefix = format!("{dir}/");
                for (j, earlier) in ops[..i].iter().enumerate() {
                    if let Op::Data { path, .. } = earlier {
                        if path.starts_with(&prefix) {
                            live[j] = false;
                        }
                    }
                }
            }
        }
        for (op, live) in ops.into_iter().zip(live) {
            let Op::Data {
                path,
                position,
                bytes,
            } = op
            else {
                continue;
            };
            if !live {
                continue;
            }
            let target = data_dir.join(&path);
            if !touched.contains_key(&target) {
                match std::fs::OpenOptions::new().write(true).open(&target) {
                    Ok(f) => {
                        touched.insert(target.clone(), f);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        report.skipped += 1;
                        continue;
                    }
                    Err(e) => return Err(StorageError::io("open", &target, 0, e)),
                }
            }
            let f = touched.get_mut(&target).expect("opened above");
            f.seek(SeekFrom::Start(position))
                .and_then(|_| f.write_all(&bytes))
                .ctx("write", &target, position)?;
            report.records += 1;
            report.bytes += bytes.len() as u64;
        }
    }
    for (path, f) in &touched {
        f.sync_data().ctx("fdatasync", path, 0)?;
    }
    // Only now may the journals go: their records are in the segments.
    for path in files {
        if let Err(e) = std::fs::remove_file(&path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(StorageError::io("remove", &path, 0, e));
            }
        }
    }
    if let Ok(handle) = std::fs::File::open(&dir) {
        handle.sync_all().ctx("fsync directory", &dir, 0)?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(seq: u64, version: u32) -> Vec<u8> {
        let mut page = header_page(seq);
        page[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = crc32fast::hash(&page[..20]);
        page[20..24].copy_from_slice(&crc.to_le_bytes());
        page
    }

    fn data(path: &str, position: u64, bytes: &[u8], seq: u64) -> Vec<u8> {
        let record = Record::Data {
            path,
            position,
            len: bytes.len(),
            fill: |out: &mut [u8]| out.copy_from_slice(bytes),
        };
        let mut out = vec![0u8; record.encoded_len()];
        record.encode(&mut out);
        seal(&mut out, seq);
        out
    }

    fn pad(len: usize, seq: u64) -> Vec<u8> {
        let mut out = vec![0u8; len];
        encode_pad(&mut out, seq);
        out
    }

    fn read(chunk: &[u8]) -> Option<(u64, Vec<Op>)> {
        read_checked(chunk)
            .unwrap()
            .map(|chunk| (chunk.seq, chunk.ops))
    }

    fn read_checked(chunk: &[u8]) -> Result<Option<ChunkRead>> {
        let dir = std::env::temp_dir().join(format!(
            "strom-journal-unit-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("0-0.journal");
        std::fs::write(&path, chunk).unwrap();
        let read = read_chunk(&path);
        std::fs::remove_dir_all(&dir).unwrap();
        read
    }

    fn data_ops(ops: &[Op]) -> Vec<(String, u64, Vec<u8>)> {
        ops.iter()
            .map(|op| match op {
                Op::Data {
                    path,
                    position,
                    bytes,
                } => (path.clone(), *position, bytes.clone()),
                Op::Tombstone { dir } => panic!("unexpected tombstone for {dir}"),
            })
            .collect()
    }

    #[test]
    fn padding_records_are_skipped_and_the_records_after_them_read() {
        let mut chunk = header(7, VERSION);
        chunk.extend(data("t-0/0.log", 100, b"first", 7));
        let len = chunk.len() - PAGE as usize;
        let padded = padded_len(len);
        assert_eq!(padded % PAGE as usize, 0);
        chunk.extend(pad(padded - len, 7));
        chunk.extend(data("t-1/0.log", 200, b"second", 7));
        // A record of an older sequence ends the chunk.
        chunk.extend(data("t-2/0.log", 300, b"stale", 6));
        let (seq, ops) = read(&chunk).expect("a valid chunk");
        assert_eq!(seq, 7);
        assert_eq!(
            data_ops(&ops),
            vec![
                ("t-0/0.log".to_string(), 100, b"first".to_vec()),
                ("t-1/0.log".to_string(), 200, b"second".to_vec()),
            ]
        );
    }

    /// A chunk used again: where this use's records end on a page, the
    /// bytes of its earlier use may hold any length, one beyond the file
    /// too; that is the end, not damage (seen after kill -9 under load).
    #[test]
    fn stale_bytes_of_an_earlier_use_at_a_page_start_end_the_records() {
        let mut chunk = header(9, VERSION);
        chunk.extend(data("t-0/0.log", 0, b"this use", 9));
        let len = chunk.len() - PAGE as usize;
        chunk.extend(pad(padded_len(len) - len, 9));
        let end = chunk.len();
        // An earlier use's bytes: a huge length, and whatever follows.
        chunk.extend(0xD0D0_D0D0u32.to_le_bytes());
        chunk.extend(vec![0xA5u8; PAGE as usize - 4]);
        let read = read_checked(&chunk).unwrap().unwrap();
        assert_eq!(read.end, end as u64);
        assert!(read.damage.is_none(), "{:?}", read.damage);
        assert_eq!(read.ops.len(), 1);
        let later = read_checked(&header(10, VERSION)).unwrap().unwrap();
        check_chunks(&[read, later]).expect("a clean end, also when a later chunk follows");
        // Inside a page the same bytes are damage.
        let mut inside = header(9, VERSION);
        inside.extend(data("t-0/0.log", 0, b"this use", 9));
        inside.extend(0xD0D0_D0D0u32.to_le_bytes());
        inside.extend(vec![0xA5u8; PAGE as usize]);
        let read = read_checked(&inside).unwrap().unwrap();
        assert!(read.damage.is_some());
    }

    #[test]
    fn version_1_chunks_are_read_and_unknown_versions_refused() {
        let mut chunk = header(3, 1);
        chunk.extend(data("t-0/0.log", 0, b"old format", 3));
        let (_, ops) = read(&chunk).expect("a version 1 chunk");
        assert_eq!(
            data_ops(&ops),
            vec![("t-0/0.log".to_string(), 0, b"old format".to_vec())]
        );
        // A newer build's journal may hold acknowledged records: never
        // skipped.
        let mut future = header(3, VERSION + 1);
        future.extend(data("t-0/0.log", 0, b"new format", 3));
        let error = read_checked(&future).err().expect("refused");
        assert!(error.to_string().contains("version 3"), "{error}");
    }

    #[test]
    fn damaged_headers_are_errors_and_blank_ones_unused_chunks() {
        let mut chunk = header(5, VERSION);
        chunk.extend(data("t-0/0.log", 0, b"acknowledged", 5));
        for flipped in [0, 9, 13, 21] {
            let mut damaged = chunk.clone();
            damaged[flipped] ^= 0x10;
            let error = read_checked(&damaged).err().expect("refused");
            assert!(error.to_string().contains("0-0.journal"), "{error}");
        }
        let mut blank = vec![0u8; 2 * PAGE as usize];
        assert!(read(&blank).is_none(), "a chunk never used");
        blank[PAGE as usize..PAGE as usize + 16]
            .copy_from_slice(&chunk[PAGE as usize..PAGE as usize + 16]);
        assert!(
            read_checked(&blank).is_err(),
            "records after a blank header"
        );
    }

    #[test]
    fn a_damaged_record_before_a_later_write_is_an_error_and_a_torn_last_write_is_cut() {
        let mut chunk = header(5, VERSION);
        let first = chunk.len();
        chunk.extend(data("t-0/0.log", 0, b"first write", 5));
        let len = chunk.len() - PAGE as usize;
        chunk.extend(pad(padded_len(len) - len, 5));
        let second = chunk.len();
        chunk.extend(data("t-0/0.log", 11, b"second write", 5));
        let len = chunk.len() - PAGE as usize;
        chunk.extend(pad(padded_len(len) - len, 5));
        chunk.extend(vec![0u8; PAGE as usize]);

        let mut damaged = chunk.clone();
        damaged[first + 30] ^= 0x01;
        let read = read_checked(&damaged).unwrap().unwrap();
        assert_eq!(read.valid_after, Some(second as u64));
        let error = check_chunks(&[read]).expect_err("refused");
        assert!(
            error.to_string().contains(&format!("byte {first}")),
            "{error}"
        );

        let mut torn = chunk.clone();
        torn[second + 30] ^= 0x01;
        let read = read_checked(&torn).unwrap().unwrap();
        assert!(read.damage.is_some() && read.valid_after.is_none());
        assert_eq!(read.ops.len(), 1, "the first write is kept");
        check_chunks(&[read]).expect("the last chunk's torn tail is cut");
    }

    #[test]
    fn a_padding_record_fills_at_least_its_head() {
        for len in [
            1,
            100,
            4096 - RECORD_HEAD,
            4096 - RECORD_HEAD + 1,
            4095,
            4096,
            4097,
        ] {
            let padded = padded_len(len);
            assert_eq!(padded % PAGE as usize, 0, "{len}");
            assert!(
                padded == len || padded - len >= RECORD_HEAD,
                "{len} -> {padded}"
            );
            assert!(padded - len < PAD_MAX, "{len} -> {padded}");
        }
    }
}
