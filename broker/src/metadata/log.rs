//! The metadata log: records appended in order, synced, and replayed at
//! start. [`MetadataLog`] is the seam: [`FileMetadataLog`] keeps them in
//! one file of the data dir (`__metadata/metadata.log`) on a single node;
//! a cluster's records go through the controller quorum's Raft log. [`MetadataWriter`] runs a log on a
//! thread of its own, so that the blocking writes and fsyncs never hold
//! an executor.
//!
//! Record framing: `len u32 | crc32 u32 (crc32fast of payload) | payload`.
//! A torn tail (a damaged record with no valid record after it: a crash
//! during an append) is truncated at open, with a warning. A damaged
//! record with valid records after it is not a torn write: those records
//! were committed, so start-up refuses with the byte position and the
//! repair command ([`repair`]) instead of dropping them.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::MetadataRecord;
use super::{MetadataError, METADATA_DIR, METADATA_FILE};
use crate::limits::{METADATA_RECORD_BYTES_MAX, METADATA_WRITES_QUEUED_MAX};

/// An ordered, durable sequence of metadata records.
pub trait MetadataLog: Send {
    /// Every record of the log, in order: what start-up applies.
    fn replay(&mut self) -> Result<Vec<MetadataRecord>, MetadataError>;
    /// Appends `records` after the last one; durable only after [`sync`].
    ///
    /// [`sync`]: MetadataLog::sync
    fn append(&mut self, records: &[MetadataRecord]) -> Result<(), MetadataError>;
    /// Makes every appended record durable.
    fn sync(&mut self) -> Result<(), MetadataError>;
}

/// A record frame at `position` that is not valid, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Damage {
    position: usize,
    reason: String,
    /// Start of the first valid record after the damage, if any: with
    /// none, the damage is a torn tail.
    next_valid: Option<usize>,
    /// The frame's CRC matched but its payload is not understood (a
    /// newer version wrote it, or a bug): never a torn write.
    crc_valid: bool,
}

/// What reading a metadata log's bytes found.
struct Replayed {
    /// The valid records, each with its byte position.
    records: Vec<(usize, MetadataRecord)>,
    /// End of the valid records before the first damaged one.
    valid_end: usize,
    damage: Option<Damage>,
}

/// Why no record is framed at a position: the reason, and whether the
/// frame's CRC matched (its payload is then not understood).
type FrameError = (String, bool);

/// The record framed at `position`, or why there is none.
fn frame_at(bytes: &[u8], position: usize) -> Result<(MetadataRecord, usize), FrameError> {
    let rest = &bytes[position..];
    if rest.len() < 8 {
        return Err((
            format!("{} bytes, too short for a record head", rest.len()),
            false,
        ));
    }
    let len = u32::from_be_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_be_bytes(rest[4..8].try_into().expect("4 bytes"));
    if len > METADATA_RECORD_BYTES_MAX {
        return Err((
            format!("length {len} above the {METADATA_RECORD_BYTES_MAX}-byte record limit"),
            false,
        ));
    }
    if rest.len() - 8 < len {
        return Err((
            format!(
                "length {len} runs past the end of the file ({} bytes left)",
                rest.len() - 8
            ),
            false,
        ));
    }
    let payload = &rest[8..8 + len];
    if crc32fast::hash(payload) != crc {
        return Err(("CRC mismatch".to_string(), false));
    }
    let record = MetadataRecord::decode(payload).map_err(|reason| (reason, true))?;
    Ok((record, 8 + len))
}

/// The record framed at `position` of a metadata log's bytes and the
/// position after its frame, or why no valid record is framed there: for
/// tools that read the file as it lies (`strom log dump`).
pub fn record_at(bytes: &[u8], position: usize) -> Result<(MetadataRecord, usize), String> {
    frame_at(bytes, position)
        .map(|(record, len)| (record, position + len))
        .map_err(|(reason, _)| reason)
}

/// Replays `bytes` up to the first damaged record, and looks past it for
/// a valid record (at any byte: the damaged length says nothing).
fn replay_bytes(bytes: &[u8]) -> Replayed {
    let mut records = Vec::new();
    let mut position = 0usize;
    let mut damage = None;
    while position < bytes.len() {
        match frame_at(bytes, position) {
            Ok((record, len)) => {
                records.push((position, record));
                position += len;
            }
            Err((reason, crc_valid)) => {
                let next_valid = (position + 1..bytes.len()).find(|&q| frame_at(bytes, q).is_ok());
                damage = Some(Damage {
                    position,
                    reason,
                    next_valid,
                    crc_valid,
                });
                break;
            }
        }
    }
    Replayed {
        records,
        valid_end: position,
        damage,
    }
}

/// What [`repair`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairReport {
    /// The copy of the log as it was before the repair.
    pub backup: PathBuf,
    /// Bytes removed: `[position, position + removed_bytes)`.
    pub position: u64,
    pub removed_bytes: u64,
    /// Valid records kept after the removed bytes.
    pub records_after: usize,
}

/// Removes the damaged record at byte `position` of `data_dir`'s metadata
/// log: the bytes up to the next valid record (or to the end for a torn
/// tail). A copy of the original file is kept next to it first. Refuses
/// unless `position` is where the first damaged record starts.
pub fn repair(data_dir: &Path, position: u64) -> Result<RepairReport, MetadataError> {
    let path = data_dir.join(METADATA_DIR).join(METADATA_FILE);
    let io = |op: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |error| MetadataError::Io { op, path, error }
    };
    let bytes = std::fs::read(&path).map_err(io("read", &path))?;
    let replayed = replay_bytes(&bytes);
    let nothing = |reason: String| MetadataError::NothingToRepair {
        path: path.clone(),
        position,
        reason,
    };
    let Some(damage) = replayed.damage else {
        return Err(nothing(format!(
            "every record of the {} bytes is valid",
            bytes.len()
        )));
    };
    if damage.position as u64 != position {
        return Err(nothing(format!(
            "the first damaged record starts at byte {}",
            damage.position
        )));
    }
    let resume = damage.next_valid.unwrap_or(bytes.len());
    let mut repaired = bytes[..damage.position].to_vec();
    repaired.extend_from_slice(&bytes[resume..]);
    let after = replay_bytes(&repaired);
    if let Some(later) = after.damage {
        // Repaired one at a time, so each removal is the operator's choice.
        tracing::warn!(
            position = later.position,
            reason = %later.reason,
            "another damaged record follows; run the repair again for it"
        );
    }
    let stamp = storage::clock::system_wall_ms() / 1000;
    let backup = path.with_file_name(format!("{METADATA_FILE}.{stamp}.before-repair"));
    std::fs::copy(&path, &backup).map_err(io("copy to a backup", &backup))?;
    File::open(&backup)
        .and_then(|f| f.sync_all())
        .map_err(io("sync", &backup))?;
    // Written aside and renamed over, so a crash leaves one whole file.
    let staged = path.with_file_name(format!("{METADATA_FILE}.repairing"));
    std::fs::write(&staged, &repaired).map_err(io("write", &staged))?;
    File::open(&staged)
        .and_then(|f| f.sync_all())
        .map_err(io("sync", &staged))?;
    std::fs::rename(&staged, &path).map_err(io("rename", &path))?;
    let dir = data_dir.join(METADATA_DIR);
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(io("sync directory", &dir))?;
    let records_after = after
        .records
        .iter()
        .filter(|(at, _)| *at >= damage.position)
        .count();
    Ok(RepairReport {
        backup,
        position,
        removed_bytes: (resume - damage.position) as u64,
        records_after,
    })
}

/// The metadata log in one append-only file.
pub struct FileMetadataLog {
    file: File,
    path: PathBuf,
}

fn io_error(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> MetadataError {
    let path = path.to_path_buf();
    move |error| MetadataError::Io { op, path, error }
}

impl FileMetadataLog {
    /// Opens (or creates) the log in `data_dir` and truncates a torn tail;
    /// refuses a log whose damage is not a torn tail.
    pub fn open(data_dir: &Path) -> Result<FileMetadataLog, MetadataError> {
        let dir = data_dir.join(METADATA_DIR);
        let path = dir.join(METADATA_FILE);
        std::fs::create_dir_all(&dir).map_err(io_error("create directory", &dir))?;
        let created = !path.exists();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_error("open", &path))?;
        if created {
            File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(io_error("sync directory", &dir))?;
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(io_error("read", &path))?;
        let Replayed {
            valid_end, damage, ..
        } = replay_bytes(&bytes);
        if let Some(damage) = damage {
            if damage.crc_valid {
                return Err(MetadataError::Corrupt {
                    path,
                    position: damage.position as u64,
                    reason: damage.reason,
                });
            }
            match damage.next_valid {
                Some(next_valid) => {
                    return Err(MetadataError::Damaged {
                        path,
                        data_dir: data_dir.to_path_buf(),
                        position: damage.position as u64,
                        next_valid: next_valid as u64,
                        reason: damage.reason,
                    })
                }
                None => {
                    tracing::warn!(
                        path = %path.display(),
                        valid_bytes = valid_end,
                        file_bytes = bytes.len(),
                        reason = %damage.reason,
                        "truncating torn metadata log tail (no valid record after it)"
                    );
                    file.set_len(valid_end as u64)
                        .map_err(io_error("truncate", &path))?;
                    file.sync_all().map_err(io_error("sync", &path))?;
                }
            }
        }
        file.seek(SeekFrom::End(0))
            .map_err(io_error("seek", &path))?;
        Ok(FileMetadataLog { file, path })
    }
}

impl MetadataLog for FileMetadataLog {
    fn replay(&mut self) -> Result<Vec<MetadataRecord>, MetadataError> {
        let bytes = std::fs::read(&self.path).map_err(io_error("read", &self.path))?;
        let replayed = replay_bytes(&bytes);
        if let Some(damage) = replayed.damage {
            // Open cut any torn tail: damage now is damage since.
            return Err(MetadataError::Corrupt {
                path: self.path.clone(),
                position: damage.position as u64,
                reason: damage.reason,
            });
        }
        Ok(replayed.records.into_iter().map(|(_, r)| r).collect())
    }

    fn append(&mut self, records: &[MetadataRecord]) -> Result<(), MetadataError> {
        let mut frames = Vec::new();
        for record in records {
            let payload = record.encode();
            frames.extend_from_slice(&(payload.len() as u32).to_be_bytes());
            frames.extend_from_slice(&crc32fast::hash(&payload).to_be_bytes());
            frames.extend_from_slice(&payload);
        }
        self.file
            .write_all(&frames)
            .map_err(io_error("append", &self.path))
    }

    fn sync(&mut self) -> Result<(), MetadataError> {
        self.file.sync_data().map_err(io_error("sync", &self.path))
    }
}

/// One batch of records for the writer thread, and where its outcome goes.
struct WriteRequest {
    records: Vec<MetadataRecord>,
    done: flume::Sender<Result<(), MetadataError>>,
}

/// Runs a [`MetadataLog`] on a thread of its own (`strom-metadata`): each
/// write appends and syncs there while the calling executor serves other
/// work. A dedicated thread rather than glommio's blocking pool: the log
/// stays owned by one thread (no lock around it), writes are applied in
/// the order they were sent, and flume is the channel the workspace uses
/// between executors and plain threads.
pub struct MetadataWriter {
    requests: flume::Sender<WriteRequest>,
}

impl MetadataWriter {
    /// Starts the writer thread; it ends when the writer is dropped.
    pub fn start(mut log: Box<dyn MetadataLog>) -> std::io::Result<MetadataWriter> {
        let (requests, received) = flume::bounded::<WriteRequest>(METADATA_WRITES_QUEUED_MAX);
        std::thread::Builder::new()
            .name("strom-metadata".to_string())
            .spawn(move || {
                for request in received.iter() {
                    let outcome = log.append(&request.records).and_then(|()| log.sync());
                    // The writer may have stopped waiting (its task dropped).
                    let _ = request.done.send(outcome);
                }
            })?;
        Ok(MetadataWriter { requests })
    }

    /// Appends `records` and syncs them; returns once they are durable.
    pub async fn write(&self, records: Vec<MetadataRecord>) -> Result<(), MetadataError> {
        let (done, outcome) = flume::bounded(1);
        let stopped = || MetadataError::WriterStopped;
        self.requests
            .send_async(WriteRequest { records, done })
            .await
            .map_err(|_| stopped())?;
        outcome.recv_async().await.map_err(|_| stopped())?
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::metadata::testing::{topic_meta, MemoryMetadataLog};
    use crate::metadata::{open, MetadataImage, PartitionState, TopicMeta};

    fn topic(name: &str, cores: &[u32]) -> MetadataRecord {
        MetadataRecord::TopicCreated(TopicMeta {
            configs: BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]),
            ..topic_meta(name, cores)
        })
    }

    fn append(log: &mut dyn MetadataLog, record: MetadataRecord) {
        log.append(&[record]).unwrap();
        log.sync().unwrap();
    }

    /// What every implementation of the trait does: records come back in
    /// the order appended, across appends of several records, and after
    /// the log is opened again (`reopen`).
    fn check_contract<L: MetadataLog>(mut log: L, reopen: impl Fn(L) -> L) {
        let before = log.replay().unwrap();
        let added = vec![
            topic("a", &[0]),
            MetadataRecord::ProducerIdsAllocated { end: 10 },
            topic("b", &[0, 1]),
        ];
        log.append(&added[..1]).unwrap();
        log.append(&added[1..]).unwrap();
        log.sync().unwrap();
        let mut expected = before;
        expected.extend(added);
        assert_eq!(log.replay().unwrap(), expected);
        assert_eq!(reopen(log).replay().unwrap(), expected);
    }

    #[test]
    fn both_logs_keep_records_in_order() {
        check_contract(MemoryMetadataLog::default(), |log| log.crash());
        let dir = tempfile::tempdir().unwrap();
        let (file, _) = open(dir.path(), 0).unwrap();
        check_contract(file, |log| {
            drop(log);
            FileMetadataLog::open(dir.path()).unwrap()
        });
    }

    #[test]
    fn the_writer_thread_appends_and_syncs() {
        let dir = tempfile::tempdir().unwrap();
        let (log, image) = open(dir.path(), 0).unwrap();
        let writer = MetadataWriter::start(Box::new(log)).unwrap();
        futures_lite::future::block_on(writer.write(vec![topic("a", &[0])])).unwrap();
        drop(writer);
        let (_, reopened) = open(dir.path(), 0).unwrap();
        assert_eq!(reopened.cluster_id, image.cluster_id);
        assert_eq!(reopened.topics.keys().collect::<Vec<_>>(), vec!["a"]);
    }

    /// `metadata-before-partition-state.log` was written by the broker
    /// before leaders, ISRs and epochs were recorded: topic `orders` (3
    /// partitions, then 5), `manual` (2 partitions assigned by hand to
    /// broker 0, then a config), `gone` (created and deleted), and a
    /// producer id block. It still opens, each partition led by its
    /// replica at epoch 0.
    #[test]
    fn a_log_written_before_partition_states_were_recorded_opens() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/metadata-before-partition-state.log");
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(METADATA_DIR)).unwrap();
        let path = dir.path().join(METADATA_DIR).join(METADATA_FILE);
        std::fs::copy(&fixture, &path).unwrap();
        let (_, image) = open(dir.path(), 0).unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(&fixture).unwrap(),
            "untouched"
        );
        assert_eq!(
            image.topics.keys().collect::<Vec<_>>(),
            vec!["manual", "orders"]
        );
        assert_eq!(image.topics["orders"].partition_cores.len(), 5);
        assert_eq!(image.topics["orders"].configs["retention.ms"], "86400000");
        assert_eq!(image.topics["manual"].configs["retention.bytes"], "1048576");
        for topic in image.topics.values() {
            assert_eq!(
                topic.partitions,
                vec![PartitionState::new(vec![0]); topic.partition_cores.len()],
                "{}",
                topic.name
            );
        }
        assert!(image.producer_ids_end > 0);
        let again = MetadataImage::replay(
            0,
            &FileMetadataLog::open(dir.path()).unwrap().replay().unwrap(),
        );
        assert_eq!(
            again.cluster_id, image.cluster_id,
            "the fixture has its cluster id"
        );
    }

    #[test]
    fn log_replays_and_truncates_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, image) = open(dir.path(), 0).unwrap();
        let cluster_id = image.cluster_id.clone();
        assert_eq!(cluster_id.len(), 22);
        append(&mut log, topic("a", &[0, 1]));
        append(
            &mut log,
            MetadataRecord::PartitionsAdded {
                name: "a".to_string(),
                cores: vec![0],
                partitions: vec![PartitionState::new(vec![0])],
            },
        );
        drop(log);
        let path = dir.path().join(METADATA_DIR).join(METADATA_FILE);
        let full = std::fs::read(&path).unwrap();
        let mut torn = full.clone();
        torn.extend_from_slice(&[0, 0, 0, 50, 1, 2]);
        std::fs::write(&path, &torn).unwrap();
        let (_, image) = open(dir.path(), 0).unwrap();
        assert_eq!(image.cluster_id, cluster_id);
        assert_eq!(image.topics["a"].partition_cores, vec![0, 1, 0]);
        assert_eq!(std::fs::read(&path).unwrap(), full);
    }

    /// A log of a cluster id and topics `a`, `b`, `c`; returns its path and
    /// the byte position of each topic's record.
    fn three_topics(dir: &Path) -> (PathBuf, Vec<u64>) {
        let (mut log, _) = open(dir, 0).unwrap();
        let path = dir.join(METADATA_DIR).join(METADATA_FILE);
        let mut positions = Vec::new();
        for name in ["a", "b", "c"] {
            positions.push(std::fs::metadata(&path).unwrap().len());
            append(&mut log, topic(name, &[0]));
        }
        (path, positions)
    }

    #[test]
    fn a_damaged_record_with_valid_records_after_it_refuses_to_open() {
        let dir = tempfile::tempdir().unwrap();
        let (path, positions) = three_topics(dir.path());
        let mut bytes = std::fs::read(&path).unwrap();
        // One flipped byte in the payload of topic `b`'s record.
        bytes[positions[1] as usize + 12] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();
        let error = open(dir.path(), 0).err().expect("refused");
        let message = error.to_string();
        assert!(
            matches!(error, MetadataError::Damaged { position, next_valid, .. }
                if position == positions[1] && next_valid == positions[2]),
            "{message}"
        );
        assert!(message.contains(&format!("--drop-damaged-at {}", positions[1])));
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing was touched");

        // A repair elsewhere than the damage is refused; at it, only the
        // damaged record goes and a copy of the original stays.
        assert!(matches!(
            repair(dir.path(), positions[2]),
            Err(MetadataError::NothingToRepair { .. })
        ));
        let report = repair(dir.path(), positions[1]).unwrap();
        assert_eq!(report.records_after, 1);
        assert_eq!(report.removed_bytes, positions[2] - positions[1]);
        assert_eq!(std::fs::read(&report.backup).unwrap(), bytes);
        let (_, image) = open(dir.path(), 0).unwrap();
        assert_eq!(
            image.topics.keys().collect::<Vec<_>>(),
            vec!["a", "c"],
            "the topics of valid records are all kept"
        );
    }

    #[test]
    fn a_damaged_last_record_is_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let (path, positions) = three_topics(dir.path());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[positions[2] as usize + 12] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();
        let (_, image) = open(dir.path(), 0).unwrap();
        assert_eq!(image.topics.keys().collect::<Vec<_>>(), vec!["a", "b"]);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), positions[2]);
    }

    #[test]
    fn a_valid_record_that_is_not_understood_is_never_cut() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = three_topics(dir.path());
        let mut bytes = std::fs::read(&path).unwrap();
        let before = bytes.len();
        let payload = [99u8, 1, 2, 3];
        bytes.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&crc32fast::hash(&payload).to_be_bytes());
        bytes.extend_from_slice(&payload);
        std::fs::write(&path, &bytes).unwrap();
        let error = open(dir.path(), 0).err().expect("refused");
        assert!(
            matches!(error, MetadataError::Corrupt { position, .. } if position == before as u64),
            "{error}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }
}
