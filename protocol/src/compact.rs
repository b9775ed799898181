//! The record-level pieces of log compaction: the records of a batch as
//! they lie in its record section (offset, key, whether the value is null,
//! and their encoded bytes), and a batch rebuilt from the records it keeps.
//!
//! A kept record is carried over byte for byte: its offset and timestamp
//! deltas stay valid because the rebuilt batch keeps the base offset, base
//! timestamp, max timestamp and last offset delta of the original (so a
//! reader still moves past the removed offsets), as well as its producer
//! id, epoch and base sequence, leader epoch and attributes. Only the record
//! count, the record section (compressed again in the batch's own codec),
//! the length and the CRC change.

use bytes::{Buf, Bytes};

use crate::batch::{
    self, read_nullable_bytes as nullable, read_varint as varint, read_varlong as varlong,
    BatchError, BatchHeader, Compression, HEADER_LEN, OFFSET_CRC, OFFSET_RECORD_COUNT,
};
use crate::recompress::{self, Codec};
use crate::records;

/// One record of a batch, undecoded beyond what compaction needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    pub offset: i64,
    pub key: Option<Bytes>,
    /// A tombstone: the value is null.
    pub value_is_null: bool,
    /// The record as encoded, its length prefix included.
    pub bytes: Bytes,
}

/// The records of `batch` (a whole, valid batch), decompressing the record
/// section when the batch is compressed (at most `decompressed_bytes_max`).
pub fn raw_records(
    batch: &[u8],
    decompressed_bytes_max: usize,
) -> Result<Vec<RawRecord>, BatchError> {
    let header = BatchHeader::parse(batch)?;
    let body = &batch[HEADER_LEN..header.size().min(batch.len())];
    let section = Bytes::from(records::decompress_records(
        body,
        header.compression(),
        decompressed_bytes_max,
    )?);
    split_section(section, header.base_offset, header.record_count)
}

fn split_section(
    mut section: Bytes,
    base_offset: i64,
    count: i32,
) -> Result<Vec<RawRecord>, BatchError> {
    let mut out = Vec::with_capacity(count.clamp(0, 4096) as usize);
    for index in 0..count.max(0) as usize {
        let malformed = |reason| BatchError::MalformedRecord { index, reason };
        let whole = section.clone();
        let length = varint(&mut section).map_err(malformed)?;
        let length = usize::try_from(length).map_err(|_| malformed("negative record length"))?;
        if length == 0 || length > section.len() {
            return Err(malformed("record length beyond the batch"));
        }
        let prefix = whole.len() - section.len();
        let bytes = whole.slice(..prefix + length);
        let mut record = section.split_to(length);
        record.advance(1); // attributes
        varlong(&mut record).map_err(malformed)?; // timestamp delta
        let offset_delta = varint(&mut record).map_err(malformed)?;
        let key = nullable(&mut record).map_err(malformed)?;
        let value = nullable(&mut record).map_err(malformed)?;
        out.push(RawRecord {
            offset: base_offset + i64::from(offset_delta),
            key,
            value_is_null: value.is_none(),
            bytes,
        });
    }
    if !section.is_empty() {
        return Err(BatchError::TrailingBytes {
            record_count: count,
        });
    }
    Ok(out)
}

/// `batch` with only `kept` of its records (in order), as described in the
/// module documentation. With no record kept, the batch keeps its header
/// (an idempotent producer's last batch must stay) with no records and no
/// compression.
pub fn rebuild(batch: &[u8], kept: &[RawRecord]) -> Result<Vec<u8>, BatchError> {
    let header = BatchHeader::parse(batch)?;
    let mut section = Vec::with_capacity(kept.iter().map(|r| r.bytes.len()).sum());
    for record in kept {
        section.extend_from_slice(&record.bytes);
    }
    let codec = if kept.is_empty() {
        Compression::None
    } else {
        header.compression()
    };
    let body = recompress::compress_records(
        Codec {
            compression: codec,
            level: None,
        },
        &section,
    );
    let mut out = batch::with_records(batch, codec, &body);
    let count = i32::try_from(kept.len()).expect("kept records come from one batch");
    out[OFFSET_RECORD_COUNT..OFFSET_RECORD_COUNT + 4].copy_from_slice(&count.to_be_bytes());
    let crc = batch::compute_crc(&out);
    out[OFFSET_CRC..OFFSET_CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::build::{self, NewRecord};
    use crate::batch::{RecordBatch, LOG_OVERHEAD, OFFSET_BATCH_LENGTH};

    fn records() -> Vec<NewRecord> {
        (0..6)
            .map(|i| NewRecord {
                key: Some(format!("key-{}", i % 3).into_bytes()),
                value: (i != 4).then(|| format!("value-{i}").into_bytes()),
                headers: vec![(b"h".to_vec(), Some(vec![i as u8]))],
                timestamp_delta: i64::from(i) * 10,
            })
            .collect()
    }

    fn stamped(mut batch: Vec<u8>) -> Vec<u8> {
        batch::set_base_offset(&mut batch, 100);
        let crc = batch::compute_crc(&batch);
        batch[OFFSET_CRC..OFFSET_CRC + 4].copy_from_slice(&crc.to_be_bytes());
        batch
    }

    #[test]
    fn a_rebuilt_batch_keeps_offsets_timestamps_and_producer_fields_in_every_codec() {
        for codec in Compression::ALL {
            let original = stamped(build::compressed(codec, 1_000, &records()));
            let all = raw_records(&original, 1 << 20).unwrap();
            assert_eq!(all.len(), 6, "{codec:?}");
            assert_eq!(
                all.iter().map(|r| r.offset).collect::<Vec<_>>(),
                (100..106).collect::<Vec<_>>()
            );
            assert_eq!(all[2].key.as_deref(), Some(&b"key-2"[..]));
            assert!(all[4].value_is_null && !all[3].value_is_null);
            let kept: Vec<RawRecord> = all.iter().filter(|r| r.offset % 2 == 1).cloned().collect();
            let rebuilt = rebuild(&original, &kept).unwrap();
            let batch =
                RecordBatch::new(Bytes::from(rebuilt.clone())).expect("valid with its new CRC");
            let (old, new) = (BatchHeader::parse(&original).unwrap(), *batch.header());
            assert_eq!(new.compression(), codec);
            assert_eq!(new.record_count, 3);
            assert_eq!(
                (
                    new.base_offset,
                    new.last_offset_delta,
                    new.base_timestamp,
                    new.max_timestamp
                ),
                (
                    old.base_offset,
                    old.last_offset_delta,
                    old.base_timestamp,
                    old.max_timestamp
                )
            );
            assert_eq!(
                (
                    new.producer_id,
                    new.producer_epoch,
                    new.base_sequence,
                    new.partition_leader_epoch
                ),
                (
                    old.producer_id,
                    old.producer_epoch,
                    old.base_sequence,
                    old.partition_leader_epoch
                )
            );
            let again = raw_records(&rebuilt, 1 << 20).unwrap();
            assert_eq!(
                again,
                kept.iter()
                    .map(|r| RawRecord { ..r.clone() })
                    .collect::<Vec<_>>()
            );
            // The kept records decode to what was produced.
            let plain = if codec == Compression::None {
                batch
                    .records()
                    .unwrap()
                    .map(|r| r.unwrap())
                    .collect::<Vec<_>>()
            } else {
                let section =
                    records::decompress_records(&rebuilt[HEADER_LEN..], codec, 1 << 20).unwrap();
                let header = BatchHeader::parse(&rebuilt).unwrap();
                batch::Records::new(
                    Bytes::from(section),
                    header.base_offset,
                    header.base_timestamp,
                    3,
                )
                .map(|r| r.unwrap())
                .collect()
            };
            assert_eq!(
                plain.iter().map(|r| r.offset).collect::<Vec<_>>(),
                vec![101, 103, 105]
            );
            assert_eq!(plain[1].value.as_deref(), Some(&b"value-3"[..]));
            assert_eq!(plain[2].timestamp, 1_050);
            assert_eq!(plain[0].headers[0].value.as_deref(), Some(&[1u8][..]));
        }
    }

    #[test]
    fn a_batch_with_nothing_kept_keeps_its_header_uncompressed() {
        let original = stamped(build::compressed(Compression::Zstd, 5, &records()));
        let rebuilt = rebuild(&original, &[]).unwrap();
        assert_eq!(rebuilt.len(), HEADER_LEN);
        let header = batch::validate(&rebuilt).unwrap();
        assert_eq!((header.record_count, header.last_offset_delta), (0, 5));
        assert_eq!(header.compression(), Compression::None);
        assert!(raw_records(&rebuilt, 1 << 20).unwrap().is_empty());
    }

    #[test]
    fn damaged_record_sections_are_errors_not_panics() {
        let original = stamped(build::batch(0, &records()));
        for cut in [HEADER_LEN + 1, HEADER_LEN + 7, original.len() - 3] {
            let mut damaged = original[..cut].to_vec();
            let length = (damaged.len() - LOG_OVERHEAD) as i32;
            damaged[OFFSET_BATCH_LENGTH..OFFSET_BATCH_LENGTH + 4]
                .copy_from_slice(&length.to_be_bytes());
            assert!(raw_records(&damaged, 1 << 20).is_err(), "cut at {cut}");
        }
    }
}
