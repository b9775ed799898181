//! A durable Raft store on plain files: an entries log and atomically replaced hard state and
//! snapshot files.
//!
//! Layout in the store's directory:
//! - `raft-entries.log`: frames of `len: u32 LE | crc32: u32 LE | Entry (protobuf)`. An append
//!   that overwrites a conflicting tail is written as new frames; replaying the frames in order
//!   with overwrite semantics gives back the same log. At open, the first frame that is short
//!   or fails its CRC and everything after it are cut (a torn tail: only the tail is ever
//!   appended), and the file is truncated there. A compaction or an installed snapshot
//!   rewrites the file whole, with only the entries after the snapshot: written aside, fsync,
//!   rename, fsync of the directory.
//! - `raft-hard-state`, `raft-snapshot`: `crc32: u32 LE | message (protobuf)`, replaced by
//!   write to a temporary file, fsync, rename, fsync of the directory; a bad one is an error.
//!   The snapshot file holds the application's data with the snapshot's metadata.
//!
//! A snapshot is written before the entries file is rewritten, so a crash leaves either the
//! old pair or a new snapshot over the old entries file. Open tells the two apart as Raft
//! does: if the entries file holds the snapshot's last entry with the snapshot's term, the
//! entries after it are kept (a compaction); otherwise the snapshot replaced the whole log (an
//! installed snapshot) and none are. Either way open finishes the rewrite.
//!
//! Reads are served from an in-memory copy (`LogCache`) kept in step with the files.
//! Each write returns only after `fsync`.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use protobuf::Message as _;
use raft::eraftpb::{Entry, HardState, Snapshot};

use crate::store::{LogCache, LogStore};
use crate::Error;

/// The store's files, by name in its directory.
pub const ENTRIES_FILE: &str = "raft-entries.log";
pub const HARD_STATE_FILE: &str = "raft-hard-state";
pub const SNAPSHOT_FILE: &str = "raft-snapshot";
const FRAME_HEADER_BYTES: usize = 8;
/// An entry larger than this is a corrupt length, not an entry.
const ENTRY_BYTES_MAX: usize = 64 * 1024 * 1024;

/// A Raft store whose writes are durable on return.
pub struct FileStore {
    dir: PathBuf,
    entries: File,
    log: LogCache,
}

/// What [`FileStore::open`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// Entries in the log after open (after the snapshot).
    pub entries_replayed: u64,
    /// Bytes of a torn tail cut from the entries file.
    pub torn_bytes_cut: u64,
    /// Entries of the entries file that the snapshot covers or replaced: a crash came
    /// between writing a snapshot and rewriting the entries file, and open finished the
    /// rewrite.
    pub entries_dropped_by_snapshot: u64,
}

impl FileStore {
    /// Opens (or creates) the store in `dir` for a quorum of `voters`, cutting a torn tail and
    /// finishing an interrupted compaction.
    pub fn open(dir: &Path, voters: &[u64]) -> Result<(Self, Recovery), Error> {
        fs::create_dir_all(dir).map_err(io("create dir", dir))?;
        let mut log = LogCache::new(voters);
        if let Some(bytes) = read_checked(&dir.join(HARD_STATE_FILE))? {
            log.set_hard_state(decode::<HardState>(&dir.join(HARD_STATE_FILE), &bytes)?);
        }
        if let Some(bytes) = read_checked(&dir.join(SNAPSHOT_FILE))? {
            let path = dir.join(SNAPSHOT_FILE);
            let snapshot = decode::<Snapshot>(&path, &bytes)?;
            if snapshot.get_metadata().index == 0 {
                return Err(Error::Corrupt {
                    path,
                    reason: "snapshot at index 0".to_string(),
                });
            }
            // Raises the hard state's commit (and term) to the snapshot's if a crash came
            // before the hard state of the same round was written.
            log.install(snapshot);
        }

        let path = dir.join(ENTRIES_FILE);
        let mut entries = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(io("open", &path))?;
        let mut bytes = Vec::new();
        entries.read_to_end(&mut bytes).map_err(io("read", &path))?;
        let mut replayed: Vec<Entry> = Vec::new();
        let mut offset = 0;
        while let Some((entry_bytes, next)) = next_frame(&bytes, offset) {
            let entry = decode::<Entry>(&path, entry_bytes)?;
            let first = replayed.first().map_or(entry.index, |e| e.index);
            let last = replayed.last().map_or(entry.index - 1, |e| e.index);
            if entry.index < first || entry.index > last + 1 {
                return Err(Error::Corrupt {
                    path,
                    reason: format!(
                        "entry {} at byte {offset} outside the log [{first}, {last}] before it",
                        entry.index
                    ),
                });
            }
            replayed.truncate((entry.index - first) as usize);
            replayed.push(entry);
            offset = next;
        }
        let torn_bytes_cut = (bytes.len() - offset) as u64;

        let snapshot_index = log.snapshot_index();
        let file_first = replayed.first().map_or(snapshot_index + 1, |e| e.index);
        let kept_from = if file_first == snapshot_index + 1 {
            0
        } else if file_first > snapshot_index + 1 {
            return Err(Error::Corrupt {
                path,
                reason: format!(
                    "entries start at {file_first}, after the snapshot's last entry \
                     {snapshot_index} + 1"
                ),
            });
        } else {
            let at_snapshot = (snapshot_index - file_first) as usize;
            match replayed.get(at_snapshot) {
                Some(entry) if entry.term == log.snapshot_term() => at_snapshot + 1,
                _ => replayed.len(),
            }
        };
        log.append(&replayed[kept_from..]);
        let mut store = FileStore {
            dir: dir.to_path_buf(),
            entries,
            log,
        };
        if kept_from > 0 {
            store.rewrite_entries()?;
        } else if torn_bytes_cut > 0 {
            store
                .entries
                .set_len(offset as u64)
                .map_err(io("truncate torn tail", &path))?;
            store.entries.sync_all().map_err(io("fsync", &path))?;
        }
        let recovery = Recovery {
            entries_replayed: store.log.entries_after_snapshot().len() as u64,
            torn_bytes_cut,
            entries_dropped_by_snapshot: kept_from as u64,
        };
        Ok((store, recovery))
    }

    /// What the store in `dir` holds, without opening it: `None` when it holds nothing (no
    /// hard state, no snapshot, no entries: this node never voted nor acknowledged anything),
    /// else the index it knows committed.
    pub fn stored_commit(dir: &Path) -> Result<Option<u64>, Error> {
        let hard_state = read_checked(&dir.join(HARD_STATE_FILE))?
            .map(|bytes| decode::<HardState>(&dir.join(HARD_STATE_FILE), &bytes))
            .transpose()?;
        let snapshot_index = read_checked(&dir.join(SNAPSHOT_FILE))?
            .map(|bytes| decode::<Snapshot>(&dir.join(SNAPSHOT_FILE), &bytes))
            .transpose()?
            .map(|snapshot| snapshot.get_metadata().index);
        let entries_path = dir.join(ENTRIES_FILE);
        let entries_bytes = match fs::metadata(&entries_path) {
            Ok(metadata) => metadata.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(source) => {
                return Err(Error::Io {
                    op: "stat",
                    path: entries_path,
                    source,
                })
            }
        };
        if hard_state.is_none() && snapshot_index.is_none() && entries_bytes == 0 {
            return Ok(None);
        }
        let commit = hard_state.map_or(0, |h| h.commit);
        Ok(Some(commit.max(snapshot_index.unwrap_or(0))))
    }

    /// The stored hard state.
    pub fn hard_state(&self) -> HardState {
        self.log.hard_state().clone()
    }

    fn log(&self) -> &LogCache {
        &self.log
    }

    /// Replaces the entries file with the entries after the snapshot, atomically.
    fn rewrite_entries(&mut self) -> Result<(), Error> {
        let path = self.dir.join(ENTRIES_FILE);
        let temp = self.dir.join(format!("{ENTRIES_FILE}.tmp"));
        let frames = frames(&path, self.log.entries_after_snapshot())?;
        let mut file = File::create(&temp).map_err(io("create", &temp))?;
        file.write_all(&frames).map_err(io("write", &temp))?;
        file.sync_all().map_err(io("fsync", &temp))?;
        drop(file);
        fs::rename(&temp, &path).map_err(io("rename", &path))?;
        sync_dir(&self.dir)?;
        self.entries = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&path)
            .map_err(io("open", &path))?;
        Ok(())
    }
}

/// The payload of the frame at `offset` and the offset after it, or `None` at the end or at a
/// torn (short or CRC-failing) frame.
fn next_frame(bytes: &[u8], offset: usize) -> Option<(&[u8], usize)> {
    frame_at(bytes, offset).ok()
}

/// The payload of the frame at `offset` of an entries file's bytes and the offset after it, or
/// why no whole frame is there.
fn frame_at(bytes: &[u8], offset: usize) -> Result<(&[u8], usize), String> {
    let rest = bytes.get(offset..).unwrap_or_default();
    let Some(header) = rest.get(..FRAME_HEADER_BYTES) else {
        return Err(format!(
            "{} bytes, too short for a frame header of {FRAME_HEADER_BYTES}",
            rest.len()
        ));
    };
    let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    if len > ENTRY_BYTES_MAX {
        return Err(format!(
            "length {len} above the {ENTRY_BYTES_MAX}-byte entry limit"
        ));
    }
    let Some(payload) = rest.get(FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + len) else {
        return Err(format!(
            "length {len} runs past the end of the file ({} bytes left)",
            rest.len() - FRAME_HEADER_BYTES
        ));
    };
    if crc32fast::hash(payload) != crc {
        return Err("CRC mismatch".to_string());
    }
    Ok((payload, offset + FRAME_HEADER_BYTES + len))
}

/// The entry framed at `offset` of an entries file's bytes and the offset after its frame, or
/// why there is none: for tools that read the file as it lies (`strom log dump`), never to
/// decide what the log holds (a later frame may replace an entry, see the module's doc).
/// Eight zero bytes frame an empty payload, which decodes as an entry of index 0: Raft's
/// entries start at 1, so that is no entry (a tool searching past damage would otherwise
/// take any run of zeros for one).
pub fn entry_at(bytes: &[u8], offset: usize) -> Result<(Entry, usize), String> {
    let (payload, next) = frame_at(bytes, offset)?;
    let entry =
        Entry::parse_from_bytes(payload).map_err(|e| format!("entry does not decode: {e}"))?;
    if entry.index == 0 {
        return Err("an entry of index 0 (Raft's entries start at 1)".to_string());
    }
    Ok((entry, next))
}

/// The hard state a hard state file's bytes hold, or why they hold none.
pub fn hard_state_of(bytes: &[u8]) -> Result<HardState, String> {
    let payload = checked_payload(bytes)?;
    HardState::parse_from_bytes(payload).map_err(|e| format!("hard state does not decode: {e}"))
}

/// The snapshot a snapshot file's bytes hold (its metadata and the application's data), or why
/// they hold none.
pub fn snapshot_of(bytes: &[u8]) -> Result<Snapshot, String> {
    let payload = checked_payload(bytes)?;
    Snapshot::parse_from_bytes(payload).map_err(|e| format!("snapshot does not decode: {e}"))
}

/// `entries` as frames of the entries file.
fn frames(path: &Path, entries: &[Entry]) -> Result<Vec<u8>, Error> {
    let mut frames = Vec::new();
    for entry in entries {
        let payload = encode(path, entry)?;
        assert!(
            payload.len() <= ENTRY_BYTES_MAX,
            "entry of {} bytes",
            payload.len()
        );
        frames.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        frames.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        frames.extend_from_slice(&payload);
    }
    Ok(frames)
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn decode<M: protobuf::Message>(path: &Path, bytes: &[u8]) -> Result<M, Error> {
    M::parse_from_bytes(bytes).map_err(|e| Error::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

fn encode<M: protobuf::Message>(path: &Path, message: &M) -> Result<Vec<u8>, Error> {
    message.write_to_bytes().map_err(|e| Error::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Reads a `crc32 | payload` file: `None` if absent, an error if the CRC fails.
fn read_checked(path: &Path) -> Result<Option<Vec<u8>>, Error> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(Error::Io {
                op: "read",
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let payload = checked_payload(&bytes).map_err(|reason| Error::Corrupt {
        path: path.to_path_buf(),
        reason,
    })?;
    Ok(Some(payload.to_vec()))
}

/// The payload of a `crc32 | payload` file's bytes, or why it is damaged.
fn checked_payload(bytes: &[u8]) -> Result<&[u8], String> {
    let (crc, payload) = bytes
        .split_at_checked(4)
        .ok_or_else(|| "shorter than its CRC".to_string())?;
    if crc32fast::hash(payload) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err("CRC mismatch".to_string());
    }
    Ok(payload)
}

/// Replaces `dir/name` with `crc32 | payload` atomically: temp file, fsync, rename, fsync dir.
fn replace_checked(dir: &Path, name: &str, payload: &[u8]) -> Result<(), Error> {
    let path = dir.join(name);
    let temp = dir.join(format!("{name}.tmp"));
    let mut file = File::create(&temp).map_err(io("create", &temp))?;
    file.write_all(&crc32fast::hash(payload).to_le_bytes())
        .map_err(io("write", &temp))?;
    file.write_all(payload).map_err(io("write", &temp))?;
    file.sync_all().map_err(io("fsync", &temp))?;
    fs::rename(&temp, &path).map_err(io("rename", &path))?;
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<(), Error> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync dir", dir))
}

impl LogStore for FileStore {
    fn append(&mut self, entries: &[Entry]) -> Result<(), Error> {
        let path = self.dir.join(ENTRIES_FILE);
        let frames = frames(&path, entries)?;
        self.entries
            .write_all(&frames)
            .map_err(io("append", &path))?;
        self.entries.sync_data().map_err(io("fsync", &path))?;
        self.log.append(entries);
        Ok(())
    }

    fn set_hard_state(&mut self, hard_state: &HardState) -> Result<(), Error> {
        let payload = encode(&self.dir.join(HARD_STATE_FILE), hard_state)?;
        replace_checked(&self.dir, HARD_STATE_FILE, &payload)?;
        self.log.set_hard_state(hard_state.clone());
        Ok(())
    }

    fn apply_snapshot(&mut self, snapshot: Snapshot) -> Result<(), Error> {
        // Snapshot first, then the entries file: a crash between the two leaves entries that
        // do not hold the snapshot's last entry, which open() drops.
        let payload = encode(&self.dir.join(SNAPSHOT_FILE), &snapshot)?;
        replace_checked(&self.dir, SNAPSHOT_FILE, &payload)?;
        self.log.install(snapshot);
        self.rewrite_entries()
    }

    fn compact(&mut self, snapshot: Snapshot) -> Result<(), Error> {
        let path = self.dir.join(SNAPSHOT_FILE);
        if let Err(reason) = self.log.check_compaction(&snapshot) {
            panic!("compaction of {}: {reason}", path.display());
        }
        // Snapshot first, then the entries file: a crash between the two leaves entries that
        // hold the snapshot's last entry, so open() keeps those after it and drops the rest.
        let payload = encode(&path, &snapshot)?;
        replace_checked(&self.dir, SNAPSHOT_FILE, &payload)?;
        self.log.compact(snapshot);
        self.rewrite_entries()
    }

    fn latest_snapshot(&self) -> Option<Snapshot> {
        self.log.latest_snapshot().cloned()
    }

    fn log_bytes_through(&self, index: u64) -> u64 {
        self.log.log_bytes_through(index)
    }
}

crate::store::storage_reads_from!(FileStore, log);

#[cfg(test)]
mod tests {
    use super::*;
    use raft::eraftpb::ConfState;
    use raft::{GetEntriesContext, Storage};

    const VOTERS: [u64; 3] = [1, 2, 3];

    fn entry(index: u64, term: u64, data: &str) -> Entry {
        Entry {
            index,
            term,
            data: data.as_bytes().to_vec().into(),
            ..Default::default()
        }
    }

    fn stored(store: &FileStore) -> Vec<(u64, u64, Vec<u8>)> {
        let last = store.last_index().unwrap();
        store
            .entries(1, last + 1, None, GetEntriesContext::empty(false))
            .unwrap()
            .into_iter()
            .map(|e| (e.index, e.term, e.data.to_vec()))
            .collect()
    }

    fn check(store: &FileStore, expected: &[(u64, u64, &str)]) {
        let expected: Vec<_> = expected
            .iter()
            .map(|&(i, t, d)| (i, t, d.as_bytes().to_vec()))
            .collect();
        assert_eq!(stored(store), expected);
    }

    #[test]
    fn a_store_that_holds_nothing_says_so_without_opening() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(FileStore::stored_commit(dir.path()).unwrap(), None);
        let (mut store, _) = FileStore::open(dir.path(), &VOTERS).unwrap();
        assert_eq!(FileStore::stored_commit(dir.path()).unwrap(), None);
        store
            .set_hard_state(&HardState {
                term: 2,
                vote: 1,
                commit: 0,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(FileStore::stored_commit(dir.path()).unwrap(), Some(0));
        store
            .append(&[entry(1, 2, "a"), entry(2, 2, "b"), entry(3, 2, "c")])
            .unwrap();
        store
            .set_hard_state(&HardState {
                term: 2,
                vote: 1,
                commit: 3,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(FileStore::stored_commit(dir.path()).unwrap(), Some(3));
    }

    #[test]
    fn entries_and_hard_state_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, recovery) = FileStore::open(dir.path(), &VOTERS).unwrap();
        assert_eq!(
            recovery,
            Recovery {
                entries_replayed: 0,
                torn_bytes_cut: 0,
                entries_dropped_by_snapshot: 0
            }
        );
        store.append(&[entry(1, 1, "a"), entry(2, 1, "b")]).unwrap();
        let hard_state = HardState {
            term: 3,
            vote: 2,
            commit: 2,
            ..Default::default()
        };
        store.set_hard_state(&hard_state).unwrap();
        drop(store);

        let (store, recovery) = FileStore::open(dir.path(), &VOTERS).unwrap();
        assert_eq!(
            recovery,
            Recovery {
                entries_replayed: 2,
                torn_bytes_cut: 0,
                entries_dropped_by_snapshot: 0
            }
        );
        check(&store, &[(1, 1, "a"), (2, 1, "b")]);
        assert_eq!(store.hard_state(), hard_state);
        assert_eq!(
            store.initial_state().unwrap().conf_state.voters,
            VOTERS.to_vec()
        );
    }

    #[test]
    fn an_overwritten_tail_replays_as_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = FileStore::open(dir.path(), &VOTERS).unwrap();
        store
            .append(&[entry(1, 1, "a"), entry(2, 1, "b"), entry(3, 1, "c")])
            .unwrap();
        store.append(&[entry(2, 2, "B")]).unwrap();
        check(&store, &[(1, 1, "a"), (2, 2, "B")]);
        drop(store);
        let (store, _) = FileStore::open(dir.path(), &VOTERS).unwrap();
        check(&store, &[(1, 1, "a"), (2, 2, "B")]);
    }

    #[test]
    fn a_torn_tail_is_cut_and_nothing_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = FileStore::open(dir.path(), &VOTERS).unwrap();
        store.append(&[entry(1, 1, "a"), entry(2, 1, "b")]).unwrap();
        let path = dir.path().join(ENTRIES_FILE);
        let whole_two = fs::metadata(&path).unwrap().len();
        store.append(&[entry(3, 1, "the third entry")]).unwrap();
        drop(store);
        let whole_three = fs::metadata(&path).unwrap().len();

        // Every cut inside the third frame loses the third entry and keeps the first two.
        for cut in whole_two + 1..whole_three {
            let copy = tempfile::tempdir().unwrap();
            let bytes = fs::read(&path).unwrap();
            fs::write(copy.path().join(ENTRIES_FILE), &bytes[..cut as usize]).unwrap();
            let (mut store, recovery) = FileStore::open(copy.path(), &VOTERS).unwrap();
            assert_eq!(
                recovery,
                Recovery {
                    entries_replayed: 2,
                    torn_bytes_cut: cut - whole_two,
                    entries_dropped_by_snapshot: 0
                }
            );
            check(&store, &[(1, 1, "a"), (2, 1, "b")]);
            assert_eq!(
                fs::metadata(copy.path().join(ENTRIES_FILE)).unwrap().len(),
                whole_two
            );
            // The log continues where the intact part ends.
            store.append(&[entry(3, 2, "c")]).unwrap();
            drop(store);
            let (store, _) = FileStore::open(copy.path(), &VOTERS).unwrap();
            check(&store, &[(1, 1, "a"), (2, 1, "b"), (3, 2, "c")]);
        }
    }

    #[test]
    fn a_tail_frame_failing_its_crc_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = FileStore::open(dir.path(), &VOTERS).unwrap();
        store.append(&[entry(1, 1, "a"), entry(2, 1, "b")]).unwrap();
        drop(store);
        let path = dir.path().join(ENTRIES_FILE);
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        fs::write(&path, &bytes).unwrap();
        let (store, recovery) = FileStore::open(dir.path(), &VOTERS).unwrap();
        assert_eq!(recovery.entries_replayed, 1);
        check(&store, &[(1, 1, "a")]);
    }

    #[test]
    fn entry_at_reads_each_frame_and_says_why_a_damaged_one_is_not_one() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = FileStore::open(dir.path(), &VOTERS).unwrap();
        store
            .append(&[entry(1, 1, "a"), entry(2, 3, "bb")])
            .unwrap();
        drop(store);
        let bytes = fs::read(dir.path().join(ENTRIES_FILE)).unwrap();
        let (first, next) = entry_at(&bytes, 0).unwrap();
        assert_eq!(
            (first.index, first.term, &first.data[..]),
            (1, 1, &b"a"[..])
        );
        let (second, end) = entry_at(&bytes, next).unwrap();
        assert_eq!((second.index, second.term), (2, 3));
        assert_eq!(end, bytes.len());
        let reason = |bytes: &[u8], at| entry_at(bytes, at).unwrap_err();
        assert!(
            reason(&bytes, end).contains("too short"),
            "{}",
            reason(&bytes, end)
        );
        assert!(reason(&bytes[..end - 1], next).contains("runs past the end"));
        let mut flipped = bytes.clone();
        flipped[end - 1] ^= 0x01;
        assert_eq!(reason(&flipped, next), "CRC mismatch");
        // Zeros frame an empty payload with a valid CRC: still no entry.
        assert!(reason(&[0; 8], 0).contains("index 0"));
    }

    #[test]
    fn hard_state_and_snapshot_files_read_back_and_refuse_damage() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = FileStore::open(dir.path(), &VOTERS).unwrap();
        let hard_state = HardState {
            term: 4,
            vote: 2,
            commit: 0,
            ..Default::default()
        };
        store.set_hard_state(&hard_state).unwrap();
        drop(store);
        let mut bytes = fs::read(dir.path().join(HARD_STATE_FILE)).unwrap();
        assert_eq!(hard_state_of(&bytes).unwrap(), hard_state);
        bytes[0] ^= 0x01;
        assert_eq!(hard_state_of(&bytes).unwrap_err(), "CRC mismatch");
        assert_eq!(snapshot_of(&[1, 2]).unwrap_err(), "shorter than its CRC");
    }

    #[test]
    fn a_corrupt_hard_state_is_an_error_not_a_reset() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = FileStore::open(dir.path(), &VOTERS).unwrap();
        let hard_state = HardState {
            term: 7,
            ..Default::default()
        };
        store.set_hard_state(&hard_state).unwrap();
        drop(store);
        let path = dir.path().join(HARD_STATE_FILE);
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        fs::write(&path, &bytes).unwrap();
        let result = FileStore::open(dir.path(), &VOTERS);
        assert!(
            matches!(result, Err(Error::Corrupt { .. })),
            "{:?}",
            result.err()
        );
    }

    fn snapshot(index: u64, term: u64, data: &str) -> Snapshot {
        let mut snapshot = Snapshot::default();
        snapshot.set_data(data.as_bytes().to_vec().into());
        let metadata = snapshot.mut_metadata();
        metadata.index = index;
        metadata.term = term;
        metadata.set_conf_state(ConfState::from((VOTERS.to_vec(), Vec::new())));
        snapshot
    }

    /// A store holding entries 1..=5 of term 1, committed through 5.
    fn five_entries(dir: &Path) -> FileStore {
        let (mut store, _) = FileStore::open(dir, &VOTERS).unwrap();
        let entries: Vec<Entry> = (1..=5).map(|i| entry(i, 1, &format!("e{i}"))).collect();
        store.append(&entries).unwrap();
        store
            .set_hard_state(&HardState {
                term: 1,
                vote: 1,
                commit: 5,
                ..Default::default()
            })
            .unwrap();
        store
    }

    /// The snapshot raft-rs would be given and the log after it.
    fn check_snapshot(store: &FileStore, index: u64, term: u64, data: &str) {
        let snapshot = store.snapshot(0, 2).unwrap();
        assert_eq!(snapshot.get_metadata().index, index);
        assert_eq!(snapshot.get_metadata().term, term);
        assert_eq!(snapshot.get_data(), data.as_bytes());
        assert_eq!(store.latest_snapshot(), Some(snapshot));
        assert_eq!(store.first_index().unwrap(), index + 1);
        assert_eq!(store.term(index).unwrap(), term);
        assert!(matches!(
            store.term(index - 1),
            Err(raft::Error::Store(raft::StorageError::Compacted))
        ));
        assert!(matches!(
            store.entries(index, index + 1, None, GetEntriesContext::empty(false)),
            Err(raft::Error::Store(raft::StorageError::Compacted))
        ));
    }

    fn check_after(store: &FileStore, expected: &[(u64, u64, &str)]) {
        let first = store.first_index().unwrap();
        let last = store.last_index().unwrap();
        let got: Vec<_> = store
            .entries(first, last + 1, None, GetEntriesContext::empty(false))
            .unwrap()
            .into_iter()
            .map(|e| (e.index, e.term, e.data.to_vec()))
            .collect();
        let expected: Vec<_> = expected
            .iter()
            .map(|&(i, t, d)| (i, t, d.as_bytes().to_vec()))
            .collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn a_store_without_a_snapshot_has_none_to_send() {
        let dir = tempfile::tempdir().unwrap();
        let store = five_entries(dir.path());
        assert_eq!(store.latest_snapshot(), None);
        assert!(matches!(
            store.snapshot(0, 2),
            Err(raft::Error::Store(
                raft::StorageError::SnapshotTemporarilyUnavailable
            ))
        ));
        assert!(0 < store.log_bytes_through(2));
        assert!(store.log_bytes_through(2) < store.log_bytes_through(5));
        assert_eq!(store.log_bytes_through(9), store.log_bytes_through(5));
    }

    #[test]
    fn compaction_keeps_the_later_entries_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = five_entries(dir.path());
        let bytes_five = store.log_bytes_through(5);
        let bytes_three = store.log_bytes_through(3);
        assert!(bytes_three > 0 && bytes_three < bytes_five);

        store.compact(snapshot(3, 1, "state at 3")).unwrap();
        check_snapshot(&store, 3, 1, "state at 3");
        check_after(&store, &[(4, 1, "e4"), (5, 1, "e5")]);
        assert_eq!(store.log_bytes_through(3), 0);
        assert_eq!(store.log_bytes_through(5), bytes_five - bytes_three);
        // The entries file holds only the entries after the snapshot.
        let file_bytes = fs::metadata(dir.path().join(ENTRIES_FILE)).unwrap().len();
        assert_eq!(
            file_bytes,
            (bytes_five - bytes_three) + 2 * FRAME_HEADER_BYTES as u64
        );
        drop(store);

        let (mut store, recovery) = FileStore::open(dir.path(), &VOTERS).unwrap();
        assert_eq!(
            recovery,
            Recovery {
                entries_replayed: 2,
                torn_bytes_cut: 0,
                entries_dropped_by_snapshot: 0
            }
        );
        check_snapshot(&store, 3, 1, "state at 3");
        check_after(&store, &[(4, 1, "e4"), (5, 1, "e5")]);
        assert_eq!(store.hard_state().commit, 5);

        // Appends and a second compaction continue from there.
        store.append(&[entry(6, 2, "e6")]).unwrap();
        store.compact(snapshot(5, 1, "state at 5")).unwrap();
        drop(store);
        let (store, _) = FileStore::open(dir.path(), &VOTERS).unwrap();
        check_snapshot(&store, 5, 1, "state at 5");
        check_after(&store, &[(6, 2, "e6")]);

        // Compacting everything leaves an empty log after the snapshot.
        let (mut store, _) = FileStore::open(dir.path(), &VOTERS).unwrap();
        store.compact(snapshot(6, 2, "state at 6")).unwrap();
        drop(store);
        let (store, recovery) = FileStore::open(dir.path(), &VOTERS).unwrap();
        assert_eq!(recovery.entries_replayed, 0);
        check_snapshot(&store, 6, 2, "state at 6");
        assert_eq!(store.last_index().unwrap(), 6);
    }

    #[test]
    fn a_crash_between_snapshot_and_rewrite_keeps_the_entries_after_the_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = five_entries(dir.path());
        let path = dir.path().join(ENTRIES_FILE);
        let before = fs::read(&path).unwrap();
        store.compact(snapshot(3, 1, "state at 3")).unwrap();
        drop(store);
        // The crash: the snapshot was renamed into place, the rewritten entries file was not;
        // a half-written next snapshot lies aside.
        fs::write(&path, &before).unwrap();
        fs::write(dir.path().join(format!("{SNAPSHOT_FILE}.tmp")), b"half").unwrap();

        let (store, recovery) = FileStore::open(dir.path(), &VOTERS).unwrap();
        assert_eq!(
            recovery,
            Recovery {
                entries_replayed: 2,
                torn_bytes_cut: 0,
                entries_dropped_by_snapshot: 3
            }
        );
        check_snapshot(&store, 3, 1, "state at 3");
        check_after(&store, &[(4, 1, "e4"), (5, 1, "e5")]);
        drop(store);
        // Open finished the rewrite.
        let (store, recovery) = FileStore::open(dir.path(), &VOTERS).unwrap();
        assert_eq!(recovery.entries_dropped_by_snapshot, 0);
        check_after(&store, &[(4, 1, "e4"), (5, 1, "e5")]);
    }

    #[test]
    fn a_crash_between_an_installed_snapshot_and_rewrite_drops_the_replaced_log() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = FileStore::open(dir.path(), &VOTERS).unwrap();
        let entries: Vec<Entry> = (1..=5).map(|i| entry(i, 1, &format!("e{i}"))).collect();
        store.append(&entries).unwrap();
        store
            .set_hard_state(&HardState {
                term: 1,
                vote: 1,
                commit: 2,
                ..Default::default()
            })
            .unwrap();
        let path = dir.path().join(ENTRIES_FILE);
        let before = fs::read(&path).unwrap();
        // A leader of term 2 sends its state at 4, where this log has an entry of term 1.
        store
            .apply_snapshot(snapshot(4, 2, "leader state"))
            .unwrap();
        assert_eq!(store.last_index().unwrap(), 4);
        drop(store);
        // The crash: neither the entries file nor the hard state of that round was written.
        fs::write(&path, &before).unwrap();

        let (store, recovery) = FileStore::open(dir.path(), &VOTERS).unwrap();
        assert_eq!(
            recovery,
            Recovery {
                entries_replayed: 0,
                torn_bytes_cut: 0,
                entries_dropped_by_snapshot: 5
            }
        );
        check_snapshot(&store, 4, 2, "leader state");
        assert_eq!(store.last_index().unwrap(), 4);
        // The snapshot's entries are committed; a vote of term 1 is no vote in term 2.
        let hard_state = store.hard_state();
        assert_eq!(
            (hard_state.term, hard_state.vote, hard_state.commit),
            (2, 0, 4)
        );
    }

    #[test]
    fn a_snapshot_newer_than_the_entries_file_is_corrupt_not_a_gap() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = five_entries(dir.path());
        store.compact(snapshot(2, 1, "state at 2")).unwrap();
        drop(store);
        // Entries 3..=5 remain; a lost snapshot file would leave a log starting at 3.
        fs::remove_file(dir.path().join(SNAPSHOT_FILE)).unwrap();
        let result = FileStore::open(dir.path(), &VOTERS);
        assert!(
            matches!(result, Err(Error::Corrupt { .. })),
            "{:?}",
            result.err()
        );
    }
}
