//! `strom-tune`: host checks, fixes and disk calibration for Strom.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tuning::{apply, check, host::Host, iotune, probe};

#[derive(Parser)]
#[command(
    name = "strom-tune",
    version,
    about = "Check and tune a Linux host for Strom; calibrate its data disk"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// One line per host property: ok, warn or fail, the current and the
    /// recommended value, and why. Exits 0 when all are ok, 1 on a warning,
    /// 2 on a failure.
    Check {
        /// The broker's data directory (filesystem, disk, O_DIRECT checks).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// Print a JSON array instead of text lines.
        #[arg(long)]
        json: bool,
        /// Executors the broker will start [default: every online CPU].
        #[arg(long, value_name = "N")]
        cores: Option<usize>,
        /// io memory per executor (`strom.io.memory.bytes`) [default: glommio's 10 MiB].
        #[arg(long, value_name = "BYTES")]
        io_memory_bytes: Option<u64>,
        /// Read /proc and /sys under this directory instead of / (tests).
        #[arg(long, value_name = "DIR", hide = true)]
        root: Option<PathBuf>,
    },
    /// Sets the sysctls and sysfs knobs `check` flags, printing each change.
    /// Knobs already at their recommended values are left alone.
    Apply {
        /// Print what would change without changing it.
        #[arg(long)]
        dry_run: bool,
        /// The broker's data directory (its disk's scheduler and nomerges).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// Read and write /proc and /sys under this directory instead of / (tests).
        #[arg(long, value_name = "DIR", hide = true)]
        root: Option<PathBuf>,
    },
    /// Measures sequential O_DIRECT write and read bandwidth and fdatasync
    /// latency in DIR and writes DIR/io-properties.toml.
    Iotune {
        /// Directory on the data disk (the broker's data dir).
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// Seconds to measure for, in total.
        #[arg(long, value_name = "S", default_value_t = 30.0)]
        duration: f64,
        /// Where to write the result [default: DIR/io-properties.toml].
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
}

fn online_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Check {
            data_dir,
            json,
            cores,
            io_memory_bytes,
            root,
        } => {
            let host = root.map(Host::at).unwrap_or_else(Host::real);
            let mut probes = check::Probes::default();
            if host.is_real() {
                probes.io_uring = Some(probe::io_uring());
                if let Some(dir) = &data_dir {
                    probes.o_direct = Some(if dir.is_dir() {
                        probe::o_direct(dir)
                    } else {
                        Err(format!("{} is not a directory", dir.display()))
                    });
                }
            }
            let options = check::Options {
                data_dir: data_dir.as_deref().map(probe::resolve_dir),
                cores: cores.unwrap_or_else(online_cpus),
                io_memory_bytes: io_memory_bytes.unwrap_or(check::IO_MEMORY_DEFAULT_BYTES),
            };
            let findings = check::run(&host, &options, &probes);
            if json {
                println!("{}", check::render_json(&findings));
            } else {
                print!("{}", check::render_text(&findings));
            }
            ExitCode::from(check::worst(&findings).exit_code())
        }
        Command::Apply {
            dry_run,
            data_dir,
            root,
        } => {
            let host = root.map(Host::at).unwrap_or_else(Host::real);
            let queue_dir = data_dir
                .as_deref()
                .map(probe::resolve_dir)
                .and_then(|dir| probe::queue_dir_for(&host, &dir));
            let changes = apply::plan(&host, queue_dir.as_deref());
            let results = apply::execute(&host, &changes, dry_run);
            print!("{}", apply::render(&results));
            for note in apply::left_to_operator(&host) {
                println!("not changed: {note}");
            }
            let refused = results
                .iter()
                .any(|(_, o)| matches!(o, apply::Outcome::Refused(_)));
            if results.iter().any(|(_, o)| *o == apply::Outcome::Set) {
                println!("these settings last until reboot: run `strom-tune apply` at boot (docs/operations.md)");
            }
            ExitCode::from(u8::from(refused))
        }
        Command::Iotune { dir, duration, out } => {
            if !(duration > 0.0 && duration.is_finite()) {
                eprintln!("strom-tune: --duration must be a positive number of seconds");
                return ExitCode::from(2);
            }
            let options = iotune::Options {
                dir: dir.clone(),
                duration: Duration::from_secs_f64(duration),
                block_sizes: iotune::BLOCK_SIZES.to_vec(),
                queue_depths: iotune::QUEUE_DEPTHS.to_vec(),
            };
            let properties = match iotune::run(options) {
                Ok(properties) => properties,
                Err(error) => {
                    eprintln!("strom-tune: iotune failed: {error:#}");
                    return ExitCode::from(1);
                }
            };
            let out = out.unwrap_or_else(|| dir.join(iotune::FILE_NAME));
            let text = properties.to_toml();
            if let Err(error) = std::fs::write(&out, &text) {
                eprintln!("strom-tune: cannot write {}: {error}", out.display());
                return ExitCode::from(1);
            }
            let m = &properties.measured;
            println!(
                "write {:.0} MB/s max, read {:.0} MB/s max, fdatasync p50 {} us p99 {} us ({} syncs)",
                m.write_bandwidth_bytes_per_s_max as f64 / 1e6,
                m.read_bandwidth_bytes_per_s_max as f64 / 1e6,
                m.fdatasync_latency_us_p50,
                m.fdatasync_latency_us_p99,
                m.fdatasync_count
            );
            println!(
                "strom.write.bytes = {}, strom.writes.inflight = {}",
                properties.io.write_bytes, properties.io.writes_inflight
            );
            println!("wrote {}", out.display());
            ExitCode::SUCCESS
        }
    }
}
