//! `strom-tune iotune`: measures the data disk the way the log uses it
//! (O_DIRECT through io_uring with glommio's `DmaFile`, files grown with
//! fallocate ahead of the writer) and writes `io-properties.toml`, which
//! `strom start` reads to size its writes.
//!
//! Phases share the duration: sequential writes at every block size and
//! queue depth (45%), sequential reads of the written file likewise (35%),
//! then fdatasync after 4 KiB appends (20%). A line on stderr each second
//! says what is being measured and how fast it goes.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use glommio::io::{DmaFile, OpenOptions};
use glommio::{LocalExecutorBuilder, Placement};
use serde::{Deserialize, Serialize};

/// The file name `strom start` looks for in the data directory.
pub const FILE_NAME: &str = "io-properties.toml";

/// Block sizes measured, all multiples of the 4 KiB page the log aligns to.
pub const BLOCK_SIZES: &[usize] = &[64 << 10, 128 << 10, 256 << 10, 1 << 20];
/// Queue depths measured; `strom.writes.inflight` allows 1 to 64.
pub const QUEUE_DEPTHS: &[usize] = &[1, 2, 4, 8];
/// Largest scratch file; sequential writes wrap around (on a fresh
/// preallocation) when they reach it.
pub const FILE_BYTES_MAX: u64 = 1 << 30;
/// The smallest scratch file, so short runs still read a sequential stream.
pub const FILE_BYTES_MIN: u64 = 64 << 20;
/// A configuration within this share of the best bandwidth counts as
/// reaching it; the smallest such block size and queue depth is chosen.
pub const GOOD_ENOUGH_PERCENT: u64 = 90;
const PAGE: usize = 4096;
/// How often a progress line is printed while measuring: a 30 s run that
/// printed nothing until the end looked hung.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// The settings the broker takes from the file, in its config names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoSettings {
    #[serde(rename = "strom.write.bytes")]
    pub write_bytes: u64,
    #[serde(rename = "strom.writes.inflight")]
    pub writes_inflight: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    pub block_bytes: u64,
    pub queue_depth: u64,
    pub bandwidth_bytes_per_s: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub dir: String,
    pub duration_s: f64,
    pub measured_at_unix_s: u64,
    pub write_bandwidth_bytes_per_s_max: u64,
    pub read_bandwidth_bytes_per_s_max: u64,
    pub fdatasync_count: u64,
    pub fdatasync_latency_us_p50: u64,
    pub fdatasync_latency_us_p99: u64,
    pub fdatasync_latency_us_max: u64,
    pub write: Vec<Measurement>,
    pub read: Vec<Measurement>,
}

/// The whole `io-properties.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IoProperties {
    pub io: IoSettings,
    pub measured: Measured,
}

impl IoProperties {
    pub fn to_toml(&self) -> String {
        let body = toml::to_string(self).expect("io properties serialize");
        format!(
            "# Written by `strom-tune iotune`. `strom start` reads the [io] table\n\
             # (unless the config sets those keys); [measured] is for people.\n{body}"
        )
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    pub dir: PathBuf,
    pub duration: Duration,
    pub block_sizes: Vec<usize>,
    pub queue_depths: Vec<usize>,
}

/// Picks the smallest block size that reaches [`GOOD_ENOUGH_PERCENT`] of the
/// best write bandwidth, then the smallest queue depth that does so at that
/// block size: the least memory and concurrency that gets the disk's speed.
pub fn recommend(writes: &[Measurement]) -> IoSettings {
    let best = writes
        .iter()
        .map(|m| m.bandwidth_bytes_per_s)
        .max()
        .unwrap_or(0);
    let good = |m: &&Measurement| m.bandwidth_bytes_per_s * 100 >= best * GOOD_ENOUGH_PERCENT;
    let block = writes
        .iter()
        .filter(good)
        .map(|m| m.block_bytes)
        .min()
        .unwrap_or(1 << 20);
    let depth = writes
        .iter()
        .filter(|m| m.block_bytes == block)
        .filter(good)
        .map(|m| m.queue_depth)
        .min()
        .unwrap_or(4);
    IoSettings {
        write_bytes: block.div_ceil(PAGE as u64) * PAGE as u64,
        writes_inflight: depth.clamp(1, 64),
    }
}

/// What a progress line counts in the current step.
#[derive(Clone, Copy)]
enum Unit {
    Bytes,
    Syncs,
}

struct Step {
    label: String,
    unit: Unit,
    started: Instant,
}

/// The step being measured and its count so far, shared between the
/// measuring executor and the thread printing progress lines.
struct Progress {
    step: Mutex<Step>,
    /// Bytes moved, or syncs done, in the current step.
    done: AtomicU64,
}

impl Progress {
    fn new() -> Self {
        Self {
            step: Mutex::new(Step {
                label: "starting".to_string(),
                unit: Unit::Bytes,
                started: Instant::now(),
            }),
            done: AtomicU64::new(0),
        }
    }

    fn begin(&self, label: String, unit: Unit) {
        let mut step = self.step.lock().expect("progress lock");
        *step = Step {
            label,
            unit,
            started: Instant::now(),
        };
        self.done.store(0, Ordering::Relaxed);
    }

    fn add(&self, count: u64) {
        self.done.fetch_add(count, Ordering::Relaxed);
    }

    /// `   3s of 30s: write 256 KiB x 4 in flight, 1830 MB/s`.
    fn line(&self, elapsed: Duration, total: Duration) -> String {
        let step = self.step.lock().expect("progress lock");
        let seconds = step.started.elapsed().as_secs_f64().max(1e-3);
        let done = self.done.load(Ordering::Relaxed) as f64;
        let rate = match step.unit {
            Unit::Bytes => format!("{:.0} MB/s", done / 1e6 / seconds),
            Unit::Syncs => format!("{:.0} syncs/s", done / seconds),
        };
        format!(
            "{:>4}s of {:.0}s: {}, {rate}",
            elapsed.as_secs(),
            total.as_secs_f64(),
            step.label
        )
    }
}

/// Prints `progress` on stderr every [`PROGRESS_INTERVAL`] until `stop`
/// is dropped.
fn print_progress(
    progress: Arc<Progress>,
    total: Duration,
    stop: mpsc::Receiver<()>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let started = Instant::now();
        while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(PROGRESS_INTERVAL) {
            eprintln!("{}", progress.line(started.elapsed(), total));
        }
    })
}

/// Runs the measurements on a glommio executor and returns the results,
/// printing a progress line on stderr each second.
pub fn run(options: Options) -> anyhow::Result<IoProperties> {
    anyhow::ensure!(
        options.dir.is_dir(),
        "{} is not a directory",
        options.dir.display()
    );
    let dir = options
        .dir
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", options.dir.display()))?;
    let options = Options { dir, ..options };
    let progress = Arc::new(Progress::new());
    let (stop, stopped) = mpsc::channel();
    let printer = print_progress(progress.clone(), options.duration, stopped);
    let result = LocalExecutorBuilder::new(Placement::Unbound)
        .name("strom-iotune")
        .spawn(move || measure(options, progress))
        .map_err(|e| {
            anyhow::anyhow!("cannot start a glommio executor (is io_uring available?): {e}")
        })
        .and_then(|executor| {
            executor
                .join()
                .map_err(|_| anyhow::anyhow!("the measuring executor panicked"))
        });
    drop(stop);
    let _ = printer.join();
    result?
}

fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct; the path is a valid C string.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut stat) };
    (rc == 0).then(|| stat.f_bavail as u64 * stat.f_frsize as u64)
}

async fn measure(options: Options, progress: Arc<Progress>) -> anyhow::Result<IoProperties> {
    let path = options.dir.join(".strom-iotune.tmp");
    let free = free_bytes(&options.dir).unwrap_or(FILE_BYTES_MIN * 4);
    let file_bytes = (free / 4).clamp(FILE_BYTES_MIN, FILE_BYTES_MAX) / (1 << 20) * (1 << 20);
    // glommio decides whether a device supports polled I/O from the first
    // file it opens; an empty one fools it, so the file starts with data.
    std::fs::write(&path, vec![0u8; PAGE])
        .with_context(|| format!("cannot write {}", path.display()))?;
    let result = measure_file(&options, &path, file_bytes, &progress).await;
    let _ = std::fs::remove_file(&path);
    result
}

async fn measure_file(
    options: &Options,
    path: &Path,
    file_bytes: u64,
    progress: &Arc<Progress>,
) -> anyhow::Result<IoProperties> {
    let file = Rc::new(
        OpenOptions::new()
            .read(true)
            .write(true)
            .dma_open(path)
            .await
            .map_err(|e| io_error("open with O_DIRECT", path, 0, e))?,
    );
    let combos: Vec<(usize, usize)> = options
        .block_sizes
        .iter()
        .flat_map(|&b| options.queue_depths.iter().map(move |&q| (b, q)))
        .collect();
    let total = options.duration.as_secs_f64();
    let write_each = Duration::from_secs_f64(total * 0.45 / combos.len() as f64);
    let read_each = Duration::from_secs_f64(total * 0.35 / combos.len() as f64);
    let sync_time = Duration::from_secs_f64(total * 0.20);

    let scratch = Scratch {
        file: &file,
        path,
        file_bytes,
        progress,
    };
    let mut writes = Vec::new();
    for &(block, depth) in &combos {
        progress.begin(
            format!("write {} KiB x {depth} in flight", block >> 10),
            Unit::Bytes,
        );
        let rate = sequential(&scratch, Direction::Write, block, depth, write_each).await?;
        writes.push(Measurement {
            block_bytes: block as u64,
            queue_depth: depth as u64,
            bandwidth_bytes_per_s: rate,
        });
    }
    // Reads need a whole file of written data.
    progress.begin(
        format!("writing {} MiB to read back", file_bytes >> 20),
        Unit::Bytes,
    );
    fill(&file, path, file_bytes, progress).await?;
    let mut reads = Vec::new();
    for &(block, depth) in &combos {
        progress.begin(
            format!("read {} KiB x {depth} in flight", block >> 10),
            Unit::Bytes,
        );
        let rate = sequential(&scratch, Direction::Read, block, depth, read_each).await?;
        reads.push(Measurement {
            block_bytes: block as u64,
            queue_depth: depth as u64,
            bandwidth_bytes_per_s: rate,
        });
    }
    progress.begin("fdatasync after 4 KiB appends".to_string(), Unit::Syncs);
    let mut latencies_us = sync_latencies(&file, path, sync_time, progress).await?;
    latencies_us.sort_unstable();
    let percentile = |p: usize| {
        if latencies_us.is_empty() {
            0
        } else {
            latencies_us[((latencies_us.len() - 1) * p) / 100]
        }
    };
    let measured = Measured {
        dir: options.dir.display().to_string(),
        duration_s: total,
        measured_at_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        write_bandwidth_bytes_per_s_max: writes
            .iter()
            .map(|m| m.bandwidth_bytes_per_s)
            .max()
            .unwrap_or(0),
        read_bandwidth_bytes_per_s_max: reads
            .iter()
            .map(|m| m.bandwidth_bytes_per_s)
            .max()
            .unwrap_or(0),
        fdatasync_count: latencies_us.len() as u64,
        fdatasync_latency_us_p50: percentile(50),
        fdatasync_latency_us_p99: percentile(99),
        fdatasync_latency_us_max: latencies_us.last().copied().unwrap_or(0),
        write: writes.clone(),
        read: reads,
    };
    let file = Rc::try_unwrap(file).map_err(|_| anyhow::anyhow!("scratch file still in use"))?;
    let _ = file.close().await;
    Ok(IoProperties {
        io: recommend(&writes),
        measured,
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Write,
    Read,
}

fn io_error(op: &str, path: &Path, position: u64, error: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{op} {} at {position}: {error}", path.display())
}

/// Starts a fresh region for appends, as the log's preallocation does.
async fn fresh(file: &DmaFile, path: &Path, file_bytes: u64) -> anyhow::Result<()> {
    file.truncate(0)
        .await
        .map_err(|e| io_error("truncate", path, 0, e))?;
    file.pre_allocate(file_bytes, false)
        .await
        .map_err(|e| io_error("fallocate", path, 0, e))
}

/// The scratch file measured and where its progress is counted.
#[derive(Clone, Copy)]
struct Scratch<'a> {
    file: &'a Rc<DmaFile>,
    path: &'a Path,
    file_bytes: u64,
    progress: &'a Arc<Progress>,
}

/// Sequential I/O of `block` bytes with `depth` in flight for `time`;
/// returns bytes per second. Writes wrap onto a fresh preallocation when
/// they reach the end of the file; reads wrap to its start.
async fn sequential(
    scratch: &Scratch<'_>,
    direction: Direction,
    block: usize,
    depth: usize,
    time: Duration,
) -> anyhow::Result<u64> {
    let Scratch {
        file,
        path,
        file_bytes,
        progress,
    } = *scratch;
    if direction == Direction::Write {
        fresh(file, path, file_bytes).await?;
    }
    let next = Rc::new(Cell::new(0u64));
    let done = Rc::new(Cell::new(0u64));
    // Wrapping writes truncate the file: the other workers must not write
    // meanwhile, so a wrap takes this lock for writing.
    let wrap = Rc::new(glommio::sync::RwLock::new(()));
    let started = Instant::now();
    let deadline = started + time.max(Duration::from_millis(20));
    let mut workers = Vec::with_capacity(depth);
    for _ in 0..depth {
        let (file, next, done, wrap) = (file.clone(), next.clone(), done.clone(), wrap.clone());
        let (path, progress) = (path.to_path_buf(), progress.clone());
        workers.push(glommio::spawn_local(async move {
            while Instant::now() < deadline {
                let guard = wrap.read().await.map_err(|e| anyhow::anyhow!("{e}"))?;
                let position = next.get();
                if position + block as u64 > file_bytes {
                    drop(guard);
                    let _exclusive = wrap.write().await.map_err(|e| anyhow::anyhow!("{e}"))?;
                    if next.get() + block as u64 > file_bytes {
                        if direction == Direction::Write {
                            fresh(&file, &path, file_bytes).await?;
                        }
                        next.set(0);
                    }
                    continue;
                }
                next.set(position + block as u64);
                match direction {
                    Direction::Write => {
                        let mut buffer = file.alloc_dma_buffer(block);
                        buffer.as_bytes_mut().fill(0x5a);
                        let written = file
                            .write_at(buffer, position)
                            .await
                            .map_err(|e| io_error("write", &path, position, e))?;
                        done.set(done.get() + written as u64);
                        progress.add(written as u64);
                    }
                    Direction::Read => {
                        let read = file
                            .read_at_aligned(position, block)
                            .await
                            .map_err(|e| io_error("read", &path, position, e))?;
                        done.set(done.get() + read.len() as u64);
                        progress.add(read.len() as u64);
                    }
                }
                drop(guard);
            }
            anyhow::Ok(())
        }));
    }
    for worker in workers {
        worker.await?;
    }
    let seconds = started.elapsed().as_secs_f64().max(1e-9);
    Ok((done.get() as f64 / seconds) as u64)
}

/// Writes the whole file once (1 MiB writes, 8 in flight) so reads find data.
async fn fill(
    file: &Rc<DmaFile>,
    path: &Path,
    file_bytes: u64,
    progress: &Arc<Progress>,
) -> anyhow::Result<()> {
    fresh(file, path, file_bytes).await?;
    const BLOCK: usize = 1 << 20;
    let next = Rc::new(Cell::new(0u64));
    let mut workers = Vec::new();
    for _ in 0..8 {
        let (file, next) = (file.clone(), next.clone());
        let (path, progress) = (path.to_path_buf(), progress.clone());
        workers.push(glommio::spawn_local(async move {
            loop {
                let position = next.get();
                if position >= file_bytes {
                    return anyhow::Ok(());
                }
                next.set(position + BLOCK as u64);
                let mut buffer = file.alloc_dma_buffer(BLOCK);
                buffer.as_bytes_mut().fill(0xa5);
                let written = file
                    .write_at(buffer, position)
                    .await
                    .map_err(|e| io_error("write", &path, position, e))?;
                progress.add(written as u64);
            }
        }));
    }
    for worker in workers {
        worker.await?;
    }
    file.fdatasync()
        .await
        .map_err(|e| io_error("fdatasync", path, 0, e))
}

/// fdatasync after each 4 KiB append to a fresh preallocation, as the log
/// does under `flush.policy=always` with one small produce at a time.
async fn sync_latencies(
    file: &DmaFile,
    path: &Path,
    time: Duration,
    progress: &Progress,
) -> anyhow::Result<Vec<u64>> {
    fresh(file, path, 64 << 20).await?;
    let mut latencies = Vec::new();
    let deadline = Instant::now() + time.max(Duration::from_millis(20));
    let mut position = 0u64;
    while Instant::now() < deadline || latencies.len() < 10 {
        if position + PAGE as u64 > 64 << 20 {
            fresh(file, path, 64 << 20).await?;
            position = 0;
        }
        let mut buffer = file.alloc_dma_buffer(PAGE);
        buffer.as_bytes_mut().fill(0x33);
        file.write_at(buffer, position)
            .await
            .map_err(|e| io_error("write", path, position, e))?;
        position += PAGE as u64;
        let started = Instant::now();
        file.fdatasync()
            .await
            .map_err(|e| io_error("fdatasync", path, position, e))?;
        latencies.push(started.elapsed().as_micros() as u64);
        progress.add(1);
    }
    Ok(latencies)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(block_bytes: u64, queue_depth: u64, bandwidth_bytes_per_s: u64) -> Measurement {
        Measurement {
            block_bytes,
            queue_depth,
            bandwidth_bytes_per_s,
        }
    }

    #[test]
    fn recommendation_is_the_smallest_good_enough_configuration() {
        let writes = [
            m(65536, 1, 500),
            m(65536, 4, 800),
            m(131072, 1, 900),
            m(131072, 4, 990),
            m(1 << 20, 1, 950),
            m(1 << 20, 4, 1000),
        ];
        assert_eq!(
            recommend(&writes),
            IoSettings {
                write_bytes: 131072,
                writes_inflight: 1
            }
        );
        assert_eq!(
            recommend(&[]),
            IoSettings {
                write_bytes: 1 << 20,
                writes_inflight: 4
            }
        );
    }
}
