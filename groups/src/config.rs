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
            _ => return Err(format!("`{key}` is not a group setting")),
        }
        if self.min_session_timeout_ms > self.max_session_timeout_ms {
            return Err(
                "group.min.session.timeout.ms is above group.max.session.timeout.ms".into(),
            );
        }
        Ok(())
    }
}
