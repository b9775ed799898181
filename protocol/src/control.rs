//! Transaction markers: the control batches a partition leader writes when
//! a transaction ends (Kafka's `EndTransactionMarker`). A marker batch is
//! transactional and control (attributes bits 4 and 5), uncompressed, with
//! the producer's id and epoch, no sequence (-1), and one record whose key
//! is the control record key (version i16 = 0, type i16: 0 abort,
//! 1 commit) and whose value is the marker (version i16 = 0, the
//! coordinator epoch i32). Consumers skip control batches themselves.

use bytes::Bytes;

use crate::batch::{
    build, set_producer, BatchHeader, Records, ATTR_CONTROL, ATTR_TRANSACTIONAL, HEADER_LEN,
};

/// How a transaction ended, as its marker says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Abort,
    Commit,
}

impl Marker {
    pub fn from_commit(commit: bool) -> Marker {
        if commit {
            Marker::Commit
        } else {
            Marker::Abort
        }
    }

    fn control_type(self) -> i16 {
        match self {
            Marker::Abort => 0,
            Marker::Commit => 1,
        }
    }
}

/// The control batch ending `producer_id`'s transaction at `epoch`, with
/// base offset 0 (the log sets it) and `timestamp_ms` as its time.
pub fn marker_batch(
    producer_id: i64,
    epoch: i16,
    coordinator_epoch: i32,
    marker: Marker,
    timestamp_ms: i64,
) -> Vec<u8> {
    let mut key = Vec::with_capacity(4);
    key.extend_from_slice(&0i16.to_be_bytes());
    key.extend_from_slice(&marker.control_type().to_be_bytes());
    let mut value = Vec::with_capacity(6);
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&coordinator_epoch.to_be_bytes());
    let record = build::NewRecord {
        key: Some(key),
        value: Some(value),
        headers: Vec::new(),
        timestamp_delta: 0,
    };
    let (body, _) = build::records_body(std::slice::from_ref(&record));
    let mut batch = build::with_body(
        timestamp_ms,
        timestamp_ms,
        1,
        0,
        ATTR_TRANSACTIONAL | ATTR_CONTROL,
        &body,
    );
    set_producer(&mut batch, producer_id, epoch, true);
    batch
}

/// A transaction marker as stored: how the transaction ended and the
/// epoch of the coordinator that wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndMarker {
    pub marker: Marker,
    pub coordinator_epoch: i32,
}

/// Which marker a control batch holds: `None` when `batch` (a whole batch,
/// header first) is not a control batch or its first record's key is not
/// a control record key Kafka defines.
pub fn marker_of(batch: &[u8]) -> Option<Marker> {
    end_marker_of(batch).map(|end| end.marker)
}

/// The marker a control batch holds with its coordinator epoch (-1 when
/// the record carries no readable value); `None` as for [`marker_of`].
pub fn end_marker_of(batch: &[u8]) -> Option<EndMarker> {
    let header = BatchHeader::parse(batch).ok()?;
    if !header.is_control() || header.size() > batch.len() || header.record_count < 1 {
        return None;
    }
    let body = Bytes::copy_from_slice(&batch[HEADER_LEN..header.size()]);
    let mut records = Records::new(body, header.base_offset, header.base_timestamp, 1);
    let record = records.next()?.ok()?;
    let key = record.key?;
    if key.len() < 4 || i16::from_be_bytes([key[0], key[1]]) < 0 {
        return None;
    }
    let marker = match i16::from_be_bytes([key[2], key[3]]) {
        0 => Marker::Abort,
        1 => Marker::Commit,
        _ => return None,
    };
    let coordinator_epoch = match record.value.as_deref() {
        Some([_, _, a, b, c, d, ..]) => i32::from_be_bytes([*a, *b, *c, *d]),
        _ => -1,
    };
    Some(EndMarker {
        marker,
        coordinator_epoch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::validate;

    #[test]
    fn a_marker_batch_is_a_valid_transactional_control_batch_read_back_as_its_marker() {
        for marker in [Marker::Abort, Marker::Commit] {
            let batch = marker_batch(42, 7, 3, marker, 1_700_000_000_000);
            let header = validate(&batch).expect("valid batch");
            assert!(header.is_control() && header.is_transactional());
            assert_eq!(
                (
                    header.producer_id,
                    header.producer_epoch,
                    header.base_sequence
                ),
                (42, 7, -1)
            );
            assert_eq!((header.record_count, header.last_offset_delta), (1, 0));
            assert_eq!(marker_of(&batch), Some(marker));
            assert_eq!(
                end_marker_of(&batch),
                Some(EndMarker {
                    marker,
                    coordinator_epoch: 3
                })
            );
        }
    }

    #[test]
    fn a_plain_batch_or_a_damaged_one_has_no_marker() {
        let plain = build::batch(0, &[build::NewRecord::default()]);
        assert_eq!(marker_of(&plain), None);
        let marker = marker_batch(1, 0, 0, Marker::Commit, 0);
        assert_eq!(marker_of(&marker[..HEADER_LEN]), None);
    }
}
