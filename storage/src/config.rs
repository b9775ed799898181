//! Per-log configuration, with Kafka's topic-level names and defaults.

/// When the log calls fdatasync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushPolicy {
    /// Every append is synced before it is reported durable. Appends that
    /// wait together share one fdatasync (group commit).
    Always,
    /// Sync once `ms` have passed since the oldest unsynced append, or once
    /// `bytes` are unsynced, whichever comes first. Durable means written.
    Interval { ms: Option<u64>, bytes: Option<u64> },
    /// Sync only on roll, explicit flush and close. Durable means written.
    Never,
}

/// What one sync of the log flushes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushScope {
    /// fdatasync of the log's active segment: the log's own device flush.
    File,
    /// One `syncfs` shared by every log of the thread on the same
    /// filesystem: a core with many partitions flushes the device once per
    /// round instead of once per partition. It also writes back anything
    /// else dirty on that filesystem, so it suits a dedicated data disk.
    Filesystem,
}

/// Limits and policies of one partition log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// `segment.bytes`: roll the active segment past this size.
    pub segment_bytes: u64,
    /// `segment.ms`: roll once the active segment's first record is this old.
    pub segment_ms: u64,
    /// `segment.index.bytes`: roll when the offset index reaches this size.
    pub segment_index_bytes: u64,
    /// `index.interval.bytes`: bytes between sparse index entries.
    pub index_interval_bytes: u32,
    /// `retention.ms`: delete segments whose newest record is older; -1 keeps all.
    pub retention_ms: i64,
    /// `retention.bytes`: delete old segments while the log is larger; -1 keeps all.
    pub retention_bytes: i64,
    /// `max.message.bytes`: the largest record batch accepted.
    pub max_message_bytes: u32,
    /// `flush.policy` (Strom), `flush.ms`, `flush.messages`, `flush.bytes`.
    pub flush: FlushPolicy,
    /// `strom.flush.scope`: how a sync is done (`file` or `filesystem`).
    pub flush_scope: FlushScope,
    /// `strom.cache.bytes`: recent batches kept in memory for tailing readers.
    pub cache_bytes_max: usize,
    /// `strom.write.bytes`: the largest single write the log submits.
    pub write_bytes_max: usize,
    /// `strom.writes.inflight`: O_DIRECT writes in flight at once per log.
    pub writes_in_flight_max: usize,
    /// `strom.pending.bytes`: appended but unwritten bytes before appends wait.
    pub pending_bytes_max: usize,
    /// `strom.preallocate.bytes`: the smallest step by which files are grown
    /// ahead of the writer; the step grows with the segment up to
    /// [`crate::limits::PREALLOCATE_STEP_MAX`], which bounds the unused space of an active
    /// partition (and this that of a small one).
    pub preallocate_bytes: u64,
    /// `strom.journal.bytes`: under `flush.policy=always`, a partition with
    /// at most twice this not yet durable makes those bytes durable through
    /// its core's journal (one write per sync round for all such partitions)
    /// and writes its segment file later, in larger writes, once four
    /// times this is unwritten (less with many partitions on a core: see
    /// `log::shares::journal_keep_bytes`); 0 turns the journal off.
    pub journal_bytes: u64,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            segment_index_bytes: 10 << 20,
            index_interval_bytes: 4096,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            max_message_bytes: 1_048_588,
            flush: FlushPolicy::Always,
            flush_scope: FlushScope::Filesystem,
            cache_bytes_max: 8 << 20,
            write_bytes_max: 1 << 20,
            writes_in_flight_max: 4,
            pending_bytes_max: 32 << 20,
            preallocate_bytes: 1 << 20,
            journal_bytes: 64 << 10,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown log config key `{key}`")]
    UnknownKey { key: String },
    #[error("invalid value `{value}` for `{key}`: {reason}")]
    InvalidValue {
        key: String,
        value: String,
        reason: &'static str,
    },
}

/// Every key `LogConfig::set` accepts, for documentation and validation.
pub const LOG_CONFIG_KEYS: &[&str] = &[
    "segment.bytes",
    "segment.ms",
    "segment.index.bytes",
    "index.interval.bytes",
    "retention.ms",
    "retention.bytes",
    "max.message.bytes",
    "flush.policy",
    "flush.ms",
    "flush.messages",
    "flush.bytes",
    "strom.flush.scope",
    "strom.cache.bytes",
    "strom.write.bytes",
    "strom.writes.inflight",
    "strom.pending.bytes",
    "strom.preallocate.bytes",
    "strom.journal.bytes",
];

impl LogConfig {
    /// Sets one setting by its Kafka (or `strom.`) name. On error nothing
    /// changes.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let invalid = |reason| ConfigError::InvalidValue {
            key: key.to_string(),
            value: value.to_string(),
            reason,
        };
        let int = || {
            value
                .trim()
                .parse::<i64>()
                .map_err(|_| invalid("not an integer"))
        };
        let positive = || match int()? {
            v if v > 0 => Ok(v as u64),
            _ => Err(invalid("must be positive")),
        };
        let limit = || match int()? {
            v if v >= -1 => Ok(v),
            _ => Err(invalid("must be -1 (unlimited) or at least 0")),
        };
        match key {
            "segment.bytes" => {
                let v = positive()?;
                if v < 14 || v > i32::MAX as u64 {
                    return Err(invalid("must be between 14 and 2147483647"));
                }
                self.segment_bytes = v;
            }
            "segment.ms" => self.segment_ms = positive()?,
            "segment.index.bytes" => {
                let v = positive()?;
                if v < 8 {
                    return Err(invalid("must hold at least one 8-byte entry"));
                }
                self.segment_index_bytes = v;
            }
            "index.interval.bytes" => {
                self.index_interval_bytes =
                    u32::try_from(positive()?).map_err(|_| invalid("must fit in 32 bits"))?
            }
            "retention.ms" => self.retention_ms = limit()?,
            "retention.bytes" => self.retention_bytes = limit()?,
            "max.message.bytes" => {
                self.max_message_bytes =
                    u32::try_from(positive()?).map_err(|_| invalid("must fit in 31 bits"))?
            }
            "flush.policy" => {
                self.flush = match value.trim() {
                    "always" => FlushPolicy::Always,
                    "never" => FlushPolicy::Never,
                    "interval" => match self.flush {
                        f @ FlushPolicy::Interval { .. } => f,
                        _ => FlushPolicy::Interval {
                            ms: Some(1000),
                            bytes: None,
                        },
                    },
                    _ => return Err(invalid("must be always, interval or never")),
                }
            }
            "flush.ms" | "flush.bytes" | "flush.messages" => {
                let v = int()?;
                if v < 0 {
                    return Err(invalid("must be at least 0"));
                }
                let v = v as u64;
                // Kafka's "never" is Long.MAX_VALUE; 0 ms or 1 message means every append.
                let syncs_every_append = (key == "flush.ms" && v == 0)
                    || (key == "flush.messages" && v <= 1)
                    || (key == "flush.bytes" && v == 0);
                if syncs_every_append {
                    self.flush = FlushPolicy::Always;
                } else if v >= i64::MAX as u64 {
                    if key != "flush.messages" {
                        self.flush = FlushPolicy::Never;
                    }
                } else if key == "flush.messages" {
                    // Counting messages would need the record counts of every
                    // batch on the hot path; a message count above one keeps
                    // the current policy.
                } else {
                    let (mut ms, mut bytes) = match self.flush {
                        FlushPolicy::Interval { ms, bytes } => (ms, bytes),
                        _ => (None, None),
                    };
                    if key == "flush.ms" {
                        ms = Some(v);
                    } else {
                        bytes = Some(v);
                    }
                    self.flush = FlushPolicy::Interval { ms, bytes };
                }
            }
            "strom.flush.scope" => {
                self.flush_scope = match value.trim() {
                    "file" => FlushScope::File,
                    "filesystem" => FlushScope::Filesystem,
                    _ => return Err(invalid("must be file or filesystem")),
                }
            }
            "strom.cache.bytes" => self.cache_bytes_max = int()?.max(0) as usize,
            "strom.write.bytes" => {
                let v = positive()?;
                if v % 4096 != 0 {
                    return Err(invalid("must be a multiple of 4096"));
                }
                self.write_bytes_max = v as usize;
            }
            "strom.writes.inflight" => {
                let v = positive()?;
                if v > 64 {
                    return Err(invalid("must be between 1 and 64"));
                }
                self.writes_in_flight_max = v as usize;
            }
            "strom.pending.bytes" => self.pending_bytes_max = positive()? as usize,
            "strom.preallocate.bytes" => {
                let v = positive()?;
                if v % 4096 != 0 {
                    return Err(invalid("must be a multiple of 4096"));
                }
                self.preallocate_bytes = v;
            }
            "strom.journal.bytes" => {
                let v = int()?;
                if !(0..=crate::limits::JOURNAL_BYTES_MAX as i64).contains(&v) {
                    return Err(invalid("must be between 0 and 8388608"));
                }
                self.journal_bytes = v as u64;
            }
            _ => {
                return Err(ConfigError::UnknownKey {
                    key: key.to_string(),
                })
            }
        }
        Ok(())
    }

    /// Builds a config from defaults and `(key, value)` pairs.
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, ConfigError> {
        let mut config = Self::default();
        for (key, value) in pairs {
            config.set(key, value)?;
        }
        Ok(config)
    }

    /// The value of `key` as Kafka would describe it.
    pub fn get(&self, key: &str) -> Option<String> {
        let (ms, bytes) = match self.flush {
            FlushPolicy::Always => (Some(0), Some(0)),
            FlushPolicy::Interval { ms, bytes } => (ms, bytes),
            FlushPolicy::Never => (None, None),
        };
        let or_max = |v: Option<u64>| v.map_or(i64::MAX.to_string(), |v| v.to_string());
        Some(match key {
            "segment.bytes" => self.segment_bytes.to_string(),
            "segment.ms" => self.segment_ms.to_string(),
            "segment.index.bytes" => self.segment_index_bytes.to_string(),
            "index.interval.bytes" => self.index_interval_bytes.to_string(),
            "retention.ms" => self.retention_ms.to_string(),
            "retention.bytes" => self.retention_bytes.to_string(),
            "max.message.bytes" => self.max_message_bytes.to_string(),
            "flush.policy" => match self.flush {
                FlushPolicy::Always => "always",
                FlushPolicy::Interval { .. } => "interval",
                FlushPolicy::Never => "never",
            }
            .to_string(),
            "flush.ms" => or_max(ms),
            "flush.bytes" => or_max(bytes),
            "flush.messages" => match self.flush {
                FlushPolicy::Always => "1".to_string(),
                _ => i64::MAX.to_string(),
            },
            "strom.flush.scope" => match self.flush_scope {
                FlushScope::File => "file",
                FlushScope::Filesystem => "filesystem",
            }
            .to_string(),
            "strom.cache.bytes" => self.cache_bytes_max.to_string(),
            "strom.write.bytes" => self.write_bytes_max.to_string(),
            "strom.writes.inflight" => self.writes_in_flight_max.to_string(),
            "strom.pending.bytes" => self.pending_bytes_max.to_string(),
            "strom.preallocate.bytes" => self.preallocate_bytes.to_string(),
            "strom.journal.bytes" => self.journal_bytes.to_string(),
            _ => return None,
        })
    }

    /// Relations between settings that the log relies on.
    pub(crate) fn effective(&self) -> Self {
        let mut config = self.clone();
        // A single write must fit under the pending bound or appends of one
        // write's worth would wait forever.
        config.pending_bytes_max = config.pending_bytes_max.max(config.write_bytes_max);
        config.writes_in_flight_max = config.writes_in_flight_max.max(1);
        // Journaled bytes wait in memory: keep them well under the bound.
        config.journal_bytes = config
            .journal_bytes
            .min(config.pending_bytes_max as u64 / 2);
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pairs: &[(&str, &str)], expected: Result<FlushPolicy, ()>) {
        let got = LogConfig::from_pairs(pairs.iter().copied()).map(|c| c.flush);
        match expected {
            Ok(policy) => assert_eq!(got, Ok(policy), "{pairs:?}"),
            Err(()) => assert!(got.is_err(), "{pairs:?} should fail"),
        }
    }

    #[test]
    fn flush_settings_map_to_policies() {
        check(&[], Ok(FlushPolicy::Always));
        check(&[("flush.policy", "never")], Ok(FlushPolicy::Never));
        check(
            &[("flush.policy", "never"), ("flush.ms", "250")],
            Ok(FlushPolicy::Interval {
                ms: Some(250),
                bytes: None,
            }),
        );
        check(
            &[("flush.ms", "100"), ("flush.bytes", "65536")],
            Ok(FlushPolicy::Interval {
                ms: Some(100),
                bytes: Some(65536),
            }),
        );
        check(&[("flush.messages", "1")], Ok(FlushPolicy::Always));
        check(
            &[("flush.policy", "never"), ("flush.ms", "0")],
            Ok(FlushPolicy::Always),
        );
        check(
            &[("flush.ms", "9223372036854775807")],
            Ok(FlushPolicy::Never),
        );
        check(&[("flush.policy", "sometimes")], Err(()));
        check(&[("flush.ms", "-5")], Err(()));
    }

    #[test]
    fn bad_values_name_the_key_and_change_nothing() {
        let mut config = LogConfig::default();
        let err = config.set("segment.bytes", "lots").unwrap_err();
        assert!(err.to_string().contains("segment.bytes"));
        assert_eq!(config, LogConfig::default());
        assert!(matches!(
            config.set("segment.bytez", "1"),
            Err(ConfigError::UnknownKey { .. })
        ));
        assert!(config.set("retention.ms", "-2").is_err());
        assert!(config.set("strom.write.bytes", "1000").is_err());
        config.set("retention.bytes", "-1").unwrap();
        config.set("segment.bytes", "1048576").unwrap();
        assert_eq!(config.segment_bytes, 1 << 20);
    }

    #[test]
    fn every_key_round_trips_through_get() {
        let config = LogConfig::default();
        for key in LOG_CONFIG_KEYS {
            let value = config.get(key).unwrap_or_else(|| panic!("get {key}"));
            let mut copy = config.clone();
            copy.set(key, &value)
                .unwrap_or_else(|e| panic!("set {key}={value}: {e}"));
            assert_eq!(copy.get(key), Some(value), "{key}");
        }
    }
}
