//! Recompression of a validated producer batch into the codec a topic's
//! `compression.type` asks for, as Kafka's LogValidator does when the
//! batch's codec differs. Only the record section changes: the records'
//! bytes are decompressed and compressed again as they are, so offsets,
//! timestamps, producer id, epoch and sequence stay exactly as the
//! producer sent them (idempotence checks the same header), and the batch
//! gets its new length and CRC.

use crate::batch::{self, BatchError, BatchHeader, Compression, HEADER_LEN};
use crate::records;

/// A codec with its level (KIP-390); `None` takes the codec's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Codec {
    pub compression: Compression,
    pub level: Option<i32>,
}

/// Kafka's default levels and ranges (`compression.<codec>.level`).
pub const GZIP_LEVEL_DEFAULT: i32 = 6;
pub const GZIP_LEVELS: std::ops::RangeInclusive<i32> = 1..=9;
pub const LZ4_LEVEL_DEFAULT: i32 = 9;
pub const LZ4_LEVELS: std::ops::RangeInclusive<i32> = 1..=17;
pub const ZSTD_LEVEL_DEFAULT: i32 = 3;
pub const ZSTD_LEVELS: std::ops::RangeInclusive<i32> = -131_072..=22;

/// lz4 frames as Kafka's producers write them: independent 64 KiB blocks.
const LZ4_BLOCK_SIZE: lz4::BlockSize = lz4::BlockSize::Max64KB;

/// Compresses a record section with `codec` (snappy in snappy-java's
/// framing, lz4 as a frame), as Kafka's clients and brokers write them.
pub fn compress_records(codec: Codec, records: &[u8]) -> Vec<u8> {
    use std::io::Write;
    match codec.compression {
        Compression::None => records.to_vec(),
        Compression::Gzip => {
            let level = codec
                .level
                .filter(|l| GZIP_LEVELS.contains(l))
                .unwrap_or(GZIP_LEVEL_DEFAULT);
            let mut encoder = flate2::write::GzEncoder::new(
                Vec::with_capacity(records.len() / 2),
                flate2::Compression::new(level as u32),
            );
            encoder
                .write_all(records)
                .expect("compressing into memory does not fail");
            encoder
                .finish()
                .expect("compressing into memory does not fail")
        }
        Compression::Snappy => batch::build::compress(Compression::Snappy, records),
        Compression::Lz4 => {
            let level = codec
                .level
                .filter(|l| LZ4_LEVELS.contains(l))
                .unwrap_or(LZ4_LEVEL_DEFAULT);
            let mut encoder = lz4::EncoderBuilder::new()
                .level(level as u32)
                .block_size(LZ4_BLOCK_SIZE)
                .block_mode(lz4::BlockMode::Independent)
                .checksum(lz4::ContentChecksum::NoChecksum)
                .build(Vec::with_capacity(records.len() / 2))
                .expect("an lz4 encoder over memory");
            encoder
                .write_all(records)
                .expect("compressing into memory does not fail");
            let (out, result) = encoder.finish();
            result.expect("compressing into memory does not fail");
            out
        }
        Compression::Zstd => {
            let level = codec
                .level
                .filter(|l| ZSTD_LEVELS.contains(l))
                .unwrap_or(ZSTD_LEVEL_DEFAULT);
            // The whole input is known, so the frame's window is no larger
            // than the records (far below `ZSTD_WINDOW_LOG_MAX`).
            zstd::bulk::compress(records, level).expect("compressing into memory does not fail")
        }
    }
}

/// The batch `batch` (validated, with `header`) with its records in
/// `target`'s codec, or `None` when it is in that codec already.
/// `decompressed_bytes_max` bounds the records' decompressed size.
pub fn recompress(
    batch: &[u8],
    header: &BatchHeader,
    target: Codec,
    decompressed_bytes_max: usize,
) -> Result<Option<Vec<u8>>, BatchError> {
    let codec = header.compression();
    if codec == target.compression {
        return Ok(None);
    }
    let body = batch.get(HEADER_LEN..).unwrap_or_default();
    let records = records::decompress_records(body, codec, decompressed_bytes_max)?;
    let compressed = compress_records(target, &records);
    Ok(Some(batch::with_records(
        batch,
        target.compression,
        &compressed,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::build::{self, NewRecord};
    use crate::batch::RecordBatch;

    fn records() -> Vec<NewRecord> {
        (0..50)
            .map(|i| NewRecord {
                key: Some(format!("key-{i}").into_bytes()),
                value: Some(build::pattern(i, 300 + i as usize)),
                headers: vec![(b"h".to_vec(), Some(vec![i as u8]))],
                timestamp_delta: i as i64 * 3,
            })
            .collect()
    }

    /// Every record of `batch`, decompressed, as (offset, timestamp, key,
    /// value, headers).
    fn read_back(batch: &[u8]) -> Vec<String> {
        let header = batch::validate(batch).expect("a valid batch");
        let body = records::decompress_records(&batch[HEADER_LEN..], header.compression(), 1 << 24)
            .unwrap();
        let plain = batch::with_records(batch, Compression::None, &body);
        let batch = RecordBatch::new(bytes::Bytes::from(plain)).unwrap();
        batch
            .records()
            .unwrap()
            .map(|r| format!("{:?}", r.unwrap()))
            .collect()
    }

    #[test]
    fn every_codec_pair_keeps_records_and_header_fields() {
        let codecs = Compression::ALL;
        for from in codecs {
            let mut original = build::compressed(from, 1_700_000_000_000, &records());
            // An idempotent producer's fields, which must survive.
            original[43..51].copy_from_slice(&77i64.to_be_bytes());
            original[51..53].copy_from_slice(&3i16.to_be_bytes());
            original[53..57].copy_from_slice(&1234i32.to_be_bytes());
            let crc = batch::compute_crc(&original);
            original[17..21].copy_from_slice(&crc.to_be_bytes());
            let header = batch::validate(&original).unwrap();
            let expected = read_back(&original);
            for to in codecs {
                for level in [None, Some(1)] {
                    let target = Codec {
                        compression: to,
                        level,
                    };
                    let Some(out) = recompress(&original, &header, target, 1 << 24).unwrap() else {
                        assert_eq!(from, to, "recompressed unless the codec is the same");
                        continue;
                    };
                    let new = batch::validate(&out).expect("length and CRC are right");
                    assert_eq!(new.compression(), to);
                    assert_eq!(
                        (new.base_offset, new.base_timestamp, new.max_timestamp),
                        (
                            header.base_offset,
                            header.base_timestamp,
                            header.max_timestamp
                        )
                    );
                    assert_eq!(
                        (new.producer_id, new.producer_epoch, new.base_sequence),
                        (77, 3, 1234)
                    );
                    assert_eq!(
                        (new.record_count, new.last_offset_delta),
                        (header.record_count, header.last_offset_delta)
                    );
                    assert_eq!(read_back(&out), expected, "{from:?} -> {to:?}");
                    let mut scratch = Vec::new();
                    records::validate_producer_batch(&out, &new, 1 << 24, &mut scratch)
                        .expect("the recompressed batch is a valid producer batch");
                }
            }
        }
    }

    #[test]
    fn decompression_is_bounded() {
        let batch = build::compressed(Compression::Gzip, 0, &records());
        let header = batch::validate(&batch).unwrap();
        let target = Codec {
            compression: Compression::Zstd,
            level: None,
        };
        assert!(matches!(
            recompress(&batch, &header, target, 100),
            Err(BatchError::DecompressedTooLarge { limit_bytes: 100 })
        ));
    }
}
