//! Topic-level configuration: which keys a topic accepts, the broker-level
//! key that sets each one's default, and the effective values a topic runs
//! with (storage's `LogConfig` plus the few settings the broker applies).

use std::collections::BTreeMap;

use protocol::batch::Compression;
use protocol::recompress::{self, Codec};
use storage::{LogConfig, LOG_CONFIG_KEYS};

/// How a topic's record timestamps are set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// A topic config key the broker applies or keeps itself (storage applies
/// the keys in `storage::LOG_CONFIG_KEYS`), and the broker-level key that
/// sets its default (Kafka's server synonym; none for the keys Kafka has
/// at topic level only).
struct BrokerKey {
    name: &'static str,
    broker_name: Option<&'static str>,
    /// Kafka's default, the value the topic is described with.
    default: &'static str,
}

/// The topic configs of Kafka 4 that Strom accepts, stores and describes
/// without acting on them: tiered storage's
/// (no tiered storage), replication throttling's, timestamp bounds,
/// jitter and delays of segment handling, and the message format of old
/// clients. Clients and their test suites set them; refusing them would
/// fail a topic creation that works against Kafka.
pub const KEYS_WITHOUT_EFFECT: &[&str] = &[
    "segment.jitter.ms",
    "file.delete.delay.ms",
    "preallocate",
    "message.format.version",
    "message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "message.downconversion.enable",
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
    "remote.storage.enable",
    "local.retention.ms",
    "local.retention.bytes",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
];

/// Whether Strom acts on the topic key `name` (see [`KEYS_WITHOUT_EFFECT`]).
pub fn has_effect(name: &str) -> bool {
    !KEYS_WITHOUT_EFFECT.contains(&name)
}

const BROKER_KEYS: &[BrokerKey] = &[
    BrokerKey {
        name: "cleanup.policy",
        broker_name: Some("log.cleanup.policy"),
        default: "delete",
    },
    BrokerKey {
        name: "compression.type",
        broker_name: Some("compression.type"),
        default: "producer",
    },
    BrokerKey {
        name: "compression.gzip.level",
        broker_name: Some("compression.gzip.level"),
        default: "-1",
    },
    BrokerKey {
        name: "compression.lz4.level",
        broker_name: Some("compression.lz4.level"),
        default: "9",
    },
    BrokerKey {
        name: "compression.zstd.level",
        broker_name: Some("compression.zstd.level"),
        default: "3",
    },
    BrokerKey {
        name: "message.timestamp.type",
        broker_name: Some("log.message.timestamp.type"),
        default: "CreateTime",
    },
    BrokerKey {
        name: "min.insync.replicas",
        broker_name: Some("min.insync.replicas"),
        default: "1",
    },
    BrokerKey {
        name: "unclean.leader.election.enable",
        broker_name: Some("unclean.leader.election.enable"),
        default: "false",
    },
    BrokerKey {
        name: "segment.jitter.ms",
        broker_name: Some("log.roll.jitter.ms"),
        default: "0",
    },
    BrokerKey {
        name: "delete.retention.ms",
        broker_name: Some("log.cleaner.delete.retention.ms"),
        default: "86400000",
    },
    BrokerKey {
        name: "min.compaction.lag.ms",
        broker_name: Some("log.cleaner.min.compaction.lag.ms"),
        default: "0",
    },
    BrokerKey {
        name: "max.compaction.lag.ms",
        broker_name: Some("log.cleaner.max.compaction.lag.ms"),
        default: "9223372036854775807",
    },
    BrokerKey {
        name: "min.cleanable.dirty.ratio",
        broker_name: Some("log.cleaner.min.cleanable.ratio"),
        default: "0.5",
    },
    BrokerKey {
        name: "file.delete.delay.ms",
        broker_name: Some("log.segment.delete.delay.ms"),
        default: "60000",
    },
    BrokerKey {
        name: "preallocate",
        broker_name: Some("log.preallocate"),
        default: "false",
    },
    BrokerKey {
        name: "message.format.version",
        broker_name: Some("log.message.format.version"),
        default: "3.0-IV1",
    },
    BrokerKey {
        name: "message.timestamp.difference.max.ms",
        broker_name: Some("log.message.timestamp.difference.max.ms"),
        default: "9223372036854775807",
    },
    BrokerKey {
        name: "message.timestamp.before.max.ms",
        broker_name: Some("log.message.timestamp.before.max.ms"),
        default: "9223372036854775807",
    },
    BrokerKey {
        name: "message.timestamp.after.max.ms",
        broker_name: Some("log.message.timestamp.after.max.ms"),
        default: "3600000",
    },
    BrokerKey {
        name: "message.downconversion.enable",
        broker_name: Some("log.message.downconversion.enable"),
        default: "true",
    },
    BrokerKey {
        name: "leader.replication.throttled.replicas",
        broker_name: None,
        default: "",
    },
    BrokerKey {
        name: "follower.replication.throttled.replicas",
        broker_name: None,
        default: "",
    },
    BrokerKey {
        name: "remote.storage.enable",
        broker_name: None,
        default: "false",
    },
    BrokerKey {
        name: "local.retention.ms",
        broker_name: Some("log.local.retention.ms"),
        default: "-2",
    },
    BrokerKey {
        name: "local.retention.bytes",
        broker_name: Some("log.local.retention.bytes"),
        default: "-2",
    },
    BrokerKey {
        name: "remote.log.copy.disable",
        broker_name: None,
        default: "false",
    },
    BrokerKey {
        name: "remote.log.delete.on.disable",
        broker_name: None,
        default: "false",
    },
];

/// Broker-level names of the storage keys, where Kafka's differ.
const STORAGE_BROKER_NAMES: &[(&str, &str)] = &[
    ("log.segment.bytes", "segment.bytes"),
    ("log.index.size.max.bytes", "segment.index.bytes"),
    ("log.index.interval.bytes", "index.interval.bytes"),
    ("log.retention.bytes", "retention.bytes"),
    ("message.max.bytes", "max.message.bytes"),
    ("log.flush.policy", "flush.policy"),
    ("log.flush.interval.ms", "flush.ms"),
    ("log.flush.interval.messages", "flush.messages"),
    ("log.flush.interval.bytes", "flush.bytes"),
];

fn is_storage_key(name: &str) -> bool {
    LOG_CONFIG_KEYS.contains(&name)
}

/// The topic key a broker-level key sets the default of, if any.
pub fn topic_key_for_broker_key(broker_name: &str) -> Option<&'static str> {
    if let Some(key) = BROKER_KEYS
        .iter()
        .find(|k| k.broker_name == Some(broker_name))
    {
        return Some(key.name);
    }
    if let Some((_, name)) = STORAGE_BROKER_NAMES.iter().find(|(b, _)| *b == broker_name) {
        return Some(name);
    }
    // Strom's own storage keys have the same name at both levels.
    LOG_CONFIG_KEYS
        .iter()
        .copied()
        .find(|k| k.starts_with("strom.") && *k == broker_name)
}

/// Every topic key.
pub fn topic_keys() -> impl Iterator<Item = &'static str> {
    LOG_CONFIG_KEYS
        .iter()
        .copied()
        .chain(BROKER_KEYS.iter().map(|k| k.name))
}

/// Checks one topic config entry; the error names the key and says why.
pub fn validate(name: &str, value: &str) -> Result<(), String> {
    if is_storage_key(name) {
        return LogConfig::default()
            .set(name, value)
            .map_err(|e| e.to_string());
    }
    if BROKER_KEYS.iter().any(|k| k.name == name) {
        return validate_broker_applied(name, value);
    }
    Err(format!("unknown topic config {name}"))
}

fn validate_broker_applied(name: &str, value: &str) -> Result<(), String> {
    let level = |levels: std::ops::RangeInclusive<i32>| {
        value
            .trim()
            .parse::<i32>()
            .is_ok_and(|level| levels.contains(&level))
    };
    let long_at_least = |min: i64| value.trim().parse::<i64>().is_ok_and(|n| n >= min);
    let boolean = matches!(value.trim(), "true" | "false");
    let ok = match name {
        "segment.jitter.ms"
        | "delete.retention.ms"
        | "min.compaction.lag.ms"
        | "file.delete.delay.ms"
        | "message.timestamp.difference.max.ms"
        | "message.timestamp.before.max.ms"
        | "message.timestamp.after.max.ms" => long_at_least(0),
        "max.compaction.lag.ms" => long_at_least(1),
        "local.retention.ms" | "local.retention.bytes" => long_at_least(-2),
        "min.cleanable.dirty.ratio" => value
            .trim()
            .parse::<f64>()
            .is_ok_and(|ratio| (0.0..=1.0).contains(&ratio)),
        "preallocate"
        | "message.downconversion.enable"
        | "remote.log.copy.disable"
        | "remote.log.delete.on.disable" => boolean,
        // As Kafka without tiered storage (remote.log.storage.system.enable off).
        "remote.storage.enable" => value.trim() == "false",
        "message.format.version" => is_message_format_version(value.trim()),
        "leader.replication.throttled.replicas" | "follower.replication.throttled.replicas" => {
            is_throttled_replica_list(value)
        }
        "cleanup.policy" => CleanupPolicy::parse(value).is_some(),
        "compression.type" => value == "producer" || Compression::from_config_name(value).is_some(),
        "compression.gzip.level" => value.trim() == "-1" || level(recompress::GZIP_LEVELS),
        "compression.lz4.level" => level(recompress::LZ4_LEVELS),
        "compression.zstd.level" => level(recompress::ZSTD_LEVELS),
        "message.timestamp.type" => matches!(value, "CreateTime" | "LogAppendTime"),
        "min.insync.replicas" => value.parse::<u16>().is_ok_and(|n| n >= 1),
        "unclean.leader.election.enable" => matches!(value, "true" | "false"),
        _ => false,
    };
    if ok {
        return Ok(());
    }
    let expected = match name {
        "segment.jitter.ms"
        | "delete.retention.ms"
        | "min.compaction.lag.ms"
        | "file.delete.delay.ms"
        | "message.timestamp.difference.max.ms"
        | "message.timestamp.before.max.ms"
        | "message.timestamp.after.max.ms" => "a whole number of milliseconds, at least 0",
        "max.compaction.lag.ms" => "a whole number of milliseconds, at least 1",
        "local.retention.ms" | "local.retention.bytes" => "a whole number, at least -2",
        "min.cleanable.dirty.ratio" => "a number from 0 to 1",
        "preallocate"
        | "message.downconversion.enable"
        | "remote.log.copy.disable"
        | "remote.log.delete.on.disable" => "true or false",
        "remote.storage.enable" => "false (tiered storage is not supported)",
        "message.format.version" => "a Kafka version, e.g. 3.0-IV1",
        "leader.replication.throttled.replicas" | "follower.replication.throttled.replicas" => {
            "PARTITION:BROKER,... or *"
        }
        "cleanup.policy" => "delete, compact, or both (compact,delete)",
        "compression.type" => "producer, uncompressed, gzip, snappy, lz4 or zstd",
        "compression.gzip.level" => "-1 (the codec's default) or 1 to 9",
        "compression.lz4.level" => "1 to 17",
        "compression.zstd.level" => "-131072 to 22",
        "message.timestamp.type" => "CreateTime or LogAppendTime",
        "min.insync.replicas" => "a whole number of at least 1",
        "unclean.leader.election.enable" => "true or false",
        _ => "a known value",
    };
    Err(format!(
        "invalid value {value:?} for {name}: expected {expected}"
    ))
}

/// `message.format.version`'s form: a Kafka version (`2.8`, `3.0.1`),
/// optionally with its inter-broker protocol step (`3.0-IV1`).
fn is_message_format_version(value: &str) -> bool {
    let (version, step) = match value.split_once("-IV") {
        Some((version, step)) => (version, Some(step)),
        None => (value, None),
    };
    let parts: Vec<&str> = version.split('.').collect();
    (2..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        && step.is_none_or(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()))
}

/// A replication throttle list: empty, `*`, or `PARTITION:BROKER,...`.
fn is_throttled_replica_list(value: &str) -> bool {
    let value = value.trim();
    value.is_empty()
        || value == "*"
        || value.split(',').all(|entry| {
            entry.trim().split_once(':').is_some_and(|(p, b)| {
                p.trim().parse::<u32>().is_ok() && b.trim().parse::<u32>().is_ok()
            })
        })
}

/// The codec a topic's batches are stored in, from its `compression.type`
/// and `compression.<codec>.level` (`value_of` gives a topic key's value:
/// the topic's own, else the broker default); `None` for `producer`: kept
/// as the producer compressed them.
pub fn compression_codec(value_of: impl Fn(&str) -> Option<String>) -> Option<Codec> {
    let compression = Compression::from_config_name(value_of("compression.type")?.trim())?;
    let level_key = match compression {
        Compression::Gzip => Some("compression.gzip.level"),
        Compression::Lz4 => Some("compression.lz4.level"),
        Compression::Zstd => Some("compression.zstd.level"),
        Compression::None | Compression::Snappy => None,
    };
    let level = level_key
        .and_then(value_of)
        .and_then(|value| value.trim().parse().ok());
    Some(Codec { compression, level })
}

/// `cleanup.policy`: what removes old records of a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    /// `delete`: retention by time and size removes whole old segments.
    pub delete: bool,
    /// `compact`: the cleaner keeps the latest record of every key.
    pub compact: bool,
}

impl CleanupPolicy {
    /// A list of `delete` and `compact`, each at most once (Kafka's form).
    pub fn parse(value: &str) -> Option<Self> {
        let mut policy = Self {
            delete: false,
            compact: false,
        };
        for item in value.split(',').map(str::trim) {
            let seen = match item {
                "delete" => std::mem::replace(&mut policy.delete, true),
                "compact" => std::mem::replace(&mut policy.compact, true),
                _ => return None,
            };
            if seen {
                return None;
            }
        }
        Some(policy)
    }
}

/// What drives the cleaning of a compacted topic (Kafka's topic keys).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Compaction {
    /// `min.cleanable.dirty.ratio`: a log is cleaned once this share of
    /// its cleanable bytes is dirty.
    pub min_dirty_ratio: f64,
    /// `min.compaction.lag.ms`: records younger stay uncleaned.
    pub min_lag_ms: i64,
    /// `max.compaction.lag.ms`: a log with dirty records is cleaned at the
    /// latest this long after its last cleaning, whatever its ratio.
    pub max_lag_ms: i64,
    /// `delete.retention.ms`: how long tombstones outlive the cleaning
    /// that first saw them.
    pub delete_retention_ms: i64,
}

impl Default for Compaction {
    fn default() -> Self {
        Self {
            min_dirty_ratio: 0.5,
            min_lag_ms: 0,
            max_lag_ms: i64::MAX,
            delete_retention_ms: 24 * 3600 * 1000,
        }
    }
}

/// The settings a partition runs with, derived from the broker defaults
/// and the topic's overrides.
#[derive(Debug, Clone)]
pub struct EffectiveConfig {
    pub log: LogConfig,
    pub timestamp_type: TimestampType,
    /// `min.insync.replicas`: in-sync replicas an `acks=all` produce needs.
    pub min_insync_replicas: usize,
    pub cleanup: CleanupPolicy,
    pub compaction: Compaction,
}

/// Topic-level defaults as the broker configuration sets them.
#[derive(Debug, Clone)]
pub struct TopicDefaults {
    log: LogConfig,
    broker: BTreeMap<String, String>,
}

impl Default for TopicDefaults {
    fn default() -> Self {
        Self::new()
    }
}

impl TopicDefaults {
    /// Kafka's defaults.
    pub fn new() -> Self {
        let broker = BROKER_KEYS
            .iter()
            .map(|k| (k.name.to_string(), k.default.to_string()))
            .collect();
        Self {
            log: LogConfig::default(),
            broker,
        }
    }

    /// Sets a default after validating it; `name` is a topic key.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        if is_storage_key(name) {
            return self.log.set(name, value).map_err(|e| e.to_string());
        }
        validate(name, value)?;
        self.broker.insert(name.to_string(), value.to_string());
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<String> {
        if is_storage_key(name) {
            return self.log.get(name);
        }
        self.broker.get(name).cloned()
    }

    /// The configuration of a topic with `overrides` over these defaults.
    /// Overrides were validated when they were accepted.
    pub fn effective(&self, overrides: &BTreeMap<String, String>) -> EffectiveConfig {
        let mut log = self.log.clone();
        let mut timestamp_type = match self
            .broker
            .get("message.timestamp.type")
            .map(String::as_str)
        {
            Some("LogAppendTime") => TimestampType::LogAppendTime,
            _ => TimestampType::CreateTime,
        };
        let positive = |value: Option<&String>| {
            value
                .and_then(|v| v.parse::<usize>().ok())
                .filter(|&n| n >= 1)
        };
        let mut min_insync_replicas = positive(self.broker.get("min.insync.replicas")).unwrap_or(1);
        let value_of = |name: &str| overrides.get(name).or_else(|| self.broker.get(name));
        let cleanup = value_of("cleanup.policy")
            .and_then(|v| CleanupPolicy::parse(v))
            .unwrap_or(CleanupPolicy {
                delete: true,
                compact: false,
            });
        let defaults = Compaction::default();
        let long = |name: &str, default: i64| {
            value_of(name)
                .and_then(|v| v.trim().parse::<i64>().ok())
                .unwrap_or(default)
        };
        let compaction = Compaction {
            min_dirty_ratio: value_of("min.cleanable.dirty.ratio")
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(defaults.min_dirty_ratio),
            min_lag_ms: long("min.compaction.lag.ms", defaults.min_lag_ms),
            max_lag_ms: long("max.compaction.lag.ms", defaults.max_lag_ms),
            delete_retention_ms: long("delete.retention.ms", defaults.delete_retention_ms),
        };
        for (name, value) in overrides {
            if name == "min.insync.replicas" {
                min_insync_replicas = positive(Some(value)).unwrap_or(min_insync_replicas);
            }
            if is_storage_key(name) {
                if let Err(e) = log.set(name, value) {
                    tracing::warn!(key = %name, %value, error = %e, "ignoring a topic config storage refused");
                }
            } else if name == "message.timestamp.type" {
                timestamp_type = if value == "LogAppendTime" {
                    TimestampType::LogAppendTime
                } else {
                    TimestampType::CreateTime
                };
            }
        }
        EffectiveConfig {
            log,
            timestamp_type,
            min_insync_replicas,
            cleanup,
            compaction,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str, value: &str, ok: bool) {
        assert_eq!(validate(name, value).is_ok(), ok, "{name}={value}");
    }

    #[test]
    fn topic_keys_are_validated_by_their_owner() {
        check("retention.ms", "1000", true);
        check("retention.ms", "soon", false);
        check("segment.bytes", "1048576", true);
        check("message.timestamp.type", "LogAppendTime", true);
        check("message.timestamp.type", "Later", false);
        check("cleanup.policy", "compact", true);
        check("cleanup.policy", "compact,delete", true);
        check("cleanup.policy", "delete, compact", true);
        check("cleanup.policy", "delete,delete", false);
        check("cleanup.policy", "compacted", false);
        check("cleanup.policy", "", false);
        for codec in ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"] {
            check("compression.type", codec, true);
        }
        check("compression.type", "brotli", false);
        check("compression.gzip.level", "-1", true);
        check("compression.gzip.level", "10", false);
        check("compression.lz4.level", "17", true);
        check("compression.lz4.level", "0", false);
        check("compression.zstd.level", "-5", true);
        check("compression.zstd.level", "23", false);
        check("no.such.key", "1", false);
    }

    #[test]
    fn kafka_4_topic_configs_without_effect_are_accepted_and_checked() {
        for key in KEYS_WITHOUT_EFFECT {
            assert!(topic_keys().any(|k| k == *key), "{key} is not a topic key");
            assert!(!has_effect(key));
            // Kafka's default is valid, and is what a new topic reports.
            let default = TopicDefaults::new().get(key).unwrap();
            check(key, &default, true);
        }
        assert!(has_effect("retention.ms"));
        check("delete.retention.ms", "1000", true);
        check("delete.retention.ms", "-1", false);
        check("file.delete.delay.ms", "0", true);
        check("max.compaction.lag.ms", "0", false);
        check("min.cleanable.dirty.ratio", "0.25", true);
        check("min.cleanable.dirty.ratio", "1.5", false);
        check("preallocate", "true", true);
        check("preallocate", "yes", false);
        check("local.retention.ms", "-2", true);
        check("local.retention.ms", "-3", false);
        check("remote.storage.enable", "false", true);
        check("remote.storage.enable", "true", false);
        check("message.format.version", "2.8", true);
        check("message.format.version", "3.0-IV1", true);
        check("message.format.version", "latest", false);
        check("leader.replication.throttled.replicas", "0:1,1:2", true);
        check("follower.replication.throttled.replicas", "*", true);
        check("follower.replication.throttled.replicas", "0-1", false);
        check("delete.retention.mss", "1000", false);
    }

    #[test]
    fn overrides_win_over_defaults() {
        let mut defaults = TopicDefaults::new();
        defaults.set("retention.ms", "5000").unwrap();
        let mut overrides = BTreeMap::new();
        assert_eq!(defaults.effective(&overrides).log.retention_ms, 5000);
        overrides.insert("retention.ms".to_string(), "7000".to_string());
        overrides.insert(
            "message.timestamp.type".to_string(),
            "LogAppendTime".to_string(),
        );
        let effective = defaults.effective(&overrides);
        assert_eq!(effective.log.retention_ms, 7000);
        assert_eq!(effective.timestamp_type, TimestampType::LogAppendTime);
    }
}
