//! Topic-level configuration: which keys a topic accepts, the broker-level
//! key that sets each one's default, and the effective values a topic runs
//! with (storage's `LogConfig` plus the few settings the broker applies).

use std::collections::BTreeMap;

use crate::storage::{FlushPolicy, LogConfig};

/// How a topic's record timestamps are set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// Who applies a topic key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Applier {
    /// Passed to `LogConfig::set` under the same name.
    Storage,
    /// Applied by the broker itself.
    Broker,
}

/// A topic config key and the broker key that sets its default.
struct TopicKey {
    name: &'static str,
    broker_name: &'static str,
    applier: Applier,
}

const TOPIC_KEYS: &[TopicKey] = &[
    TopicKey {
        name: "cleanup.policy",
        broker_name: "log.cleanup.policy",
        applier: Applier::Broker,
    },
    TopicKey {
        name: "compression.type",
        broker_name: "compression.type",
        applier: Applier::Broker,
    },
    TopicKey {
        name: "flush.messages",
        broker_name: "log.flush.interval.messages",
        applier: Applier::Storage,
    },
    TopicKey {
        name: "flush.ms",
        broker_name: "log.flush.interval.ms",
        applier: Applier::Storage,
    },
    TopicKey {
        name: "flush.policy",
        broker_name: "log.flush.policy",
        applier: Applier::Storage,
    },
    TopicKey {
        name: "index.interval.bytes",
        broker_name: "log.index.interval.bytes",
        applier: Applier::Storage,
    },
    TopicKey {
        name: "max.message.bytes",
        broker_name: "message.max.bytes",
        applier: Applier::Storage,
    },
    TopicKey {
        name: "message.timestamp.type",
        broker_name: "log.message.timestamp.type",
        applier: Applier::Broker,
    },
    TopicKey {
        name: "min.insync.replicas",
        broker_name: "min.insync.replicas",
        applier: Applier::Broker,
    },
    TopicKey {
        name: "retention.bytes",
        broker_name: "log.retention.bytes",
        applier: Applier::Storage,
    },
    TopicKey {
        name: "retention.ms",
        broker_name: "log.retention.ms",
        applier: Applier::Storage,
    },
    TopicKey {
        name: "segment.bytes",
        broker_name: "log.segment.bytes",
        applier: Applier::Storage,
    },
    TopicKey {
        name: "segment.ms",
        broker_name: "log.roll.ms",
        applier: Applier::Storage,
    },
];

fn topic_key(name: &str) -> Option<&'static TopicKey> {
    TOPIC_KEYS.iter().find(|k| k.name == name)
}

/// The topic key a broker-level key sets the default of, if any.
pub fn topic_key_for_broker_key(broker_name: &str) -> Option<&'static str> {
    TOPIC_KEYS
        .iter()
        .find(|k| k.broker_name == broker_name)
        .map(|k| k.name)
}

/// Every topic key, sorted.
pub fn topic_keys() -> impl Iterator<Item = &'static str> {
    TOPIC_KEYS.iter().map(|k| k.name)
}

/// Checks one topic config entry; the error names the key and says why.
pub fn validate(name: &str, value: &str) -> Result<(), String> {
    let Some(key) = topic_key(name) else {
        return Err(format!("unknown topic config {name}"));
    };
    match key.applier {
        Applier::Storage => LogConfig::default()
            .set(name, value)
            .map_err(|e| e.to_string()),
        Applier::Broker => validate_broker_applied(name, value),
    }
}

fn validate_broker_applied(name: &str, value: &str) -> Result<(), String> {
    let ok = match name {
        "cleanup.policy" => value == "delete",
        "compression.type" => value == "producer",
        "message.timestamp.type" => matches!(value, "CreateTime" | "LogAppendTime"),
        "min.insync.replicas" => value == "1",
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        let expected = match name {
            "cleanup.policy" => "delete (compaction is not supported yet)",
            "compression.type" => {
                "producer (the broker stores batches as the producer compressed them)"
            }
            "message.timestamp.type" => "CreateTime or LogAppendTime",
            "min.insync.replicas" => "1 on a single node",
            _ => "a known value",
        };
        Err(format!(
            "invalid value {value:?} for {name}: expected {expected}"
        ))
    }
}

/// The settings a partition runs with, derived from the broker defaults
/// and the topic's overrides.
#[derive(Debug, Clone)]
pub struct EffectiveConfig {
    pub log: LogConfig,
    pub timestamp_type: TimestampType,
}

/// Topic-level defaults as set by the broker configuration, as strings in
/// topic key names.
#[derive(Debug, Clone, Default)]
pub struct TopicDefaults {
    values: BTreeMap<String, String>,
}

impl TopicDefaults {
    /// Kafka's defaults for the keys storage does not own.
    pub fn new() -> Self {
        let log = LogConfig::default();
        let mut values = BTreeMap::new();
        for (key, value) in [
            ("cleanup.policy", "delete".to_string()),
            ("compression.type", "producer".to_string()),
            ("message.timestamp.type", "CreateTime".to_string()),
            ("min.insync.replicas", "1".to_string()),
            ("segment.bytes", log.segment_bytes.to_string()),
            ("segment.ms", log.segment_ms.to_string()),
            ("retention.ms", log.retention_ms.to_string()),
            ("retention.bytes", log.retention_bytes.to_string()),
            ("index.interval.bytes", log.index_interval_bytes.to_string()),
            ("max.message.bytes", log.max_message_bytes.to_string()),
            ("flush.policy", flush_policy_name(&log.flush).to_string()),
        ] {
            values.insert(key.to_string(), value);
        }
        Self { values }
    }

    /// Sets a default after validating it; `name` is a topic key.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        validate(name, value)?;
        self.values.insert(name.to_string(), value.to_string());
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// The configuration of a topic with `overrides` over these defaults.
    /// Overrides were validated when they were accepted.
    pub fn effective(&self, overrides: &BTreeMap<String, String>) -> EffectiveConfig {
        let mut log = LogConfig::default();
        let mut timestamp_type = TimestampType::CreateTime;
        let merged = self.values.iter().chain(overrides.iter());
        for (name, value) in merged {
            match topic_key(name).map(|k| k.applier) {
                Some(Applier::Storage) => {
                    if let Err(e) = log.set(name, value) {
                        tracing::warn!(key = %name, %value, error = %e, "ignoring topic config storage refused");
                    }
                }
                Some(Applier::Broker) if name == "message.timestamp.type" => {
                    timestamp_type = if value == "LogAppendTime" {
                        TimestampType::LogAppendTime
                    } else {
                        TimestampType::CreateTime
                    };
                }
                _ => {}
            }
        }
        EffectiveConfig {
            log,
            timestamp_type,
        }
    }
}

fn flush_policy_name(policy: &FlushPolicy) -> &'static str {
    match policy {
        FlushPolicy::Always => "always",
        FlushPolicy::Interval { .. } => "interval",
        FlushPolicy::Never => "never",
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
        check("cleanup.policy", "compact", false);
        check("no.such.key", "1", false);
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
