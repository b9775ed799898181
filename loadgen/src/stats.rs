//! Measurements: latency histograms (microseconds), counters and errors.
//! Each executor records into its own `Recorder`; once a second it ships
//! the interval to the reporter, which merges them into a per-second series
//! and a whole-run total.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latencies are kept in microseconds, from 1 µs to 1 hour, 3 digits.
const LATENCY_US_MAX: u64 = 3_600_000_000;

pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("valid histogram bounds")
}

/// What one executor measured over one interval.
#[derive(Clone)]
pub struct Recorder {
    /// From the intended send time to the broker's acknowledgement.
    pub publish_us: Histogram<u64>,
    /// From the intended send time to consumption.
    pub end_to_end_us: Histogram<u64>,
    /// How late sends ran behind their schedule.
    pub send_delay_us: Histogram<u64>,
    pub sent_records: u64,
    pub acked_records: u64,
    pub acked_bytes: u64,
    pub consumed_records: u64,
    pub consumed_bytes: u64,
    pub errors: BTreeMap<String, u64>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self {
            publish_us: latency_histogram(),
            end_to_end_us: latency_histogram(),
            send_delay_us: latency_histogram(),
            sent_records: 0,
            acked_records: 0,
            acked_bytes: 0,
            consumed_records: 0,
            consumed_bytes: 0,
            errors: BTreeMap::new(),
        }
    }
}

fn record(histogram: &mut Histogram<u64>, us: u64) {
    histogram.saturating_record(us.clamp(1, LATENCY_US_MAX));
}

impl Recorder {
    pub fn publish(&mut self, records: u64, bytes: u64, latency_us: u64) {
        self.acked_records += records;
        self.acked_bytes += bytes;
        // Every record of a batch waited as long as the batch's oldest.
        self.publish_us
            .saturating_record_n(latency_us.clamp(1, LATENCY_US_MAX), records.max(1));
    }

    pub fn consumed(&mut self, bytes: u64, end_to_end_us: Option<u64>) {
        self.consumed_records += 1;
        self.consumed_bytes += bytes;
        if let Some(us) = end_to_end_us {
            record(&mut self.end_to_end_us, us);
        }
    }

    pub fn sent(&mut self, records: u64, delay_us: u64) {
        self.sent_records += records;
        record(&mut self.send_delay_us, delay_us);
    }

    pub fn error(&mut self, kind: impl Into<String>) {
        *self.errors.entry(kind.into()).or_default() += 1;
    }

    pub fn merge(&mut self, other: &Recorder) {
        self.publish_us.add(&other.publish_us).expect("same bounds");
        self.end_to_end_us
            .add(&other.end_to_end_us)
            .expect("same bounds");
        self.send_delay_us
            .add(&other.send_delay_us)
            .expect("same bounds");
        self.sent_records += other.sent_records;
        self.acked_records += other.acked_records;
        self.acked_bytes += other.acked_bytes;
        self.consumed_records += other.consumed_records;
        self.consumed_bytes += other.consumed_bytes;
        for (kind, n) in &other.errors {
            *self.errors.entry(kind.clone()).or_default() += n;
        }
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// The percentiles every report shows.
pub const PERCENTILES: [(&str, f64); 7] = [
    ("p50", 50.0),
    ("p75", 75.0),
    ("p90", 90.0),
    ("p95", 95.0),
    ("p99", 99.0),
    ("p99.9", 99.9),
    ("p99.99", 99.99),
];

/// Percentiles of one histogram, in milliseconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub percentiles_ms: BTreeMap<String, f64>,
    pub max_ms: f64,
    pub mean_ms: f64,
}

impl LatencySummary {
    pub fn of(histogram: &Histogram<u64>) -> Self {
        let percentiles_ms = PERCENTILES
            .iter()
            .map(|(name, q)| {
                let us = if histogram.is_empty() {
                    0
                } else {
                    histogram.value_at_percentile(*q)
                };
                (name.to_string(), us as f64 / 1000.0)
            })
            .collect();
        Self {
            count: histogram.len(),
            percentiles_ms,
            max_ms: histogram.max() as f64 / 1000.0,
            mean_ms: histogram.mean() / 1000.0,
        }
    }

    pub fn get(&self, name: &str) -> f64 {
        self.percentiles_ms.get(name).copied().unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_recorders_add_up() {
        let mut a = Recorder::default();
        let mut b = Recorder::default();
        for us in 1..=1000 {
            a.publish(1, 100, us);
        }
        b.publish(10, 1000, 50_000);
        b.error("NOT_LEADER");
        a.error("NOT_LEADER");
        a.merge(&b);
        assert_eq!(a.acked_records, 1010);
        assert_eq!(a.acked_bytes, 101_000);
        assert_eq!(a.errors["NOT_LEADER"], 2);
        let summary = LatencySummary::of(&a.publish_us);
        assert_eq!(summary.count, 1010);
        assert!((summary.get("p50") - 0.505).abs() < 0.01, "{summary:?}");
        assert!((summary.max_ms - 50.0).abs() < 0.1);
    }
}
