//! Reports: the per-second progress line, the final table, the JSON file,
//! the HDR histogram interval log, and the SVG plot.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::e2e::Integrity;
use crate::run::Mode;
use crate::stats::{LatencySummary, Recorder, PERCENTILES};

/// The shortest measured window a rate is given for. A consume of a small
/// topic ends within milliseconds of its start (or before the window
/// opens): records over such a window said 37 records took a nanosecond,
/// 37,000,000,000 records/s. Below this the report says "too short to
/// measure" and gives counts only.
pub const MEASURED_SECONDS_MIN: f64 = 0.1;
/// What the report says instead of a rate below [`MEASURED_SECONDS_MIN`].
pub const TOO_SHORT: &str = "too short to measure";

/// One second of the run, over every executor.
#[derive(Debug, Clone, Serialize)]
pub struct Second {
    /// Seconds since the start of the run (warm-up included).
    pub t: u64,
    pub warmup: bool,
    pub produced_records_per_s: u64,
    pub produced_mb_per_s: f64,
    pub consumed_records_per_s: u64,
    pub consumed_mb_per_s: f64,
    pub publish_p99_ms: f64,
    pub end_to_end_p99_ms: f64,
    pub errors: u64,
}

impl Second {
    pub fn of(t: u64, warmup: bool, interval: &Recorder) -> Self {
        let p99 = |h: &Histogram<u64>| {
            if h.is_empty() {
                0.0
            } else {
                h.value_at_percentile(99.0) as f64 / 1000.0
            }
        };
        Self {
            t,
            warmup,
            produced_records_per_s: interval.acked_records,
            produced_mb_per_s: interval.acked_bytes as f64 / 1e6,
            consumed_records_per_s: interval.consumed_records,
            consumed_mb_per_s: interval.consumed_bytes as f64 / 1e6,
            publish_p99_ms: p99(&interval.publish_us),
            end_to_end_p99_ms: p99(&interval.end_to_end_us),
            errors: interval.error_count(),
        }
    }

    /// The progress line printed on stderr every second: what the mode
    /// runs (no consume figures in produce mode, no publish latency in
    /// consume mode, end-to-end latency in e2e mode only).
    pub fn progress_line(&self, mode: Mode, total_errors: u64, run_p99_ms: f64) -> String {
        let mut line = format!("{:>4}s{}", self.t, if self.warmup { " warmup" } else { "" });
        let mut parts = Vec::new();
        if mode.produces() {
            parts.push(format!(
                "produce {:>9} rec/s {:>8.1} MB/s",
                self.produced_records_per_s, self.produced_mb_per_s
            ));
        }
        if mode.consumes() {
            parts.push(format!(
                "consume {:>9} rec/s {:>8.1} MB/s",
                self.consumed_records_per_s, self.consumed_mb_per_s
            ));
        }
        if mode.produces() {
            parts.push(format!(
                "publish p99 {:>7.2} ms (run {:>7.2})",
                self.publish_p99_ms, run_p99_ms
            ));
        }
        if mode == Mode::EndToEnd {
            parts.push(format!("e2e p99 {:>7.2} ms", self.end_to_end_p99_ms));
        }
        parts.push(format!("errors {total_errors}"));
        line.push(' ');
        line.push_str(&parts.join(" | "));
        line
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    /// `None` (JSON `null`) when the run was too short to measure.
    pub records_per_s: Option<f64>,
    pub mb_per_s: Option<f64>,
    pub records: u64,
    pub bytes: u64,
}

impl Throughput {
    fn of(records: u64, bytes: u64, seconds: f64) -> Self {
        let measured = seconds >= MEASURED_SECONDS_MIN;
        Self {
            records_per_s: measured.then(|| records as f64 / seconds),
            mb_per_s: measured.then(|| bytes as f64 / 1e6 / seconds),
            records,
            bytes,
        }
    }
}

/// Everything a run measured, after warm-up.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub workload: String,
    pub mode: Mode,
    pub bootstrap: String,
    pub measured_seconds: f64,
    pub produce: Throughput,
    pub consume: Throughput,
    pub publish_latency: LatencySummary,
    pub end_to_end_latency: LatencySummary,
    /// How late sends ran behind the open-loop schedule.
    pub send_delay: LatencySummary,
    pub errors: BTreeMap<String, u64>,
    pub integrity: Option<Integrity>,
    pub series: Vec<Second>,
}

impl RunReport {
    pub fn new(
        workload: &str,
        mode: Mode,
        bootstrap: &str,
        measured_seconds: f64,
        total: &Recorder,
        integrity: Option<Integrity>,
        series: Vec<Second>,
    ) -> Self {
        Self {
            workload: workload.to_string(),
            mode,
            bootstrap: bootstrap.to_string(),
            measured_seconds,
            produce: Throughput::of(total.acked_records, total.acked_bytes, measured_seconds),
            consume: Throughput::of(
                total.consumed_records,
                total.consumed_bytes,
                measured_seconds,
            ),
            publish_latency: LatencySummary::of(&total.publish_us),
            end_to_end_latency: LatencySummary::of(&total.end_to_end_us),
            send_delay: LatencySummary::of(&total.send_delay_us),
            errors: total.errors.clone(),
            integrity,
            series,
        }
    }

    /// The final summary table: the rows of what the mode ran (no
    /// consume or end-to-end rows in produce mode, no publish rows in
    /// consume mode).
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = write!(
            out,
            "workload `{}` ({} mode) against {}: {:.3} s measured",
            self.workload,
            self.mode.name(),
            self.bootstrap,
            self.measured_seconds
        );
        if self.measured_seconds < MEASURED_SECONDS_MIN {
            let _ = write!(
                out,
                ", {TOO_SHORT} rates (that takes at least {MEASURED_SECONDS_MIN} s)"
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "| | records/s | MB/s | records | bytes |");
        let _ = writeln!(out, "|---|---|---|---|---|");
        let mut throughputs = Vec::new();
        if self.mode.produces() {
            throughputs.push(("produced (acknowledged)", &self.produce));
        }
        if self.mode.consumes() {
            throughputs.push(("consumed", &self.consume));
        }
        for (name, t) in throughputs {
            let (records_per_s, mb_per_s) = match (t.records_per_s, t.mb_per_s) {
                (Some(records), Some(mb)) => (format!("{records:.0}"), format!("{mb:.1}")),
                _ => (TOO_SHORT.to_string(), TOO_SHORT.to_string()),
            };
            let _ = writeln!(
                out,
                "| {name} | {records_per_s} | {mb_per_s} | {} | {} |",
                t.records, t.bytes
            );
        }
        let _ = writeln!(out);
        let mut latencies = Vec::new();
        if self.mode.produces() {
            latencies.push(("publish", &self.publish_latency));
        }
        if self.mode == Mode::EndToEnd {
            latencies.push(("end-to-end", &self.end_to_end_latency));
        }
        if self.mode.produces() {
            latencies.push(("send delay", &self.send_delay));
        }
        if !latencies.is_empty() {
            let mut header = String::from("| latency (ms) |");
            let mut rule = String::from("|---|");
            for (name, _) in PERCENTILES {
                header.push_str(&format!(" {name} |"));
                rule.push_str("---|");
            }
            header.push_str(" max | count |");
            rule.push_str("---|---|");
            let _ = writeln!(out, "{header}\n{rule}");
            for (name, summary) in latencies {
                let mut row = format!("| {name} |");
                for (p, _) in PERCENTILES {
                    row.push_str(&format!(" {:.3} |", summary.get(p)));
                }
                row.push_str(&format!(" {:.3} | {} |", summary.max_ms, summary.count));
                let _ = writeln!(out, "{row}");
            }
            let _ = writeln!(out);
        }
        if self.errors.is_empty() {
            let _ = writeln!(out, "errors: none");
        } else {
            for (kind, n) in &self.errors {
                let _ = writeln!(out, "errors: {kind}: {n}");
            }
        }
        if let Some(i) = &self.integrity {
            let _ = writeln!(
                out,
                "integrity: received {}, lost {}, duplicates {}, reordered {}, corrupt {}, foreign {}",
                i.received, i.lost, i.duplicates, i.reordered, i.corrupt, i.foreign
            );
        }
        out
    }

    pub fn write_json(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }
}

/// Draws latency by percentile (log scale of 1/(1-p)) and throughput over
/// time as one SVG.
pub fn write_svg(
    path: &Path,
    report: &RunReport,
    publish: &Histogram<u64>,
    end_to_end: &Histogram<u64>,
) -> Result<()> {
    const W: f64 = 900.0;
    const H: f64 = 320.0;
    const PAD: f64 = 60.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{}" font-family="sans-serif" font-size="12">"#,
        2.0 * H + 40.0
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);

    // Panel 1: latency by percentile. x = log10(1 / (1 - p)), p in [0, 0.99999].
    let x_max = 5.0; // up to p99.999
    type Curve<'a> = (&'a str, &'a str, Vec<(f64, f64)>);
    let curves: Vec<Curve> = [
        ("publish", "#1f77b4", publish),
        ("end-to-end", "#d62728", end_to_end),
    ]
    .into_iter()
    .filter(|(_, _, h)| !h.is_empty())
    .map(|(name, color, h)| {
        let points = (0..=100)
            .map(|i| {
                let x = x_max * i as f64 / 100.0;
                let p = 100.0 * (1.0 - 10f64.powf(-x));
                (x, h.value_at_percentile(p) as f64 / 1000.0)
            })
            .collect();
        (name, color, points)
    })
    .collect();
    let y_max = curves
        .iter()
        .flat_map(|(_, _, pts)| pts.iter().map(|p| p.1))
        .fold(0.001f64, f64::max)
        * 1.1;
    let px = |x: f64| PAD + (W - 2.0 * PAD) * x / x_max;
    let py = |y: f64, top: f64, max: f64| top + H - PAD / 2.0 - (H - PAD) * y / max;
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="20" text-anchor="middle">{} — latency by percentile (ms)</text>"#,
        W / 2.0,
        escape(&report.workload)
    );
    axis(&mut svg, PAD, 0.0 + 30.0, W, H - 30.0);
    for (label, x) in [
        ("p0", 0.0),
        ("p90", 1.0),
        ("p99", 2.0),
        ("p99.9", 3.0),
        ("p99.99", 4.0),
        ("p99.999", 5.0),
    ] {
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{label}</text>"#,
            px(x),
            H + 5.0
        );
    }
    for i in 0..=4 {
        let v = y_max * i as f64 / 4.0;
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="end">{v:.2}</text>"#,
            PAD - 5.0,
            py(v, 0.0, y_max) + 4.0
        );
    }
    for (i, (name, color, points)) in curves.iter().enumerate() {
        let path: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y, 0.0, y_max)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" fill="{color}">{name}</text>"#,
            PAD + 10.0,
            50.0 + 15.0 * i as f64
        );
    }

    // Panel 2: throughput over time.
    let top = H + 20.0;
    let t_max = report.series.last().map_or(1.0, |s| s.t as f64).max(1.0);
    let mb_max = report
        .series
        .iter()
        .map(|s| s.produced_mb_per_s.max(s.consumed_mb_per_s))
        .fold(0.001f64, f64::max)
        * 1.1;
    let tx = |t: f64| PAD + (W - 2.0 * PAD) * t / t_max;
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">throughput over time (MB/s)</text>"#,
        W / 2.0,
        top + 20.0
    );
    axis(&mut svg, PAD, top + 30.0, W, H - 30.0);
    for i in 0..=4 {
        let v = mb_max * i as f64 / 4.0;
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="end">{v:.0}</text>"#,
            PAD - 5.0,
            py(v, top, mb_max) + 4.0
        );
        let t = t_max * i as f64 / 4.0;
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{t:.0}s</text>"#,
            tx(t),
            top + H + 5.0
        );
    }
    for (name, color, pick) in [
        (
            "produced",
            "#1f77b4",
            (|s: &Second| s.produced_mb_per_s) as fn(&Second) -> f64,
        ),
        ("consumed", "#2ca02c", |s: &Second| s.consumed_mb_per_s),
    ] {
        let points: Vec<String> = report
            .series
            .iter()
            .map(|s| format!("{:.1},{:.1}", tx(s.t as f64), py(pick(s), top, mb_max)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" fill="{color}">{name}</text>"#,
            W - PAD - 80.0,
            top + 50.0 + if name == "consumed" { 15.0 } else { 0.0 }
        );
    }
    svg.push_str("</svg>\n");
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))
}

fn axis(svg: &mut String, left: f64, top: f64, width: f64, height: f64) {
    let _ = writeln!(
        svg,
        r#"<polyline fill="none" stroke="black" points="{left},{top} {left},{} {},{}"/>"#,
        top + height - 15.0,
        width - left,
        top + height - 15.0
    );
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
