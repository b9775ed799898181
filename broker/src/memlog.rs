//! Temporary in-memory stand-in with the exact API of the `storage` crate's
//! `Log`, used only until that crate lands; the broker names it through
//! `crate::storage`, so the swap is one line. Nothing here is durable.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

use bytes::Bytes;

#[derive(Debug, Clone, PartialEq)]
pub enum FlushPolicy {
    Always,
    Interval { ms: Option<u64>, bytes: Option<u64> },
    Never,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    pub segment_bytes: u64,
    pub segment_ms: u64,
    pub index_interval_bytes: u32,
    pub retention_ms: i64,
    pub retention_bytes: i64,
    pub flush: FlushPolicy,
    pub max_message_bytes: u32,
    pub cache_bytes_max: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            index_interval_bytes: 4096,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            flush: FlushPolicy::Always,
            max_message_bytes: 1_048_588,
            cache_bytes_max: 64 << 20,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown log config key {key}")]
    UnknownKey { key: String },
    #[error("invalid value {value:?} for {key}: {reason}")]
    InvalidValue {
        key: String,
        value: String,
        reason: String,
    },
}

fn parse<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    value
        .trim()
        .parse::<T>()
        .map_err(|e| ConfigError::InvalidValue {
            key: key.to_string(),
            value: value.to_string(),
            reason: e.to_string(),
        })
}

impl LogConfig {
    pub fn set(&mut self, kafka_key: &str, value: &str) -> Result<(), ConfigError> {
        match kafka_key {
            "segment.bytes" => self.segment_bytes = parse(kafka_key, value)?,
            "segment.ms" => self.segment_ms = parse(kafka_key, value)?,
            "index.interval.bytes" => self.index_interval_bytes = parse(kafka_key, value)?,
            "retention.ms" => self.retention_ms = parse(kafka_key, value)?,
            "retention.bytes" => self.retention_bytes = parse(kafka_key, value)?,
            "max.message.bytes" => self.max_message_bytes = parse(kafka_key, value)?,
            "flush.policy" => {
                self.flush = match value {
                    "always" => FlushPolicy::Always,
                    "interval" => FlushPolicy::Interval {
                        ms: None,
                        bytes: None,
                    },
                    "never" => FlushPolicy::Never,
                    _ => {
                        return Err(ConfigError::InvalidValue {
                            key: kafka_key.to_string(),
                            value: value.to_string(),
                            reason: "expected always, interval or never".to_string(),
                        })
                    }
                }
            }
            "flush.ms" | "flush.messages" => {
                let _: u64 = parse(kafka_key, value)?;
            }
            _ => {
                return Err(ConfigError::UnknownKey {
                    key: kafka_key.to_string(),
                })
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Default)]
pub struct AppendOptions {
    pub leader_epoch: i32,
    pub log_append_time_ms: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct AppendInfo {
    pub base_offset: u64,
    pub last_offset: u64,
    pub max_timestamp: i64,
    pub log_append_time_ms: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct ReadResult {
    pub bytes: Bytes,
    pub next_offset: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("offset {offset} out of range [{start}, {end}]")]
    OffsetOutOfRange { offset: u64, start: u64, end: u64 },
    #[error("invalid batch: {0}")]
    InvalidBatch(#[from] protocol::batch::BatchError),
}

struct Stored {
    base_offset: u64,
    last_offset: u64,
    max_timestamp: i64,
    bytes: Bytes,
}

#[derive(Default)]
struct Inner {
    batches: Vec<Stored>,
    next_offset: u64,
    waiters: Vec<std::task::Waker>,
}

#[derive(Clone)]
pub struct Log {
    inner: Rc<RefCell<Inner>>,
}

impl Log {
    pub async fn open(_dir: PathBuf, _config: LogConfig) -> Result<Log, StorageError> {
        Ok(Log {
            inner: Rc::new(RefCell::new(Inner::default())),
        })
    }

    pub async fn append(
        &self,
        batch: Bytes,
        opts: AppendOptions,
    ) -> Result<AppendInfo, StorageError> {
        let header = protocol::batch::validate(&batch)?;
        let mut inner = self.inner.borrow_mut();
        let base_offset = inner.next_offset;
        let last_offset = base_offset + header.last_offset_delta as u64;
        let mut bytes = batch.to_vec();
        protocol::batch::set_base_offset(&mut bytes, base_offset as i64);
        protocol::batch::set_partition_leader_epoch(&mut bytes, opts.leader_epoch);
        let mut max_timestamp = header.max_timestamp;
        if let Some(time) = opts.log_append_time_ms {
            protocol::batch::set_log_append_time(&mut bytes, time);
            max_timestamp = time;
        }
        inner.batches.push(Stored {
            base_offset,
            last_offset,
            max_timestamp,
            bytes: Bytes::from(bytes),
        });
        inner.next_offset = last_offset + 1;
        for waker in inner.waiters.drain(..) {
            waker.wake();
        }
        Ok(AppendInfo {
            base_offset,
            last_offset,
            max_timestamp,
            log_append_time_ms: opts.log_append_time_ms,
        })
    }

    pub async fn wait_durable(&self, _last_offset: u64) -> Result<(), StorageError> {
        Ok(())
    }

    pub async fn read(
        &self,
        from_offset: u64,
        max_bytes: usize,
        upper_bound: u64,
    ) -> Result<ReadResult, StorageError> {
        let inner = self.inner.borrow();
        if from_offset > inner.next_offset {
            return Err(StorageError::OffsetOutOfRange {
                offset: from_offset,
                start: 0,
                end: inner.next_offset,
            });
        }
        let mut out = Vec::new();
        let mut next_offset = from_offset;
        for stored in inner
            .batches
            .iter()
            .filter(|b| b.last_offset >= from_offset && b.base_offset < upper_bound)
        {
            if !out.is_empty() && out.len() + stored.bytes.len() > max_bytes {
                break;
            }
            out.extend_from_slice(&stored.bytes);
            next_offset = stored.last_offset + 1;
        }
        Ok(ReadResult {
            bytes: Bytes::from(out),
            next_offset,
        })
    }

    pub async fn wait_for_append(&self, offset: u64) {
        std::future::poll_fn(|cx| {
            let mut inner = self.inner.borrow_mut();
            if inner.next_offset > offset {
                std::task::Poll::Ready(())
            } else {
                inner.waiters.push(cx.waker().clone());
                std::task::Poll::Pending
            }
        })
        .await
    }

    pub fn next_offset(&self) -> u64 {
        self.inner.borrow().next_offset
    }

    pub fn start_offset(&self) -> u64 {
        0
    }

    pub async fn offset_for_timestamp(
        &self,
        timestamp_ms: i64,
    ) -> Result<Option<u64>, StorageError> {
        let inner = self.inner.borrow();
        for stored in &inner.batches {
            if stored.max_timestamp < timestamp_ms {
                continue;
            }
            let batch = protocol::batch::RecordBatch::new(stored.bytes.clone())?;
            if let Ok(records) = batch.records() {
                for record in records.flatten() {
                    if record.timestamp >= timestamp_ms {
                        return Ok(Some(record.offset as u64));
                    }
                }
            }
            return Ok(Some(stored.base_offset));
        }
        Ok(None)
    }

    pub fn max_timestamp(&self) -> Option<(i64, u64)> {
        let inner = self.inner.borrow();
        inner
            .batches
            .iter()
            .map(|b| (b.max_timestamp, b.last_offset))
            .fold(None, |best: Option<(i64, u64)>, (ts, off)| match best {
                Some((best_ts, _)) if best_ts >= ts => best,
                _ => Some((ts, off)),
            })
    }

    pub fn set_config(&self, _config: LogConfig) {}

    pub async fn flush(&self) -> Result<(), StorageError> {
        Ok(())
    }

    pub async fn close(self) -> Result<(), StorageError> {
        Ok(())
    }

    pub async fn delete(self) -> Result<(), StorageError> {
        Ok(())
    }
}
