//! A durable Raft store on plain files: an append-only entries log and atomically replaced
//! hard state and snapshot files.
//!
//! Layout in the store's directory:
//! - `raft-entries.log`: frames of `len: u32 LE | crc32: u32 LE | Entry (protobuf)`. An append
//!   that overwrites a conflicting tail is written as new frames; replaying the frames in order
//!   through the in-memory log gives back the same log. At open, the first frame that is short
//!   or fails its CRC and everything after it are cut (a torn tail: only the tail is ever
//!   written), and the file is truncated there.
//! - `raft-hard-state`, `raft-snapshot`: `crc32: u32 LE | message (protobuf)`, replaced by
//!   write to a temporary file, fsync, rename, fsync of the directory; a bad one is an error.
//!
//! Reads are served from an in-memory copy ([`MemStorage`]) kept in step with the files.
//! Each write returns only after `fsync`. The entries file is never compacted yet.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::storage::MemStorage;

use crate::store::LogStore;
use crate::Error;

const ENTRIES_FILE: &str = "raft-entries.log";
const HARD_STATE_FILE: &str = "raft-hard-state";
const SNAPSHOT_FILE: &str = "raft-snapshot";
const FRAME_HEADER_BYTES: usize = 8;
/// An entry larger than this is a corrupt length, not an entry.
const ENTRY_BYTES_MAX: usize = 64 * 1024 * 1024;

/// A Raft store whose writes are durable on return.
pub struct FileStore {
    dir: PathBuf,
    entries: File,
    cache: MemStorage,
}

/// What [`FileStore::open`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    pub entries_replayed: u64,
    /// Bytes of a torn tail cut from the entries file.
    pub torn_bytes_cut: u64,
}

impl FileStore {
    /// Opens (or creates) the store in `dir` for a quorum of `voters`, cutting a torn tail.
    pub fn open(dir: &Path, voters: &[u64]) -> Result<(Self, Recovery), Error> {
        fs::create_dir_all(dir).map_err(io("create dir", dir))?;
        let cache = MemStorage::new_with_conf_state(ConfState::from((voters.to_vec(), Vec::new())));
        let mut snapshot_index = 0;
        if let Some(bytes) = read_checked(&dir.join(SNAPSHOT_FILE))? {
            let snapshot = decode::<Snapshot>(&dir.join(SNAPSHOT_FILE), &bytes)?;
            snapshot_index = snapshot.get_metadata().index;
            cache
                .wl()
                .apply_snapshot(snapshot)
                .map_err(|source| Error::Raft {
                    op: "replay snapshot",
                    source,
                })?;
        }
        if let Some(bytes) = read_checked(&dir.join(HARD_STATE_FILE))? {
            let hard_state = decode::<HardState>(&dir.join(HARD_STATE_FILE), &bytes)?;
            cache.wl().set_hardstate(hard_state);
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
        let mut offset = 0;
        let mut entries_replayed = 0;
        while let Some((entry_bytes, next)) = next_frame(&bytes, offset) {
            let entry = decode::<Entry>(&path, entry_bytes)?;
            if entry.index > snapshot_index {
                cache
                    .wl()
                    .append(std::slice::from_ref(&entry))
                    .map_err(|source| Error::Raft {
                        op: "replay entry",
                        source,
                    })?;
                entries_replayed += 1;
            }
            offset = next;
        }
        let torn_bytes_cut = (bytes.len() - offset) as u64;
        if torn_bytes_cut > 0 {
            entries
                .set_len(offset as u64)
                .map_err(io("truncate torn tail", &path))?;
            entries.sync_all().map_err(io("fsync", &path))?;
        }
        let store = FileStore {
            dir: dir.to_path_buf(),
            entries,
            cache,
        };
        Ok((
            store,
            Recovery {
                entries_replayed,
                torn_bytes_cut,
            },
        ))
    }

    /// The stored hard state.
    pub fn hard_state(&self) -> HardState {
        self.cache.rl().hard_state().clone()
    }
}

/// The payload of the frame at `offset` and the offset after it, or `None` at the end or at a
/// torn (short or CRC-failing) frame.
fn next_frame(bytes: &[u8], offset: usize) -> Option<(&[u8], usize)> {
    let header = bytes.get(offset..offset + FRAME_HEADER_BYTES)?;
    let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    if len > ENTRY_BYTES_MAX {
        return None;
    }
    let start = offset + FRAME_HEADER_BYTES;
    let payload = bytes.get(start..start + len)?;
    (crc32fast::hash(payload) == crc).then_some((payload, start + len))
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
    let corrupt = |reason: &str| Error::Corrupt {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let (crc, payload) = bytes
        .split_at_checked(4)
        .ok_or_else(|| corrupt("shorter than its CRC"))?;
    if crc32fast::hash(payload) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err(corrupt("CRC mismatch"));
    }
    Ok(Some(payload.to_vec()))
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
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync dir", dir))
}

impl LogStore for FileStore {
    fn append(&mut self, entries: &[Entry]) -> Result<(), Error> {
        let path = self.dir.join(ENTRIES_FILE);
        let mut frames = Vec::new();
        for entry in entries {
            let payload = encode(&path, entry)?;
            assert!(
                payload.len() <= ENTRY_BYTES_MAX,
                "entry of {} bytes",
                payload.len()
            );
            frames.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            frames.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
            frames.extend_from_slice(&payload);
        }
        self.entries
            .write_all(&frames)
            .map_err(io("append", &path))?;
        self.entries.sync_data().map_err(io("fsync", &path))?;
        self.cache
            .wl()
            .append(entries)
            .map_err(|source| Error::Raft {
                op: "append",
                source,
            })
    }

    fn set_hard_state(&mut self, hard_state: &HardState) -> Result<(), Error> {
        let payload = encode(&self.dir.join(HARD_STATE_FILE), hard_state)?;
        replace_checked(&self.dir, HARD_STATE_FILE, &payload)?;
        self.cache.wl().set_hardstate(hard_state.clone());
        Ok(())
    }

    fn apply_snapshot(&mut self, snapshot: Snapshot) -> Result<(), Error> {
        // Snapshot first, then drop the entries it covers: a crash between the two leaves
        // entries that open() skips by index.
        let payload = encode(&self.dir.join(SNAPSHOT_FILE), &snapshot)?;
        replace_checked(&self.dir, SNAPSHOT_FILE, &payload)?;
        let path = self.dir.join(ENTRIES_FILE);
        self.entries.set_len(0).map_err(io("truncate", &path))?;
        self.entries.sync_all().map_err(io("fsync", &path))?;
        self.cache
            .wl()
            .apply_snapshot(snapshot)
            .map_err(|source| Error::Raft {
                op: "apply snapshot",
                source,
            })
    }
}

crate::store::storage_reads_from!(FileStore, cache);

#[cfg(test)]
mod tests {
    use super::*;
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
    fn entries_and_hard_state_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, recovery) = FileStore::open(dir.path(), &VOTERS).unwrap();
        assert_eq!(
            recovery,
            Recovery {
                entries_replayed: 0,
                torn_bytes_cut: 0
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
                torn_bytes_cut: 0
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
                    torn_bytes_cut: cut - whole_two
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
}
