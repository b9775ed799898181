//! `strom log dump`: prints what a file of the data dir holds, for people
//! and scripts, and says where it is damaged. Kafka's `kafka-dump-log.sh`
//! is the model: a partition segment's batches (and records), its indexes
//! checked against it, the metadata log and the Raft store's files, the
//! snapshots. It reads files only (opened read-only, no lock), so it runs
//! on a copy or on the live files of a running broker, and it never talks
//! to a broker.

mod metadata;
mod output;
mod segment;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};

use output::{Line, Printer};

#[derive(Args, Debug)]
pub struct LogArgs {
    #[command(subcommand)]
    command: LogCommand,
}

#[derive(Subcommand, Debug)]
enum LogCommand {
    /// Print what a log file of the data dir holds and report damage.
    ///
    /// Reads each PATH (opened read-only, never locked or written: a copy,
    /// or the live file of a running broker, read up to its size when it
    /// was opened: a batch being written at that moment may show as
    /// damaged, dump again) and prints one line per thing found, as `KIND
    /// name=value ...` (text taken from the file in double quotes; bytes
    /// that are not printable UTF-8 as `hex:...`; `null` when absent), or
    /// with --json one JSON object per line.
    ///
    /// The file's type comes from its name (or --type):
    ///
    /// - `<20 digits>.log` (any `*.log` but the two below): a partition
    ///   segment. A `batch` line per record batch: position (byte in the
    ///   file), base_offset, last_offset, records (count), size (bytes),
    ///   codec (none, gzip, snappy, lz4, zstd), leader_epoch (partition
    ///   leader epoch), producer_id, producer_epoch, base_sequence,
    ///   transactional, control, timestamp_type (create or log_append),
    ///   max_timestamp, crc and crc_valid (the CRC-32C recomputed). With
    ///   --records a `record` line after each batch whose CRC holds
    ///   (compressed batches are decompressed): offset, timestamp,
    ///   sequence (idempotent producers), key, value_bytes (`null` and
    ///   `tombstone=true` for a null value), headers (each key with its
    ///   value's size, `null` for a null value), and for a transaction's
    ///   end marker, marker (commit or abort) and coordinator_epoch.
    ///   Zeros to the end of the file are space preallocated for the
    ///   batches to come (a `tail` line), not damage.
    /// - `<20 digits>.index`, `<20 digits>.timeindex`: the segment's
    ///   offset index (offset, position) and time index (timestamp,
    ///   offset), entry by entry.
    /// - `metadata.log` (`__metadata/` of a single node): the metadata log,
    ///   each record with its position, size and contents.
    /// - `raft-entries.log` (`__metadata/raft/` of a cluster member): each
    ///   Raft entry with its position, size, index and term, and the
    ///   metadata records it carries (or the voter change and the node's
    ///   directory); an entry whose index is not above the one before it
    ///   replaced a conflicting tail (`replaces_earlier=true`).
    /// - `raft-hard-state`: term, vote, commit. `raft-snapshot`: its index,
    ///   term, voters and learners, and the metadata image it holds
    ///   (brokers, topics, each partition's replicas, leader, epochs and
    ///   ISR, configs).
    /// - `<20 digits>.snapshot` (in a partition's directory): the producer
    ///   state: each producer's id, epoch, last sequence and time.
    /// - A metadata image snapshot on its own (found by its magic bytes).
    ///
    /// Raft entries of a type Strom never proposes (joint configuration
    /// changes) are printed with their index, term, type and size only.
    ///
    /// Damage: each problem prints a `problem` line with the byte position
    /// where it starts and the reason: a batch or frame whose CRC fails, a
    /// header that does not parse (bad magic, bad length), garbage bytes, a
    /// batch or frame cut short by the end of the file, offsets that do not
    /// grow, records that do not decode. The dump goes on at the next valid
    /// batch or frame after the damage, found by searching the bytes that
    /// follow. A `summary` line ends each segment, index and log.
    ///
    /// Exit status: 0 when every file was read and everything checked is
    /// valid; 1 when a problem was found (a line on stderr counts them), or
    /// a PATH cannot be read (missing, a directory, a type the tool does not
    /// know: one line on stderr); 2 for a usage error.
    #[command(verbatim_doc_comment)]
    Dump(DumpArgs),
}

#[derive(Args, Debug)]
struct DumpArgs {
    /// The files to read, one after the other.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Segments: also print every record of every batch whose CRC holds
    /// (compressed batches are decompressed).
    #[arg(long, visible_alias = "deep-iteration")]
    records: bool,
    /// Segments: also print every record's value, after its size (as
    /// keys are printed); implies --records.
    #[arg(long, visible_alias = "print-data-log")]
    values: bool,
    /// Segments: check the `.index` and `.timeindex` beside the segment
    /// against its batches (every offset index entry names the position
    /// where a batch starts that ends at the entry's offset; every time
    /// index entry names an offset of a batch whose max timestamp is the
    /// entry's timestamp; entries grow) and print each mismatch. A missing
    /// index is said, not counted as a problem (an active segment's are
    /// written when it is sealed or the broker stops). Index files given
    /// as PATH: check their entries against the segment beside them.
    #[arg(long)]
    verify_index: bool,
    /// One JSON object per line (`{"type": KIND, ...}`, the fields of the
    /// text lines; a key or value that is not UTF-8 goes in `key_hex` or
    /// `value_hex` as hex) instead of text.
    #[arg(long)]
    json: bool,
    /// What the files are, when their names do not say (a copy under
    /// another name).
    #[arg(long = "type", value_enum, value_name = "TYPE")]
    file_type: Option<FileType>,
}

/// The files the tool reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum FileType {
    /// A partition segment (`<base offset>.log`).
    Segment,
    /// A segment's offset index (`.index`).
    Index,
    /// A segment's time index (`.timeindex`).
    TimeIndex,
    /// A single node's metadata log (`metadata.log`).
    MetadataLog,
    /// A cluster member's Raft entries (`raft-entries.log`).
    RaftEntries,
    /// A cluster member's Raft hard state (`raft-hard-state`).
    RaftHardState,
    /// A cluster member's Raft snapshot (`raft-snapshot`).
    RaftSnapshot,
    /// A metadata image snapshot.
    ImageSnapshot,
    /// A partition's producer-state snapshot (`<offset>.snapshot`).
    ProducerSnapshot,
}

/// The magic bytes a metadata image snapshot starts with.
const IMAGE_SNAPSHOT_MAGIC: &[u8; 8] = b"STRMIMG\0";

/// What a file is, from its name or, for an image snapshot, its first
/// bytes.
fn detect(path: &Path) -> Option<FileType> {
    let name = path.file_name()?.to_str()?;
    let by_name = match name {
        broker::metadata::METADATA_FILE => Some(FileType::MetadataLog),
        replication::file_store::ENTRIES_FILE => Some(FileType::RaftEntries),
        replication::file_store::HARD_STATE_FILE => Some(FileType::RaftHardState),
        replication::file_store::SNAPSHOT_FILE => Some(FileType::RaftSnapshot),
        _ if name.ends_with(".log") => Some(FileType::Segment),
        _ if name.ends_with(".timeindex") => Some(FileType::TimeIndex),
        _ if name.ends_with(".index") => Some(FileType::Index),
        _ if name.ends_with(".snapshot") => Some(FileType::ProducerSnapshot),
        _ => None,
    };
    by_name.or_else(|| {
        let mut magic = [0u8; IMAGE_SNAPSHOT_MAGIC.len()];
        let file = std::fs::File::open(path).ok()?;
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut magic, 0).ok()?;
        (&magic == IMAGE_SNAPSHOT_MAGIC).then_some(FileType::ImageSnapshot)
    })
}

const KNOWN_FILES: &str = "a segment <20 digits>.log, its .index or .timeindex, \
     __metadata/metadata.log, __metadata/raft/raft-entries.log, raft-hard-state, raft-snapshot, \
     a producer-state <20 digits>.snapshot";

/// Dumps one file; `Err` when it cannot be read at all.
fn dump_one(path: &Path, args: &DumpArgs, printer: &mut Printer) -> Result<(), String> {
    let metadata =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if metadata.is_dir() {
        return Err(format!(
            "{} is a directory; give one of its files ({KNOWN_FILES})",
            path.display()
        ));
    }
    let Some(file_type) = args.file_type.or_else(|| detect(path)) else {
        return Err(format!(
            "cannot tell what {} is from its name: give --type, or one of {KNOWN_FILES}",
            path.display()
        ));
    };
    let is_segment_or_index = matches!(
        file_type,
        FileType::Segment | FileType::Index | FileType::TimeIndex
    );
    if args.verify_index && !is_segment_or_index {
        return Err(format!(
            "--verify-index checks a segment's indexes; {} is a {}",
            path.display(),
            file_type
                .to_possible_value()
                .map_or("file".to_string(), |v| v.get_name().to_string())
        ));
    }
    match file_type {
        FileType::Segment => segment::dump(
            path,
            segment::Options {
                records: args.records || args.values,
                values: args.values,
                verify_index: args.verify_index,
            },
            printer,
        ),
        FileType::Index => {
            segment::dump_index(path, segment::IndexKind::Offset, args.verify_index, printer)
        }
        FileType::TimeIndex => {
            segment::dump_index(path, segment::IndexKind::Time, args.verify_index, printer)
        }
        FileType::MetadataLog => metadata::dump_metadata_log(path, printer),
        FileType::RaftEntries => metadata::dump_raft_entries(path, printer),
        FileType::RaftHardState => metadata::dump_hard_state(path, printer),
        FileType::RaftSnapshot => metadata::dump_raft_snapshot(path, printer),
        FileType::ImageSnapshot => metadata::dump_image(path, printer),
        FileType::ProducerSnapshot => metadata::dump_producer_snapshot(path, printer),
    }
}

pub fn run(args: LogArgs) -> ExitCode {
    let LogCommand::Dump(args) = args.command;
    let mut printer = Printer::new(args.json);
    let mut unreadable = 0usize;
    for path in &args.paths {
        if let Err(error) = dump_one(path, &args, &mut printer) {
            // In order with what was printed before it.
            printer.flush();
            eprintln!("strom log dump: {error}");
            unreadable += 1;
        }
    }
    if args.paths.len() > 1 {
        printer.line(
            Line::new("files")
                .num("read", args.paths.len() - unreadable)
                .num("unreadable", unreadable)
                .num("problems", printer.problems()),
        );
    }
    printer.flush();
    let problems = printer.problems();
    if problems > 0 {
        eprintln!(
            "strom log dump: {problems} problem{} found (see the `problem` lines)",
            if problems == 1 { "" } else { "s" }
        );
    }
    if problems > 0 || unreadable > 0 {
        ExitCode::from(crate::cli::EXIT_FAILURE)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_types_come_from_the_names_the_broker_gives_them() {
        let check = |name: &str, expected: Option<FileType>| {
            assert_eq!(detect(Path::new(name)), expected, "{name}");
        };
        check("d/t-0/00000000000000000000.log", Some(FileType::Segment));
        check("copy.log", Some(FileType::Segment));
        check("d/t-0/00000000000000000000.index", Some(FileType::Index));
        check("00000000000000000000.timeindex", Some(FileType::TimeIndex));
        check("d/__metadata/metadata.log", Some(FileType::MetadataLog));
        check("raft/raft-entries.log", Some(FileType::RaftEntries));
        check("raft/raft-hard-state", Some(FileType::RaftHardState));
        check("raft/raft-snapshot", Some(FileType::RaftSnapshot));
        check(
            "t-0/00000000000000000042.snapshot",
            Some(FileType::ProducerSnapshot),
        );
        check("t-0/strom.checkpoint", None);
    }

    #[test]
    fn an_image_snapshot_is_known_by_its_magic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("image.bin");
        let image = broker::metadata::MetadataImage::new(1);
        std::fs::write(&path, broker::metadata::encode_snapshot(&image)).unwrap();
        assert_eq!(detect(&path), Some(FileType::ImageSnapshot));
        assert!(broker::metadata::encode_snapshot(&image).starts_with(IMAGE_SNAPSHOT_MAGIC));
        std::fs::write(&path, b"something else").unwrap();
        assert_eq!(detect(&path), None);
    }
}
