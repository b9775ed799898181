//! The workload: what to run, from OpenMessaging Benchmark workload YAML
//! and/or flags. Field names are OMB's, so a workload file written for OMB
//! runs here unchanged.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use yaml_rust2::{Yaml, YamlLoader};

/// How producers pick record keys (OMB's `keyDistributor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyDistributor {
    /// No key: the producer spreads records over partitions round-robin.
    NoKey,
    /// Keys cycle through a fixed set, one per partition's worth.
    KeyRoundRobin,
    /// A random key per record.
    RandomNano,
}

impl KeyDistributor {
    pub fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "NO_KEY" => Self::NoKey,
            "KEY_ROUND_ROBIN" => Self::KeyRoundRobin,
            "RANDOM_NANO" => Self::RandomNano,
            other => {
                bail!("keyDistributor `{other}`: expected NO_KEY, KEY_ROUND_ROBIN or RANDOM_NANO")
            }
        })
    }
}

/// Record batch compression the producers apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    pub fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "none" => Self::None,
            "gzip" => Self::Gzip,
            "snappy" => Self::Snappy,
            "lz4" => Self::Lz4,
            "zstd" => Self::Zstd,
            other => bail!("compression `{other}`: expected none, gzip, snappy, lz4 or zstd"),
        })
    }
}

/// Producer settings, with Kafka's producer names where they exist.
#[derive(Debug, Clone, PartialEq)]
pub struct ProducerSettings {
    /// -1 (all), 0 or 1.
    pub acks: i16,
    /// How long a partition's batch may wait to fill before it is sent.
    pub linger: Duration,
    /// Bytes of records per partition batch before it is sent.
    pub batch_bytes: usize,
    pub compression: Compression,
    pub idempotence: bool,
    /// Produce requests in flight per producer connection.
    pub in_flight_max: usize,
}

impl Default for ProducerSettings {
    fn default() -> Self {
        Self {
            acks: -1,
            linger: Duration::from_millis(1),
            batch_bytes: 128 << 10,
            compression: Compression::None,
            idempotence: false,
            in_flight_max: 5,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub name: String,
    pub topics: usize,
    pub partitions_per_topic: usize,
    pub message_size: usize,
    pub payload_file: Option<PathBuf>,
    pub subscriptions_per_topic: usize,
    pub producers_per_topic: usize,
    pub consumer_per_subscription: usize,
    /// Records per second over all producers; 0 finds the maximum
    /// sustainable rate.
    pub producer_rate: f64,
    pub key_distributor: KeyDistributor,
    pub test_duration: Duration,
    pub warmup_duration: Duration,
    /// Topic configs set at creation (`retention.ms`, `flush.policy`, ...).
    pub topic_configs: Vec<(String, String)>,
    pub producer: ProducerSettings,
    /// OMB's `consumerBacklogSizeGB`: in produce mode, producers stop once
    /// they have sent this many bytes (0: produce for the whole duration),
    /// building a backlog for a later consume run.
    pub backlog_bytes: u64,
}

impl Default for Workload {
    fn default() -> Self {
        Self {
            name: "workload".into(),
            topics: 1,
            partitions_per_topic: 16,
            message_size: 1024,
            payload_file: None,
            subscriptions_per_topic: 1,
            producers_per_topic: 1,
            consumer_per_subscription: 1,
            producer_rate: 0.0,
            key_distributor: KeyDistributor::NoKey,
            test_duration: Duration::from_secs(60),
            warmup_duration: Duration::ZERO,
            topic_configs: Vec::new(),
            producer: ProducerSettings::default(),
            backlog_bytes: 0,
        }
    }
}

fn minutes(value: f64, field: &str) -> Result<Duration> {
    if !(value.is_finite() && value >= 0.0) {
        bail!("{field} must be a non-negative number of minutes, got {value}");
    }
    Ok(Duration::from_secs_f64(value * 60.0))
}

fn number(yaml: &Yaml, field: &str) -> Result<f64> {
    match yaml {
        Yaml::Integer(i) => Ok(*i as f64),
        Yaml::Real(_) => yaml
            .as_f64()
            .with_context(|| format!("{field}: not a number")),
        other => bail!("{field}: expected a number, got {other:?}"),
    }
}

fn count(yaml: &Yaml, field: &str) -> Result<usize> {
    match yaml {
        Yaml::Integer(i) if *i >= 0 => Ok(*i as usize),
        other => bail!("{field}: expected a non-negative integer, got {other:?}"),
    }
}

fn text(yaml: &Yaml, field: &str) -> Result<String> {
    match yaml {
        Yaml::String(s) => Ok(s.clone()),
        Yaml::Integer(i) => Ok(i.to_string()),
        Yaml::Boolean(b) => Ok(b.to_string()),
        Yaml::Real(r) => Ok(r.clone()),
        other => bail!("{field}: expected text, got {other:?}"),
    }
}

impl Workload {
    /// Parses an OMB workload file. Unknown fields are errors (a typo must
    /// not silently run a different benchmark).
    pub fn from_yaml(source: &str) -> Result<Self> {
        let docs = YamlLoader::load_from_str(source).context("workload YAML")?;
        let Some(doc) = docs.first() else {
            bail!("workload YAML is empty");
        };
        let Some(map) = doc.as_hash() else {
            bail!("workload YAML must be a mapping of fields");
        };
        let mut workload = Self::default();
        for (key, value) in map {
            let Some(key) = key.as_str() else {
                bail!("workload field names must be text, got {key:?}");
            };
            workload
                .set_yaml(key, value)
                .with_context(|| format!("workload field `{key}`"))?;
        }
        workload.validate()?;
        Ok(workload)
    }

    fn set_yaml(&mut self, key: &str, value: &Yaml) -> Result<()> {
        match key {
            "name" => self.name = text(value, key)?,
            "topics" => self.topics = count(value, key)?,
            "partitionsPerTopic" => self.partitions_per_topic = count(value, key)?,
            "messageSize" => self.message_size = count(value, key)?,
            "payloadFile" => self.payload_file = Some(PathBuf::from(text(value, key)?)),
            "subscriptionsPerTopic" => self.subscriptions_per_topic = count(value, key)?,
            "producersPerTopic" => self.producers_per_topic = count(value, key)?,
            "consumerPerSubscription" => self.consumer_per_subscription = count(value, key)?,
            "producerRate" => self.producer_rate = number(value, key)?,
            "keyDistributor" => self.key_distributor = KeyDistributor::parse(&text(value, key)?)?,
            "testDurationMinutes" => self.test_duration = minutes(number(value, key)?, key)?,
            "warmupDurationMinutes" => self.warmup_duration = minutes(number(value, key)?, key)?,
            "consumerBacklogSizeGB" => self.backlog_bytes = (number(value, key)? * 1e9) as u64,
            // OMB fields this runner accepts and does not need.
            "useRandomizedPayloads"
            | "randomBytesRatio"
            | "randomizedPayloadPoolSize"
            | "producerRateList" => {}
            "topicConfig" => {
                let Some(map) = value.as_hash() else {
                    bail!("expected a mapping of topic configs");
                };
                for (k, v) in map {
                    let k = text(k, key)?;
                    self.topic_configs.push((k, text(v, key)?));
                }
            }
            "producerConfig" => {
                let Some(map) = value.as_hash() else {
                    bail!("expected a mapping of producer settings");
                };
                for (k, v) in map {
                    let k = text(k, key)?;
                    let v = text(v, key)?;
                    self.set_producer(&k, &v)?;
                }
            }
            other => bail!("unknown field `{other}`"),
        }
        Ok(())
    }

    /// Sets a producer setting by its Kafka producer name.
    pub fn set_producer(&mut self, key: &str, value: &str) -> Result<()> {
        let p = &mut self.producer;
        match key {
            "acks" => {
                p.acks = match value {
                    "all" | "-1" => -1,
                    "0" => 0,
                    "1" => 1,
                    other => bail!("acks `{other}`: expected all, -1, 0 or 1"),
                }
            }
            "linger.ms" => {
                p.linger = Duration::from_millis(
                    value
                        .parse()
                        .with_context(|| format!("linger.ms `{value}`"))?,
                )
            }
            "batch.size" => {
                p.batch_bytes = value
                    .parse()
                    .with_context(|| format!("batch.size `{value}`"))?;
                if p.batch_bytes == 0 {
                    bail!("batch.size must be positive");
                }
            }
            "compression.type" => p.compression = Compression::parse(value)?,
            "enable.idempotence" => {
                p.idempotence = value
                    .parse()
                    .with_context(|| format!("enable.idempotence `{value}`"))?
            }
            "max.in.flight.requests.per.connection" => {
                p.in_flight_max = value
                    .parse()
                    .with_context(|| format!("max.in.flight `{value}`"))?;
                if p.in_flight_max == 0 || p.in_flight_max > 64 {
                    bail!("max.in.flight.requests.per.connection must be 1..=64");
                }
            }
            other => bail!("unknown producer setting `{other}`"),
        }
        Ok(())
    }

    /// Bytes per second the producers are asked for (0: as fast as
    /// acknowledged).
    fn target_bytes_per_s(&self) -> f64 {
        self.producer_rate * self.message_size as f64
    }

    /// The name of this workload when `flags` (`--rate 10000`, ...)
    /// changed fields of `file`, the workload as its file gave it: a
    /// throughput the name states that no longer holds (`50 MB/s`,
    /// `48828 records/s`) becomes the one that runs, and the flags are
    /// named after it, so a report never claims the file's figures for a
    /// run that changed them.
    pub fn name_with_flags(&self, file: &Workload, flags: &[String]) -> String {
        if flags.is_empty() {
            return self.name.clone();
        }
        let unthrottled = self.producer_rate == 0.0;
        let figures = [
            (
                "MB/s",
                file.target_bytes_per_s() / 1e6,
                self.target_bytes_per_s() / 1e6,
            ),
            ("records/s", file.producer_rate, self.producer_rate),
        ];
        let close = |a: f64, b: f64| (a - b).abs() <= 0.02 * a.abs().max(b.abs()).max(1e-9);
        let mut words: Vec<String> = self.name.split(' ').map(str::to_string).collect();
        for at in 1..words.len() {
            let Some((_, stated, running)) = figures
                .iter()
                .find(|(unit, _, _)| words[at].starts_with(unit))
            else {
                continue;
            };
            let Ok(number) = words[at - 1].replace(',', "").parse::<f64>() else {
                continue;
            };
            if !close(number, *stated) || close(*stated, *running) {
                continue;
            }
            words[at - 1] = if unthrottled {
                "unthrottled".to_string()
            } else if *running >= 10.0 {
                format!("{running:.0}")
            } else {
                format!("{running:.1}")
            };
        }
        format!("{} ({})", words.join(" "), flags.join(" "))
    }

    pub fn validate(&self) -> Result<()> {
        if self.topics == 0 || self.partitions_per_topic == 0 {
            bail!("topics and partitionsPerTopic must be at least 1");
        }
        if self.message_size < 16 && self.payload_file.is_none() {
            bail!("messageSize must be at least 16 bytes (the end-to-end header)");
        }
        if self.message_size > 64 << 20 {
            bail!("messageSize above 64 MiB is not supported");
        }
        if !(self.producer_rate.is_finite() && self.producer_rate >= 0.0) {
            bail!("producerRate must be 0 (find the maximum) or a positive rate");
        }
        if self.partitions_per_topic > 100_000 || self.topics > 10_000 {
            bail!("topics or partitionsPerTopic is unreasonably large");
        }
        if self.producer.idempotence && self.producer.acks != -1 {
            bail!("enable.idempotence needs acks=all");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn omb_workload_parses() {
        let w = Workload::from_yaml(
            "name: 1 topic / 16 partitions / 1kb\n\
             topics: 1\npartitionsPerTopic: 16\nmessageSize: 1024\n\
             payloadFile: payload/payload-1Kb.data\n\
             subscriptionsPerTopic: 1\nconsumerPerSubscription: 1\nproducersPerTopic: 1\n\
             producerRate: 50000\nconsumerBacklogSizeGB: 0\n\
             keyDistributor: KEY_ROUND_ROBIN\n\
             testDurationMinutes: 15\nwarmupDurationMinutes: 0.5\n\
             producerConfig:\n  acks: all\n  linger.ms: 2\n  compression.type: lz4\n",
        )
        .unwrap();
        assert_eq!(w.partitions_per_topic, 16);
        assert_eq!(w.producer_rate, 50000.0);
        assert_eq!(w.key_distributor, KeyDistributor::KeyRoundRobin);
        assert_eq!(w.test_duration, Duration::from_secs(900));
        assert_eq!(w.warmup_duration, Duration::from_secs(30));
        assert_eq!(w.producer.linger, Duration::from_millis(2));
        assert_eq!(w.producer.compression, Compression::Lz4);
        assert_eq!(
            w.payload_file.as_deref(),
            Some(std::path::Path::new("payload/payload-1Kb.data"))
        );
    }

    #[test]
    fn a_name_keeps_no_figure_the_flags_changed() {
        let file = Workload::from_yaml(
            "name: (d) 50 MB/s of 1 KiB records end to end, acks=all\n\
             messageSize: 1024\nproducerRate: 48828\n",
        )
        .unwrap();
        let check = |change: &dyn Fn(&mut Workload), flags: &[&str], expected: &str| {
            let mut run = file.clone();
            change(&mut run);
            let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
            assert_eq!(run.name_with_flags(&file, &flags), expected);
        };
        check(
            &|_| {},
            &[],
            "(d) 50 MB/s of 1 KiB records end to end, acks=all",
        );
        check(
            &|w| w.producer_rate = 10_000.0,
            &["--rate 10000"],
            "(d) 10 MB/s of 1 KiB records end to end, acks=all (--rate 10000)",
        );
        check(
            &|w| w.producer_rate = 2_000.0,
            &["--rate 2000"],
            "(d) 2.0 MB/s of 1 KiB records end to end, acks=all (--rate 2000)",
        );
        check(
            &|w| w.producer_rate = 0.0,
            &["--rate 0"],
            "(d) unthrottled MB/s of 1 KiB records end to end, acks=all (--rate 0)",
        );
        // The throughput the file gave: only the flags are added.
        check(
            &|_| {},
            &["--rate 48828"],
            "(d) 50 MB/s of 1 KiB records end to end, acks=all (--rate 48828)",
        );
        check(
            &|w| w.test_duration = Duration::from_secs(5),
            &["--duration 5"],
            "(d) 50 MB/s of 1 KiB records end to end, acks=all (--duration 5)",
        );
        let records = Workload {
            name: "48,828 records/s".into(),
            producer_rate: 48_828.0,
            ..Workload::default()
        };
        let mut run = records.clone();
        run.producer_rate = 1_000.0;
        assert_eq!(
            run.name_with_flags(&records, &["--rate 1000".to_string()]),
            "1000 records/s (--rate 1000)"
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let check = |yaml: &str, needle: &str| {
            let err = format!("{:#}", Workload::from_yaml(yaml).unwrap_err());
            assert!(err.contains(needle), "{yaml:?}: {err}");
        };
        check("topics: 1\npartitionsPerTopc: 3\n", "partitionsPerTopc");
        check("topics: -1\n", "topics");
        check("keyDistributor: SOMETIMES\n", "keyDistributor");
        check("producerRate: fast\n", "producerRate");
        check("messageSize: 4\n", "messageSize");
        check("producerConfig:\n  acks: most\n", "acks");
        check("- a\n- b\n", "mapping");
        check(
            "producerConfig:\n  enable.idempotence: true\n  acks: 1\n",
            "idempotence",
        );
    }
}
