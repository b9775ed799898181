//! What the benchmark binaries share: the disk's limit measured with fio,
//! and medians.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

/// fio's sequential O_DIRECT write of a new file of `bytes` in `dir`,
/// 1 MiB blocks, QD1, in MB/s.
pub fn fio_write_mb_s(dir: &Path, bytes: u64) -> Result<f64> {
    let file = dir.join("fio.dat");
    let _ = std::fs::remove_file(&file);
    let output = Command::new("fio")
        .args([
            "--name=seqwrite",
            "--rw=write",
            "--bs=1M",
            "--iodepth=1",
            "--direct=1",
            "--ioengine=psync",
            "--end_fsync=1",
            "--output-format=terse",
            "--terse-version=3",
        ])
        .arg(format!("--filename={}", file.display()))
        .arg(format!("--size={bytes}"))
        .output()
        .context("running fio (install it: apt-get install fio)")?;
    let _ = std::fs::remove_file(&file);
    if !output.status.success() {
        bail!("fio failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    // Terse v3: field 48 (0-based 47) is the write bandwidth in KiB/s.
    let text = String::from_utf8(output.stdout)?;
    let fields: Vec<&str> = text.trim().split(';').collect();
    let kib_s: f64 = fields
        .get(47)
        .context("fio terse output too short")?
        .parse()
        .context("fio write bandwidth")?;
    Ok(kib_s * 1024.0 / 1e6)
}

/// The median of `values` (the upper one of an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    sorted[sorted.len() / 2]
}

/// `values` as a comma-separated list of whole numbers.
pub fn fmt_runs(values: &[f64]) -> String {
    values
        .iter()
        .map(|r| format!("{r:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}
