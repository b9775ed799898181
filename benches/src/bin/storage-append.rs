//! Sequential append throughput of the storage crate alone, next to fio's
//! sequential O_DIRECT write bandwidth on the same filesystem, measured in
//! the same run. Prints a markdown table of medians (and each run).
//!
//! ```text
//! cargo build --release
//! target/release/storage-append --dir target/bench --runs 3
//! ```

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use bytes::Bytes;
use clap::Parser;
use protocol::batch::build;
use storage::{AppendOptions, FlushPolicy, Log, LogConfig};
use strom_benches::{fio_write_mb_s, fmt_runs, median};

#[derive(Parser, Debug)]
#[command(about = "Storage append throughput next to fio's O_DIRECT write limit")]
struct Args {
    /// Directory on the filesystem to measure (created; emptied per run).
    #[arg(long, default_value = "target/bench")]
    dir: PathBuf,
    /// Runs per configuration; the table shows the median.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Bytes each run appends (and fio writes).
    #[arg(long, default_value_t = 1 << 30)]
    bytes: u64,
    /// Concurrent appenders for the `always` cases (group commit).
    #[arg(long, default_value_t = 16)]
    appenders: usize,
    /// Extra log settings, `key=value` (e.g. `strom.write.bytes=1048576`).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    settings: Vec<String>,
    /// Only run the cases whose name contains this text.
    #[arg(long)]
    only: Option<String>,
    /// Skip fio (its figure is then reported as 0).
    #[arg(long)]
    no_fio: bool,
}

#[derive(Clone, Copy, Debug)]
struct Case {
    name: &'static str,
    batch_bytes: usize,
    flush: FlushPolicy,
    appenders: usize,
}

fn main() -> Result<()> {
    let args = Args::parse();
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let cases = [
        Case {
            name: "never, 1 MiB batches, 1 appender",
            batch_bytes: 1 << 20,
            flush: FlushPolicy::Never,
            appenders: 1,
        },
        Case {
            name: "never, 16 KiB batches, 1 appender",
            batch_bytes: 16 << 10,
            flush: FlushPolicy::Never,
            appenders: 1,
        },
        Case {
            name: "always, 1 MiB batches",
            batch_bytes: 1 << 20,
            flush: FlushPolicy::Always,
            appenders: args.appenders,
        },
        Case {
            name: "always, 16 KiB batches",
            batch_bytes: 16 << 10,
            flush: FlushPolicy::Always,
            appenders: args.appenders,
        },
    ];
    let cases: Vec<Case> = cases
        .into_iter()
        .filter(|c| {
            args.only
                .as_deref()
                .is_none_or(|only| c.name.contains(only))
        })
        .collect();
    let mut settings = Vec::new();
    for setting in &args.settings {
        let (key, value) = setting
            .split_once('=')
            .with_context(|| format!("--set {setting}: expected KEY=VALUE"))?;
        LogConfig::default().set(key, value)?;
        settings.push((key.to_string(), value.to_string()));
    }
    let mut fio_runs = Vec::new();
    let mut case_runs: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    // Interleave fio and the cases in every round, so each ratio compares
    // figures taken under the same background load.
    for round in 0..args.runs {
        fio_runs.push(if args.no_fio {
            0.0
        } else {
            fio_write_mb_s(&args.dir, args.bytes)?
        });
        for (i, case) in cases.iter().enumerate() {
            let mb_s = run_case(&args.dir, *case, args.bytes, &settings)?;
            eprintln!(
                "round {round}: {} -> {mb_s:.0} MB/s (fio {:.0})",
                case.name, fio_runs[round]
            );
            case_runs[i].push(mb_s);
        }
    }
    let fio = median(&fio_runs);
    println!(
        "| case | appenders | MB/s (median of {}) | runs | ratio to fio (median of the rounds' ratios) |",
        args.runs
    );
    println!("|---|---|---|---|---|");
    println!(
        "| fio seq write, 1 MiB, QD1, O_DIRECT, new file | 1 | {fio:.0} | {} | 1.00 |",
        fmt_runs(&fio_runs)
    );
    for (case, runs) in cases.iter().zip(&case_runs) {
        let m = median(runs);
        // Each round's figure against the fio figure of the same round: the
        // machine's load moves both together.
        let ratios: Vec<f64> = runs.iter().zip(&fio_runs).map(|(r, f)| r / f).collect();
        println!(
            "| {} | {} | {m:.0} | {} | {:.2} |",
            case.name,
            case.appenders,
            fmt_runs(runs),
            median(&ratios)
        );
    }
    Ok(())
}

fn run_case(
    dir: &Path,
    case: Case,
    total_bytes: u64,
    settings: &[(String, String)],
) -> Result<f64> {
    let log_dir = dir.join("bench-0");
    let settings = settings.to_vec();
    let _ = std::fs::remove_dir_all(&log_dir);
    let result = glommio::LocalExecutorBuilder::default()
        .spawn(move || async move { append_for(log_dir, case, total_bytes, settings).await })
        .map_err(|e| anyhow::anyhow!("starting executor: {e}"))?
        .join()
        .map_err(|e| anyhow::anyhow!("executor: {e:?}"))?;
    let _ = std::fs::remove_dir_all(dir.join("bench-0"));
    result
}

async fn append_for(
    dir: PathBuf,
    case: Case,
    total_bytes: u64,
    settings: Vec<(String, String)>,
) -> Result<f64> {
    let mut config = LogConfig::default();
    for (key, value) in &settings {
        config.set(key, value)?;
    }
    config.flush = case.flush;
    config.max_message_bytes = (case.batch_bytes + 4096) as u32;
    // One core: one storage context.
    let log = Log::open(&storage::Context::default(), &dir, config).await?;
    // One record per batch, its value sized so the batch is batch_bytes.
    let probe = build::patterned(0, 1, 0, 1).len();
    let batch = Bytes::from(build::patterned(
        1_700_000_000_000,
        1,
        case.batch_bytes - probe - 8,
        7,
    ));
    let per_appender = (total_bytes / batch.len() as u64 / case.appenders as u64).max(1);
    let start = Instant::now();
    let tasks: Vec<_> = (0..case.appenders)
        .map(|_| {
            let (log, batch) = (log.clone(), batch.clone());
            glommio::spawn_local(async move {
                for _ in 0..per_appender {
                    let info = log.append(batch.clone(), AppendOptions::default()).await?;
                    if case.flush == FlushPolicy::Always {
                        log.wait_durable(info.last_offset).await?;
                    }
                }
                Ok::<_, storage::StorageError>(())
            })
        })
        .collect();
    for task in tasks {
        task.await?;
    }
    // Everything on disk (and synced) before the clock stops.
    log.flush().await?;
    let elapsed = start.elapsed().as_secs_f64();
    let bytes = per_appender * case.appenders as u64 * batch.len() as u64;
    log.close().await?;
    Ok(bytes as f64 / elapsed / 1e6)
}
