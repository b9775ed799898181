//! The log cleaner's throughput on one core: a partition of `--bytes`
//! (1 GiB) of 1 KiB records whose keys each appear ten times, so a tenth
//! of it is live, cleaned once; next to fio's sequential O_DIRECT write
//! bandwidth on the same filesystem, measured in the same round. Prints a
//! markdown table of medians (and each run).
//!
//! ```text
//! cargo build --release
//! target/release/storage-clean --dir target/bench --runs 3
//! ```

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use bytes::Bytes;
use clap::Parser;
use protocol::batch::build::{self, NewRecord};
use storage::{AppendOptions, CleanOptions, FlushPolicy, Log, LogConfig};
use strom_benches::{fio_write_mb_s, fmt_runs, median};

#[derive(Parser, Debug)]
#[command(about = "The log cleaner's MB/s on one core next to fio's O_DIRECT write limit")]
struct Args {
    /// Directory on the filesystem to measure (created; emptied per run).
    #[arg(long, default_value = "target/bench")]
    dir: PathBuf,
    /// Runs; the table shows the median.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Bytes of records in the partition before it is cleaned.
    #[arg(long, default_value_t = 1 << 30)]
    bytes: u64,
    /// How many times each key is written (10: a tenth of the log is live).
    #[arg(long, default_value_t = 10)]
    versions: u64,
    /// Skip fio (its figure is then reported as 0).
    #[arg(long)]
    no_fio: bool,
}

const RECORD_BYTES: usize = 1024;
const RECORDS_PER_BATCH: usize = 64;
const SEGMENT_BYTES: u64 = 64 << 20;

/// One cleaning: the log's cleanable bytes, the seconds it took, what it
/// read and wrote.
struct Cleaning {
    log_bytes: u64,
    seconds: f64,
    read: u64,
    written: u64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let mut fio_runs = Vec::new();
    let mut cleanings = Vec::new();
    for round in 0..args.runs {
        fio_runs.push(if args.no_fio {
            0.0
        } else {
            fio_write_mb_s(&args.dir, args.bytes)?
        });
        let cleaning = run(&args.dir, args.bytes, args.versions)?;
        eprintln!(
            "round {round}: cleaned {} MB in {:.2} s ({:.0} MB/s; read {} MB, wrote {} MB); fio {:.0} MB/s",
            cleaning.log_bytes / 1_000_000,
            cleaning.seconds,
            cleaning.log_bytes as f64 / cleaning.seconds / 1e6,
            cleaning.read / 1_000_000,
            cleaning.written / 1_000_000,
            fio_runs[round]
        );
        cleanings.push(cleaning);
    }
    let mb_s: Vec<f64> = cleanings
        .iter()
        .map(|c| c.log_bytes as f64 / c.seconds / 1e6)
        .collect();
    let io_mb_s: Vec<f64> = cleanings
        .iter()
        .map(|c| (c.read + c.written) as f64 / c.seconds / 1e6)
        .collect();
    let ratios: Vec<f64> = io_mb_s.iter().zip(&fio_runs).map(|(c, f)| c / f).collect();
    println!("| figure (median of {}) | value | runs |", args.runs);
    println!("|---|---|---|");
    println!(
        "| fio seq write, 1 MiB, QD1, O_DIRECT | {:.0} MB/s | {} |",
        median(&fio_runs),
        fmt_runs(&fio_runs)
    );
    println!(
        "| log cleaned per second (1 KiB records, 1/{} live) | {:.0} MB/s | {} |",
        args.versions,
        median(&mb_s),
        fmt_runs(&mb_s)
    );
    println!(
        "| cleaner disk I/O (read + written) per second | {:.0} MB/s | {} |",
        median(&io_mb_s),
        fmt_runs(&io_mb_s)
    );
    println!(
        "| cleaner disk I/O against fio's write | {:.2} | |",
        median(&ratios)
    );
    Ok(())
}

fn run(dir: &Path, bytes: u64, versions: u64) -> Result<Cleaning> {
    let log_dir = dir.join("clean-0");
    let _ = std::fs::remove_dir_all(&log_dir);
    let result = glommio::LocalExecutorBuilder::default()
        .spawn({
            let log_dir = log_dir.clone();
            move || async move { fill_and_clean(log_dir, bytes, versions).await }
        })
        .map_err(|e| anyhow::anyhow!("starting executor: {e}"))?
        .join()
        .map_err(|e| anyhow::anyhow!("executor: {e:?}"))?;
    let _ = std::fs::remove_dir_all(&log_dir);
    result
}

async fn fill_and_clean(dir: PathBuf, bytes: u64, versions: u64) -> Result<Cleaning> {
    let config = LogConfig {
        segment_bytes: SEGMENT_BYTES,
        flush: FlushPolicy::Never,
        retention_ms: -1,
        ..LogConfig::default()
    };
    let log = Log::open(&storage::Context::default(), &dir, config).await?;
    let records = bytes / RECORD_BYTES as u64;
    let keys = (records / versions.max(1)).max(1);
    let value = vec![0x5a; RECORD_BYTES - 40];
    let now_ms = 1_700_000_000_000i64;
    let mut written = 0u64;
    let mut next = 0u64;
    while written < records {
        let batch: Vec<NewRecord> = (0..RECORDS_PER_BATCH)
            .map(|i| {
                // Keys in a scrambled order: each appears `versions` times.
                let key = (next + i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) % keys;
                NewRecord {
                    key: Some(format!("key-{key:012}").into_bytes()),
                    value: Some(value.clone()),
                    headers: vec![],
                    timestamp_delta: i as i64,
                }
            })
            .collect();
        next += RECORDS_PER_BATCH as u64;
        written += RECORDS_PER_BATCH as u64;
        log.append(
            Bytes::from(build::batch(now_ms, &batch)),
            AppendOptions::default(),
        )
        .await?;
    }
    log.flush().await?;
    let end = log.next_offset();
    // An hour after the records' timestamps.
    let clean_ms = now_ms + 3_600_000;
    let cleanable = log.cleanable(end, clean_ms, 0).await?;
    let options = CleanOptions {
        clean_below: end,
        now_ms: clean_ms,
        min_compaction_lag_ms: 0,
        delete_retention_ms: 24 * 3600 * 1000,
        key_map_entries_max: (keys as usize) * 2,
        keep_batches: HashSet::new(),
        aborted: Vec::new(),
        io_bytes_per_second: f64::MAX,
    };
    let start = Instant::now();
    let outcome = log
        .clean(&options)
        .await?
        .context("the filled log had nothing to clean")?;
    let seconds = start.elapsed().as_secs_f64();
    log.close().await?;
    Ok(Cleaning {
        log_bytes: cleanable.dirty_bytes,
        seconds,
        read: outcome.bytes_read,
        written: outcome.bytes_written,
    })
}
