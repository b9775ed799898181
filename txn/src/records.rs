//! The records of `__transaction_state`, in Kafka's formats. Each record is
//! one transactional id's whole state, keyed by the id, so the compacted
//! topic keeps each id's latest; a null value is a tombstone (the id
//! expired).
//!
//! - Key, TransactionLogKey version 0: `version: i16`, `transactional_id:
//!   STRING` (i16 length, UTF-8).
//! - Value, TransactionLogValue version 0 (what Kafka writes while the
//!   cluster's `transaction.version` is 0): `version: i16`, `producer_id:
//!   i64`, `producer_epoch: i16`, `transaction_timeout_ms: i32`,
//!   `transaction_status: i8` (the [`TxnState`] id),
//!   `transaction_partitions`: a nullable array (i32 count, -1 null) of
//!   `{topic: STRING, partition_ids: [i32]}`,
//!   `transaction_last_update_timestamp_ms: i64`,
//!   `transaction_start_timestamp_ms: i64`.
//! - Value version 1 (from `transaction.version` 1) has the same fields in
//!   Kafka's flexible encoding (unsigned-varint lengths of length + 1, 0 for
//!   null, and tagged fields after each struct) and three tagged fields at
//!   the end: tag 0 `previous_producer_id: i64` (default -1), tag 1
//!   `next_producer_id: i64` (default -1), tag 2
//!   `client_transaction_version: i16` (default 0). A tagged field equal to
//!   its default is not written; unknown tags are skipped.
//!
//! Kafka writes the partitions of an Empty transaction as null and ignores
//! whatever an Empty value holds; so does this module. Decoding never
//! panics: damaged bytes are a [`RecordError`].

use std::collections::BTreeSet;

use crate::limits::NO_PRODUCER_ID;
use crate::state::TxnState;
use crate::TopicPartition;

/// TransactionLogKey's only version.
pub const KEY_VERSION: i16 = 0;

const TAG_PREVIOUS_PRODUCER_ID: u32 = 0;
const TAG_NEXT_PRODUCER_ID: u32 = 1;
const TAG_CLIENT_TRANSACTION_VERSION: u32 = 2;

/// A TransactionLogValue version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum ValueVersion {
    /// Fixed-width encoding; what Kafka writes at `transaction.version` 0.
    #[default]
    V0,
    /// Flexible encoding with tagged fields; from `transaction.version` 1.
    V1,
}

impl ValueVersion {
    pub const fn number(self) -> i16 {
        match self {
            ValueVersion::V0 => 0,
            ValueVersion::V1 => 1,
        }
    }

    pub const fn from_number(number: i16) -> Option<ValueVersion> {
        match number {
            0 => Some(ValueVersion::V0),
            1 => Some(ValueVersion::V1),
            _ => None,
        }
    }
}

/// The fields of a TransactionLogValue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnLogValue {
    pub producer_id: i64,
    /// Version 1's tag 0; -1 when absent.
    pub previous_producer_id: i64,
    /// Version 1's tag 1; -1 when absent.
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TopicPartition>,
    pub last_update_ms: i64,
    pub start_ms: i64,
    /// Version 1's tag 2; 0 when absent.
    pub client_transaction_version: i16,
}

/// One decoded record of `__transaction_state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnRecord {
    Value {
        transactional_id: String,
        value: TxnLogValue,
    },
    /// The id was removed.
    Tombstone { transactional_id: String },
}

/// Why a record does not encode or decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("the record ends inside {field}")]
    Truncated { field: &'static str },
    #[error("unknown TransactionLogKey version {version}")]
    UnknownKeyVersion { version: i16 },
    #[error("unknown TransactionLogValue version {version}")]
    UnknownValueVersion { version: i16 },
    #[error("{field} is null but may not be")]
    Null { field: &'static str },
    #[error("{field} has the negative length {length}")]
    NegativeLength { field: &'static str, length: i32 },
    #[error("{field} is not UTF-8")]
    InvalidUtf8 { field: &'static str },
    #[error("{field} counts {count} elements, more than the record holds")]
    CountTooLarge { field: &'static str, count: usize },
    #[error("{field} has a varint longer than five bytes")]
    VarintTooLong { field: &'static str },
    #[error("unknown transaction status {id}")]
    UnknownState { id: i8 },
    #[error("tagged field {tag} has {size} bytes, not {expected}")]
    TaggedFieldSize {
        tag: u32,
        size: usize,
        expected: usize,
    },
    #[error("{count} bytes follow the record")]
    TrailingBytes { count: usize },
    #[error("{field} is {length} bytes or elements, more than its encoding holds")]
    TooLong { field: &'static str, length: usize },
    #[error("an Empty transaction has partitions")]
    PartitionsInEmpty,
    #[error("{state} is never written to the log")]
    StateNotInLog { state: TxnState },
}

/// Appends fields in one value version's encoding.
struct Writer {
    out: Vec<u8>,
    flexible: bool,
}

impl Writer {
    fn uvarint(&mut self, mut value: u32) {
        while value >= 0x80 {
            self.out.push((value as u8 & 0x7f) | 0x80);
            value >>= 7;
        }
        self.out.push(value as u8);
    }

    /// A length: fixed-width before version 1 (`wide`: i32, else i16),
    /// an unsigned varint of length + 1 from version 1.
    fn length(
        &mut self,
        field: &'static str,
        length: usize,
        wide: bool,
    ) -> Result<(), RecordError> {
        let too_long = RecordError::TooLong { field, length };
        if self.flexible {
            let n = u32::try_from(length).ok().and_then(|n| n.checked_add(1));
            self.uvarint(n.ok_or(too_long)?);
        } else if wide {
            let n = i32::try_from(length).map_err(|_| too_long)?;
            self.out.extend_from_slice(&n.to_be_bytes());
        } else {
            let n = i16::try_from(length).map_err(|_| too_long)?;
            self.out.extend_from_slice(&n.to_be_bytes());
        }
        Ok(())
    }

    fn null_array(&mut self) {
        if self.flexible {
            self.uvarint(0);
        } else {
            self.out.extend_from_slice(&(-1i32).to_be_bytes());
        }
    }

    /// A STRING: Kafka refuses longer than i16::MAX bytes in both encodings.
    fn string(&mut self, field: &'static str, value: &str) -> Result<(), RecordError> {
        if value.len() > i16::MAX as usize {
            return Err(RecordError::TooLong {
                field,
                length: value.len(),
            });
        }
        self.length(field, value.len(), false)?;
        self.out.extend_from_slice(value.as_bytes());
        Ok(())
    }

    /// No tagged fields (flexible structs only).
    fn no_tags(&mut self) {
        if self.flexible {
            self.uvarint(0);
        }
    }
}

/// The key of `transactional_id`'s records.
pub fn encode_key(transactional_id: &str) -> Result<Vec<u8>, RecordError> {
    let mut w = Writer {
        out: Vec::with_capacity(4 + transactional_id.len()),
        flexible: false,
    };
    w.out.extend_from_slice(&KEY_VERSION.to_be_bytes());
    w.string("transactional_id", transactional_id)?;
    Ok(w.out)
}

/// `value` as a TransactionLogValue of `version`.
pub fn encode_value(value: &TxnLogValue, version: ValueVersion) -> Result<Vec<u8>, RecordError> {
    if value.state == TxnState::Empty && !value.partitions.is_empty() {
        return Err(RecordError::PartitionsInEmpty);
    }
    let topics_bytes: usize = value.partitions.iter().map(|(t, _)| t.len() + 8).sum();
    let mut w = Writer {
        out: Vec::with_capacity(64 + topics_bytes),
        flexible: version == ValueVersion::V1,
    };
    w.out.extend_from_slice(&version.number().to_be_bytes());
    w.out.extend_from_slice(&value.producer_id.to_be_bytes());
    w.out.extend_from_slice(&value.producer_epoch.to_be_bytes());
    w.out.extend_from_slice(&value.timeout_ms.to_be_bytes());
    w.out.push(value.state.id() as u8);
    if value.state == TxnState::Empty {
        w.null_array();
    } else {
        let topics = group_by_topic(&value.partitions);
        w.length("transaction_partitions", topics.len(), true)?;
        for (topic, partitions) in topics {
            w.string("topic", topic)?;
            w.length("partition_ids", partitions.len(), true)?;
            for partition in partitions {
                w.out.extend_from_slice(&partition.to_be_bytes());
            }
            w.no_tags();
        }
    }
    w.out.extend_from_slice(&value.last_update_ms.to_be_bytes());
    w.out.extend_from_slice(&value.start_ms.to_be_bytes());
    if w.flexible {
        let mut tags: Vec<(u32, Vec<u8>)> = Vec::new();
        if value.previous_producer_id != NO_PRODUCER_ID {
            let bytes = value.previous_producer_id.to_be_bytes().to_vec();
            tags.push((TAG_PREVIOUS_PRODUCER_ID, bytes));
        }
        if value.next_producer_id != NO_PRODUCER_ID {
            let bytes = value.next_producer_id.to_be_bytes().to_vec();
            tags.push((TAG_NEXT_PRODUCER_ID, bytes));
        }
        if value.client_transaction_version != 0 {
            let bytes = value.client_transaction_version.to_be_bytes().to_vec();
            tags.push((TAG_CLIENT_TRANSACTION_VERSION, bytes));
        }
        w.uvarint(tags.len() as u32);
        for (tag, bytes) in tags {
            w.uvarint(tag);
            w.uvarint(bytes.len() as u32);
            w.out.extend_from_slice(&bytes);
        }
    }
    Ok(w.out)
}

/// The partitions by topic, in order (the set is ordered by topic first).
fn group_by_topic(partitions: &BTreeSet<TopicPartition>) -> Vec<(&str, Vec<i32>)> {
    let mut topics: Vec<(&str, Vec<i32>)> = Vec::new();
    for (topic, partition) in partitions {
        match topics.last_mut() {
            Some((last, ids)) if *last == topic.as_str() => ids.push(*partition),
            _ => topics.push((topic.as_str(), vec![*partition])),
        }
    }
    topics
}

/// Reads fields in one version's encoding; every read is bounds-checked.
struct Reader<'a> {
    bytes: &'a [u8],
    flexible: bool,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], RecordError> {
        if self.bytes.len() < n {
            return Err(RecordError::Truncated { field });
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], RecordError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }

    fn i8(&mut self, field: &'static str) -> Result<i8, RecordError> {
        Ok(i8::from_be_bytes(self.array(field)?))
    }

    fn i16(&mut self, field: &'static str) -> Result<i16, RecordError> {
        Ok(i16::from_be_bytes(self.array(field)?))
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, RecordError> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    fn i64(&mut self, field: &'static str) -> Result<i64, RecordError> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    fn uvarint(&mut self, field: &'static str) -> Result<u32, RecordError> {
        let mut value = 0u32;
        for shift in (0..35).step_by(7) {
            let byte = self.take(1, field)?[0];
            // The fifth byte may carry only the top four bits.
            if shift == 28 && byte > 0x0f {
                return Err(RecordError::VarintTooLong { field });
            }
            value |= u32::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(RecordError::VarintTooLong { field })
    }

    /// A length; `None` for null.
    fn length(&mut self, field: &'static str, wide: bool) -> Result<Option<usize>, RecordError> {
        if self.flexible {
            let n = self.uvarint(field)?;
            return Ok(n.checked_sub(1).map(|n| n as usize));
        }
        let n = if wide {
            self.i32(field)?
        } else {
            i32::from(self.i16(field)?)
        };
        match n {
            -1 => Ok(None),
            n if n < 0 => Err(RecordError::NegativeLength { field, length: n }),
            n => Ok(Some(n as usize)),
        }
    }

    fn string(&mut self, field: &'static str) -> Result<String, RecordError> {
        let len = self
            .length(field, false)?
            .ok_or(RecordError::Null { field })?;
        let bytes = self.take(len, field)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| RecordError::InvalidUtf8 { field })
    }

    /// An array's element count, `None` for null. Every element takes at
    /// least `element_bytes_min`: a count beyond what is left is a damaged
    /// record, not an allocation to make.
    fn array_len(
        &mut self,
        field: &'static str,
        element_bytes_min: usize,
    ) -> Result<Option<usize>, RecordError> {
        let len = self.length(field, true)?;
        if let Some(count) = len {
            if count.saturating_mul(element_bytes_min) > self.bytes.len() {
                return Err(RecordError::CountTooLarge { field, count });
            }
        }
        Ok(len)
    }

    /// A struct's tagged fields (flexible versions only): `known` takes a
    /// tag and its bytes and says whether it knew the tag; others are
    /// skipped, as Kafka skips tags newer than its schema.
    fn tagged_fields(
        &mut self,
        mut known: impl FnMut(u32, &[u8]) -> Result<bool, RecordError>,
    ) -> Result<(), RecordError> {
        if !self.flexible {
            return Ok(());
        }
        let count = self.uvarint("tagged fields")?;
        for _ in 0..count {
            let tag = self.uvarint("tag")?;
            let size = self.uvarint("tagged field size")? as usize;
            let bytes = self.take(size, "tagged field")?;
            known(tag, bytes)?;
        }
        Ok(())
    }

    fn end(&self) -> Result<(), RecordError> {
        match self.bytes.len() {
            0 => Ok(()),
            count => Err(RecordError::TrailingBytes { count }),
        }
    }
}

/// The transactional id of a record's key.
pub fn decode_key(bytes: &[u8]) -> Result<String, RecordError> {
    let mut r = Reader {
        bytes,
        flexible: false,
    };
    let version = r.i16("key version")?;
    if version != KEY_VERSION {
        return Err(RecordError::UnknownKeyVersion { version });
    }
    let transactional_id = r.string("transactional_id")?;
    r.end()?;
    Ok(transactional_id)
}

/// A TransactionLogValue of any version Kafka writes.
pub fn decode_value(bytes: &[u8]) -> Result<TxnLogValue, RecordError> {
    let mut r = Reader {
        bytes,
        flexible: false,
    };
    let number = r.i16("value version")?;
    let version = ValueVersion::from_number(number)
        .ok_or(RecordError::UnknownValueVersion { version: number })?;
    r.flexible = version == ValueVersion::V1;
    let producer_id = r.i64("producer_id")?;
    let producer_epoch = r.i16("producer_epoch")?;
    let timeout_ms = r.i32("transaction_timeout_ms")?;
    let id = r.i8("transaction_status")?;
    let state = TxnState::from_id(id).ok_or(RecordError::UnknownState { id })?;
    let mut partitions = BTreeSet::new();
    // Each topic takes at least its string length and its array length.
    let topic_bytes_min = if r.flexible { 3 } else { 6 };
    let topics = r.array_len("transaction_partitions", topic_bytes_min)?;
    for _ in 0..topics.unwrap_or(0) {
        let topic = r.string("topic")?;
        let ids = r.array_len("partition_ids", 4)?.ok_or(RecordError::Null {
            field: "partition_ids",
        })?;
        for _ in 0..ids {
            partitions.insert((topic.clone(), r.i32("partition_ids")?));
        }
        r.tagged_fields(|_, _| Ok(false))?;
    }
    let last_update_ms = r.i64("transaction_last_update_timestamp_ms")?;
    let start_ms = r.i64("transaction_start_timestamp_ms")?;
    let mut value = TxnLogValue {
        producer_id,
        previous_producer_id: NO_PRODUCER_ID,
        next_producer_id: NO_PRODUCER_ID,
        producer_epoch,
        timeout_ms,
        state,
        partitions,
        last_update_ms,
        start_ms,
        client_transaction_version: 0,
    };
    r.tagged_fields(|tag, bytes| {
        let sized = |expected: usize| {
            if bytes.len() == expected {
                Ok(())
            } else {
                Err(RecordError::TaggedFieldSize {
                    tag,
                    size: bytes.len(),
                    expected,
                })
            }
        };
        match tag {
            TAG_PREVIOUS_PRODUCER_ID => {
                sized(8)?;
                value.previous_producer_id = i64::from_be_bytes(bytes.try_into().unwrap_or([0; 8]));
            }
            TAG_NEXT_PRODUCER_ID => {
                sized(8)?;
                value.next_producer_id = i64::from_be_bytes(bytes.try_into().unwrap_or([0; 8]));
            }
            TAG_CLIENT_TRANSACTION_VERSION => {
                sized(2)?;
                value.client_transaction_version =
                    i16::from_be_bytes(bytes.try_into().unwrap_or([0; 2]));
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    r.end()?;
    // Kafka ignores whatever an Empty value says its partitions are.
    if value.state == TxnState::Empty {
        value.partitions.clear();
    }
    Ok(value)
}

/// One record of `__transaction_state`; `value` `None` is a tombstone.
pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<TxnRecord, RecordError> {
    let transactional_id = decode_key(key)?;
    Ok(match value {
        None => TxnRecord::Tombstone { transactional_id },
        Some(bytes) => TxnRecord::Value {
            transactional_id,
            value: decode_value(bytes)?,
        },
    })
}

#[cfg(test)]
mod tests;
