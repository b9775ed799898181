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
            let _ = write!(out, "integrity: received {}", i.received);
            if i.received_warmup > 0 {
                let _ = write!(out, " (and {} in the warm-up)", i.received_warmup);
            }
            let _ = writeln!(
                out,
                ", lost {}, duplicates {}, reordered {}, corrupt {}, foreign {}{}",
                i.lost,
                i.duplicates,
                i.reordered,
                i.corrupt,
                i.foreign,
                if i.received_warmup > 0 {
                    " (of every record, warm-up included)"
                } else {
                    ""
                }
            );
        }
        out
    }

    pub fn write_json(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }
}

/// Width of the SVG, and height of each of its two panels.
const SVG_WIDTH: f64 = 900.0;
const PANEL_HEIGHT: f64 = 320.0;
/// Room left and right of a plot for the axis labels.
const PLOT_MARGIN: f64 = 60.0;
/// Most steps a value axis is divided into.
const TICK_STEPS_MAX: usize = 5;

/// Where one panel of the SVG draws: its title, then a legend row, then
/// the plot, whose area holds nothing but the axes and the lines.
struct Panel {
    top: f64,
}

impl Panel {
    fn title_y(&self) -> f64 {
        self.top + 20.0
    }

    /// The legend's row, above the plot area so no line runs through it.
    fn legend_y(&self) -> f64 {
        self.top + 40.0
    }

    fn plot_top(&self) -> f64 {
        self.top + 52.0
    }

    fn plot_bottom(&self) -> f64 {
        self.top + PANEL_HEIGHT - 15.0
    }

    /// The y coordinate of `value` on an axis from 0 to `max`.
    fn y(&self, value: f64, max: f64) -> f64 {
        self.plot_bottom() - (self.plot_bottom() - self.plot_top()) * value / max
    }

    fn axes(&self, svg: &mut String) {
        let (left, right) = (PLOT_MARGIN, SVG_WIDTH - PLOT_MARGIN);
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="black" points="{left},{} {left},{} {right},{}"/>"#,
            self.plot_top(),
            self.plot_bottom(),
            self.plot_bottom()
        );
    }

    /// The curves' names in their colours, side by side in the legend row.
    fn legend(&self, svg: &mut String, entries: &[(&str, &str)]) {
        for (i, (name, color)) in entries.iter().enumerate() {
            let x = PLOT_MARGIN + 10.0 + 120.0 * i as f64;
            let y = self.legend_y();
            let _ = writeln!(
                svg,
                r#"<line x1="{x}" y1="{}" x2="{}" y2="{}" stroke="{color}" stroke-width="2"/>"#,
                y - 4.0,
                x + 20.0,
                y - 4.0
            );
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{y}" fill="{color}">{name}</text>"#,
                x + 25.0
            );
        }
    }
}

/// An axis from 0 that holds `max`: a round step (1, 2, 2.5 or 5 times a
/// power of ten) and at most [`TICK_STEPS_MAX`] steps of it, so the tick
/// labels are evenly spaced round numbers. Returns (step, steps).
fn ticks(max: f64) -> (f64, usize) {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let magnitude = 10f64.powf((max / TICK_STEPS_MAX as f64).log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|step| step * TICK_STEPS_MAX as f64 >= max)
        .unwrap_or(10.0 * magnitude);
    // A hair under a whole number of steps is that number, not one more.
    let steps = ((max / step) - 1e-9).ceil().max(1.0) as usize;
    (step, steps)
}

/// A tick's label with the decimals its step needs (2.5 → "2.5", 0.05 →
/// "0.05", 20 → "20").
fn tick_label(value: f64, step: f64) -> String {
    let decimals = (0..=6)
        .find(|&d| {
            let scaled = step * 10f64.powi(d);
            (scaled - scaled.round()).abs() < 1e-6 * scaled.max(1.0)
        })
        .unwrap_or(6) as usize;
    format!("{value:.decimals$}")
}

/// Draws latency by percentile (log scale of 1/(1-p)) and throughput over
/// time as one SVG.
pub fn write_svg(
    path: &Path,
    report: &RunReport,
    publish: &Histogram<u64>,
    end_to_end: &Histogram<u64>,
) -> Result<()> {
    let svg = render_svg(report, publish, end_to_end);
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))
}

fn render_svg(report: &RunReport, publish: &Histogram<u64>, end_to_end: &Histogram<u64>) -> String {
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{SVG_WIDTH}" height="{}" font-family="sans-serif" font-size="12">"#,
        2.0 * PANEL_HEIGHT + 40.0
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let px = |x: f64, x_max: f64| PLOT_MARGIN + (SVG_WIDTH - 2.0 * PLOT_MARGIN) * x / x_max;

    // Panel 1: latency by percentile. x = log10(1 / (1 - p)), p in [0, 0.99999].
    let latency = Panel { top: 0.0 };
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
    let ms_max = curves
        .iter()
        .flat_map(|(_, _, pts)| pts.iter().map(|p| p.1))
        .fold(0.001f64, f64::max);
    let (ms_step, ms_steps) = ticks(ms_max);
    let ms_axis = ms_step * ms_steps as f64;
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">{} — latency by percentile (ms)</text>"#,
        SVG_WIDTH / 2.0,
        latency.title_y(),
        escape(&report.workload)
    );
    latency.axes(&mut svg);
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
            px(x, x_max),
            latency.plot_bottom() + 20.0
        );
    }
    for i in 0..=ms_steps {
        let v = ms_step * i as f64;
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            PLOT_MARGIN - 5.0,
            latency.y(v, ms_axis) + 4.0,
            tick_label(v, ms_step)
        );
    }
    for (_, color, points) in &curves {
        let path: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x, x_max), latency.y(*y, ms_axis)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
    }
    let entries: Vec<(&str, &str)> = curves.iter().map(|(n, c, _)| (*n, *c)).collect();
    latency.legend(&mut svg, &entries);

    // Panel 2: throughput over time.
    let throughput = Panel {
        top: PANEL_HEIGHT + 20.0,
    };
    let t_last = report.series.last().map_or(1.0, |s| s.t as f64).max(1.0);
    let (t_step, t_steps) = ticks(t_last);
    let t_axis = t_step * t_steps as f64;
    let mb_max = report
        .series
        .iter()
        .map(|s| s.produced_mb_per_s.max(s.consumed_mb_per_s))
        .fold(0.001f64, f64::max);
    let (mb_step, mb_steps) = ticks(mb_max);
    let mb_axis = mb_step * mb_steps as f64;
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">throughput over time (MB/s)</text>"#,
        SVG_WIDTH / 2.0,
        throughput.title_y()
    );
    throughput.axes(&mut svg);
    for i in 0..=mb_steps {
        let v = mb_step * i as f64;
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            PLOT_MARGIN - 5.0,
            throughput.y(v, mb_axis) + 4.0,
            tick_label(v, mb_step)
        );
    }
    for i in 0..=t_steps {
        let t = t_step * i as f64;
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{}s</text>"#,
            px(t, t_axis),
            throughput.plot_bottom() + 20.0,
            tick_label(t, t_step)
        );
    }
    type Line = (&'static str, &'static str, fn(&Second) -> f64);
    let lines: [Line; 2] = [
        ("produced", "#1f77b4", |s| s.produced_mb_per_s),
        ("consumed", "#2ca02c", |s| s.consumed_mb_per_s),
    ];
    for (_, color, pick) in lines {
        let points: Vec<String> = report
            .series
            .iter()
            .map(|s| {
                format!(
                    "{:.1},{:.1}",
                    px(s.t as f64, t_axis),
                    throughput.y(pick(s), mb_axis)
                )
            })
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
    }
    let entries: Vec<(&str, &str)> = lines.iter().map(|(n, c, _)| (*n, *c)).collect();
    throughput.legend(&mut svg, &entries);
    svg.push_str("</svg>\n");
    svg
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(t: u64, produced_mb_per_s: f64, consumed_mb_per_s: f64) -> Second {
        Second {
            t,
            warmup: false,
            produced_records_per_s: 0,
            produced_mb_per_s,
            consumed_records_per_s: 0,
            consumed_mb_per_s,
            publish_p99_ms: 0.0,
            end_to_end_p99_ms: 0.0,
            errors: 0,
        }
    }

    fn report(series: Vec<Second>, integrity: Option<Integrity>) -> RunReport {
        RunReport::new(
            "(d) 50 MB/s",
            Mode::EndToEnd,
            "127.0.0.1:9092",
            10.0,
            &Recorder::default(),
            integrity,
            series,
        )
    }

    /// The value of attribute `name` in the SVG element `element`.
    fn attribute(element: &str, name: &str) -> f64 {
        let start = element.find(&format!(" {name}=\"")).expect(name) + name.len() + 3;
        let end = start + element[start..].find('"').unwrap();
        element[start..end].parse().unwrap()
    }

    /// The (y, text) of the SVG's `<text>` elements with `text-anchor="end"`
    /// (the value axes' labels) between `top` and `bottom`.
    fn value_labels(svg: &str, top: f64, bottom: f64) -> Vec<(f64, String)> {
        svg.lines()
            .filter(|l| l.starts_with("<text") && l.contains(r#"text-anchor="end""#))
            .map(|l| {
                let text = l[l.find('>').unwrap() + 1..l.rfind("</text>").unwrap()].to_string();
                (attribute(l, "y"), text)
            })
            .filter(|(y, _)| (top..bottom).contains(y))
            .collect()
    }

    #[test]
    fn axes_step_by_round_numbers() {
        let check = |max: f64, step: f64, steps: usize| {
            let (got_step, got_steps) = ticks(max);
            assert!(
                (got_step - step).abs() < 1e-9 && got_steps == steps,
                "{max}: ({got_step}, {got_steps}), expected ({step}, {steps})"
            );
        };
        check(55.0, 20.0, 3);
        check(50.0, 10.0, 5);
        check(49.97, 10.0, 5);
        check(12.0, 2.5, 5);
        check(0.37, 0.1, 4);
        check(1.0, 0.2, 5);
        check(7.0, 2.0, 4);
        check(0.0, 0.2, 5);
        assert_eq!(tick_label(7.5, 2.5), "7.5");
        assert_eq!(tick_label(0.30000000000000004, 0.1), "0.3");
        assert_eq!(tick_label(0.05, 0.05), "0.05");
        assert_eq!(tick_label(60.0, 20.0), "60");
    }

    #[test]
    fn the_throughput_axis_has_even_round_ticks() {
        let series = (0..=12).map(|t| second(t, 49.97, 48.3)).collect();
        let svg = render_svg(
            &report(series, None),
            &Histogram::new(3).unwrap(),
            &Histogram::new(3).unwrap(),
        );
        let panel = Panel {
            top: PANEL_HEIGHT + 20.0,
        };
        let labels = value_labels(&svg, panel.top, panel.top + PANEL_HEIGHT);
        let texts: Vec<&str> = labels.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(texts, ["0", "10", "20", "30", "40", "50"]);
        let gaps: Vec<f64> = labels.windows(2).map(|w| w[0].0 - w[1].0).collect();
        assert!(
            gaps.iter().all(|g| (g - gaps[0]).abs() < 1e-6),
            "labels are not evenly spaced: {labels:?}"
        );
    }

    #[test]
    fn legends_sit_above_the_lines() {
        // Lines at the top of their axes, the worst case for a legend.
        let series = (0..=12).map(|t| second(t, 50.0, 50.0)).collect();
        let mut publish = Histogram::<u64>::new(3).unwrap();
        publish.record(4_000).unwrap();
        let mut end_to_end = Histogram::<u64>::new(3).unwrap();
        end_to_end.record(5_000).unwrap();
        let svg = render_svg(&report(series, None), &publish, &end_to_end);
        for (top, names) in [
            (0.0, ["publish", "end-to-end"]),
            (PANEL_HEIGHT + 20.0, ["produced", "consumed"]),
        ] {
            let bottom = top + PANEL_HEIGHT;
            let lines_top = svg
                .lines()
                .filter(|l| l.starts_with("<polyline") && l.contains(r#"stroke-width="2""#))
                .flat_map(|l| {
                    let points = l.split("points=\"").nth(1).unwrap();
                    let points = &points[..points.find('"').unwrap()];
                    points
                        .split(' ')
                        .map(|p| p.split(',').nth(1).unwrap().parse::<f64>().unwrap())
                        .collect::<Vec<_>>()
                })
                .filter(|y| (top..bottom).contains(y))
                .fold(f64::MAX, f64::min);
            assert!(lines_top < bottom, "no line in the panel at {top}");
            for name in names {
                let legend = svg
                    .lines()
                    .find(|l| l.starts_with("<text") && l.ends_with(&format!(">{name}</text>")))
                    .unwrap_or_else(|| panic!("no legend for {name}"));
                // The text's baseline; its glyphs descend a few pixels.
                let y = attribute(legend, "y");
                assert!(
                    y + 4.0 < lines_top,
                    "the legend {name} (y {y}) overlaps a line (top {lines_top})"
                );
            }
        }
    }

    #[test]
    fn integrity_says_what_the_warm_up_received() {
        let integrity = Integrity {
            received: 29_000,
            received_warmup: 1_000,
            ..Integrity::default()
        };
        let table = report(Vec::new(), Some(integrity)).table();
        assert!(
            table.contains(
                "integrity: received 29000 (and 1000 in the warm-up), lost 0, duplicates 0, \
                 reordered 0, corrupt 0, foreign 0 (of every record, warm-up included)"
            ),
            "{table}"
        );
        let table = report(Vec::new(), Some(Integrity::default())).table();
        assert!(
            table.contains(
                "integrity: received 0, lost 0, duplicates 0, reordered 0, corrupt 0, foreign 0\n"
            ),
            "{table}"
        );
    }
}
