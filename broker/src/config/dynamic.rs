//! Settings as DescribeConfigs reports them and AlterConfigs changes them:
//! the type and documentation of every key, which broker settings change
//! while the broker runs (kept in the metadata log as two layers over the
//! static configuration: the cluster-wide default `""`, then this node's
//! own), and the consumer group (GROUP resource) settings.
//!
//! Precedence, highest first, as in Kafka: the node's dynamic value, the
//! cluster-wide dynamic default, the static configuration (file, flags),
//! the built-in default.

use std::collections::BTreeMap;

use crate::config::reference::{BROKER_SETTINGS, GROUP_SETTINGS, TOPIC_SETTINGS};
use crate::config::BrokerConfig;
use crate::metadata::MetadataImage;
use crate::topic_config::{self, TopicDefaults};

/// The broker resource name of the cluster-wide default.
pub const CLUSTER_DEFAULT: &str = "";

/// DescribeConfigs config types (KIP-569).
pub mod types {
    pub const BOOLEAN: i8 = 1;
    pub const STRING: i8 = 2;
    pub const INT: i8 = 3;
    pub const SHORT: i8 = 4;
    pub const LONG: i8 = 5;
    pub const DOUBLE: i8 = 6;
    pub const LIST: i8 = 7;
}

/// DescribeConfigs config sources.
pub mod sources {
    pub const DYNAMIC_TOPIC: i8 = 1;
    pub const DYNAMIC_BROKER: i8 = 2;
    pub const DYNAMIC_DEFAULT_BROKER: i8 = 3;
    pub const STATIC_BROKER: i8 = 4;
    pub const DEFAULT: i8 = 5;
    pub const GROUP: i8 = 8;
}

/// The type of a setting, by any of its names (broker, topic or group).
pub fn config_type(name: &str) -> i8 {
    match name {
        "auto.create.topics.enable"
        | "delete.topic.enable"
        | "strom.metrics.partition.labels"
        | "unclean.leader.election.enable"
        | "preallocate"
        | "log.preallocate"
        | "message.downconversion.enable"
        | "log.message.downconversion.enable"
        | "remote.storage.enable"
        | "remote.log.copy.disable"
        | "remote.log.delete.on.disable" => types::BOOLEAN,
        "min.cleanable.dirty.ratio" | "log.cleaner.min.cleanable.ratio" => types::DOUBLE,
        "cleanup.policy"
        | "log.cleanup.policy"
        | "leader.replication.throttled.replicas"
        | "follower.replication.throttled.replicas"
        | "process.roles"
        | "controller.quorum.voters"
        | "controller.quorum.bootstrap.servers"
        | "controller.listener.names"
        | "strom.cpuset" => types::LIST,
        "offsets.topic.replication.factor" | "transaction.state.log.replication.factor" => {
            types::SHORT
        }
        "node.id"
        | "broker.id"
        | "cores"
        | "num.partitions"
        | "default.replication.factor"
        | "socket.request.max.bytes"
        | "segment.bytes"
        | "log.segment.bytes"
        | "segment.index.bytes"
        | "log.index.size.max.bytes"
        | "index.interval.bytes"
        | "log.index.interval.bytes"
        | "max.message.bytes"
        | "message.max.bytes"
        | "min.insync.replicas"
        | "log.retention.minutes"
        | "log.retention.hours"
        | "log.roll.hours"
        | "strom.writes.inflight"
        | "producer.id.expiration.ms"
        | "group.initial.rebalance.delay.ms"
        | "group.max.size"
        | "group.min.session.timeout.ms"
        | "group.max.session.timeout.ms"
        | "offsets.topic.num.partitions"
        | "offsets.retention.minutes"
        | "transaction.state.log.num.partitions"
        | "transaction.state.log.min.isr"
        | "transaction.max.timeout.ms"
        | "compression.gzip.level"
        | "compression.lz4.level"
        | "compression.zstd.level" => types::INT,
        _ if GROUP_KEYS.iter().any(|k| k.name == name) => GROUP_KEYS
            .iter()
            .find(|k| k.name == name)
            .map_or(types::STRING, |k| k.config_type),
        _ if name.ends_with(".ms")
            || name.ends_with(".us")
            || name.ends_with(".bytes")
            || name.ends_with(".bytes.max")
            || name.ends_with(".messages") =>
        {
            types::LONG
        }
        _ => types::STRING,
    }
}

/// What a setting is for: the text of the configuration reference.
pub fn documentation(name: &str) -> Option<&'static str> {
    if let Some(setting) = BROKER_SETTINGS.iter().find(|s| s.keys.contains(&name)) {
        return Some(setting.meaning);
    }
    if let Some(setting) = TOPIC_SETTINGS
        .iter()
        .find(|s| s.topic_key == name || s.broker_key == Some(name))
    {
        return Some(setting.meaning);
    }
    if let Some(setting) = GROUP_SETTINGS.iter().find(|s| s.key == name) {
        return Some(setting.meaning);
    }
    GROUP_KEYS
        .iter()
        .find(|k| k.name == name)
        .map(|k| k.meaning)
}

/// Broker keys that set a topic default in a time unit: (topic key, ms per unit).
fn time_unit(key: &str) -> Option<(&'static str, i64)> {
    match key {
        "log.retention.ms" => Some(("retention.ms", 1)),
        "log.retention.minutes" => Some(("retention.ms", 60_000)),
        "log.retention.hours" => Some(("retention.ms", 3_600_000)),
        "log.roll.ms" => Some(("segment.ms", 1)),
        "log.roll.hours" => Some(("segment.ms", 3_600_000)),
        _ => None,
    }
}

/// The broker keys of one time setting, most precise first.
fn unit_keys(topic_key: &str) -> &'static [&'static str] {
    match topic_key {
        "retention.ms" => &[
            "log.retention.ms",
            "log.retention.minutes",
            "log.retention.hours",
        ],
        "segment.ms" => &["log.roll.ms", "log.roll.hours"],
        _ => &[],
    }
}

/// The topic key a broker key sets the default of, time units included.
fn topic_key_of(key: &str) -> Option<&'static str> {
    time_unit(key)
        .map(|(topic_key, _)| topic_key)
        .or_else(|| topic_config::topic_key_for_broker_key(key))
}

/// Whether a broker setting may change while the broker runs: the topic
/// defaults (`log.*`, `message.max.bytes`, `compression.type`, ...) and
/// `log.retention.check.interval.ms`. The others are read-only.
pub fn is_dynamic(key: &str) -> bool {
    key == "log.retention.check.interval.ms"
        || topic_key_of(key).is_some()
        || crate::tls::reloadable(key).is_some()
}

/// Checks one dynamic broker setting; the error names the key and says why.
pub fn validate_broker(key: &str, value: &str) -> Result<(), String> {
    if crate::tls::reloadable(key).is_some() {
        // Checked whole by the broker whose listener it is.
        return if value.trim().is_empty() {
            Err(format!("invalid value for {key}: empty"))
        } else {
            Ok(())
        };
    }
    if key == "log.retention.check.interval.ms" {
        return match value.trim().parse::<u64>() {
            Ok(ms) if ms >= 1 => Ok(()),
            _ => Err(format!(
                "invalid value {value:?} for {key}: expected a number of milliseconds, at least 1"
            )),
        };
    }
    if let Some((topic_key, unit_ms)) = time_unit(key) {
        let count: i64 = value
            .trim()
            .parse()
            .map_err(|_| format!("invalid value {value:?} for {key}: expected a whole number"))?;
        let ms = if count < 0 {
            -1
        } else {
            count.saturating_mul(unit_ms)
        };
        return topic_config::validate(topic_key, &ms.to_string());
    }
    match topic_config::topic_key_for_broker_key(key) {
        Some(topic_key) => topic_config::validate(topic_key, value),
        None => Err(format!("{key} is not a broker setting")),
    }
}

/// The dynamic layers that apply to this node, lowest precedence first.
fn layers<'a>(
    config: &BrokerConfig,
    image: &'a MetadataImage,
) -> impl Iterator<Item = (i8, &'a BTreeMap<String, String>)> {
    let node = image.broker_configs.get(&config.node_id.to_string());
    let default = image.broker_configs.get(CLUSTER_DEFAULT);
    [
        default.map(|c| (sources::DYNAMIC_DEFAULT_BROKER, c)),
        node.map(|c| (sources::DYNAMIC_BROKER, c)),
    ]
    .into_iter()
    .flatten()
}

/// The topic defaults this node runs with: the static ones with the
/// dynamic layers over them.
pub fn topic_defaults(config: &BrokerConfig, image: &MetadataImage) -> TopicDefaults {
    let mut defaults = config.topic_defaults.clone();
    for (_, layer) in layers(config, image) {
        for (key, value) in layer {
            if time_unit(key).is_some() {
                continue;
            }
            if let Some(topic_key) = topic_config::topic_key_for_broker_key(key) {
                if let Err(error) = defaults.set(topic_key, value) {
                    tracing::warn!(%key, %value, %error, "ignoring a dynamic broker setting");
                }
            }
        }
        for topic_key in ["retention.ms", "segment.ms"] {
            // Within a layer the most precise unit wins, as in Kafka.
            let given = unit_keys(topic_key)
                .iter()
                .find_map(|key| layer.get(*key).map(|value| (*key, value)));
            if let Some((key, value)) = given {
                let (_, unit_ms) = time_unit(key).expect("a time key");
                let ms = match value.trim().parse::<i64>() {
                    Ok(count) if count < 0 => -1,
                    Ok(count) => count.saturating_mul(unit_ms),
                    Err(_) => continue,
                };
                if let Err(error) = defaults.set(topic_key, &ms.to_string()) {
                    tracing::warn!(%key, %value, %error, "ignoring a dynamic broker setting");
                }
            }
        }
    }
    defaults
}

/// The dynamic value of `key` for this node, if any layer sets it.
fn dynamic_value<'a>(
    config: &BrokerConfig,
    image: &'a MetadataImage,
    key: &str,
) -> Option<&'a String> {
    layers(config, image)
        .filter_map(|(_, layer)| layer.get(key))
        .last()
}

/// The broker default of a topic key as it is now: the dynamic layers'
/// value of its broker key, else the static default. Cheaper than
/// [`topic_defaults`] for one key.
pub fn topic_default_value(
    config: &BrokerConfig,
    image: &MetadataImage,
    topic_key: &str,
) -> Option<String> {
    let setting = TOPIC_SETTINGS.iter().find(|s| s.topic_key == topic_key)?;
    let Some(broker_key) = setting.broker_key else {
        // A topic-only key: no broker layer sets it.
        return config.topic_defaults.get(topic_key);
    };
    match dynamic_value(config, image, broker_key) {
        Some(value) if time_unit(broker_key).is_none() => Some(value.clone()),
        Some(_) => topic_defaults(config, image).get(topic_key),
        None => config.topic_defaults.get(topic_key),
    }
}

/// `message.max.bytes` as it is now (a topic's `max.message.bytes` default).
pub fn message_max_bytes(config: &BrokerConfig, image: &MetadataImage) -> usize {
    dynamic_value(config, image, "message.max.bytes")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(config.message_max_bytes as usize)
}

/// `log.retention.check.interval.ms` as it is now.
pub fn retention_check_interval_ms(config: &BrokerConfig, image: &MetadataImage) -> u64 {
    dynamic_value(config, image, "log.retention.check.interval.ms")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(config.retention_check_interval_ms)
}

/// One described setting: value, source, and the values it overrides
/// (synonyms: name, value, source), highest precedence first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    pub name: String,
    pub value: Option<String>,
    pub source: i8,
    pub read_only: bool,
    pub synonyms: Vec<(String, Option<String>, i8)>,
}

/// Every broker setting's name, in the reference's order, each once: the
/// broker settings (all their names), the topic defaults, the group
/// settings.
pub fn broker_keys() -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = Vec::new();
    let settings = BROKER_SETTINGS.iter().flat_map(|s| s.keys.iter().copied());
    let topic = TOPIC_SETTINGS.iter().filter_map(|s| s.broker_key);
    let group = GROUP_SETTINGS.iter().map(|s| s.key);
    for key in settings.chain(topic).chain(group) {
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

/// The built-in default of a broker setting, `None` when it has none
/// (a unit alias nobody set, or one the host decides).
fn builtin_default(key: &str) -> Option<String> {
    let unit_alias = time_unit(key).is_some_and(|_| !key.ends_with(".ms"));
    if let Some(setting) = BROKER_SETTINGS
        .iter()
        .find(|s| s.keys[0] == key || (!unit_alias && s.keys.contains(&key)))
    {
        if let crate::config::reference::Default::Value(value) = setting.default {
            return Some(value.to_string());
        }
    }
    match key {
        "log.retention.hours" | "log.roll.hours" => return Some("168".to_string()),
        "log.retention.minutes" => return None,
        _ => {}
    }
    if let Some(topic_key) = topic_key_of(key) {
        return TopicDefaults::new().get(topic_key);
    }
    GROUP_SETTINGS
        .iter()
        .find(|s| s.key == key)
        .map(|s| s.default.to_string())
}

/// The value the broker runs with for a static (or default) setting.
fn running_value(config: &BrokerConfig, defaults: &TopicDefaults, key: &str) -> Option<String> {
    if let Some(setting) = BROKER_SETTINGS.iter().find(|s| s.keys.contains(&key)) {
        let primary = setting.keys[0];
        if primary != key && time_unit(key).is_some() {
            // A unit alias: only what was given in that unit.
            return config
                .given
                .iter()
                .rev()
                .find(|g| g.key == key)
                .map(|g| g.value.clone())
                .or_else(|| builtin_default(key));
        }
        if let Some(topic_key) = topic_key_of(primary) {
            return defaults.get(topic_key);
        }
        return crate::config::effective::broker_value(config, primary);
    }
    if let Some(topic_key) = topic_key_of(key) {
        return defaults.get(topic_key);
    }
    crate::config::effective::group_value(config, key)
}

/// The setting `key` of this node as DescribeConfigs reports it for the
/// broker resource of its node id.
pub fn describe_broker_key(config: &BrokerConfig, image: &MetadataImage, key: &str) -> Described {
    let defaults = topic_defaults(config, image);
    let mut synonyms: Vec<(String, Option<String>, i8)> = Vec::new();
    let mut layered: Vec<_> = layers(config, image).collect();
    layered.reverse();
    // The ms key of a time setting has the other units as synonyms.
    let names: Vec<&str> = match time_unit(key) {
        Some((topic_key, 1)) => unit_keys(topic_key).to_vec(),
        _ => vec![key],
    };
    for (source, layer) in layered {
        for name in &names {
            if let Some(value) = layer.get(*name) {
                synonyms.push((name.to_string(), Some(value.clone()), source));
            }
        }
    }
    let aliases: Vec<&str> = BROKER_SETTINGS
        .iter()
        .find(|s| s.keys.contains(&key))
        .map_or_else(|| vec![key], |s| s.keys.to_vec());
    let static_given = config.given.iter().rev().find(|g| {
        g.key == key
            || (time_unit(key).is_none() && aliases.contains(&g.key.as_str()))
            || crate::config::effective::shares_a_value(key, &g.key)
    });
    // Given under a key that only moves part of it (`--listen` for
    // `listeners`): the value is the one the broker runs with.
    let given_in_part =
        static_given.is_some_and(|g| crate::config::effective::shares_a_value(key, &g.key));
    if let Some(given) = static_given {
        synonyms.push((
            key.to_string(),
            Some(given.value.clone()),
            sources::STATIC_BROKER,
        ));
    }
    synonyms.push((key.to_string(), builtin_default(key), sources::DEFAULT));
    // A value that was set is reported as it was given (storage may run
    // with a derived form, e.g. `flush.messages` above 1); a default as
    // the broker runs with it.
    // The ms key of a time setting reports the milliseconds it runs with,
    // whichever unit set them.
    let (_, given, source) = synonyms[0].clone();
    let value = match source {
        _ if names.len() > 1 || given_in_part => running_value(config, &defaults, key),
        sources::DEFAULT => running_value(config, &defaults, key),
        _ => given,
    };
    Described {
        name: key.to_string(),
        value,
        source,
        read_only: !is_dynamic(key),
        synonyms,
    }
}

/// The cluster-wide dynamic defaults, as DescribeConfigs reports the
/// broker resource `""`: only what was set there.
pub fn describe_cluster_defaults(image: &MetadataImage) -> Vec<Described> {
    image
        .broker_configs
        .get(CLUSTER_DEFAULT)
        .into_iter()
        .flatten()
        .map(|(key, value)| Described {
            name: key.clone(),
            value: Some(value.clone()),
            source: sources::DYNAMIC_DEFAULT_BROKER,
            read_only: false,
            synonyms: vec![(
                key.clone(),
                Some(value.clone()),
                sources::DYNAMIC_DEFAULT_BROKER,
            )],
        })
        .collect()
}

/// A topic setting as DescribeConfigs reports it: the override, else the
/// broker default of this node, with the broker-level synonyms.
pub fn describe_topic_key(
    config: &BrokerConfig,
    image: &MetadataImage,
    defaults: &TopicDefaults,
    overrides: &BTreeMap<String, String>,
    key: &str,
) -> Described {
    let mut synonyms = Vec::new();
    if let Some(value) = overrides.get(key) {
        synonyms.push((key.to_string(), Some(value.clone()), sources::DYNAMIC_TOPIC));
    }
    let broker_key = TOPIC_SETTINGS
        .iter()
        .find(|s| s.topic_key == key)
        .and_then(|s| s.broker_key);
    if let Some(broker_key) = broker_key {
        let broker = describe_broker_key(config, image, broker_key);
        synonyms.extend(broker.synonyms);
    }
    let (value, source) = match synonyms.first() {
        Some((_, value, source)) if *source != sources::DEFAULT => (value.clone(), *source),
        _ => (defaults.get(key), sources::DEFAULT),
    };
    Described {
        name: key.to_string(),
        value,
        source,
        read_only: false,
        synonyms,
    }
}

/// A consumer group setting (GROUP resources, Kafka 4.x's group configs):
/// its type, default, allowed range and what it is for.
pub struct GroupKey {
    pub name: &'static str,
    pub config_type: i8,
    pub default: &'static str,
    /// Inclusive bounds of an INT setting.
    pub range: Option<(i64, i64)>,
    pub meaning: &'static str,
}

pub const GROUP_KEYS: &[GroupKey] = &[
    GroupKey {
        name: "consumer.session.timeout.ms",
        config_type: types::INT,
        default: "45000",
        range: Some((45_000, 60_000)),
        meaning: "Session timeout of the group's members under the consumer rebalance protocol (KIP-848, `group.protocol=consumer`), over `group.consumer.session.timeout.ms`. Classic members give their own.",
    },
    GroupKey {
        name: "consumer.heartbeat.interval.ms",
        config_type: types::INT,
        default: "5000",
        range: Some((5_000, 15_000)),
        meaning: "Heartbeat interval the coordinator gives the group's members under the consumer rebalance protocol, over `group.consumer.heartbeat.interval.ms`.",
    },
    GroupKey {
        name: "share.session.timeout.ms",
        config_type: types::INT,
        default: "45000",
        range: Some((45_000, 60_000)),
        meaning: "Session timeout of a share group's members, over `group.share.session.timeout.ms`.",
    },
    GroupKey {
        name: "share.heartbeat.interval.ms",
        config_type: types::INT,
        default: "5000",
        range: Some((5_000, 15_000)),
        meaning: "Heartbeat interval the coordinator gives a share group's members, over `group.share.heartbeat.interval.ms`.",
    },
    GroupKey {
        name: "share.record.lock.duration.ms",
        config_type: types::INT,
        default: "30000",
        range: Some((15_000, 60_000)),
        meaning: "How long a share group's consumer holds a record's acquisition lock, over `group.share.record.lock.duration.ms`.",
    },
    GroupKey {
        name: "share.auto.offset.reset",
        config_type: types::STRING,
        default: "latest",
        range: None,
        meaning: "Where a share partition without a kept state starts: `latest` (the log end), `earliest` (the log start) or `by_duration:<ISO-8601 duration>` (the first record at most that old, e.g. `by_duration:PT10M`).",
    },
    GroupKey {
        name: "share.isolation.level",
        config_type: types::STRING,
        default: "read_uncommitted",
        range: None,
        meaning: "`read_committed` or `read_uncommitted` records for a share group. `read_committed`: records up to the last stable offset only; those of aborted transactions and the transaction markers are archived, never delivered.",
    },
    GroupKey {
        name: "streams.session.timeout.ms",
        config_type: types::INT,
        default: "45000",
        range: Some((45_000, 60_000)),
        meaning: "Session timeout of a streams group's members. Kept and reported.",
    },
    GroupKey {
        name: "streams.heartbeat.interval.ms",
        config_type: types::INT,
        default: "5000",
        range: Some((5_000, 15_000)),
        meaning: "Heartbeat interval of a streams group's members. Kept and reported.",
    },
    GroupKey {
        name: "streams.num.standby.replicas",
        config_type: types::INT,
        default: "0",
        range: Some((0, 2)),
        meaning: "Standby replicas of a streams group's tasks. Kept and reported.",
    },
];

/// Checks a group's whole set of settings: known keys, values in range,
/// and each heartbeat interval below its session timeout.
pub fn validate_group(configs: &BTreeMap<String, String>) -> Result<(), String> {
    for (name, value) in configs {
        let Some(key) = GROUP_KEYS.iter().find(|k| k.name == name) else {
            return Err(format!("unknown group config {name}"));
        };
        if let Some((low, high)) = key.range {
            match value.trim().parse::<i64>() {
                Ok(n) if (low..=high).contains(&n) => {}
                _ => {
                    return Err(format!(
                        "invalid value {value:?} for {name}: expected a whole number from {low} to {high}"
                    ))
                }
            }
        }
        let ok = match key.name {
            "share.auto.offset.reset" => {
                matches!(value.as_str(), "latest" | "earliest")
                    || value
                        .strip_prefix("by_duration:")
                        .and_then(groups::share::parse_duration_ms)
                        .is_some()
            }
            "share.isolation.level" => {
                matches!(value.as_str(), "read_committed" | "read_uncommitted")
            }
            _ => true,
        };
        if !ok {
            return Err(format!("invalid value {value:?} for {name}"));
        }
    }
    let effective = |name: &str| -> i64 {
        configs
            .get(name)
            .and_then(|v| v.trim().parse().ok())
            .or_else(|| {
                GROUP_KEYS
                    .iter()
                    .find(|k| k.name == name)
                    .and_then(|k| k.default.parse().ok())
            })
            .unwrap_or(0)
    };
    for kind in ["consumer", "share", "streams"] {
        let heartbeat = format!("{kind}.heartbeat.interval.ms");
        let session = format!("{kind}.session.timeout.ms");
        if effective(&heartbeat) >= effective(&session) {
            return Err(format!("{heartbeat} must be less than {session}"));
        }
    }
    Ok(())
}

/// Every group setting of `group` as DescribeConfigs reports it.
pub fn describe_group(image: &MetadataImage, group: &str) -> Vec<Described> {
    let set = image.group_configs.get(group);
    GROUP_KEYS
        .iter()
        .map(|key| {
            let given = set.and_then(|s| s.get(key.name));
            let mut synonyms = Vec::new();
            if let Some(value) = given {
                synonyms.push((key.name.to_string(), Some(value.clone()), sources::GROUP));
            }
            synonyms.push((
                key.name.to_string(),
                Some(key.default.to_string()),
                sources::DEFAULT,
            ));
            Described {
                name: key.name.to_string(),
                value: Some(given.cloned().unwrap_or_else(|| key.default.to_string())),
                source: synonyms[0].2,
                read_only: false,
                synonyms,
            }
        })
        .collect()
}

/// The list-valued settings, for AlterConfigs' APPEND and SUBTRACT.
pub fn is_list(name: &str) -> bool {
    config_type(name) == types::LIST
}

/// Applies APPEND (`add`) or SUBTRACT to a list value (comma-separated):
/// APPEND adds the items not there yet, SUBTRACT removes every given item.
pub fn edit_list(current: Option<&str>, items: &str, add: bool) -> String {
    let mut list: Vec<String> = current
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let items: Vec<&str> = items
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if add {
        for item in items {
            if !list.iter().any(|l| l == item) {
                list.push(item.to_string());
            }
        }
    } else {
        list.retain(|l| !items.contains(&l.as_str()));
    }
    list.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(settings: &[(&str, &str)]) -> BrokerConfig {
        crate::config::load(&crate::config::flags_with(settings)).expect("valid config")
    }

    fn image_with(layers: &[(&str, &[(&str, &str)])]) -> MetadataImage {
        let mut image = MetadataImage::default();
        for (resource, configs) in layers {
            image.apply(&crate::metadata::MetadataRecord::BrokerConfigsSet {
                resource: resource.to_string(),
                configs: configs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            });
        }
        image
    }

    #[test]
    fn every_described_key_has_a_type_and_documentation() {
        for key in broker_keys()
            .into_iter()
            .chain(topic_config::topic_keys())
            .chain(GROUP_KEYS.iter().map(|k| k.name))
        {
            assert!(config_type(key) > 0, "{key}");
            assert!(documentation(key).is_some(), "{key} has no documentation");
        }
        assert_eq!(config_type("retention.bytes"), types::LONG);
        assert_eq!(config_type("cleanup.policy"), types::LIST);
        assert_eq!(config_type("segment.bytes"), types::INT);
        assert_eq!(config_type("auto.create.topics.enable"), types::BOOLEAN);
        assert_eq!(config_type("consumer.session.timeout.ms"), types::INT);
    }

    #[test]
    fn the_node_layer_wins_over_the_cluster_default_over_static_settings() {
        let config = load(&[("log.retention.ms", "1000"), ("message.max.bytes", "2000")]);
        let image = image_with(&[
            (
                "",
                &[("log.retention.hours", "2"), ("message.max.bytes", "3000")],
            ),
            ("0", &[("message.max.bytes", "4000")]),
            ("7", &[("message.max.bytes", "5000")]),
        ]);
        let defaults = topic_defaults(&config, &image);
        assert_eq!(defaults.get("retention.ms").as_deref(), Some("7200000"));
        assert_eq!(defaults.get("max.message.bytes").as_deref(), Some("4000"));
        assert_eq!(message_max_bytes(&config, &image), 4000);
        let described = describe_broker_key(&config, &image, "message.max.bytes");
        assert_eq!(described.value.as_deref(), Some("4000"));
        assert_eq!(described.source, sources::DYNAMIC_BROKER);
        let sources: Vec<i8> = described.synonyms.iter().map(|s| s.2).collect();
        assert_eq!(
            sources,
            vec![
                sources::DYNAMIC_BROKER,
                sources::DYNAMIC_DEFAULT_BROKER,
                sources::STATIC_BROKER,
                sources::DEFAULT
            ]
        );
        let retention = describe_broker_key(&config, &image, "log.retention.ms");
        assert_eq!(retention.value.as_deref(), Some("7200000"));
        assert!(!retention.read_only);
        assert!(describe_broker_key(&config, &image, "node.id").read_only);
    }

    #[test]
    fn dynamic_settings_are_checked() {
        assert!(validate_broker("log.retention.bytes", "100").is_ok());
        assert!(validate_broker("log.retention.bytes", "lots").is_err());
        assert!(validate_broker("log.retention.hours", "-1").is_ok());
        assert!(validate_broker("log.retention.check.interval.ms", "0").is_err());
        assert!(is_dynamic("log.flush.interval.messages"));
        assert!(!is_dynamic("advertised.listeners"));
    }

    #[test]
    fn listen_flag_is_reported_as_the_static_listeners() {
        let image = MetadataImage::default();
        let mut flags = crate::config::flags_with(&[]);
        flags.listen = Some("127.0.0.1:19556".to_string());
        let listening = crate::config::load(&flags).unwrap();
        let listeners = describe_broker_key(&listening, &image, "listeners");
        assert_eq!(
            (listeners.value.as_deref(), listeners.source),
            (Some("PLAINTEXT://127.0.0.1:19556"), sources::STATIC_BROKER)
        );
        assert!(!is_dynamic("node.id"));
    }

    #[test]
    fn group_settings_are_checked_as_kafka_checks_them() {
        let set = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(validate_group(&set(&[("consumer.session.timeout.ms", "50000")])).is_ok());
        assert!(validate_group(&set(&[("consumer.session.timeout.ms", "1000")])).is_err());
        assert!(validate_group(&set(&[("no.such", "1")])).is_err());
        assert!(validate_group(&set(&[("share.auto.offset.reset", "earliest")])).is_ok());
        assert!(validate_group(&set(&[("share.auto.offset.reset", "soon")])).is_err());
        assert!(validate_group(&set(&[("share.auto.offset.reset", "by_duration:PT10M")])).is_ok());
        assert!(validate_group(&set(&[("share.auto.offset.reset", "by_duration:P")])).is_err());
    }

    #[test]
    fn append_and_subtract_edit_lists() {
        assert_eq!(edit_list(Some("delete"), "compact", true), "delete,compact");
        assert_eq!(edit_list(Some("delete"), "delete", true), "delete");
        assert_eq!(
            edit_list(Some("delete,compact"), "compact", false),
            "delete"
        );
        assert_eq!(edit_list(None, "x", false), "");
    }
}
