//! A partition on its owning core: the storage log plus what the broker
//! adds around it (idempotent producer state, timestamp type). Everything
//! here runs on the owning core; results are plain `Send` values that hop
//! back to the core serving the connection.

use std::cell::{Cell, RefCell};
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use protocol::batch::{BatchHeader, RecordBatch};

use crate::errors;
use crate::limits::{PRODUCER_RECOVERY_OFFSETS, PRODUCER_RECOVERY_READ_BYTES};
use crate::producer_state::{last_sequence, ProducerTable, SequenceCheck};
use crate::topic_config::{EffectiveConfig, TimestampType};
use storage::{AppendOptions, Log, StorageError};

/// Kafka's ListOffsets special timestamps.
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;

pub struct Partition {
    pub topic: String,
    pub index: i32,
    log: Log,
    producers: RefCell<ProducerTable>,
    timestamp_type: Cell<TimestampType>,
}

/// The answer for one partition of a produce request.
#[derive(Debug, Clone, Copy)]
pub struct ProduceOutcome {
    pub error_code: i16,
    pub base_offset: i64,
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
}

impl ProduceOutcome {
    pub fn error(error_code: i16) -> Self {
        Self {
            error_code,
            base_offset: -1,
            log_append_time_ms: -1,
            log_start_offset: -1,
        }
    }
}

/// The answer for one partition of a fetch.
#[derive(Debug, Clone)]
pub struct FetchOutcome {
    pub error_code: i16,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub records: Bytes,
}

impl FetchOutcome {
    pub fn error(error_code: i16) -> Self {
        Self {
            error_code,
            high_watermark: -1,
            log_start_offset: -1,
            records: Bytes::new(),
        }
    }
}

/// The answer for one partition of a ListOffsets request.
#[derive(Debug, Clone, Copy)]
pub struct OffsetOutcome {
    pub error_code: i16,
    pub timestamp: i64,
    pub offset: i64,
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Rebuilds idempotent producer state from the log's last
/// `PRODUCER_RECOVERY_OFFSETS` offsets, so a producer retrying across a
/// restart is still recognised. Only batch headers are read.
async fn recover_producers(log: &Log) -> Result<ProducerTable, StorageError> {
    let mut table = ProducerTable::default();
    let end = log.next_offset();
    let mut from = end
        .saturating_sub(PRODUCER_RECOVERY_OFFSETS)
        .max(log.start_offset());
    while from < end {
        let result = log.read(from, PRODUCER_RECOVERY_READ_BYTES, end).await?;
        let mut bytes = &result.bytes[..];
        while let Ok(header) = BatchHeader::parse(bytes) {
            if header.producer_id >= 0 && !header.is_control() && !header.is_transactional() {
                let last = last_sequence(header.base_sequence, header.last_offset_delta);
                let append_time = if header.is_log_append_time() {
                    header.max_timestamp
                } else {
                    -1
                };
                table.recover(
                    header.producer_id,
                    header.producer_epoch,
                    header.base_sequence,
                    last,
                    header.base_offset,
                    append_time,
                );
            }
            if header.size() > bytes.len() {
                break;
            }
            bytes = &bytes[header.size()..];
        }
        if result.next_offset <= from {
            break;
        }
        from = result.next_offset;
    }
    Ok(table)
}

impl Partition {
    /// Opens the partition's log in `<data_dir>/<topic>-<index>`.
    pub async fn open(
        data_dir: &Path,
        topic: &str,
        index: i32,
        config: &EffectiveConfig,
    ) -> Result<Rc<Partition>, StorageError> {
        let dir = data_dir.join(format!("{topic}-{index}"));
        let log = Log::open(dir, config.log.clone()).await?;
        let producers = recover_producers(&log).await?;
        Ok(Rc::new(Partition {
            topic: topic.to_string(),
            index,
            log,
            producers: RefCell::new(producers),
            timestamp_type: Cell::new(config.timestamp_type),
        }))
    }

    pub fn apply_config(&self, config: &EffectiveConfig) {
        self.log.set_config(config.log.clone());
        self.timestamp_type.set(config.timestamp_type);
    }

    /// The partition's log, for metrics.
    pub fn log(&self) -> &Log {
        &self.log
    }

    pub fn high_watermark(&self) -> i64 {
        self.log.next_offset() as i64
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log.start_offset() as i64
    }

    /// Appends one validated batch; with `acks == -1` returns once durable.
    pub async fn produce(&self, batch: RecordBatch, acks: i16) -> ProduceOutcome {
        let header = *batch.header();
        let idempotent = header.producer_id >= 0 && !header.is_transactional();
        let first_sequence = header.base_sequence;
        let last_seq = last_sequence(first_sequence, header.last_offset_delta);
        let mut reservation = None;
        if idempotent {
            let check = self.producers.borrow_mut().check(
                header.producer_id,
                header.producer_epoch,
                first_sequence,
                last_seq,
            );
            match check {
                SequenceCheck::Append {
                    previous_last_sequence,
                } => reservation = Some(previous_last_sequence),
                SequenceCheck::Duplicate {
                    base_offset,
                    log_append_time_ms,
                } => {
                    return ProduceOutcome {
                        error_code: errors::NONE,
                        base_offset,
                        log_append_time_ms,
                        log_start_offset: self.log_start_offset(),
                    }
                }
                SequenceCheck::Reject(code) => return ProduceOutcome::error(code),
            }
        } else if header.is_transactional() {
            return ProduceOutcome::error(errors::INVALID_TXN_STATE);
        }
        let log_append_time_ms = match self.timestamp_type.get() {
            TimestampType::LogAppendTime => Some(now_ms()),
            TimestampType::CreateTime => None,
        };
        let options = AppendOptions {
            log_append_time_ms,
            ..AppendOptions::default()
        };
        // No await between the sequence check and the append call: appends
        // of one partition are ordered as they are called.
        let appended = self.log.append_batch(batch, options).await;
        let info = match appended {
            Ok(info) => info,
            Err(error) => {
                if let Some(previous) = reservation {
                    self.producers.borrow_mut().append_failed(
                        header.producer_id,
                        last_seq,
                        previous,
                    );
                }
                tracing::warn!(topic = %self.topic, partition = self.index, %error, "append failed");
                return ProduceOutcome::error(errors::storage_error_code(&error));
            }
        };
        let log_append_time_ms = info.log_append_time_ms.unwrap_or(-1);
        if reservation.is_some() {
            self.producers.borrow_mut().appended(
                header.producer_id,
                first_sequence,
                last_seq,
                info.base_offset as i64,
                log_append_time_ms,
            );
        }
        if acks == -1 {
            if let Err(error) = self.log.wait_durable(info.last_offset).await {
                tracing::error!(topic = %self.topic, partition = self.index, %error, "sync failed");
                return ProduceOutcome::error(errors::storage_error_code(&error));
            }
        }
        ProduceOutcome {
            error_code: errors::NONE,
            base_offset: info.base_offset as i64,
            log_append_time_ms,
            log_start_offset: self.log_start_offset(),
        }
    }

    /// Reads up to `max_bytes` (the first batch whole even if larger) from
    /// `fetch_offset`, up to the high watermark.
    pub async fn read(&self, fetch_offset: i64, max_bytes: usize) -> FetchOutcome {
        let high_watermark = self.high_watermark();
        let log_start_offset = self.log_start_offset();
        if fetch_offset < log_start_offset || fetch_offset > high_watermark {
            return FetchOutcome {
                error_code: errors::OFFSET_OUT_OF_RANGE,
                high_watermark,
                log_start_offset,
                records: Bytes::new(),
            };
        }
        if fetch_offset == high_watermark {
            return FetchOutcome {
                error_code: errors::NONE,
                high_watermark,
                log_start_offset,
                records: Bytes::new(),
            };
        }
        match self
            .log
            .read(fetch_offset as u64, max_bytes, high_watermark as u64)
            .await
        {
            Ok(result) => FetchOutcome {
                error_code: errors::NONE,
                high_watermark,
                log_start_offset,
                records: result.bytes,
            },
            Err(error) => FetchOutcome {
                error_code: errors::storage_error_code(&error),
                high_watermark,
                log_start_offset,
                records: Bytes::new(),
            },
        }
    }

    /// Resolves once every offset up to `last_offset` is durable (the
    /// group coordinator answers commits only then).
    pub async fn wait_durable(&self, last_offset: i64) -> Result<(), i16> {
        self.log
            .wait_durable(last_offset.max(0) as u64)
            .await
            .map_err(|error| errors::storage_error_code(&error))
    }

    /// Moves the log start offset forward; segments wholly below it go.
    pub async fn advance_start_offset(&self, offset: i64) -> Result<(), i16> {
        self.log
            .advance_start_offset(offset.max(0) as u64)
            .await
            .map(|_| ())
            .map_err(|error| errors::storage_error_code(&error))
    }

    /// Resolves once the log holds an offset past `offset`.
    pub async fn wait_for_append(&self, offset: i64) {
        self.log.wait_for_append(offset.max(0) as u64).await
    }

    pub async fn list_offset(&self, timestamp: i64) -> OffsetOutcome {
        let ok = |timestamp, offset| OffsetOutcome {
            error_code: errors::NONE,
            timestamp,
            offset,
        };
        match timestamp {
            LATEST_TIMESTAMP => ok(-1, self.high_watermark()),
            EARLIEST_TIMESTAMP => ok(-1, self.log_start_offset()),
            MAX_TIMESTAMP => match self.log.max_timestamp() {
                Some((timestamp, offset)) => ok(timestamp, offset as i64),
                None => ok(-1, -1),
            },
            t if t >= 0 => match self.log.offset_for_timestamp(t).await {
                Ok(Some(offset)) => ok(t, offset as i64),
                Ok(None) => ok(-1, -1),
                Err(error) => OffsetOutcome {
                    error_code: errors::storage_error_code(&error),
                    timestamp: -1,
                    offset: -1,
                },
            },
            _ => OffsetOutcome {
                error_code: errors::INVALID_REQUEST,
                timestamp: -1,
                offset: -1,
            },
        }
    }

    /// Closes the log cleanly (synced and checkpointed, so the next start
    /// scans nothing).
    pub async fn close(&self) {
        if let Err(error) = self.log.close().await {
            tracing::error!(topic = %self.topic, partition = self.index, %error, "closing log failed");
        }
    }

    /// Stops the log and removes its directory.
    pub async fn delete(&self) {
        if let Err(error) = self.log.delete().await {
            tracing::error!(topic = %self.topic, partition = self.index, %error, "deleting log failed");
        }
    }

    /// Deletes segments past the retention limits.
    pub async fn enforce_retention(&self, now_ms: i64) {
        match self.log.enforce_retention(now_ms).await {
            Ok(outcome) if outcome.segments_deleted > 0 => {
                tracing::info!(topic = %self.topic, partition = self.index, segments = outcome.segments_deleted, bytes = outcome.bytes_deleted, "retention deleted segments");
            }
            Ok(_) => {}
            Err(error) => {
                tracing::error!(topic = %self.topic, partition = self.index, %error, "retention failed")
            }
        }
    }
}
