//! The configuration the broker runs with, setting by setting, with where
//! each value came from (`default`, `flag`, or the file that set it):
//! logged once at start, so a log alone tells what a broker was running.

use crate::config::reference::{BROKER_SETTINGS, GROUP_SETTINGS, TOPIC_SETTINGS};
use crate::config::{BrokerConfig, Source};

/// One effective setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub key: &'static str,
    pub value: String,
    pub source: String,
}

/// The value of a broker setting (by its first key), `None` for a key this
/// function does not know (a test checks there is none). Static: the
/// dynamic layers are `config::dynamic`'s.
pub fn broker_value(config: &BrokerConfig, key: &str) -> Option<String> {
    let topic_default = |topic_key: &str| config.topic_defaults.get(topic_key);
    Some(match key {
        "node.id" => config.node_id.to_string(),
        "listen" => config.listen.to_string(),
        "listeners" => crate::kraft_config::render_named(&config.quorum.listeners),
        "advertise" => format!("{}:{}", config.advertise_host, config.advertise_port),
        "advertised.listeners" => advertised_listeners(config),
        "controller.listener.names" => config.quorum.controller_listener_names.join(","),
        "listener.security.protocol.map" => config
            .security_protocols
            .iter()
            .map(|(name, protocol)| format!("{name}:{protocol}"))
            .collect::<Vec<_>>()
            .join(","),
        "connections.max.reauth.ms" => first_sasl(config)
            .map_or(0, |sasl| sasl.reauth_ms)
            .to_string(),
        "sasl.enabled.mechanisms" => {
            first_sasl(config).map_or(String::new(), |sasl| sasl.mechanisms.join(","))
        }
        _ if key.starts_with("sasl.oauthbearer.") => config
            .given
            .iter()
            .rev()
            .find(|g| {
                g.key == key
                    || (g.key.starts_with("listener.name.") && g.key.ends_with(&format!(".{key}")))
            })
            .map(|g| g.value.clone())
            .unwrap_or_else(|| {
                match key {
                    "sasl.oauthbearer.sub.claim.name" => "sub",
                    "sasl.oauthbearer.scope.claim.name" => "scope",
                    "sasl.oauthbearer.clock.skew.seconds" => "30",
                    _ => "",
                }
                .to_string()
            }),
        "inter.broker.listener.name" => config.inter_broker.listener.clone(),
        "security.inter.broker.protocol" => config.inter_broker.protocol.clone(),
        "sasl.mechanism.controller.protocol" => config
            .controller_security
            .login
            .as_ref()
            .map_or(String::new(), |login| login.mechanism.clone()),
        "sasl.mechanism.inter.broker.protocol" => config
            .inter_broker
            .sasl
            .as_ref()
            .map_or(String::new(), |login| login.mechanism.clone()),
        _ if crate::tls::SSL_KEYS.contains(&key) => {
            // The first TLS listener's (its own settings over the plain ones).
            let listener = config
                .listeners
                .iter()
                .find(|l| l.tls.is_some())
                .unwrap_or(&config.listeners[0]);
            let given = listener
                .ssl_settings
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone());
            match given {
                Some(_) if key == "ssl.keystore.key" || key == "ssl.key.password" => {
                    "[hidden]".to_string()
                }
                Some(value) => value,
                None => String::new(),
            }
        }
        "process.roles" => config.quorum.roles.render(),
        "controller.quorum.voters" => crate::kraft_config::render_voters(&config.quorum.voters),
        "controller.quorum.bootstrap.servers" => {
            crate::kraft_config::render_servers(&config.quorum.bootstrap_servers)
        }
        "broker.rack" => config.quorum.rack.clone().unwrap_or_default(),
        "admin.listen" => config
            .admin_listen
            .map_or_else(|| "off".to_string(), |a| a.to_string()),
        "data.dir" => config.data_dir.display().to_string(),
        "cores" => config.cores.to_string(),
        "strom.cpuset" => config
            .cpuset
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(","),
        "log.format" => config.log_format.name().to_string(),
        "strom.metrics.partition.labels" => config.metrics_partition_labels.to_string(),
        "strom.balancer.enable" => config.balancer_enable.to_string(),
        "strom.balancer.single.broker" => config.balancer_single_broker.to_string(),
        "strom.balancer.broker.address" => format!("{}:{}", config.broker_host, config.broker_port),
        "auto.create.topics.enable" => config.auto_create_topics.to_string(),
        "authorizer.class.name" => config.authorizer.as_ref().map_or(String::new(), |_| {
            crate::authorizer::CLASS_NAMES[0].to_string()
        }),
        "super.users" => config
            .authorizer
            .as_ref()
            .map_or(String::new(), |a| a.super_users.join(";")),
        "allow.everyone.if.no.acl.found" => config
            .authorizer
            .as_ref()
            .is_some_and(|a| a.allow_if_no_acl)
            .to_string(),
        "num.partitions" => config.num_partitions.to_string(),
        "delete.topic.enable" => config.delete_topic_enable.to_string(),
        "default.replication.factor" => config.default_replication_factor.to_string(),
        "offsets.topic.replication.factor" => config.offsets_replication_factor.to_string(),
        "socket.request.max.bytes" => config.frame_bytes_max.to_string(),
        "queued.max.request.bytes" => config.queued_request_bytes_max.to_string(),
        "strom.queued.max.response.bytes" => config.queued_response_bytes_max.to_string(),
        "strom.connection.queued.max.response.bytes" => {
            config.connection_response_bytes_max.to_string()
        }
        "connections.max.idle.ms" => config.connections_max_idle_ms.to_string(),
        "strom.request.receive.timeout.ms" => config.request_receive_timeout_ms.to_string(),
        "strom.io.memory.bytes" => config
            .io_memory_bytes
            .unwrap_or(crate::config::IO_MEMORY_BYTES_DEFAULT)
            .to_string(),
        "strom.spin.before.park.us" => config.spin_before_park_us.to_string(),
        "strom.journal.chunk.bytes.max" => config.journal_chunk_bytes_max.to_string(),
        crate::config::io_properties::PATH_KEY => config
            .io_properties
            .as_ref()
            .map_or_else(|| "none".to_string(), |a| a.path.display().to_string()),
        "log.retention.check.interval.ms" => config.retention_check_interval_ms.to_string(),
        "transaction.state.log.num.partitions" => config.transactions.state_partitions.to_string(),
        "transaction.state.log.replication.factor" => {
            config.transactions.state_replication_factor.to_string()
        }
        "transaction.state.log.min.isr" => config.transactions.state_min_isr.to_string(),
        "transaction.max.timeout.ms" => config.transactions.max_timeout_ms.to_string(),
        "transactional.id.expiration.ms" => config.transactions.id_expiration_ms.to_string(),
        "transaction.abort.timed.out.transaction.cleanup.interval.ms" => {
            config.transactions.abort_check_ms.to_string()
        }
        "log.cleaner.enable" => config.cleaner.enable.to_string(),
        "log.cleaner.backoff.ms" => config.cleaner.backoff_ms.to_string(),
        "log.cleaner.dedupe.buffer.size" => config.cleaner.dedupe_buffer_bytes.to_string(),
        "log.cleaner.io.max.bytes.per.second" => {
            format!("{:E}", config.cleaner.io_bytes_per_second)
        }
        "producer.id.expiration.ms" => config.producer_id_expiration_ms.to_string(),
        "broker.session.timeout.ms" => config.cluster_timing.session_timeout_ms.to_string(),
        "strom.metadata.snapshot.bytes" => config.metadata_snapshot_bytes.to_string(),
        "replica.lag.time.max.ms" => config.cluster_timing.replica_lag_time_max_ms.to_string(),
        "auto.leader.rebalance.enable" => config.cluster_timing.auto_leader_rebalance.to_string(),
        "leader.imbalance.check.interval.seconds" => {
            (config.cluster_timing.leader_imbalance_check_interval_ms / 1000).to_string()
        }
        "broker.heartbeat.interval.ms" => config.cluster_timing.heartbeat_interval_ms.to_string(),
        "controller.quorum.election.timeout.ms" => {
            config.cluster_timing.election_timeout_ms.to_string()
        }
        "log.retention.ms" => topic_default("retention.ms")?,
        "log.roll.ms" => topic_default("segment.ms")?,
        _ => return None,
    })
}

/// The SASL settings of the first SASL listener.
fn first_sasl(config: &BrokerConfig) -> Option<&crate::sasl::SaslConfig> {
    config.listeners.iter().find_map(|l| l.sasl.as_deref())
}

/// `advertised.listeners` as it applies: the client listener with the
/// address clients are given, then the other advertised ones.
fn advertised_listeners(config: &BrokerConfig) -> String {
    let mut list: Vec<crate::kraft_config::NamedAddress> = config
        .listeners
        .iter()
        .map(|l| crate::kraft_config::NamedAddress {
            name: l.name.clone(),
            host: l.advertise_host.clone(),
            port: l.advertise_port,
        })
        .collect();
    list.extend(
        config
            .quorum
            .advertised_listeners
            .iter()
            .filter(|a| !config.listeners.iter().any(|l| l.name == a.name))
            .cloned(),
    );
    crate::kraft_config::render_named(&list)
}

pub fn group_value(config: &BrokerConfig, key: &str) -> Option<String> {
    let groups = &config.groups;
    Some(match key {
        "group.initial.rebalance.delay.ms" => groups.initial_rebalance_delay_ms.to_string(),
        "group.max.size" => groups.max_size.to_string(),
        "group.min.session.timeout.ms" => groups.min_session_timeout_ms.to_string(),
        "group.max.session.timeout.ms" => groups.max_session_timeout_ms.to_string(),
        "offsets.topic.num.partitions" => groups.offsets_partitions.to_string(),
        "offsets.retention.minutes" => (groups.offsets_retention_ms / 60_000).to_string(),
        "group.consumer.session.timeout.ms" => groups.consumer.session_timeout_ms.to_string(),
        "group.consumer.min.session.timeout.ms" => {
            groups.consumer.min_session_timeout_ms.to_string()
        }
        "group.consumer.max.session.timeout.ms" => {
            groups.consumer.max_session_timeout_ms.to_string()
        }
        "group.consumer.heartbeat.interval.ms" => groups.consumer.heartbeat_interval_ms.to_string(),
        "group.consumer.min.heartbeat.interval.ms" => {
            groups.consumer.min_heartbeat_interval_ms.to_string()
        }
        "group.consumer.max.heartbeat.interval.ms" => {
            groups.consumer.max_heartbeat_interval_ms.to_string()
        }
        "group.consumer.max.size" => groups.consumer.max_size.to_string(),
        "group.consumer.assignors" => groups.consumer.assignors.join(","),
        "group.consumer.migration.policy" => groups.consumer.migration_policy.name().to_string(),
        "group.share.session.timeout.ms" => groups.share.session_timeout_ms.to_string(),
        "group.share.heartbeat.interval.ms" => groups.share.heartbeat_interval_ms.to_string(),
        "group.share.max.size" => groups.share.max_size.to_string(),
        "group.share.record.lock.duration.ms" => groups.share.partition.record_lock_ms.to_string(),
        "group.share.delivery.count.limit" => {
            groups.share.partition.delivery_count_limit.to_string()
        }
        "group.share.partition.max.record.locks" => {
            groups.share.partition.max_record_locks.to_string()
        }
        _ => return None,
    })
}

/// Where the last setting of any of `keys` came from, else `default`.
fn source_of(config: &BrokerConfig, matches: impl Fn(&str) -> bool) -> String {
    match config.given.iter().rev().find(|g| matches(&g.key)) {
        None => "default".to_string(),
        Some(given) => match &given.source {
            Source::Flag => "flag".to_string(),
            Source::Default => "default".to_string(),
            Source::File(path) => path.display().to_string(),
        },
    }
}

/// Whether setting `given` changes the value of `key` too: `--listen`
/// moves the client listener of `listeners`, `--advertise` its advertised
/// address.
pub fn shares_a_value(key: &str, given: &str) -> bool {
    matches!(
        (key, given),
        ("listeners", "listen") | ("advertised.listeners", "advertise" | "listen" | "listeners")
    )
}

/// Every setting: the broker's, the topic defaults (by their broker key),
/// the group settings.
pub fn settings(config: &BrokerConfig) -> Vec<Effective> {
    let mut out = Vec::new();
    for setting in BROKER_SETTINGS {
        let key = setting.keys[0];
        out.push(Effective {
            key,
            value: broker_value(config, key).unwrap_or_else(|| "?".to_string()),
            source: source_of(config, |given| {
                setting.keys.contains(&given) || shares_a_value(key, given)
            }),
        });
    }
    for setting in TOPIC_SETTINGS {
        let Some(broker_key) = setting.broker_key else {
            continue;
        };
        if out.iter().any(|e| e.key == broker_key) {
            continue;
        }
        out.push(Effective {
            key: broker_key,
            value: config
                .topic_defaults
                .get(setting.topic_key)
                .unwrap_or_else(|| "?".to_string()),
            source: source_of(config, |given| {
                given == broker_key
                    || crate::topic_config::topic_key_for_broker_key(given)
                        == Some(setting.topic_key)
            }),
        });
    }
    for setting in GROUP_SETTINGS {
        out.push(Effective {
            key: setting.key,
            value: group_value(config, setting.key).unwrap_or_else(|| "?".to_string()),
            source: source_of(config, |given| given == setting.key),
        });
    }
    out
}

/// The settings as one line: `key=value (source), ...`.
pub fn render(config: &BrokerConfig) -> String {
    settings(config)
        .iter()
        .map(|e| format!("{}={} ({})", e.key, e.value, e.source))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{self, flags_with};

    #[test]
    fn every_setting_has_a_value_and_a_source() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("strom.toml");
        std::fs::write(&path, "num.partitions = 4\nlog.retention.hours = 2\n").unwrap();
        let mut flags = flags_with(&[("log.format", "json"), ("group.max.size", "7")]);
        flags.config_file = Some(path.clone());
        flags.cores = Some("3".to_string());
        flags.listen = Some("127.0.0.1:19555".to_string());
        let config = config::load(&flags).unwrap();
        let settings = settings(&config);
        let find = |key: &str| settings.iter().find(|e| e.key == key).unwrap().clone();
        for e in &settings {
            assert_ne!(e.value, "?", "{} has no value", e.key);
        }
        let file = path.display().to_string();
        let check = |key: &str, value: &str, source: &str| {
            let e = find(key);
            assert_eq!(
                (e.value.as_str(), e.source.as_str()),
                (value, source),
                "{key}"
            );
        };
        check("num.partitions", "4", &file);
        check("log.retention.ms", "7200000", &file);
        check("log.format", "json", "flag");
        check("cores", "3", "flag");
        check("group.max.size", "7", "flag");
        check("delete.topic.enable", "true", "default");
        // `--listen` moves the client listener: both report the flag.
        check("listeners", "PLAINTEXT://127.0.0.1:19555", "flag");
        check(
            "advertised.listeners",
            "PLAINTEXT://127.0.0.1:19555",
            "flag",
        );
        check("controller.quorum.voters", "", "default");
        check("log.segment.bytes", "1073741824", "default");
        let keys: Vec<&str> = settings.iter().map(|e| e.key).collect();
        let mut unique = keys.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), keys.len(), "a key twice: {keys:?}");
    }
}
