//! The group settings the coordinator runs by, under Kafka's broker
//! config names (re-exported by `coordinator`).

use crate::limits::GROUP_MEMBERS_MAX;

/// Group settings (Kafka's broker names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.initial.rebalance.delay.ms`: how long the first rebalance of
    /// an empty group waits for more members.
    pub initial_rebalance_delay_ms: u64,
    /// `group.max.size`.
    pub max_size: usize,
    /// `group.min.session.timeout.ms`, `group.max.session.timeout.ms`.
    pub min_session_timeout_ms: u64,
    pub max_session_timeout_ms: u64,
    /// `offsets.topic.num.partitions`.
    pub offsets_partitions: i32,
    /// `offsets.retention.minutes`, in ms.
    pub offsets_retention_ms: u64,
    /// KIP-848 groups (`group.protocol=consumer`): the broker-side settings.
    pub consumer: ConsumerGroupConfig,
    /// Share groups (KIP-932).
    pub share: ShareGroupConfig,
}

/// The settings of share groups (Kafka's `group.share.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareGroupConfig {
    /// `group.share.session.timeout.ms`.
    pub session_timeout_ms: u64,
    /// `group.share.heartbeat.interval.ms`.
    pub heartbeat_interval_ms: u64,
    /// `group.share.max.size`.
    pub max_size: usize,
    /// `group.share.record.lock.duration.ms`, `group.share.delivery.count.limit`,
    /// `group.share.partition.max.record.locks`.
    pub partition: crate::share::ShareConfig,
}

impl Default for ShareGroupConfig {
    fn default() -> Self {
        Self {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            max_size: 200,
            partition: crate::share::ShareConfig::default(),
        }
    }
}

/// The server-side assignors of consumer-protocol groups, by the names
/// clients give.
pub const ASSIGNORS: &[&str] = &["uniform", "range"];

/// The settings of consumer-protocol groups (Kafka's `group.consumer.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupConfig {
    /// `group.consumer.session.timeout.ms` and its bounds
    /// (`group.consumer.min.session.timeout.ms`, `...max...`).
    pub session_timeout_ms: u64,
    pub min_session_timeout_ms: u64,
    pub max_session_timeout_ms: u64,
    /// `group.consumer.heartbeat.interval.ms` and its bounds.
    pub heartbeat_interval_ms: u64,
    pub min_heartbeat_interval_ms: u64,
    pub max_heartbeat_interval_ms: u64,
    /// `group.consumer.max.size`.
    pub max_size: usize,
    /// `group.consumer.assignors`: the server-side assignors members may
    /// name, the first the default.
    pub assignors: Vec<String>,
    /// `group.consumer.migration.policy`: whether a group may switch
    /// protocols while it has members.
    pub migration_policy: MigrationPolicy,
}

/// `group.consumer.migration.policy` (Kafka's values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationPolicy {
    /// A group with members keeps its protocol.
    Disabled,
    /// A classic group turns consumer when a consumer-protocol member
    /// joins it.
    Upgrade,
    /// A consumer group whose last consumer-protocol member leaves turns
    /// classic again when classic members remain.
    Downgrade,
    Bidirectional,
}

impl MigrationPolicy {
    pub fn name(self) -> &'static str {
        match self {
            MigrationPolicy::Disabled => "disabled",
            MigrationPolicy::Upgrade => "upgrade",
            MigrationPolicy::Downgrade => "downgrade",
            MigrationPolicy::Bidirectional => "bidirectional",
        }
    }

    pub fn upgrades(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Upgrade | MigrationPolicy::Bidirectional
        )
    }

    pub fn downgrades(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Downgrade | MigrationPolicy::Bidirectional
        )
    }
}

impl Default for ConsumerGroupConfig {
    fn default() -> Self {
        Self {
            session_timeout_ms: 45_000,
            min_session_timeout_ms: 45_000,
            max_session_timeout_ms: 60_000,
            heartbeat_interval_ms: 5_000,
            min_heartbeat_interval_ms: 5_000,
            max_heartbeat_interval_ms: 15_000,
            max_size: GROUP_MEMBERS_MAX,
            assignors: ASSIGNORS.iter().map(|a| a.to_string()).collect(),
            migration_policy: MigrationPolicy::Bidirectional,
        }
    }
}

impl Default for GroupConfig {
    fn default() -> Self {
        Self {
            initial_rebalance_delay_ms: 3_000,
            max_size: GROUP_MEMBERS_MAX,
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            offsets_partitions: 50,
            offsets_retention_ms: 7 * 24 * 60 * 60 * 1000,
            consumer: ConsumerGroupConfig::default(),
            share: ShareGroupConfig::default(),
        }
    }
}

/// The broker config keys this module owns.
pub const GROUP_CONFIG_KEYS: &[&str] = &[
    "group.initial.rebalance.delay.ms",
    "group.max.size",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "offsets.topic.num.partitions",
    "offsets.retention.minutes",
    "group.consumer.session.timeout.ms",
    "group.consumer.min.session.timeout.ms",
    "group.consumer.max.session.timeout.ms",
    "group.consumer.heartbeat.interval.ms",
    "group.consumer.min.heartbeat.interval.ms",
    "group.consumer.max.heartbeat.interval.ms",
    "group.consumer.max.size",
    "group.consumer.assignors",
    "group.consumer.migration.policy",
    "group.share.session.timeout.ms",
    "group.share.heartbeat.interval.ms",
    "group.share.max.size",
    "group.share.record.lock.duration.ms",
    "group.share.delivery.count.limit",
    "group.share.partition.max.record.locks",
];

impl GroupConfig {
    /// Applies one of [`GROUP_CONFIG_KEYS`]; the error is the reason.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let number = || -> Result<u64, String> {
            value
                .trim()
                .parse::<u64>()
                .map_err(|e| format!("expected a non-negative integer: {e}"))
        };
        match key {
            "group.initial.rebalance.delay.ms" => self.initial_rebalance_delay_ms = number()?,
            "group.max.size" => {
                let size = number()?;
                if size == 0 || size > GROUP_MEMBERS_MAX as u64 {
                    return Err(format!("must be between 1 and {GROUP_MEMBERS_MAX}"));
                }
                self.max_size = size as usize;
            }
            "group.min.session.timeout.ms" => self.min_session_timeout_ms = number()?,
            "group.max.session.timeout.ms" => self.max_session_timeout_ms = number()?,
            "offsets.topic.num.partitions" => {
                let count = number()?;
                if count == 0 || count > crate::limits::OFFSETS_PARTITIONS_MAX as u64 {
                    return Err(format!(
                        "must be between 1 and {}",
                        crate::limits::OFFSETS_PARTITIONS_MAX
                    ));
                }
                self.offsets_partitions = count as i32;
            }
            "offsets.retention.minutes" => {
                let minutes = number()?;
                if minutes == 0 {
                    return Err("must be positive".to_string());
                }
                self.offsets_retention_ms = minutes.saturating_mul(60_000);
            }
            "group.consumer.session.timeout.ms" => self.consumer.session_timeout_ms = number()?,
            "group.consumer.min.session.timeout.ms" => {
                self.consumer.min_session_timeout_ms = number()?
            }
            "group.consumer.max.session.timeout.ms" => {
                self.consumer.max_session_timeout_ms = number()?
            }
            "group.consumer.heartbeat.interval.ms" => {
                self.consumer.heartbeat_interval_ms = number()?
            }
            "group.consumer.min.heartbeat.interval.ms" => {
                self.consumer.min_heartbeat_interval_ms = number()?
            }
            "group.consumer.max.heartbeat.interval.ms" => {
                self.consumer.max_heartbeat_interval_ms = number()?
            }
            "group.consumer.max.size" => {
                let size = number()?;
                if size == 0 || size > GROUP_MEMBERS_MAX as u64 {
                    return Err(format!("must be between 1 and {GROUP_MEMBERS_MAX}"));
                }
                self.consumer.max_size = size as usize;
            }
            "group.consumer.assignors" => {
                let names: Vec<String> = value
                    .split(',')
                    .map(|name| name.trim().to_string())
                    .filter(|name| !name.is_empty())
                    .collect();
                if names.is_empty() {
                    return Err("names no assignor".to_string());
                }
                if let Some(unknown) = names.iter().find(|n| !ASSIGNORS.contains(&n.as_str())) {
                    return Err(format!(
                        "`{unknown}` is not an assignor here (known: {})",
                        ASSIGNORS.join(", ")
                    ));
                }
                self.consumer.assignors = names;
            }
            "group.share.session.timeout.ms" => self.share.session_timeout_ms = number()?,
            "group.share.heartbeat.interval.ms" => self.share.heartbeat_interval_ms = number()?,
            "group.share.max.size" => {
                let size = number()?;
                if size == 0 || size > GROUP_MEMBERS_MAX as u64 {
                    return Err(format!("must be between 1 and {GROUP_MEMBERS_MAX}"));
                }
                self.share.max_size = size as usize;
            }
            "group.share.record.lock.duration.ms" => {
                let ms = number()?;
                if !(1_000..=3_600_000).contains(&ms) {
                    return Err("must be between 1000 and 3600000".to_string());
                }
                self.share.partition.record_lock_ms = ms;
            }
            "group.share.delivery.count.limit" => {
                let limit = number()?;
                if !(2..=10).contains(&limit) {
                    return Err("must be between 2 and 10".to_string());
                }
                self.share.partition.delivery_count_limit = limit as u16;
            }
            "group.share.partition.max.record.locks" => {
                let locks = number()?;
                if !(100..=10_000).contains(&locks) {
                    return Err("must be between 100 and 10000".to_string());
                }
                self.share.partition.max_record_locks = locks as usize;
            }
            "group.consumer.migration.policy" => {
                self.consumer.migration_policy = match value.trim().to_ascii_lowercase().as_str() {
                    "disabled" => MigrationPolicy::Disabled,
                    "upgrade" => MigrationPolicy::Upgrade,
                    "downgrade" => MigrationPolicy::Downgrade,
                    "bidirectional" => MigrationPolicy::Bidirectional,
                    other => {
                        return Err(format!(
                        "`{other}` is not a policy: disabled, upgrade, downgrade or bidirectional"
                    ))
                    }
                }
            }
            _ => return Err(format!("`{key}` is not a group setting")),
        }
        if self.min_session_timeout_ms > self.max_session_timeout_ms {
            return Err(
                "group.min.session.timeout.ms is above group.max.session.timeout.ms".into(),
            );
        }
        Ok(())
    }

    /// Checks that each consumer-protocol default lies within its bounds
    /// (once every key is set: Kafka checks them together at start).
    pub fn check_consumer_bounds(&self) -> Result<(), String> {
        let c = &self.consumer;
        if !(c.min_session_timeout_ms..=c.max_session_timeout_ms).contains(&c.session_timeout_ms) {
            return Err(format!(
                "group.consumer.session.timeout.ms ({}) must lie between group.consumer.min.session.timeout.ms ({}) and group.consumer.max.session.timeout.ms ({})",
                c.session_timeout_ms, c.min_session_timeout_ms, c.max_session_timeout_ms
            ));
        }
        if !(c.min_heartbeat_interval_ms..=c.max_heartbeat_interval_ms)
            .contains(&c.heartbeat_interval_ms)
        {
            return Err(format!(
                "group.consumer.heartbeat.interval.ms ({}) must lie between group.consumer.min.heartbeat.interval.ms ({}) and group.consumer.max.heartbeat.interval.ms ({})",
                c.heartbeat_interval_ms, c.min_heartbeat_interval_ms, c.max_heartbeat_interval_ms
            ));
        }
        if c.heartbeat_interval_ms >= c.session_timeout_ms {
            return Err(format!(
                "group.consumer.heartbeat.interval.ms ({}) must be below group.consumer.session.timeout.ms ({})",
                c.heartbeat_interval_ms, c.session_timeout_ms
            ));
        }
        Ok(())
    }
}
