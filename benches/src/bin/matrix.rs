//! The end-to-end benchmark matrix: measures the machine's limits
//! (fio O_DIRECT write and read on the data dir's filesystem, the latency
//! of one durable write there, iperf3 on loopback, memcpy, and the CPU time
//! fio and iperf3's receiver spend per GB), starts `strom` on a fresh data
//! dir (or uses another Kafka-compatible broker given by `--bootstrap`),
//! runs each workload file of `benches/workloads/` with `strom-loadgen`,
//! samples the broker's CPU time and RSS, and writes a markdown and a JSON
//! table: each figure, its ratio to the limit, and the broker's CPU seconds
//! per GB next to the machine's own for receiving and writing a GB.
//!
//! Replicated cases (workload files named `r-...-rf<N>`) run twice per
//! round: against one broker (the topic with one replica) and against a
//! cluster of N brokers on this machine that the matrix starts and stops
//! itself (or another cluster given by `--replicated-bootstrap`), the
//! topic created with N replicas. Each broker's CPU, the bytes it writes
//! to disk (`/proc/<pid>/io` `write_bytes`) and the bytes it receives and
//! sends (its `/metrics` request and response byte counters) are taken
//! around the load and divided by the GB ingested; the replicated run's
//! figures are reported next to the single broker's, with their ratio.
//!
//! Load-balancer cases (`lb-...-rf<N>`) run twice per round, on two fresh
//! clusters of N nodes the matrix starts: one without load-balancer mode,
//! the clients bootstrapping from node 1 and sending to each leader
//! directly, and one in load-balancer mode (`strom.balancer.enable`,
//! every node advertising HAProxy's address) behind HAProxy in TCP mode,
//! so every connection lands on a broker in turn and the brokers forward
//! to the leaders. Each side produces the workload into a topic of N
//! replicas, then consumes all of it back; the side that runs first
//! alternates by round. HAProxy's CPU and the bytes forwarded between
//! brokers (`strom_forwarded_*`) are reported next to the brokers' own.
//!
//! ```text
//! cargo build --release
//! target/release/matrix --runs 3 --out target/matrix
//! ```

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(about = "Run the end-to-end benchmark matrix next to the machine's measured limits")]
struct Args {
    /// Where data, reports and the result tables go.
    #[arg(long, default_value = "target/matrix")]
    out: PathBuf,
    /// Runs of each case; the table shows medians.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Only cases whose file name contains this (e.g. `a-`).
    #[arg(long)]
    only: Option<String>,
    /// Benchmark another broker at this address instead of starting strom
    /// (its CPU and RSS are sampled only with --broker-pid).
    #[arg(long)]
    bootstrap: Option<String>,
    /// Process id of the external broker, for CPU and RSS sampling.
    #[arg(long)]
    broker_pid: Option<u32>,
    /// The strom binary.
    #[arg(long, default_value = "target/release/strom")]
    strom: PathBuf,
    /// The strom-loadgen binary.
    #[arg(long, default_value = "target/release/strom-loadgen")]
    loadgen: PathBuf,
    /// Workload files.
    #[arg(long, default_value = "benches/workloads")]
    workloads: PathBuf,
    /// Executors the broker runs (the rest of the machine runs the load).
    #[arg(long, default_value_t = 1)]
    broker_cores: usize,
    /// Executors strom-loadgen runs.
    #[arg(long, default_value_t = 1)]
    loadgen_cores: usize,
    /// Run the replicated cases (`r-` files) against this Kafka-compatible
    /// cluster (one broker's address) instead of starting strom nodes; the
    /// single-broker half of each case still uses --bootstrap or strom.
    #[arg(long)]
    replicated_bootstrap: Option<String>,
    /// Process ids of that cluster's brokers on this machine,
    /// comma-separated, for CPU and disk-write sampling.
    #[arg(long, value_delimiter = ',')]
    replicated_pids: Vec<u32>,
    /// The HAProxy binary the load-balancer cases (`lb-` files) put in
    /// front of their cluster.
    #[arg(long, default_value = "/usr/sbin/haproxy")]
    haproxy: PathBuf,
}

#[derive(Debug, Default, Clone, serde::Serialize)]
struct Limits {
    fio_write_mb_s: f64,
    fio_read_mb_s: f64,
    /// One durable write at a time (fio, 64 KiB O_DIRECT + O_DSYNC over
    /// written blocks: a write and a cache flush, what one journal round
    /// costs the device), latency percentiles in ms: no acks=all publish
    /// can beat them.
    durable_write_p50_ms: f64,
    durable_write_p99_ms: f64,
    durable_write_p999_ms: f64,
    loopback_mb_s: f64,
    memcpy_mb_s: f64,
    /// CPU seconds the machine spends per GB on the least any produce path
    /// must do with each byte: receive it over loopback TCP (a bare
    /// receiving thread, or iperf3's receiver if it did better) and write
    /// it with O_DIRECT (fio's 1 MiB writes), nothing else. No broker's CPU
    /// per GB ingested can be lower.
    receive_cpu_s_per_gb: f64,
    write_cpu_s_per_gb: f64,
}

impl Limits {
    /// The machine's floor of CPU seconds per GB ingested (receive + write).
    fn ingest_cpu_s_per_gb(&self) -> f64 {
        self.receive_cpu_s_per_gb + self.write_cpu_s_per_gb
    }
}

#[derive(Debug, Default, Clone, serde::Serialize)]
struct CaseRun {
    produce_mb_s: f64,
    produce_records_s: f64,
    consume_mb_s: f64,
    publish_p50_ms: f64,
    publish_p99_ms: f64,
    publish_p999_ms: f64,
    e2e_p99_ms: f64,
    broker_cpu_s: f64,
    broker_rss_mb: f64,
    gb_moved: f64,
    errors: u64,
    /// Share of the machine's CPU time the hypervisor took for other
    /// guests during the load (the `steal` column of /proc/stat), in %.
    stolen_pct: f64,
}

/// What one broker did during a load run (deltas over the run).
#[derive(Debug, Default, Clone, serde::Serialize)]
struct BrokerLoad {
    cpu_s: f64,
    rss_mb: f64,
    /// `/proc/<pid>/io` `write_bytes`: bytes this process caused to be
    /// sent to the block layer (O_DIRECT writes, dirtied pages).
    disk_write_bytes: f64,
    /// `/proc/<pid>/io` `wchar` and `rchar`: bytes passed to write and
    /// read system calls (not io_uring's operations, so a partial count
    /// for strom; kept for brokers without byte counters).
    wchar: f64,
    rchar: f64,
    /// `/metrics` `strom_request_bytes_total` and
    /// `strom_response_bytes_total` (shard="all"): bytes of requests the
    /// broker received and of responses it sent, follower fetches
    /// included; not the requests its own fetchers send (small) nor the
    /// responses they receive (counted as the leader's response bytes).
    request_bytes: Option<f64>,
    response_bytes: Option<f64>,
}

/// One round of a replicated case: the same workload on one broker and on
/// the cluster.
#[derive(Debug, Default, Clone, serde::Serialize)]
struct ReplicatedRun {
    single: CaseRun,
    single_brokers: Vec<BrokerLoad>,
    cluster: CaseRun,
    cluster_brokers: Vec<BrokerLoad>,
    replication_factor: usize,
    /// Most partitions any node reported under-replicated
    /// (`strom_under_replicated_partitions`, polled during the load).
    under_replicated_max: f64,
    /// "ISR change proposed" lines in the nodes' logs over the run.
    isr_changes: usize,
    /// WARN and ERROR lines in the nodes' logs over the run.
    log_warnings: usize,
}

fn main() -> Result<()> {
    let args = Args::parse();
    std::fs::create_dir_all(&args.out)?;
    let out = std::fs::canonicalize(&args.out)?;
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&args.workloads)
        .with_context(|| format!("listing {}", args.workloads.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    cases.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    cases.retain(|p| {
        args.only
            .as_deref()
            .is_none_or(|o| p.file_name().unwrap().to_string_lossy().contains(o))
    });
    cases.sort();
    if cases.is_empty() {
        bail!("no workload files selected");
    }
    let path_var = std::env::var_os("PATH");
    let missing: Vec<Tool> = tools_needed(&args, &cases)
        .into_iter()
        .filter(|tool| !is_runnable(&tool.program, path_var.as_deref()))
        .collect();
    if let Some(line) = missing_tools_line(&missing) {
        eprintln!("{line}");
        std::process::exit(2);
    }
    let mut limit_runs: Vec<Limits> = Vec::new();
    let mut results: BTreeMap<String, Vec<CaseRun>> = BTreeMap::new();
    let mut replicated: BTreeMap<String, Vec<ReplicatedRun>> = BTreeMap::new();
    let mut balanced: BTreeMap<String, Vec<BalancerRun>> = BTreeMap::new();
    for round in 0..args.runs {
        let limits = measure_limits(&out)?;
        eprintln!("round {round}: limits {limits:?}");
        limit_runs.push(limits);
        for case in &cases {
            let name = case.file_stem().unwrap().to_string_lossy().to_string();
            if is_balancer_case(&name) {
                let run = run_balancer_case(&args, &out, case, round)
                    .with_context(|| format!("case {name}"))?;
                eprintln!("round {round}: {name}: {run:?}");
                balanced.entry(name).or_default().push(run);
                continue;
            }
            if let Some(replicas) = replication_factor_of(&name) {
                let run = run_replicated_case(&args, &out, case, round, replicas)
                    .with_context(|| format!("case {name}"))?;
                eprintln!("round {round}: {name}: {run:?}");
                results
                    .entry(format!("{name}, 1 broker, RF=1"))
                    .or_default()
                    .push(run.single.clone());
                results
                    .entry(format!("{name}, {replicas} brokers, RF={replicas}"))
                    .or_default()
                    .push(run.cluster.clone());
                replicated.entry(name).or_default().push(run);
                continue;
            }
            let run = run_case(&args, &out, case, round).with_context(|| format!("case {name}"))?;
            eprintln!("round {round}: {name}: {run:?}");
            results.entry(name).or_default().push(run);
        }
    }
    let limits = Limits {
        fio_write_mb_s: median(limit_runs.iter().map(|l| l.fio_write_mb_s)),
        fio_read_mb_s: median(limit_runs.iter().map(|l| l.fio_read_mb_s)),
        durable_write_p50_ms: median(limit_runs.iter().map(|l| l.durable_write_p50_ms)),
        durable_write_p99_ms: median(limit_runs.iter().map(|l| l.durable_write_p99_ms)),
        durable_write_p999_ms: median(limit_runs.iter().map(|l| l.durable_write_p999_ms)),
        loopback_mb_s: median(limit_runs.iter().map(|l| l.loopback_mb_s)),
        memcpy_mb_s: median(limit_runs.iter().map(|l| l.memcpy_mb_s)),
        receive_cpu_s_per_gb: median(limit_runs.iter().map(|l| l.receive_cpu_s_per_gb)),
        write_cpu_s_per_gb: median(limit_runs.iter().map(|l| l.write_cpu_s_per_gb)),
    };
    let mut table = markdown(&limits, &results, args.runs);
    if !replicated.is_empty() {
        table.push('\n');
        table.push_str(&replicated_markdown(&replicated));
    }
    if !balanced.is_empty() {
        table.push('\n');
        table.push_str(&balancer_markdown(&limits, &balanced));
    }
    println!("{table}");
    std::fs::write(out.join("matrix.md"), &table)?;
    let json = serde_json::json!({ "limits": limits, "limit_runs": limit_runs, "cases": results, "replicated": replicated, "balancer": balanced });
    std::fs::write(
        out.join("matrix.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    Ok(())
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn markdown(limits: &Limits, results: &BTreeMap<String, Vec<CaseRun>>, runs: usize) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "Limits (median of {runs}): fio write {:.0} MB/s, fio read {:.0} MB/s, one durable 64 KiB write (QD1) p50 / p99 / p99.9 {:.2} / {:.2} / {:.2} ms, loopback TCP {:.0} MB/s, memcpy {:.0} MB/s, CPU to receive and write a GB {:.2} s ({:.2} receive + {:.2} write)\n\n",
        limits.fio_write_mb_s,
        limits.fio_read_mb_s,
        limits.durable_write_p50_ms,
        limits.durable_write_p99_ms,
        limits.durable_write_p999_ms,
        limits.loopback_mb_s,
        limits.memcpy_mb_s,
        limits.ingest_cpu_s_per_gb(),
        limits.receive_cpu_s_per_gb,
        limits.write_cpu_s_per_gb,
    ));
    if results.is_empty() {
        return s;
    }
    s.push_str("| case | produce MB/s | records/s | consume MB/s | ratio to disk limit | publish p99 / p99.9 ms | ratio to durable write p99 / p99.9 | e2e p99 ms | broker CPU s/GB | ratio to CPU floor | broker RSS MB | errors | CPU stolen % (max) |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (name, runs) in results {
        let m = |f: fn(&CaseRun) -> f64| median(runs.iter().map(f));
        let produce = m(|r| r.produce_mb_s);
        let consume = m(|r| r.consume_mb_s);
        let ratio = if produce > 0.0 && !name.starts_with('c') {
            produce / limits.fio_write_mb_s
        } else {
            consume / limits.fio_read_mb_s
        };
        let cpu_per_gb = median(runs.iter().map(|r| {
            if r.gb_moved > 0.0 {
                r.broker_cpu_s / r.gb_moved
            } else {
                0.0
            }
        }));
        let (p99, p999) = (m(|r| r.publish_p99_ms), m(|r| r.publish_p999_ms));
        let to_durable_write = if p99 > 0.0 {
            format!(
                "{:.1} / {:.1}",
                p99 / limits.durable_write_p99_ms,
                p999 / limits.durable_write_p999_ms
            )
        } else {
            String::new()
        };
        let floor = limits.ingest_cpu_s_per_gb();
        let to_cpu_floor = if produce > 0.0 && !name.starts_with('c') && floor > 0.0 {
            format!("{:.1}", cpu_per_gb / floor)
        } else {
            String::new()
        };
        s.push_str(&format!(
            "| {name} | {produce:.0} | {:.0} | {consume:.0} | {ratio:.2} | {p99:.2} / {p999:.2} | {to_durable_write} | {:.2} | {cpu_per_gb:.2} | {to_cpu_floor} | {:.0} | {} | {:.1} ({:.1}) |\n",
            m(|r| r.produce_records_s),
            m(|r| r.e2e_p99_ms),
            m(|r| r.broker_rss_mb),
            runs.iter().map(|r| r.errors).sum::<u64>(),
            m(|r| r.stolen_pct),
            runs.iter().map(|r| r.stolen_pct).fold(0.0, f64::max),
        ));
    }
    s
}

/// The replicated cases' table: each figure on one broker and on the
/// cluster in the same rounds (medians, each round's figure in brackets),
/// and their ratio.
fn replicated_markdown(cases: &BTreeMap<String, Vec<ReplicatedRun>>) -> String {
    let mut s = String::new();
    for (name, runs) in cases {
        let replicas = runs.first().map_or(0, |r| r.replication_factor);
        s.push_str(&format!(
            "{name}: figures per GB are bytes per GB of records ingested (produced), over the whole load run (warm-up included)\n\n"
        ));
        s.push_str(&format!(
            "| figure | 1 broker, RF=1 (runs) | {replicas} brokers, RF={replicas} (runs) | replicated / single |\n|---|---|---|---|\n"
        ));
        let gb = |c: &CaseRun| c.gb_moved.max(f64::MIN_POSITIVE);
        type Figure = Box<dyn Fn(&CaseRun, &[BrokerLoad]) -> Option<f64>>;
        let rows: Vec<(&str, Figure, usize)> = vec![
            ("produce MB/s", Box::new(|c, _| Some(c.produce_mb_s)), 0),
            ("publish p50 ms", Box::new(|c, _| Some(c.publish_p50_ms)), 2),
            ("publish p99 ms", Box::new(|c, _| Some(c.publish_p99_ms)), 1),
            (
                "publish p99.9 ms",
                Box::new(|c, _| Some(c.publish_p999_ms)),
                1,
            ),
            (
                "end-to-end p99 ms (end-to-end cases)",
                Box::new(|c, _| (c.e2e_p99_ms > 0.0).then_some(c.e2e_p99_ms)),
                1,
            ),
            (
                "broker CPU s per GB (all brokers)",
                Box::new(move |c, _| Some(c.broker_cpu_s / gb(c))),
                2,
            ),
            (
                "disk writes, GB per GB (all brokers, /proc/<pid>/io write_bytes)",
                Box::new(move |c, b| {
                    Some(b.iter().map(|l| l.disk_write_bytes).sum::<f64>() / 1e9 / gb(c))
                }),
                2,
            ),
            (
                "sent, GB per GB (all brokers, strom_response_bytes_total)",
                Box::new(move |c, b| {
                    let sum: Option<f64> = b.iter().map(|l| l.response_bytes).sum();
                    Some(sum? / 1e9 / gb(c))
                }),
                2,
            ),
            (
                "received, GB per GB (all brokers, strom_request_bytes_total)",
                Box::new(move |c, b| {
                    let sum: Option<f64> = b.iter().map(|l| l.request_bytes).sum();
                    Some(sum? / 1e9 / gb(c))
                }),
                2,
            ),
            (
                "errors (sum of runs)",
                Box::new(|c, _| Some(c.errors as f64)),
                0,
            ),
            ("CPU stolen %", Box::new(|c, _| Some(c.stolen_pct)), 1),
        ];
        for (label, figure, decimals) in &rows {
            let column = |single: bool| -> (Option<f64>, String) {
                let values: Vec<f64> = runs
                    .iter()
                    .filter_map(|r| {
                        if single {
                            figure(&r.single, &r.single_brokers)
                        } else {
                            figure(&r.cluster, &r.cluster_brokers)
                        }
                    })
                    .collect();
                if values.is_empty() {
                    return (None, String::new());
                }
                let each = values
                    .iter()
                    .map(|v| format!("{v:.decimals$}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let shown = if label.starts_with("errors") {
                    values.iter().sum::<f64>()
                } else {
                    median(values.iter().copied())
                };
                (Some(shown), format!("{shown:.decimals$} ({each})"))
            };
            let (single, single_text) = column(true);
            let (cluster, cluster_text) = column(false);
            let ratio = match (single, cluster) {
                // A figure near zero on one broker (bytes sent to no
                // followers) has no meaningful ratio.
                (Some(a), Some(b)) if a > 0.01 && !label.starts_with("errors") => {
                    format!("{:.2}", b / a)
                }
                _ => String::new(),
            };
            s.push_str(&format!(
                "| {label} | {single_text} | {cluster_text} | {ratio} |\n"
            ));
        }
        // Each broker of the cluster (medians over the rounds).
        let brokers = runs
            .iter()
            .map(|r| r.cluster_brokers.len())
            .max()
            .unwrap_or(0);
        for i in 0..brokers {
            let of = |f: &dyn Fn(&BrokerLoad, &CaseRun) -> Option<f64>| -> String {
                let values: Vec<f64> = runs
                    .iter()
                    .filter_map(|r| f(r.cluster_brokers.get(i)?, &r.cluster))
                    .collect();
                if values.is_empty() {
                    "–".to_string()
                } else {
                    format!("{:.2}", median(values.into_iter()))
                }
            };
            s.push_str(&format!(
                "| broker {}: CPU s / disk GB / sent GB / received GB per GB | | {} / {} / {} / {} | |\n",
                i + 1,
                of(&|l, c| Some(l.cpu_s / gb(c))),
                of(&|l, c| Some(l.disk_write_bytes / 1e9 / gb(c))),
                of(&|l, c| Some(l.response_bytes? / 1e9 / gb(c))),
                of(&|l, c| Some(l.request_bytes? / 1e9 / gb(c))),
            ));
        }
        s.push_str(&format!(
            "\nUnder-replicated partitions, most seen on any node while loading (per round): {}; ISR changes proposed (per round): {}; WARN/ERROR log lines (per round): {}.\n",
            runs.iter().map(|r| format!("{:.0}", r.under_replicated_max)).collect::<Vec<_>>().join(", "),
            runs.iter().map(|r| r.isr_changes.to_string()).collect::<Vec<_>>().join(", "),
            runs.iter().map(|r| r.log_warnings.to_string()).collect::<Vec<_>>().join(", "),
        ));
    }
    s
}

/// A program the matrix runs and the Debian package that installs it.
#[derive(Debug, PartialEq)]
struct Tool {
    program: PathBuf,
    package: &'static str,
}

/// The programs the selected cases run: fio and iperf3 for the machine's
/// limits every round, HAProxy (`--haproxy`) for load-balancer cases.
fn tools_needed(args: &Args, cases: &[PathBuf]) -> Vec<Tool> {
    let mut tools = vec![
        Tool {
            program: PathBuf::from("fio"),
            package: "fio",
        },
        Tool {
            program: PathBuf::from("iperf3"),
            package: "iperf3",
        },
    ];
    let balancer_cases = cases.iter().any(|case| {
        case.file_stem()
            .is_some_and(|stem| is_balancer_case(&stem.to_string_lossy()))
    });
    if balancer_cases {
        tools.push(Tool {
            program: args.haproxy.clone(),
            package: "haproxy",
        });
    }
    tools
}

/// Whether `program` can be run: a path with a `/` names the file itself,
/// a bare name is looked up in `path_var` as a shell does.
fn is_runnable(program: &Path, path_var: Option<&std::ffi::OsStr>) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |file: &Path| {
        std::fs::metadata(file).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.components().count() > 1 {
        return executable(program);
    }
    path_var
        .is_some_and(|dirs| std::env::split_paths(dirs).any(|dir| executable(&dir.join(program))))
}

/// One line naming every missing program and the command that installs
/// them all, or `None` when nothing is missing.
fn missing_tools_line(missing: &[Tool]) -> Option<String> {
    if missing.is_empty() {
        return None;
    }
    let programs: Vec<String> = missing
        .iter()
        .map(|tool| tool.program.display().to_string())
        .collect();
    let packages: Vec<&str> = missing.iter().map(|tool| tool.package).collect();
    Some(format!(
        "matrix: {} not found; install with `sudo apt-get install -y {}` (Debian)",
        programs.join(", "),
        packages.join(" ")
    ))
}

fn measure_limits(out: &Path) -> Result<Limits> {
    let file = out.join("fio.dat");
    // (MB/s, CPU seconds per GB) of 1 MiB O_DIRECT transfers.
    let fio = |rw: &str, depth: &str| -> Result<(f64, f64)> {
        let engine = if depth == "1" { "psync" } else { "io_uring" };
        let v = fio_json(
            &file,
            &[
                "--name=limit",
                "--bs=1M",
                "--direct=1",
                "--size=1G",
                &format!("--rw={rw}"),
                &format!("--iodepth={depth}"),
                &format!("--ioengine={engine}"),
                "--end_fsync=1",
            ],
        )?;
        let side = if rw == "write" { "write" } else { "read" };
        fio_rate_and_cpu(&v, side)
    };
    let _ = std::fs::remove_file(&file);
    let (fio_write_mb_s, write_cpu_s_per_gb) = fio("write", "1")?;
    let (fio_read_mb_s, _) = fio("read", "8")?;
    let _ = std::fs::remove_file(&file);
    let (durable_write_p50_ms, durable_write_p99_ms, durable_write_p999_ms) =
        durable_write_latency(&file)?;
    let _ = std::fs::remove_file(&file);

    let port = free_port();
    let mut server = Command::new("iperf3")
        .args(["-s", "-1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("running iperf3 (apt-get install iperf3)")?;
    // The server serves one test (-1); a probe connection would use it up,
    // so the client retries until the server is up.
    let mut loopback = None;
    for _ in 0..100 {
        let output = Command::new("iperf3")
            .args(["-c", "127.0.0.1", "-p", &port.to_string(), "-t", "3", "-J"])
            .output()?;
        let v: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
        if let Ok(measured) = loopback_rate_and_receive_cpu(&v) {
            loopback = Some(measured);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = server.kill();
    let _ = server.wait();
    let (loopback_mb_s, iperf3_receive_cpu_s_per_gb) = loopback.context("iperf3 gave no result")?;
    // iperf3's receiver does more than receive (its loop, timers, JSON);
    // the floor is the least of it and a bare receiving thread.
    let receive_cpu_s_per_gb = bare_receive_cpu_s_per_gb(4 << 30)?.min(iperf3_receive_cpu_s_per_gb);

    // memcpy: copy 256 MiB eight times.
    let src = vec![7u8; 256 << 20];
    let mut dst = vec![0u8; 256 << 20];
    let started = Instant::now();
    for _ in 0..8 {
        dst.copy_from_slice(std::hint::black_box(&src));
    }
    std::hint::black_box(&dst);
    let memcpy_mb_s = (8u64 * (256 << 20)) as f64 / started.elapsed().as_secs_f64() / 1e6;
    Ok(Limits {
        fio_write_mb_s,
        fio_read_mb_s,
        durable_write_p50_ms,
        durable_write_p99_ms,
        durable_write_p999_ms,
        loopback_mb_s,
        memcpy_mb_s,
        receive_cpu_s_per_gb,
        write_cpu_s_per_gb,
    })
}

/// CPU seconds per GB a thread spends doing nothing but receive `bytes`
/// over loopback TCP into one reused 1 MiB buffer (the sender on another
/// CPU when there is one, as strom-loadgen is): the kernel's receive path
/// and copy, the least any broker pays to take in a byte.
fn bare_receive_cpu_s_per_gb(bytes: u64) -> Result<f64> {
    use std::io::{Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let address = listener.local_addr()?;
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    let sender = std::thread::spawn(move || -> std::io::Result<()> {
        pin_this_thread(online - 1);
        let mut stream = std::net::TcpStream::connect(address)?;
        let chunk = vec![0x5au8; 1 << 20];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            stream.write_all(&chunk[..n])?;
            left -= n as u64;
        }
        Ok(())
    });
    let receiver = std::thread::spawn(move || -> std::io::Result<(u64, f64)> {
        pin_this_thread(0);
        let (mut stream, _) = listener.accept()?;
        let mut buffer = vec![0u8; 1 << 20];
        let started = thread_cpu_s();
        let mut received = 0u64;
        loop {
            match stream.read(&mut buffer)? {
                0 => break,
                n => received += n as u64,
            }
        }
        Ok((received, thread_cpu_s() - started))
    });
    let (received, cpu_s) = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("receiving thread panicked"))??;
    sender
        .join()
        .map_err(|_| anyhow::anyhow!("sending thread panicked"))??;
    if received != bytes {
        bail!("received {received} of {bytes} bytes over loopback");
    }
    Ok(cpu_s / (received as f64 / 1e9))
}

/// Pins the calling thread to `cpu` (best effort: a benchmark still runs
/// where pinning is not allowed).
fn pin_this_thread(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below the number of online CPUs, inside the set.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: sets the calling thread's affinity from a valid set.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
}

/// CPU seconds (user + system) the calling thread has used.
fn thread_cpu_s() -> f64 {
    // SAFETY: rusage is plain data, filled by getrusage for this thread.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to an rusage.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// MB/s and CPU seconds per GB (fio's user + system time over the bytes
/// moved) of one side (`write` or `read`) of a fio JSON report.
fn fio_rate_and_cpu(v: &serde_json::Value, side: &str) -> Result<(f64, f64)> {
    let job = &v["jobs"][0];
    let bytes_s = job[side]["bw_bytes"].as_f64().context("fio bandwidth")?;
    let cpu_pct = job["usr_cpu"].as_f64().context("fio usr_cpu")?
        + job["sys_cpu"].as_f64().context("fio sys_cpu")?;
    if bytes_s <= 0.0 {
        bail!("fio moved no bytes");
    }
    Ok((bytes_s / 1e6, cpu_pct / 100.0 / (bytes_s / 1e9)))
}

/// MB/s received and the receiving process's CPU seconds per GB of an
/// iperf3 client's JSON report (the server receives; iperf3 reports its
/// CPU use as `remote_total`, in % of one CPU over the test).
fn loopback_rate_and_receive_cpu(v: &serde_json::Value) -> Result<(f64, f64)> {
    let bits_s = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .context("iperf3 gave no received rate")?;
    let cpu_pct = v["end"]["cpu_utilization_percent"]["remote_total"]
        .as_f64()
        .context("iperf3 gave no receiver CPU")?;
    if bits_s <= 0.0 {
        bail!("iperf3 received nothing");
    }
    let bytes_s = bits_s / 8.0;
    Ok((bytes_s / 1e6, cpu_pct / 100.0 / (bytes_s / 1e9)))
}

/// Latency percentiles (p50, p99, p99.9, ms) of durable writes made one
/// at a time for 8 s: fio writes 64 KiB with O_DIRECT and O_DSYNC into a
/// 256 MiB file it has written once (`--overwrite=1`), so each write is
/// the data and a cache flush, as a journal round over its reused chunk.
fn durable_write_latency(file: &Path) -> Result<(f64, f64, f64)> {
    let v = fio_json(
        file,
        &[
            "--name=durable",
            "--rw=write",
            "--bs=64k",
            "--direct=1",
            "--sync=dsync",
            "--ioengine=psync",
            "--size=256M",
            "--overwrite=1",
            "--time_based",
            "--runtime=8",
        ],
    )?;
    durable_write_percentiles(&v)
}

/// Runs fio on `file` with `args` and returns its JSON report.
fn fio_json(file: &Path, args: &[&str]) -> Result<serde_json::Value> {
    let output = Command::new("fio")
        .args(args)
        .arg("--output-format=json")
        .arg(format!("--filename={}", file.display()))
        .output()
        .context("running fio (apt-get install fio)")?;
    if !output.status.success() {
        bail!("fio: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

/// p50, p99 and p99.9 (ms) of the write completion latency in fio's JSON.
fn durable_write_percentiles(v: &serde_json::Value) -> Result<(f64, f64, f64)> {
    let percentiles = &v["jobs"][0]["write"]["clat_ns"]["percentile"];
    let at = |p: &str| {
        percentiles[p]
            .as_f64()
            .map(|ns| ns / 1e6)
            .with_context(|| format!("fio gave no p{p} write latency"))
    };
    Ok((at("50.000000")?, at("99.000000")?, at("99.900000")?))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `count` distinct free ports: each listener is held until all are
/// taken, so no two are the same (ports chosen one at a time and released
/// could be handed out again before a node binds them).
fn free_ports(count: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

fn wait_listening(port: u16, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            bail!("nothing listens on port {port}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

struct StartedBroker {
    child: Child,
    bootstrap: String,
    /// Port of its admin listener (`/metrics`).
    admin: u16,
    log: PathBuf,
}

fn start_strom(args: &Args, data: &Path) -> Result<StartedBroker> {
    let _ = std::fs::remove_dir_all(data);
    spawn_strom(args, data, free_port(), "log", Duration::from_secs(30))
}

/// Starts `strom` on `data` (kept as it is) listening on `port`, its log in
/// `data` with `log_extension`, and waits until it accepts connections.
fn spawn_strom(
    args: &Args,
    data: &Path,
    port: u16,
    log_extension: &str,
    timeout: Duration,
) -> Result<StartedBroker> {
    let started = spawn_node(args, data, port, free_port(), log_extension, &[])?;
    wait_listening(port, timeout)?;
    Ok(started)
}

/// Starts `strom` on `data` listening on `port` with `settings` added
/// (`--set` and other start flags), its admin listener on `admin`; does
/// not wait for it.
fn spawn_node(
    args: &Args,
    data: &Path,
    port: u16,
    admin: u16,
    log_extension: &str,
    settings: &[String],
) -> Result<StartedBroker> {
    let log_path = data.with_extension(log_extension);
    let log = std::fs::File::create(&log_path)?;
    let child = Command::new(&args.strom)
        .args([
            "start",
            "--cores",
            &args.broker_cores.to_string(),
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin}"),
        ])
        .arg("--data-dir")
        .arg(data)
        .args(settings)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", args.strom.display()))?;
    Ok(StartedBroker {
        child,
        bootstrap: format!("127.0.0.1:{port}"),
        admin,
        log: log_path,
    })
}

/// Starts a cluster of `nodes` strom nodes on this machine, each a broker
/// and a controller voter with `--cores` as the single broker's, its own
/// data dir under `dir` and its own ports (as docs/operations.md's "Three
/// nodes on one host"), and waits until every node serves clients and
/// every broker is registered and live.
fn start_cluster(
    args: &Args,
    dir: &Path,
    nodes: usize,
    extra: &[String],
) -> Result<Vec<StartedBroker>> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    // Client, controller and admin ports of every node, all distinct.
    let ports: Vec<(u16, u16, u16)> = free_ports(3 * nodes)
        .chunks(3)
        .map(|p| (p[0], p[1], p[2]))
        .collect();
    let voters = ports
        .iter()
        .enumerate()
        .map(|(i, (_, controller, _))| format!("{}@127.0.0.1:{controller}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    let mut started = Vec::with_capacity(nodes);
    let spread = cluster_cpus(args.broker_cores, nodes) > args.broker_cores;
    for (i, (client, controller, admin)) in ports.iter().enumerate() {
        // Each node on CPUs of its own where the machine has them (and
        // one left for the load); otherwise all on the first ones.
        let cpuset = spread.then(|| {
            let first = i * args.broker_cores;
            (first..first + args.broker_cores)
                .map(|cpu| cpu.to_string())
                .collect::<Vec<_>>()
                .join(",")
        });
        let settings: Vec<String> = [
            ("--node-id", (i + 1).to_string()),
            (
                "--set",
                format!(
                    "listeners=PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{controller}"
                ),
            ),
            ("--set", "controller.listener.names=CONTROLLER".to_string()),
            ("--set", format!("controller.quorum.voters={voters}")),
        ]
        .into_iter()
        .chain(cpuset.map(|cpus| ("--cpuset", cpus)))
        .flat_map(|(flag, value)| [flag.to_string(), value])
        .chain(extra.iter().cloned())
        .collect();
        let data = dir.join(format!("node-{}", i + 1));
        match spawn_node(args, &data, *client, *admin, "log", &settings) {
            Ok(node) => started.push(node),
            Err(e) => {
                started.into_iter().for_each(stop);
                return Err(e);
            }
        }
    }
    let ready = (|| -> Result<()> {
        for node in &started {
            let port: u16 = node.bootstrap.rsplit(':').next().unwrap().parse()?;
            wait_listening(port, Duration::from_secs(60))?;
        }
        // Every node registered and unfenced, as some node's image says.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let live = started
                .iter()
                .filter_map(|n| metrics_text(n.admin))
                .filter_map(|text| metric_value(&text, "strom_brokers{state=\"live\"}"))
                .fold(0.0, f64::max);
            if live >= nodes as f64 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{live} of {nodes} brokers live after 60 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })();
    match ready {
        Ok(()) => Ok(started),
        Err(e) => {
            let logs: Vec<PathBuf> = started.iter().map(|n| n.log.clone()).collect();
            started.into_iter().rev().for_each(stop);
            Err(e.context(format!("cluster not ready; logs in {logs:?}")))
        }
    }
}

/// How many first CPUs a cluster of `nodes` nodes with `cores` cores each
/// takes: a set of its own per node when the machine has them and one
/// more for the load generator, else the first `cores` (all nodes share
/// them, as several brokers do on a small host).
fn cluster_cpus(cores: usize, nodes: usize) -> usize {
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores * nodes < online {
        cores * nodes
    } else {
        cores
    }
}

/// The body of `GET /metrics` on the admin listener at `port`, if it
/// answers within a second.
fn metrics_text(port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// The value of the sample `series` (name and labels exactly as written)
/// in Prometheus text.
fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

/// `write_bytes`, `rchar` and `wchar` of `/proc/<pid>/io`.
fn proc_io(pid: u32) -> Option<(f64, f64, f64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    proc_io_fields(&text)
}

fn proc_io_fields(text: &str) -> Option<(f64, f64, f64)> {
    let field = |name: &str| -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
    };
    Some((field("write_bytes")?, field("rchar")?, field("wchar")?))
}

/// A broker whose work is sampled around a load run: its process (CPU,
/// RSS, `/proc/<pid>/io`) and its admin listener (byte counters), each
/// when known.
#[derive(Debug, Clone, Copy, Default)]
struct Probe {
    pid: Option<u32>,
    admin: Option<u16>,
}

#[derive(Debug, Default)]
struct ProbeSample {
    cpu_s: f64,
    rss_mb: f64,
    io: Option<(f64, f64, f64)>,
    request_bytes: Option<f64>,
    response_bytes: Option<f64>,
}

impl Probe {
    fn sample(&self) -> ProbeSample {
        let (cpu_s, rss_mb) = self.pid.and_then(sample).unwrap_or_default();
        let metrics = self.admin.and_then(metrics_text);
        let counter = |name: &str| {
            metrics
                .as_deref()
                .and_then(|t| metric_value(t, &format!("{name}{{shard=\"all\"}}")))
        };
        ProbeSample {
            cpu_s,
            rss_mb,
            io: self.pid.and_then(proc_io),
            request_bytes: counter("strom_request_bytes_total"),
            response_bytes: counter("strom_response_bytes_total"),
        }
    }
}

fn broker_load(before: &ProbeSample, after: &ProbeSample) -> BrokerLoad {
    let delta = |a: Option<f64>, b: Option<f64>| Some(a? - b?);
    let io = |i: fn(&(f64, f64, f64)) -> f64| {
        delta(after.io.as_ref().map(i), before.io.as_ref().map(i)).unwrap_or(0.0)
    };
    BrokerLoad {
        cpu_s: after.cpu_s - before.cpu_s,
        rss_mb: after.rss_mb,
        disk_write_bytes: io(|x| x.0),
        rchar: io(|x| x.1),
        wchar: io(|x| x.2),
        request_bytes: delta(after.request_bytes, before.request_bytes),
        response_bytes: delta(after.response_bytes, before.response_bytes),
    }
}

/// Runs `load` while sampling every broker of `probes` around it and
/// polling their under-replicated partitions; fills `run`'s broker CPU and
/// RSS (summed over the brokers) and stolen CPU. Returns the load's result,
/// each broker's figures and the most under-replicated partitions seen.
fn measured_brokers<T>(
    run: &mut CaseRun,
    probes: &[Probe],
    load: impl FnOnce() -> Result<T>,
) -> Result<(T, Vec<BrokerLoad>, f64)> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let before: Vec<ProbeSample> = probes.iter().map(Probe::sample).collect();
    let machine_before = std::fs::read_to_string("/proc/stat").ok();
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let admins: Vec<u16> = probes.iter().filter_map(|p| p.admin).collect();
    let poller = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut most = 0.0f64;
            while !done.load(Ordering::Relaxed) {
                for admin in &admins {
                    if let Some(n) = metrics_text(*admin)
                        .and_then(|t| metric_value(&t, "strom_under_replicated_partitions"))
                    {
                        most = most.max(n);
                    }
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            most
        })
    };
    let result = load();
    done.store(true, Ordering::Relaxed);
    let under_replicated_max = poller.join().unwrap_or(0.0);
    let result = result?;
    let after: Vec<ProbeSample> = probes.iter().map(Probe::sample).collect();
    let loads: Vec<BrokerLoad> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| broker_load(b, a))
        .collect();
    if probes.iter().any(|p| p.pid.is_some()) {
        run.broker_cpu_s = loads.iter().map(|l| l.cpu_s).sum();
        run.broker_rss_mb = loads.iter().map(|l| l.rss_mb).sum();
    }
    let machine_after = std::fs::read_to_string("/proc/stat").ok();
    if let (Some(b), Some(a)) = (machine_before, machine_after) {
        run.stolen_pct = stolen_pct(&b, &a).unwrap_or(0.0);
    }
    Ok((result, loads, under_replicated_max))
}

/// The replication factor of a replicated case: files named `r-...`,
/// with `-rf<N>` in the name for N replicas (3 without it).
fn replication_factor_of(name: &str) -> Option<usize> {
    name.starts_with("r-").then(|| replicas_named(name))
}

/// Counts of "ISR change proposed" lines and of WARN or ERROR lines in a
/// broker's log.
fn log_counts(log: &Path) -> (usize, usize) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let isr = text.matches("ISR change proposed").count();
    let warnings = text
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .count();
    (isr, warnings)
}

/// One round of a replicated case: the workload against one broker (one
/// replica per partition), then against the cluster (`replicas` brokers,
/// the topic created with `replicas` replicas).
fn run_replicated_case(
    args: &Args,
    out: &Path,
    workload: &Path,
    round: usize,
    replicas: usize,
) -> Result<ReplicatedRun> {
    let name = workload.file_stem().unwrap().to_string_lossy().to_string();
    let mut result = ReplicatedRun {
        replication_factor: replicas,
        ..ReplicatedRun::default()
    };

    // One broker, the topic with one replica.
    let data = out.join(format!("data-{name}-single-{round}"));
    let (bootstrap, probes, single) = match &args.bootstrap {
        Some(b) => {
            let probe = Probe {
                pid: args.broker_pid,
                admin: None,
            };
            (b.clone(), vec![probe], None)
        }
        None => {
            let started = start_strom(args, &data)?;
            let probe = Probe {
                pid: Some(started.child.id()),
                admin: Some(started.admin),
            };
            (started.bootstrap.clone(), vec![probe], Some(started))
        }
    };
    let report = out.join(format!("{name}-single-{round}.json"));
    let measured = measured_brokers(&mut result.single, &probes, || {
        loadgen(
            args,
            load_mode(&name),
            &bootstrap,
            workload,
            // One replica: min.insync.replicas cannot ask for more.
            &[
                "--replication-factor",
                "1",
                "--topic-config",
                "min.insync.replicas=1",
            ],
            &report,
            args.bootstrap.is_none().then_some(args.broker_cores),
        )
    });
    if let Some(started) = single {
        stop(started);
        let _ = std::fs::remove_dir_all(&data);
    }
    let (r, loads, _) = measured?;
    fill_from_report(&mut result.single, &r, false);
    result.single_brokers = loads;

    // The cluster, the topic with `replicas` replicas.
    let dir = out.join(format!("data-{name}-cluster-{round}"));
    let (bootstrap, probes, nodes) = match &args.replicated_bootstrap {
        Some(b) => {
            let probes: Vec<Probe> = args
                .replicated_pids
                .iter()
                .map(|&pid| Probe {
                    pid: Some(pid),
                    admin: None,
                })
                .collect();
            (b.clone(), probes, Vec::new())
        }
        None => {
            let nodes = start_cluster(args, &dir, replicas, &[])?;
            let probes: Vec<Probe> = nodes
                .iter()
                .map(|n| Probe {
                    pid: Some(n.child.id()),
                    admin: Some(n.admin),
                })
                .collect();
            (nodes[0].bootstrap.clone(), probes, nodes)
        }
    };
    let report = out.join(format!("{name}-cluster-{round}.json"));
    let replicas_arg = replicas.to_string();
    let measured = measured_brokers(&mut result.cluster, &probes, || {
        loadgen(
            args,
            load_mode(&name),
            &bootstrap,
            workload,
            &["--replication-factor", &replicas_arg],
            &report,
            args.replicated_bootstrap
                .is_none()
                .then(|| cluster_cpus(args.broker_cores, replicas)),
        )
    });
    // Logs are counted before the nodes stop: a stop moves leadership.
    for node in &nodes {
        let (isr, warnings) = log_counts(&node.log);
        result.isr_changes += isr;
        result.log_warnings += warnings;
    }
    // The data go, the logs (`node-N.log`) stay for reading.
    let data_dirs: Vec<PathBuf> = nodes.iter().map(|n| n.log.with_extension("")).collect();
    nodes.into_iter().rev().for_each(stop);
    for data in data_dirs {
        let _ = std::fs::remove_dir_all(data);
    }
    let (r, loads, under_replicated_max) = measured?;
    fill_from_report(&mut result.cluster, &r, false);
    result.cluster_brokers = loads;
    result.under_replicated_max = under_replicated_max;
    Ok(result)
}

fn stop(mut broker: StartedBroker) {
    // SIGTERM for a clean stop, bounded.
    // SAFETY: kill(2) on a child process id we own.
    unsafe {
        libc::kill(broker.child.id() as i32, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = broker.child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = broker.child.kill();
    let _ = broker.child.wait();
}

/// Runs `load`, sampling the broker's CPU time and RSS (when its pid is
/// known) and the host's stolen CPU time around it.
fn measured<T>(run: &mut CaseRun, pid: Option<u32>, load: impl FnOnce() -> Result<T>) -> Result<T> {
    let before = pid.and_then(sample);
    let machine_before = std::fs::read_to_string("/proc/stat").ok();
    let result = load()?;
    let after = pid.and_then(sample);
    if let (Some(b), Some(a)) = (before, after) {
        run.broker_cpu_s = a.0 - b.0;
        run.broker_rss_mb = a.1;
    }
    let machine_after = std::fs::read_to_string("/proc/stat").ok();
    if let (Some(b), Some(a)) = (machine_before, machine_after) {
        run.stolen_pct = stolen_pct(&b, &a).unwrap_or(0.0);
    }
    Ok(result)
}

/// The share of all CPU time between two reads of /proc/stat that was
/// stolen (its aggregate `cpu` line: user nice system idle iowait irq
/// softirq steal ...), in %.
fn stolen_pct(before: &str, after: &str) -> Option<f64> {
    let times = |stat: &str| -> Option<(u64, u64)> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let fields: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .take(8)
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        (fields.len() == 8).then(|| (fields.iter().sum(), fields[7]))
    };
    let (total_b, steal_b) = times(before)?;
    let (total_a, steal_a) = times(after)?;
    let total = total_a.checked_sub(total_b)?;
    (total > 0).then(|| 100.0 * steal_a.saturating_sub(steal_b) as f64 / total as f64)
}

/// CPU seconds (user + system) and RSS of a process, from /proc.
fn sample(pid: u32) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = 100.0; // USER_HZ on Linux
    let cpu = (fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?) / ticks;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some((cpu, rss_kb / 1024.0))
}

/// Runs the load generator on the CPUs after the first `broker_cores`,
/// where the brokers' executors are pinned (`Placement::Fixed`): left to
/// itself, strom-loadgen places its executor on the first CPU as well and
/// both would share one core while the other idles. The broker's helper
/// threads (io_uring workers, the syncfs thread) stay free to run anywhere.
fn load_on_other_cpus(command: &mut Command, broker_cores: usize) {
    use std::os::unix::process::CommandExt;
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    if online <= broker_cores {
        return;
    }
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for cpu in broker_cores..online {
        // SAFETY: `cpu` is below the number of online CPUs, well inside
        // the set's capacity.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: the closure runs in the child between fork and exec and only
    // makes the sched_setaffinity system call, which is async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Runs strom-loadgen; `brokers_cpus`: the brokers are strom processes
/// started here, pinned to that many first CPUs, so the load runs on the
/// others.
fn loadgen(
    args: &Args,
    mode: &str,
    bootstrap: &str,
    workload: &Path,
    extra: &[&str],
    report: &Path,
    brokers_cpus: Option<usize>,
) -> Result<serde_json::Value> {
    let mut command = Command::new(&args.loadgen);
    if let Some(cpus) = brokers_cpus {
        load_on_other_cpus(&mut command, cpus);
    }
    let output = command
        .arg(mode)
        .args([
            "--bootstrap",
            bootstrap,
            "--cores",
            &args.loadgen_cores.to_string(),
        ])
        .arg("--workload")
        .arg(workload)
        .arg("--json")
        .arg(report)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", args.loadgen.display()))?;
    if !output.status.success() {
        bail!(
            "strom-loadgen {mode} failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
    }
    Ok(serde_json::from_str(&std::fs::read_to_string(report)?)?)
}

fn run_case(args: &Args, out: &Path, workload: &Path, round: usize) -> Result<CaseRun> {
    let name = workload.file_stem().unwrap().to_string_lossy().to_string();
    let data = out.join(format!("data-{name}-{round}"));
    let mut broker: (String, Option<u32>) = match &args.bootstrap {
        Some(b) => (b.clone(), args.broker_pid),
        None => {
            let started = start_strom(args, &data)?;
            let pid = started.child.id();
            let bootstrap = started.bootstrap.clone();
            STARTED.with(|s| *s.borrow_mut() = Some(started));
            (bootstrap, Some(pid))
        }
    };
    let report = out.join(format!("{name}-{round}.json"));
    let consume_case = name.starts_with("c-");
    let mut run = CaseRun::default();
    let r = if consume_case {
        // Build the backlog, restart the broker (its caches start cold), consume.
        loadgen(
            args,
            "produce",
            &broker.0,
            workload,
            &["--keep"],
            &out.join(format!("{name}-{round}-backlog.json")),
            args.bootstrap.is_none().then_some(args.broker_cores),
        )?;
        let topic = backlog_topic(&broker.0, args)?;
        if args.bootstrap.is_none() {
            let previous = STARTED
                .with(|s| s.borrow_mut().take())
                .expect("started broker");
            stop(previous);
            let port: u16 = broker.0.rsplit(':').next().unwrap().parse()?;
            let restarted = spawn_strom(args, &data, port, "restart.log", Duration::from_secs(60))?;
            broker.1 = Some(restarted.child.id());
            STARTED.with(|s| *s.borrow_mut() = Some(restarted));
        }
        // Cold: a restarted broker has empty caches; drop the kernel's too
        // (as root; the log reads bypass it with O_DIRECT anyway).
        let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
        measured(&mut run, broker.1, || {
            loadgen(
                args,
                "consume",
                &broker.0,
                workload,
                &["--topic", &topic],
                &report,
                args.bootstrap.is_none().then_some(args.broker_cores),
            )
        })?
    } else {
        let mode = load_mode(&name);
        measured(&mut run, broker.1, || {
            loadgen(
                args,
                mode,
                &broker.0,
                workload,
                &[],
                &report,
                args.bootstrap.is_none().then_some(args.broker_cores),
            )
        })?
    };
    if let Some(started) = STARTED.with(|s| s.borrow_mut().take()) {
        stop(started);
        let _ = std::fs::remove_dir_all(&data);
    }
    fill_from_report(&mut run, &r, consume_case);
    Ok(run)
}

/// How strom-loadgen runs a case: (d)'s fixed-rate end-to-end cases
/// (`d-...`, and replicated `r-d-...`) produce and consume at once; the
/// others produce.
fn load_mode(name: &str) -> &'static str {
    if name.starts_with("d-") || name.starts_with("r-d-") {
        "e2e"
    } else {
        "produce"
    }
}

/// Fills `run`'s figures from strom-loadgen's JSON report `r`.
fn fill_from_report(run: &mut CaseRun, r: &serde_json::Value, consume_case: bool) {
    let f = |path: &[&str]| -> f64 {
        let mut v = r;
        for p in path {
            v = &v[*p];
        }
        v.as_f64().unwrap_or(0.0)
    };
    run.produce_mb_s = f(&["produce", "mb_per_s"]);
    run.produce_records_s = f(&["produce", "records_per_s"]);
    run.consume_mb_s = f(&["consume", "mb_per_s"]);
    run.publish_p50_ms = f(&["publish_latency", "percentiles_ms", "p50"]);
    run.publish_p99_ms = f(&["publish_latency", "percentiles_ms", "p99"]);
    run.publish_p999_ms = f(&["publish_latency", "percentiles_ms", "p99.9"]);
    run.e2e_p99_ms = f(&["end_to_end_latency", "percentiles_ms", "p99"]);
    // The broker's CPU is sampled over the whole loadgen run, warm-up
    // included, so the bytes are too (from the per-second series).
    let series_mb = |field: &str| -> f64 {
        r["series"]
            .as_array()
            .map_or(0.0, |s| s.iter().filter_map(|x| x[field].as_f64()).sum())
    };
    run.gb_moved = if consume_case {
        f(&["consume", "bytes"]).max(series_mb("consumed_mb_per_s") * 1e6) / 1e9
    } else {
        f(&["produce", "bytes"]).max(series_mb("produced_mb_per_s") * 1e6) / 1e9
    };
    run.errors = r["errors"]
        .as_object()
        .map_or(0, |m| m.values().filter_map(|v| v.as_u64()).sum());
}

thread_local! {
    static STARTED: std::cell::RefCell<Option<StartedBroker>> = const { std::cell::RefCell::new(None) };
}

/// The topic a `--keep` produce run left behind (the newest loadgen topic).
fn backlog_topic(bootstrap: &str, args: &Args) -> Result<String> {
    let output = Command::new(&args.strom)
        .args(["topic", "list", "--bootstrap", bootstrap])
        .output()?;
    if !output.status.success() {
        bail!(
            "listing topics: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text = String::from_utf8(output.stdout)?;
    let mut topics: Vec<&str> = text
        .split_whitespace()
        .filter(|t| t.starts_with("loadgen-"))
        .collect();
    topics.sort();
    topics
        .last()
        .map(|t| t.to_string())
        .context("no loadgen topic after the backlog run")
}

/// The load-balancer cases: files named `lb-...-rf<N>`.
fn is_balancer_case(name: &str) -> bool {
    name.starts_with("lb-")
}

/// The replicas a case's file name asks for (`-rf<N>`), 3 without it.
fn replicas_named(name: &str) -> usize {
    name.split('-')
        .find_map(|part| part.strip_prefix("rf")?.parse().ok())
        .unwrap_or(3)
}

/// One side of a balancer case: a cluster's produce run, then a consume
/// run of what it produced, with the brokers' and HAProxy's work.
#[derive(Debug, Default, Clone, serde::Serialize)]
struct BalancerSide {
    produce: CaseRun,
    consume: CaseRun,
    produce_brokers: Vec<BrokerLoad>,
    consume_brokers: Vec<BrokerLoad>,
    /// CPU seconds HAProxy used during each load (0 direct).
    haproxy_produce_cpu_s: f64,
    haproxy_consume_cpu_s: f64,
    /// Bytes of produce requests forwarded between brokers, and of fetch
    /// answers forwarded back (`strom_forwarded_request_bytes_total` and
    /// `strom_forwarded_response_bytes_total`, all nodes, shard `all`).
    forwarded_produce_bytes: f64,
    forwarded_fetch_bytes: f64,
    /// WARN and ERROR lines in the nodes' logs over the side's run.
    log_warnings: usize,
}

/// One round of a balancer case: the same workload direct to the leaders
/// of a cluster without load-balancer mode, and through HAProxy in front
/// of a cluster in load-balancer mode.
#[derive(Debug, Default, Clone, serde::Serialize)]
struct BalancerRun {
    direct: BalancerSide,
    balancer: BalancerSide,
    /// Which side ran first in this round (they alternate by round).
    balancer_first: bool,
    replication_factor: usize,
}

/// HAProxy in TCP mode in front of a cluster's client listeners, one
/// backend chosen per connection in turn (`balance roundrobin`), as
/// `broker/tests/balancer.rs` runs it.
struct HaProxy {
    child: Child,
    port: u16,
}

fn start_haproxy(args: &Args, dir: &Path, port: u16, backends: &[u16]) -> Result<HaProxy> {
    let servers: String = backends
        .iter()
        .enumerate()
        .map(|(i, backend)| format!("    server broker{} 127.0.0.1:{backend}\n", i + 1))
        .collect();
    let config = format!(
        "global\n    maxconn 4096\n\n\
         defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 120s\n    timeout server 120s\n\n\
         frontend kafka\n    bind 127.0.0.1:{port}\n    default_backend brokers\n\n\
         backend brokers\n    balance roundrobin\n{servers}"
    );
    let config_path = dir.join("haproxy.cfg");
    std::fs::write(&config_path, config)?;
    let log = std::fs::File::create(dir.join("haproxy.log"))?;
    // -db: in the foreground, so the child is HAProxy itself.
    let child = Command::new(&args.haproxy)
        .arg("-db")
        .arg("-f")
        .arg(&config_path)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| {
            format!(
                "starting {} (apt-get install haproxy)",
                args.haproxy.display()
            )
        })?;
    let mut haproxy = HaProxy { child, port };
    if let Err(e) = wait_listening(port, Duration::from_secs(10)) {
        haproxy.stop();
        return Err(e.context(format!("haproxy; its log is {}/haproxy.log", dir.display())));
    }
    Ok(haproxy)
}

impl HaProxy {
    fn stop(&mut self) {
        // SAFETY: kill(2) on a child process id we own.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A cluster the matrix started, and HAProxy in front of it when in
/// load-balancer mode; dropping it stops HAProxy, then the nodes in
/// reverse order, also when a run fails.
struct RunningCluster {
    nodes: Vec<StartedBroker>,
    haproxy: Option<HaProxy>,
}

impl Drop for RunningCluster {
    fn drop(&mut self) {
        if let Some(haproxy) = self.haproxy.as_mut() {
            haproxy.stop();
        }
        std::mem::take(&mut self.nodes)
            .into_iter()
            .rev()
            .for_each(stop);
    }
}

/// Sum over the samples of `family` with labels `shard="all"` and
/// `api="<api>"` in Prometheus text (every destination broker).
fn forwarded_sum(text: &str, family: &str, api: &str) -> f64 {
    let api_label = format!("api=\"{api}\"");
    text.lines()
        .filter_map(|line| {
            let labels_and_value = line.strip_prefix(family)?.strip_prefix('{')?;
            let (labels, value) = labels_and_value.split_once("} ")?;
            let wanted = labels.contains("shard=\"all\"") && labels.contains(&api_label);
            wanted.then(|| value.trim().parse::<f64>().ok())?
        })
        .sum()
}

/// (forwarded produce request bytes, forwarded fetch response bytes) over
/// every node of `nodes`.
fn forwarded_bytes(nodes: &[StartedBroker]) -> (f64, f64) {
    nodes
        .iter()
        .filter_map(|n| metrics_text(n.admin))
        .map(|t| {
            (
                forwarded_sum(&t, "strom_forwarded_request_bytes_total", "Produce"),
                forwarded_sum(&t, "strom_forwarded_response_bytes_total", "Fetch"),
            )
        })
        .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1))
}

/// One side of a balancer case: starts a cluster of `replicas` nodes (in
/// load-balancer mode behind HAProxy when `balancer`), produces the
/// workload into a topic of `replicas` replicas, consumes all of it back,
/// and stops everything.
fn run_balancer_side(
    args: &Args,
    out: &Path,
    workload: &Path,
    round: usize,
    replicas: usize,
    balancer: bool,
) -> Result<BalancerSide> {
    let name = workload.file_stem().unwrap().to_string_lossy().to_string();
    let side = if balancer { "balancer" } else { "direct" };
    let dir = out.join(format!("data-{name}-{side}-{round}"));
    // Held until HAProxy starts, so no node is given the same port.
    let balancer_listener = TcpListener::bind("127.0.0.1:0")?;
    let balancer_port = balancer_listener.local_addr()?.port();
    let settings: Vec<String> = if balancer {
        vec![
            "--set".into(),
            "strom.balancer.enable=true".into(),
            "--set".into(),
            format!("advertised.listeners=PLAINTEXT://127.0.0.1:{balancer_port}"),
        ]
    } else {
        Vec::new()
    };
    let mut cluster = RunningCluster {
        nodes: start_cluster(args, &dir, replicas, &settings)?,
        haproxy: None,
    };
    let data_dirs: Vec<PathBuf> = cluster
        .nodes
        .iter()
        .map(|n| n.log.with_extension(""))
        .collect();
    let result = (|| -> Result<BalancerSide> {
        if balancer {
            let backends: Vec<u16> = cluster
                .nodes
                .iter()
                .map(|n| n.bootstrap.rsplit(':').next().unwrap().parse())
                .collect::<Result<_, _>>()?;
            drop(balancer_listener);
            cluster.haproxy = Some(start_haproxy(args, &dir, balancer_port, &backends)?);
        }
        let bootstrap = match &cluster.haproxy {
            Some(h) => format!("127.0.0.1:{}", h.port),
            None => cluster.nodes[0].bootstrap.clone(),
        };
        let probes: Vec<Probe> = cluster
            .nodes
            .iter()
            .map(|n| Probe {
                pid: Some(n.child.id()),
                admin: Some(n.admin),
            })
            .collect();
        let haproxy_cpu = |c: &RunningCluster| {
            c.haproxy
                .as_ref()
                .and_then(|h| sample(h.child.id()))
                .map_or(0.0, |(cpu, _)| cpu)
        };
        let mut result = BalancerSide::default();

        let replicas_arg = replicas.to_string();
        let forwarded_before = forwarded_bytes(&cluster.nodes);
        let haproxy_before = haproxy_cpu(&cluster);
        let (r, loads, _) = measured_brokers(&mut result.produce, &probes, || {
            loadgen(
                args,
                "produce",
                &bootstrap,
                workload,
                &["--replication-factor", &replicas_arg, "--keep"],
                &out.join(format!("{name}-{side}-produce-{round}.json")),
                Some(cluster_cpus(args.broker_cores, replicas)),
            )
        })?;
        result.haproxy_produce_cpu_s = haproxy_cpu(&cluster) - haproxy_before;
        let forwarded_between = forwarded_bytes(&cluster.nodes);
        result.forwarded_produce_bytes = forwarded_between.0 - forwarded_before.0;
        fill_from_report(&mut result.produce, &r, false);
        result.produce_brokers = loads;

        // Everything just produced, read back from the start by the
        // workload's consumers (no warm-up: the run ends when all is read).
        let topic = backlog_topic(&cluster.nodes[0].bootstrap, args)?;
        let haproxy_before = haproxy_cpu(&cluster);
        let (r, loads, _) = measured_brokers(&mut result.consume, &probes, || {
            loadgen(
                args,
                "consume",
                &bootstrap,
                workload,
                &["--topic", &topic, "--warmup", "0"],
                &out.join(format!("{name}-{side}-consume-{round}.json")),
                Some(cluster_cpus(args.broker_cores, replicas)),
            )
        })?;
        result.haproxy_consume_cpu_s = haproxy_cpu(&cluster) - haproxy_before;
        result.forwarded_fetch_bytes = forwarded_bytes(&cluster.nodes).1 - forwarded_between.1;
        fill_from_report(&mut result.consume, &r, true);
        result.consume_brokers = loads;
        result.log_warnings = cluster.nodes.iter().map(|n| log_counts(&n.log).1).sum();
        Ok(result)
    })();
    drop(cluster);
    // The data go; the logs (`node-N.log`, `haproxy.log`) stay for reading.
    for data in data_dirs {
        let _ = std::fs::remove_dir_all(data);
    }
    result
}

/// One round of a balancer case; the side that runs first alternates by
/// round, so neither always gets the fresher machine.
fn run_balancer_case(
    args: &Args,
    out: &Path,
    workload: &Path,
    round: usize,
) -> Result<BalancerRun> {
    let name = workload.file_stem().unwrap().to_string_lossy().to_string();
    let replicas = replicas_named(&name);
    let balancer_first = round % 2 == 1;
    let mut run = BalancerRun {
        balancer_first,
        replication_factor: replicas,
        ..BalancerRun::default()
    };
    for balancer in [balancer_first, !balancer_first] {
        let side = run_balancer_side(args, out, workload, round, replicas, balancer).with_context(
            || {
                if balancer {
                    "through the balancer"
                } else {
                    "direct to the leaders"
                }
            },
        )?;
        if balancer {
            run.balancer = side;
        } else {
            run.direct = side;
        }
    }
    Ok(run)
}

/// The balancer cases' table: each figure direct to the leaders and
/// through the balancer in the same rounds (medians, each round's figure
/// in brackets), the ratio of the medians and each round's ratio.
fn balancer_markdown(limits: &Limits, cases: &BTreeMap<String, Vec<BalancerRun>>) -> String {
    let mut s = String::new();
    for (name, runs) in cases {
        let replicas = runs.first().map_or(0, |r| r.replication_factor);
        s.push_str(&format!(
            "{name}: {replicas} brokers, RF={replicas}; direct to the leaders (no load-balancer mode) against HAProxy in front of a cluster of the same shape in load-balancer mode; rounds with the balancer first: {}\n\n",
            runs.iter().enumerate().filter(|(_, r)| r.balancer_first).map(|(i, _)| i.to_string()).collect::<Vec<_>>().join(", "),
        ));
        s.push_str(
            "| figure | direct to leaders (runs) | through the balancer (runs) | balancer / direct (per round) |\n|---|---|---|---|\n",
        );
        // Seconds or GB over the GB the run moved (warm-up included).
        let per_gb = |x: f64, c: &CaseRun| x / c.gb_moved.max(f64::MIN_POSITIVE);
        type Figure<'a> = Box<dyn Fn(&BalancerSide) -> f64 + 'a>;
        let rows: Vec<(&str, Figure<'_>, usize)> = vec![
            ("produce MB/s", Box::new(|b| b.produce.produce_mb_s), 0),
            (
                "produce MB/s over fio write",
                Box::new(|b| b.produce.produce_mb_s / limits.fio_write_mb_s.max(f64::MIN_POSITIVE)),
                2,
            ),
            ("publish p50 ms", Box::new(|b| b.produce.publish_p50_ms), 1),
            ("publish p99 ms", Box::new(|b| b.produce.publish_p99_ms), 1),
            (
                "publish p99.9 ms",
                Box::new(|b| b.produce.publish_p999_ms),
                1,
            ),
            ("consume MB/s", Box::new(|b| b.consume.consume_mb_s), 0),
            (
                "consume MB/s over loopback TCP",
                Box::new(|b| b.consume.consume_mb_s / limits.loopback_mb_s.max(f64::MIN_POSITIVE)),
                2,
            ),
            (
                "broker CPU s per GB produced (all brokers)",
                Box::new(move |b| per_gb(b.produce.broker_cpu_s, &b.produce)),
                2,
            ),
            (
                "HAProxy CPU s per GB produced",
                Box::new(move |b| per_gb(b.haproxy_produce_cpu_s, &b.produce)),
                2,
            ),
            (
                "broker CPU s per GB consumed (all brokers)",
                Box::new(move |b| per_gb(b.consume.broker_cpu_s, &b.consume)),
                2,
            ),
            (
                "HAProxy CPU s per GB consumed",
                Box::new(move |b| per_gb(b.haproxy_consume_cpu_s, &b.consume)),
                2,
            ),
            (
                "produce bytes forwarded between brokers, GB per GB produced",
                Box::new(move |b| per_gb(b.forwarded_produce_bytes / 1e9, &b.produce)),
                2,
            ),
            (
                "fetch answers forwarded between brokers, GB per GB consumed",
                Box::new(move |b| per_gb(b.forwarded_fetch_bytes / 1e9, &b.consume)),
                2,
            ),
            (
                "errors, produce + consume (sum of runs)",
                Box::new(|b| (b.produce.errors + b.consume.errors) as f64),
                0,
            ),
            (
                "WARN/ERROR log lines, all nodes (sum of runs)",
                Box::new(|b| b.log_warnings as f64),
                0,
            ),
            (
                "CPU stolen % (produce)",
                Box::new(|b| b.produce.stolen_pct),
                1,
            ),
        ];
        for (label, figure, decimals) in &rows {
            let summed = label.contains("sum of runs");
            let column = |values: Vec<f64>| -> (f64, String) {
                let each = values
                    .iter()
                    .map(|v| format!("{v:.decimals$}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let shown = if summed {
                    values.iter().sum::<f64>()
                } else {
                    median(values.iter().copied())
                };
                (shown, format!("{shown:.decimals$} ({each})"))
            };
            let direct: Vec<f64> = runs.iter().map(|r| figure(&r.direct)).collect();
            let through: Vec<f64> = runs.iter().map(|r| figure(&r.balancer)).collect();
            let (direct_shown, direct_text) = column(direct.clone());
            let (through_shown, through_text) = column(through.clone());
            let ratio = if summed
                || direct_shown <= 0.001
                || label.contains("HAProxy")
                || label.contains("forwarded")
            {
                String::new()
            } else {
                let each = direct
                    .iter()
                    .zip(&through)
                    .map(|(d, t)| {
                        if *d > 0.0 {
                            format!("{:.2}", t / d)
                        } else {
                            "–".into()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                format!("{:.2} ({each})", through_shown / direct_shown)
            };
            s.push_str(&format!(
                "| {label} | {direct_text} | {through_text} | {ratio} |\n"
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::{
        durable_write_percentiles, fio_rate_and_cpu, forwarded_sum, is_balancer_case, is_runnable,
        loopback_rate_and_receive_cpu, metric_value, missing_tools_line, proc_io_fields,
        replicas_named, replication_factor_of, stolen_pct, tools_needed, Args, Tool,
    };
    use clap::Parser;
    use std::path::PathBuf;

    #[test]
    fn haproxy_is_needed_only_for_load_balancer_cases() {
        let args = Args::parse_from(["matrix", "--haproxy", "/opt/haproxy"]);
        let packages = |cases: &[&str]| -> Vec<&'static str> {
            let cases: Vec<PathBuf> = cases.iter().map(PathBuf::from).collect();
            tools_needed(&args, &cases)
                .iter()
                .map(|tool| tool.package)
                .collect()
        };
        assert_eq!(
            packages(&["w/a-produce.yaml", "w/r-produce-rf3.yaml"]),
            ["fio", "iperf3"]
        );
        assert_eq!(
            packages(&["w/a-produce.yaml", "w/lb-produce-rf3.yaml"]),
            ["fio", "iperf3", "haproxy"]
        );
        let cases = [PathBuf::from("w/lb-produce-rf3.yaml")];
        assert_eq!(
            tools_needed(&args, &cases)[2].program,
            PathBuf::from("/opt/haproxy")
        );
    }

    #[test]
    fn programs_are_found_on_the_path_or_by_their_own_path() {
        let dir = tempfile::tempdir().unwrap();
        let program = dir.path().join("tool");
        std::fs::write(&program, "#!/bin/sh\n").unwrap();
        let path_var = std::env::join_paths([dir.path()]).unwrap();
        // Not executable yet.
        assert!(!is_runnable(&PathBuf::from("tool"), Some(&path_var)));
        assert!(!is_runnable(&program, None));
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(is_runnable(&PathBuf::from("tool"), Some(&path_var)));
        assert!(is_runnable(&program, None));
        assert!(!is_runnable(&PathBuf::from("tool"), None));
        assert!(!is_runnable(&PathBuf::from("other"), Some(&path_var)));
        assert!(!is_runnable(&dir.path().join("other"), Some(&path_var)));
    }

    #[test]
    fn every_missing_program_is_named_in_one_line() {
        assert_eq!(missing_tools_line(&[]), None);
        let missing = [
            Tool {
                program: PathBuf::from("fio"),
                package: "fio",
            },
            Tool {
                program: PathBuf::from("/usr/sbin/haproxy"),
                package: "haproxy",
            },
        ];
        assert_eq!(
            missing_tools_line(&missing).unwrap(),
            "matrix: fio, /usr/sbin/haproxy not found; \
             install with `sudo apt-get install -y fio haproxy` (Debian)"
        );
    }

    #[test]
    fn balancer_cases_are_lb_files_with_their_replicas_in_the_name() {
        assert!(is_balancer_case("lb-produce-consume-1kb-16p-rf3"));
        assert!(!is_balancer_case("r-produce-1kb-16p-rf3"));
        assert_eq!(replicas_named("lb-produce-consume-1kb-16p-rf3"), 3);
        assert_eq!(replicas_named("lb-produce-consume-1kb-16p-rf5"), 5);
        assert_eq!(replicas_named("lb-produce-consume-1kb-16p"), 3);
    }

    #[test]
    fn forwarded_bytes_sum_every_destination_of_one_api_on_shard_all() {
        let text = "\
# TYPE strom_forwarded_request_bytes_total counter
strom_forwarded_request_bytes_total{shard=\"0\",broker=\"2\",api=\"Produce\"} 100
strom_forwarded_request_bytes_total{shard=\"all\",broker=\"2\",api=\"Produce\"} 100
strom_forwarded_request_bytes_total{shard=\"all\",broker=\"3\",api=\"Produce\"} 50
strom_forwarded_request_bytes_total{shard=\"all\",broker=\"3\",api=\"Fetch\"} 7
strom_forwarded_response_bytes_total{shard=\"all\",broker=\"3\",api=\"Produce\"} 9
";
        assert_eq!(
            forwarded_sum(text, "strom_forwarded_request_bytes_total", "Produce"),
            150.0
        );
        assert_eq!(
            forwarded_sum(text, "strom_forwarded_request_bytes_total", "Fetch"),
            7.0
        );
        assert_eq!(
            forwarded_sum(text, "strom_forwarded_response_bytes_total", "Fetch"),
            0.0
        );
    }

    #[test]
    fn replicated_cases_are_r_files_with_their_replication_factor_in_the_name() {
        assert_eq!(replication_factor_of("r-produce-1kb-16p-rf3"), Some(3));
        assert_eq!(replication_factor_of("r-produce-1kb-16p-rf5"), Some(5));
        assert_eq!(replication_factor_of("r-produce-1kb-16p"), Some(3));
        assert_eq!(replication_factor_of("a-produce-1kb-16p"), None);
        assert_eq!(replication_factor_of("c-consume-rf3"), None);
    }

    #[test]
    fn a_metric_is_read_by_its_exact_name_and_labels() {
        let text = "# TYPE strom_brokers gauge\nstrom_brokers{state=\"live\"} 3\n\
            strom_brokers{state=\"fenced\"} 0\nstrom_response_bytes_total{shard=\"0\"} 7\n\
            strom_response_bytes_total{shard=\"all\"} 1234567\nstrom_under_replicated_partitions 2\n";
        assert_eq!(
            metric_value(text, "strom_brokers{state=\"live\"}"),
            Some(3.0)
        );
        assert_eq!(
            metric_value(text, "strom_brokers{state=\"fenced\"}"),
            Some(0.0)
        );
        assert_eq!(
            metric_value(text, "strom_response_bytes_total{shard=\"all\"}"),
            Some(1234567.0)
        );
        assert_eq!(
            metric_value(text, "strom_under_replicated_partitions"),
            Some(2.0)
        );
        assert_eq!(metric_value(text, "strom_brokers"), None);
        assert_eq!(
            metric_value(text, "strom_request_bytes_total{shard=\"all\"}"),
            None
        );
    }

    #[test]
    fn proc_io_gives_write_bytes_rchar_and_wchar() {
        let text = "rchar: 100\nwchar: 200\nsyscr: 3\nsyscw: 4\nread_bytes: 5\n\
            write_bytes: 4096\ncancelled_write_bytes: 0\n";
        assert_eq!(proc_io_fields(text), Some((4096.0, 100.0, 200.0)));
        assert_eq!(proc_io_fields("rchar: 1\nwchar: 2\n"), None);
    }

    #[test]
    fn a_bare_receiver_takes_every_byte_and_reports_its_cpu() {
        let cpu_s_per_gb = super::bare_receive_cpu_s_per_gb(256 << 20).unwrap();
        // Receiving cannot be free, nor cost more than a second per 256 MiB
        // on any machine that runs this suite.
        assert!(
            cpu_s_per_gb.is_finite() && (0.0..4.0).contains(&cpu_s_per_gb),
            "{cpu_s_per_gb}"
        );
    }

    #[test]
    fn cpu_per_gb_is_cpu_share_over_gb_per_second() {
        // 1 GB/s written with 15% + 5% of a CPU: 0.2 CPU s per GB.
        let v = serde_json::json!({"jobs": [{"usr_cpu": 5.0, "sys_cpu": 15.0,
            "write": {"bw_bytes": 1_000_000_000u64}}]});
        let (mb_s, cpu) = fio_rate_and_cpu(&v, "write").unwrap();
        assert_eq!(mb_s, 1000.0);
        assert!((cpu - 0.2).abs() < 1e-9, "{cpu}");
        assert!(fio_rate_and_cpu(&v, "read").is_err());
        // 2 GB/s (16 Gbit/s) received with 50% of a CPU: 0.25 s per GB.
        let v = serde_json::json!({"end": {
            "sum_received": {"bits_per_second": 16e9},
            "cpu_utilization_percent": {"host_total": 90.0, "remote_total": 50.0}}});
        let (mb_s, cpu) = loopback_rate_and_receive_cpu(&v).unwrap();
        assert_eq!(mb_s, 2000.0);
        assert!((cpu - 0.25).abs() < 1e-9, "{cpu}");
        let v = serde_json::json!({"end": {"sum_received": {"bits_per_second": 16e9}}});
        assert!(loopback_rate_and_receive_cpu(&v).is_err());
    }

    #[test]
    fn durable_write_percentiles_come_from_fio_s_write_completion_latency() {
        let v = serde_json::json!({"jobs": [{"write": {"clat_ns": {"percentile": {
            "50.000000": 150_000, "99.000000": 1_600_000, "99.900000": 6_000_000
        }}}}]});
        assert_eq!(durable_write_percentiles(&v).unwrap(), (0.15, 1.6, 6.0));
        let v = serde_json::json!({"jobs": [{"write": {"clat_ns": {"percentile": {
            "50.000000": 150_000, "99.000000": 1_600_000
        }}}}]});
        let error = durable_write_percentiles(&v).unwrap_err().to_string();
        assert!(error.contains("p99.900000"), "{error}");
    }

    #[test]
    fn stolen_share_is_steal_over_all_cpu_time_between_two_reads() {
        let before = "cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        // +1000 ticks in all, of which steal +50.
        let after = "cpu  400 0 150 1330 20 0 15 85 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(stolen_pct(before, after), Some(5.0));
        assert_eq!(stolen_pct(before, before), None);
        assert_eq!(stolen_pct("intr 1 2\n", after), None);
        assert_eq!(stolen_pct("cpu  1 2 3\n", after), None);
    }
}
