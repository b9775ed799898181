//! `strom repair`: offline repairs that start-up refuses to make on its own
//! because they drop data. Each keeps a copy of everything it removes and
//! says what it did; the broker must not be running on the data dir.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};

#[derive(Args, Debug)]
pub struct RepairArgs {
    #[command(subcommand)]
    command: RepairCommand,
}

#[derive(Subcommand, Debug)]
enum RepairCommand {
    /// Remove the damaged record at a byte position of the metadata log
    /// (the position start-up names); the records after it are kept.
    Metadata {
        /// The broker's data directory.
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
        /// Byte position of the damaged record.
        #[arg(long, value_name = "POS")]
        drop_damaged_at: u64,
    },
    /// Cut a partition's log at a corrupt batch of a segment (the file and
    /// position start-up names): that segment ends there, later segments
    /// are moved out of the log.
    Segment {
        /// The segment file, `<data-dir>/<topic>-<partition>/<base>.log`.
        #[arg(long, value_name = "FILE")]
        file: PathBuf,
        /// Byte position of the first corrupt batch.
        #[arg(long, value_name = "POS")]
        truncate_at: u64,
    },
}

pub fn run(args: RepairArgs) -> anyhow::Result<()> {
    match args.command {
        RepairCommand::Metadata {
            data_dir,
            drop_damaged_at,
        } => {
            let _lock = broker::exclusive::DataDirLock::acquire(&data_dir)?;
            let report = broker::metadata::repair(&data_dir, drop_damaged_at)?;
            outln!(
                "removed {} bytes at byte {} of the metadata log; {} valid records after them kept; \
                 the original is in {}",
                report.removed_bytes,
                report.position,
                report.records_after,
                report.backup.display()
            );
            Ok(())
        }
        RepairCommand::Segment { file, truncate_at } => repair_segment(&file, truncate_at),
    }
}

/// The base offset of a segment file named `<20 digits>.log`.
fn segment_base(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".log")?;
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot sync directory {}", dir.display()))
}

fn repair_segment(file: &Path, truncate_at: u64) -> anyhow::Result<()> {
    let Some(base) = segment_base(file) else {
        bail!(
            "{} is not a segment file (<20-digit base offset>.log)",
            file.display()
        );
    };
    let file_bytes = std::fs::metadata(file)
        .with_context(|| format!("cannot read {}", file.display()))?
        .len();
    if truncate_at >= file_bytes {
        bail!(
            "{} has {file_bytes} bytes: nothing at byte {truncate_at} to cut",
            file.display()
        );
    }
    let partition_dir = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let partition = partition_dir
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", partition_dir.display()))?;
    let data_dir = partition
        .parent()
        .context("the segment's directory has no parent (the data dir)")?;
    // Never under a running broker: it holds the data dir's lock.
    let _lock = broker::exclusive::DataDirLock::acquire(data_dir)?;
    let name = partition
        .file_name()
        .and_then(|n| n.to_str())
        .context("the partition directory's name is not UTF-8")?;
    let stamp = storage::clock::system_wall_ms() / 1000;
    let backup = data_dir
        .join(broker::metadata::REPAIR_DIR)
        .join(format!("{name}-{stamp}"));
    std::fs::create_dir_all(&backup)
        .with_context(|| format!("cannot create {}", backup.display()))?;

    // What leaves the log: the later segments, the cut segment's indexes
    // (rebuilt from the cut file) and the checkpoint (so the next start
    // scans the log instead of trusting what it recorded).
    let mut moved = Vec::new();
    let mut later_segments = 0usize;
    for entry in std::fs::read_dir(&partition)
        .with_context(|| format!("cannot list {}", partition.display()))?
    {
        let path = entry?.path();
        let Some(file_name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some((stem, ext)) = file_name.split_once('.') else {
            continue;
        };
        let segment_file = stem.len() == 20
            && stem.bytes().all(|b| b.is_ascii_digit())
            && matches!(ext, "log" | "index" | "timeindex");
        let later = segment_file && stem.parse::<u64>().is_ok_and(|b| b > base);
        let own_index = segment_file && stem.parse::<u64>() == Ok(base) && ext != "log";
        if later && ext == "log" {
            later_segments += 1;
        }
        if later || own_index || file_name == storage::checkpoint::FILE_NAME {
            moved.push(path);
        }
    }
    let copy = backup.join(file.file_name().expect("a segment file name"));
    std::fs::copy(file, &copy)
        .with_context(|| format!("cannot copy {} to {}", file.display(), copy.display()))?;
    std::fs::File::open(&copy)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("cannot sync {}", copy.display()))?;
    for path in &moved {
        let to = backup.join(path.file_name().expect("a file name"));
        std::fs::rename(path, &to)
            .with_context(|| format!("cannot move {} to {}", path.display(), to.display()))?;
    }
    sync_dir(&backup)?;
    let segment = std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .with_context(|| format!("cannot open {}", file.display()))?;
    segment
        .set_len(truncate_at)
        .and_then(|()| segment.sync_all())
        .with_context(|| format!("cannot cut {} at byte {truncate_at}", file.display()))?;
    sync_dir(&partition)?;
    outln!(
        "cut {} at byte {truncate_at} ({} bytes removed) and moved {later_segments} later \
         segments out of the log; copies of everything removed are in {}",
        file.display(),
        file_bytes - truncate_at,
        backup.display()
    );
    Ok(())
}
