//! Record-level validation of a producer's batch, as Kafka's LogValidator
//! does it: the offset range must match the record count, and every record
//! is walked (lengths, varints, offset deltas, timestamps, headers), through
//! streaming decompression for compressed batches.
//!
//! Nothing is copied or kept: an uncompressed batch is walked in place; a
//! compressed one is decompressed in chunks into a caller-owned scratch
//! buffer and each chunk is forgotten once walked. Keys, values and header
//! bytes are skipped, not read. The decompressed size is bounded by the
//! caller, and decompression stops at the bound, so a small batch that
//! expands to gigabytes costs at most the bound in CPU time and one chunk
//! of memory (plus the codec's own window).

use std::io::Read;

use crate::batch::{BatchError, BatchHeader, Compression, HEADER_LEN};

/// Decompressed bytes produced per step; the scratch buffer grows to this.
pub const SCRATCH_CHUNK_BYTES: usize = 64 << 10;

/// Largest zstd window (log2 bytes) a batch may ask for. zstd allocates the
/// window the frame header declares; Kafka's producers use level 3
/// (window 2^21) unless configured otherwise, and even level 19 stays below
/// this 16 MiB.
pub const ZSTD_WINDOW_LOG_MAX: u32 = 24;

/// A snappy block cannot expand more than this many times: the densest
/// element is a 3-byte copy that yields 64 bytes (21.3x). Checked before the
/// block's declared size is allocated.
const SNAPPY_EXPANSION_MAX: usize = 22;

/// The 8-byte magic of snappy-java's framing (xerial), which Kafka's Java
/// clients write; followed by two 4-byte fields (version, compatible).
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_LEN: usize = 16;

/// What walking the records found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordsSummary {
    /// Largest record timestamp (base timestamp + delta).
    pub max_timestamp: i64,
    /// Bytes of the record section after decompression (its size when
    /// uncompressed).
    pub records_bytes: u64,
    /// Records with a null key (refused by compacted topics).
    pub keyless_records: u32,
}

/// Checks what Kafka checks of a batch a client produced, beyond the header
/// and CRC that [`crate::batch::validate`] covers: the record count equals
/// `last_offset_delta + 1` and is positive, and every record is well formed
/// with offset delta equal to its index. `batch` is the whole batch;
/// `decompressed_bytes_max` bounds a compressed batch's record section;
/// `scratch` is reused across calls (grows to [`SCRATCH_CHUNK_BYTES`]).
pub fn validate_producer_batch(
    batch: &[u8],
    header: &BatchHeader,
    decompressed_bytes_max: usize,
    scratch: &mut Vec<u8>,
) -> Result<RecordsSummary, BatchError> {
    if header.record_count <= 0
        || i64::from(header.last_offset_delta) + 1 != i64::from(header.record_count)
    {
        return Err(BatchError::InvalidRecordCount {
            record_count: header.record_count,
            last_offset_delta: header.last_offset_delta,
        });
    }
    let body = batch.get(HEADER_LEN..).unwrap_or_default();
    let codec = header.compression();
    match codec {
        Compression::None => walk(&mut InPlace { buf: body, pos: 0 }, header),
        _ => {
            scratch.resize(SCRATCH_CHUNK_BYTES, 0);
            let reader = decoder(body, codec, decompressed_bytes_max)?;
            let limit = decompressed_bytes_max;
            walk(&mut Streamed::new(reader, scratch, codec, limit), header)
        }
    }
}

/// The first record of a stored batch whose timestamp satisfies `wanted`:
/// its offset delta and timestamp, or `None` when no record does. The
/// records are walked as [`validate_producer_batch`] walks them, through
/// streaming decompression bounded by `decompressed_bytes_max`. As in
/// Kafka's batches, every record of a LogAppendTime batch carries the
/// batch's max timestamp.
pub fn find_record(
    batch: &[u8],
    header: &BatchHeader,
    decompressed_bytes_max: usize,
    scratch: &mut Vec<u8>,
    wanted: impl FnMut(i64) -> bool,
) -> Result<Option<(i32, i64)>, BatchError> {
    let body = batch.get(HEADER_LEN..).unwrap_or_default();
    let codec = header.compression();
    if codec == Compression::None {
        return find(&mut InPlace { buf: body, pos: 0 }, header, wanted);
    }
    scratch.resize(SCRATCH_CHUNK_BYTES, 0);
    let reader = decoder(body, codec, decompressed_bytes_max)?;
    let limit = decompressed_bytes_max;
    find(
        &mut Streamed::new(reader, scratch, codec, limit),
        header,
        wanted,
    )
}

fn find<S: Source>(
    src: &mut S,
    header: &BatchHeader,
    mut wanted: impl FnMut(i64) -> bool,
) -> Result<Option<(i32, i64)>, BatchError> {
    for index in 0..header.record_count {
        let (timestamp, _) = record(src, header, index).map_err(|fault| match fault {
            Fault::Record(reason) => BatchError::MalformedRecord {
                index: index as usize,
                reason,
            },
            Fault::Batch(error) => error,
        })?;
        let timestamp = if header.is_log_append_time() {
            header.max_timestamp
        } else {
            timestamp
        };
        if wanted(timestamp) {
            return Ok(Some((index, timestamp)));
        }
    }
    Ok(None)
}

/// What a codec's decoder failing means for the batch.
fn corrupt(codec: Compression, error: std::io::Error) -> BatchError {
    BatchError::CorruptCompressed {
        codec,
        reason: error.to_string(),
    }
}

/// A streaming decoder of a compressed record section (`codec` is not
/// `None`); snappy's is bounded by `decompressed_bytes_max` itself, the
/// others by their caller's reads.
fn decoder<'a>(
    body: &'a [u8],
    codec: Compression,
    decompressed_bytes_max: usize,
) -> Result<Box<dyn Read + 'a>, BatchError> {
    let corrupt = |error| corrupt(codec, error);
    Ok(match codec {
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(body)),
        Compression::Snappy => {
            Box::new(SnappyReader::new(body, decompressed_bytes_max).map_err(corrupt)?)
        }
        Compression::Lz4 => Box::new(lz4::Decoder::new(body).map_err(corrupt)?),
        Compression::Zstd => {
            let mut reader = zstd::stream::read::Decoder::with_buffer(body).map_err(corrupt)?;
            reader
                .window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(corrupt)?;
            Box::new(reader)
        }
        Compression::None => Box::new(body),
    })
}

/// The record section of a compressed batch body, decompressed whole;
/// more than `decompressed_bytes_max` bytes is refused, having decompressed
/// no more than that (plus one byte).
pub fn decompress_records(
    body: &[u8],
    codec: Compression,
    decompressed_bytes_max: usize,
) -> Result<Vec<u8>, BatchError> {
    let mut out = Vec::new();
    if codec == Compression::None {
        out.extend_from_slice(body);
    } else {
        decoder(body, codec, decompressed_bytes_max)?
            .take(decompressed_bytes_max as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|error| corrupt(codec, error))?;
    }
    if out.len() > decompressed_bytes_max {
        return Err(BatchError::DecompressedTooLarge {
            limit_bytes: decompressed_bytes_max,
        });
    }
    Ok(out)
}

/// A record section read byte by byte, with skips for the bulk fields.
trait Source {
    /// The next byte, or `None` at the end of the records.
    fn next_byte(&mut self) -> Result<Option<u8>, BatchError>;
    /// Skips `n` bytes; `false` when the records end first.
    fn skip(&mut self, n: usize) -> Result<bool, BatchError>;
    /// Bytes consumed so far.
    fn position(&self) -> u64;
}

/// The uncompressed record section, walked where it lies.
struct InPlace<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Source for InPlace<'_> {
    #[inline]
    fn next_byte(&mut self) -> Result<Option<u8>, BatchError> {
        let byte = self.buf.get(self.pos).copied();
        self.pos += usize::from(byte.is_some());
        Ok(byte)
    }

    #[inline]
    fn skip(&mut self, n: usize) -> Result<bool, BatchError> {
        if self.buf.len() - self.pos < n {
            self.pos = self.buf.len();
            return Ok(false);
        }
        self.pos += n;
        Ok(true)
    }

    #[inline]
    fn position(&self) -> u64 {
        self.pos as u64
    }
}

/// Marks the error a reader returns when the decompressed size would pass
/// the bound, so that it is told apart from corrupt input.
#[derive(Debug)]
struct OverLimit;

impl std::fmt::Display for OverLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("decompressed size over the bound")
    }
}

impl std::error::Error for OverLimit {}

/// A compressed record section, decompressed one chunk at a time.
struct Streamed<'s, R: Read> {
    reader: R,
    chunk: &'s mut [u8],
    pos: usize,
    filled: usize,
    consumed: u64,
    produced: u64,
    limit: usize,
    codec: Compression,
    done: bool,
}

impl<'s, R: Read> Streamed<'s, R> {
    fn new(reader: R, chunk: &'s mut [u8], codec: Compression, limit: usize) -> Self {
        Self {
            reader,
            chunk,
            pos: 0,
            filled: 0,
            consumed: 0,
            produced: 0,
            limit,
            codec,
            done: false,
        }
    }

    /// Decompresses the next chunk; `false` at the end of the stream.
    fn fill(&mut self) -> Result<bool, BatchError> {
        if self.done {
            return Ok(false);
        }
        loop {
            match self.reader.read(self.chunk) {
                Ok(0) => {
                    self.done = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.produced += n as u64;
                    if self.produced > self.limit as u64 {
                        return Err(BatchError::DecompressedTooLarge {
                            limit_bytes: self.limit,
                        });
                    }
                    self.pos = 0;
                    self.filled = n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.get_ref().is_some_and(|inner| inner.is::<OverLimit>()) => {
                    return Err(BatchError::DecompressedTooLarge {
                        limit_bytes: self.limit,
                    })
                }
                Err(e) => {
                    return Err(BatchError::CorruptCompressed {
                        codec: self.codec,
                        reason: e.to_string(),
                    })
                }
            }
        }
    }
}

impl<R: Read> Source for Streamed<'_, R> {
    fn next_byte(&mut self) -> Result<Option<u8>, BatchError> {
        if self.pos == self.filled && !self.fill()? {
            return Ok(None);
        }
        let byte = self.chunk[self.pos];
        self.pos += 1;
        self.consumed += 1;
        Ok(Some(byte))
    }

    fn skip(&mut self, mut n: usize) -> Result<bool, BatchError> {
        loop {
            let take = n.min(self.filled - self.pos);
            self.pos += take;
            self.consumed += take as u64;
            n -= take;
            if n == 0 {
                return Ok(true);
            }
            if !self.fill()? {
                return Ok(false);
            }
        }
    }

    fn position(&self) -> u64 {
        self.consumed
    }
}

/// Snappy as Kafka's clients write it: snappy-java's framing (a 16-byte
/// header, then blocks each prefixed by its big-endian u32 length) or, as
/// snappy-java also reads, one raw snappy block without framing. Blocks are
/// decompressed one at a time into a reused buffer.
struct SnappyReader<'a> {
    input: &'a [u8],
    framed: bool,
    block: Vec<u8>,
    pos: usize,
    budget: usize,
    decoder: snap::raw::Decoder,
}

impl<'a> SnappyReader<'a> {
    fn new(input: &'a [u8], budget: usize) -> std::io::Result<Self> {
        let framed = input.starts_with(XERIAL_MAGIC);
        let input = if framed {
            input.get(XERIAL_HEADER_LEN..).ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "snappy framing header truncated",
                )
            })?
        } else {
            input
        };
        Ok(Self {
            input,
            framed,
            block: Vec::new(),
            pos: 0,
            budget,
            decoder: snap::raw::Decoder::new(),
        })
    }

    /// Decompresses the next block; `false` when the input is used up.
    fn next_block(&mut self) -> std::io::Result<bool> {
        let invalid = |message: &str| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, message.to_string())
        };
        if self.input.is_empty() {
            return Ok(false);
        }
        let compressed = if self.framed {
            if self.input.len() < 4 {
                return Err(invalid("snappy block length truncated"));
            }
            let length = u32::from_be_bytes(self.input[..4].try_into().expect("4 bytes")) as usize;
            let rest = &self.input[4..];
            if rest.len() < length {
                return Err(invalid("snappy block beyond the batch"));
            }
            let (block, rest) = rest.split_at(length);
            self.input = rest;
            block
        } else {
            std::mem::take(&mut self.input)
        };
        let length = snap::raw::decompress_len(compressed).map_err(|e| invalid(&e.to_string()))?;
        if length > self.budget {
            return Err(std::io::Error::other(OverLimit));
        }
        if length > compressed.len().saturating_mul(SNAPPY_EXPANSION_MAX) + 1 {
            return Err(invalid("snappy block declares more than it can expand to"));
        }
        self.budget -= length;
        self.block.resize(length, 0);
        self.decoder
            .decompress(compressed, &mut self.block)
            .map_err(|e| invalid(&e.to_string()))?;
        self.pos = 0;
        Ok(true)
    }
}

impl Read for SnappyReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.block.len() {
            if !self.next_block()? {
                return Ok(0);
            }
        }
        let n = out.len().min(self.block.len() - self.pos);
        out[..n].copy_from_slice(&self.block[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Why one record is malformed, or an error of the whole stream.
enum Fault {
    Record(&'static str),
    Batch(BatchError),
}

impl From<BatchError> for Fault {
    fn from(error: BatchError) -> Self {
        Self::Batch(error)
    }
}

fn byte<S: Source>(src: &mut S) -> Result<u8, Fault> {
    src.next_byte()?.ok_or(Fault::Record("record truncated"))
}

/// A zigzag varint of at most 5 bytes whose value fits 32 bits, as Kafka's
/// `ByteUtils.readVarint` requires.
#[inline]
fn varint<S: Source>(src: &mut S) -> Result<i32, Fault> {
    let mut raw = 0u64;
    for i in 0..5 {
        let b = byte(src)?;
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            let raw = u32::try_from(raw).map_err(|_| Fault::Record("varint out of i32 range"))?;
            return Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32));
        }
    }
    Err(Fault::Record("varint longer than 5 bytes"))
}

/// A zigzag varlong of at most 10 bytes.
#[inline]
fn varlong<S: Source>(src: &mut S) -> Result<i64, Fault> {
    let mut raw = 0u64;
    for i in 0..10 {
        let b = byte(src)?;
        if i == 9 && b > 1 {
            return Err(Fault::Record("varlong out of i64 range"));
        }
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    Err(Fault::Record("varlong longer than 10 bytes"))
}

/// Skips a field of `length` bytes that must end by `end`.
#[inline]
fn skip_field<S: Source>(
    src: &mut S,
    length: i32,
    end: u64,
    what: &'static str,
) -> Result<(), Fault> {
    let length = length as u64;
    if src.position() + length > end {
        return Err(Fault::Record(what));
    }
    if !src.skip(length as usize)? {
        return Err(Fault::Record("record truncated"));
    }
    Ok(())
}

fn walk<S: Source>(src: &mut S, header: &BatchHeader) -> Result<RecordsSummary, BatchError> {
    let mut max_timestamp = header.base_timestamp;
    let mut keyless_records = 0u32;
    for index in 0..header.record_count {
        let (timestamp, keyless) = record(src, header, index).map_err(|fault| match fault {
            Fault::Record(reason) => BatchError::MalformedRecord {
                index: index as usize,
                reason,
            },
            Fault::Batch(error) => error,
        })?;
        max_timestamp = max_timestamp.max(timestamp);
        keyless_records += u32::from(keyless);
    }
    if src.next_byte()?.is_some() {
        return Err(BatchError::TrailingBytes {
            record_count: header.record_count,
        });
    }
    Ok(RecordsSummary {
        max_timestamp,
        records_bytes: src.position(),
        keyless_records,
    })
}

/// Walks one record (Kafka's `DefaultRecord` layout) and returns its
/// timestamp and whether its key is null.
#[inline]
fn record<S: Source>(src: &mut S, header: &BatchHeader, index: i32) -> Result<(i64, bool), Fault> {
    let length = varint(src)?;
    if length <= 0 {
        return Err(Fault::Record("record length not positive"));
    }
    let end = src.position() + length as u64;
    let _attributes = byte(src)?;
    let timestamp_delta = varlong(src)?;
    let timestamp = header
        .base_timestamp
        .checked_add(timestamp_delta)
        .ok_or(Fault::Record(
            "timestamp delta overflows the base timestamp",
        ))?;
    if varint(src)? != index {
        return Err(Fault::Record("offset delta is not the record's index"));
    }
    // Kafka reads any negative length as null; only -1 is ever written, and
    // a consumer meeting another negative length may stop on the partition.
    let key_length = varint(src)?;
    if key_length < -1 {
        return Err(Fault::Record("key length below -1"));
    }
    skip_field(src, key_length.max(0), end, "key beyond the record")?;
    let value_length = varint(src)?;
    if value_length < -1 {
        return Err(Fault::Record("value length below -1"));
    }
    skip_field(src, value_length.max(0), end, "value beyond the record")?;
    let header_count = varint(src)?;
    if header_count < 0 {
        return Err(Fault::Record("negative header count"));
    }
    if src.position() + header_count as u64 > end {
        return Err(Fault::Record("header count beyond the record"));
    }
    for _ in 0..header_count {
        let key_length = varint(src)?;
        if key_length < 0 {
            return Err(Fault::Record("header key length negative"));
        }
        skip_field(src, key_length, end, "header key beyond the record")?;
        let value_length = varint(src)?;
        if value_length < -1 {
            return Err(Fault::Record("header value length below -1"));
        }
        skip_field(
            src,
            value_length.max(0),
            end,
            "header value beyond the record",
        )?;
    }
    if src.position() != end {
        return Err(Fault::Record("record length does not match its fields"));
    }
    Ok((timestamp, key_length < 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::build::{self, NewRecord};
    use crate::batch::{validate, Compression};
    use proptest::prelude::*;

    const TS: i64 = 1_700_000_000_000;
    const LIMIT: usize = 1 << 20;

    fn records(n: usize) -> Vec<NewRecord> {
        (0..n)
            .map(|i| NewRecord {
                key: if i % 2 == 0 {
                    None
                } else {
                    Some(b"key".to_vec())
                },
                value: Some(format!("value-{i}").into_bytes()),
                headers: vec![(b"h".to_vec(), Some(b"v".to_vec()))],
                timestamp_delta: i as i64,
            })
            .collect()
    }

    /// One record: null key, value "hello", no headers. Byte 5 is the value
    /// length (zigzag 5 = 0x0a).
    fn hello() -> Vec<u8> {
        let (body, _) = build::records_body(&[NewRecord {
            value: Some(b"hello".to_vec()),
            ..Default::default()
        }]);
        assert_eq!(body[5], 0x0a);
        body
    }

    fn check(batch: &[u8]) -> Result<RecordsSummary, BatchError> {
        let header = validate(batch).expect("header and CRC are valid");
        validate_producer_batch(batch, &header, LIMIT, &mut Vec::new())
    }

    fn with(count: i32, delta: i32, attributes: i16, body: &[u8]) -> Vec<u8> {
        build::with_body(TS, TS, count, delta, attributes, body)
    }

    fn malformed(result: Result<RecordsSummary, BatchError>) -> (usize, &'static str) {
        match result {
            Err(BatchError::MalformedRecord { index, reason }) => (index, reason),
            other => panic!("expected a malformed record, got {other:?}"),
        }
    }

    #[test]
    fn well_formed_batches_pass_in_every_codec() {
        let plain = build::batch(TS, &records(50));
        let summary = check(&plain).unwrap();
        assert_eq!(summary.max_timestamp, TS + 49);
        assert_eq!(summary.records_bytes as usize, plain.len() - HEADER_LEN);
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let batch = build::compressed(codec, TS, &records(50));
            assert_eq!(check(&batch).unwrap(), summary, "{codec:?}");
        }
        // Snappy without snappy-java's framing: one raw block.
        let (body, _) = build::records_body(&records(50));
        let raw = snap::raw::Encoder::new().compress_vec(&body).unwrap();
        assert_eq!(check(&with(50, 49, 2, &raw)).unwrap(), summary);
        // Large values in a compressed batch span many scratch chunks.
        let big = build::compressed(
            Compression::Lz4,
            TS,
            &[NewRecord {
                value: Some(build::pattern(1, 300_000)),
                ..Default::default()
            }],
        );
        // The value, and 11 bytes of varints and attributes around it.
        assert_eq!(check(&big).unwrap().records_bytes, 300_000 + 11);
    }

    #[test]
    fn find_record_reports_the_first_match_in_every_codec() {
        // Timestamps out of order: TS+5, TS+1, TS+9, TS+9, TS+3.
        let recs: Vec<NewRecord> = [5, 1, 9, 9, 3]
            .iter()
            .map(|&delta| NewRecord {
                value: Some(vec![7; 10]),
                timestamp_delta: delta,
                ..Default::default()
            })
            .collect();
        let mut batches = vec![build::batch(TS, &recs)];
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            batches.push(build::compressed(codec, TS, &recs));
        }
        for batch in &batches {
            let header = validate(batch).unwrap();
            let find = |wanted: &dyn Fn(i64) -> bool| {
                find_record(batch, &header, LIMIT, &mut Vec::new(), wanted).unwrap()
            };
            assert_eq!(find(&|t| t >= TS + 2), Some((0, TS + 5)));
            assert_eq!(find(&|t| t >= TS + 6), Some((2, TS + 9)));
            assert_eq!(find(&|t| t == TS + 9), Some((2, TS + 9)));
            assert_eq!(find(&|t| t > TS + 9), None);
        }
    }

    #[test]
    fn record_count_must_match_the_offset_range() {
        let (body, _) = build::records_body(&records(3));
        for (count, delta) in [(0, 2), (3, 1_000_000), (2, 2), (0, 0)] {
            assert_eq!(
                check(&with(count, delta, 0, &body)),
                Err(BatchError::InvalidRecordCount {
                    record_count: count,
                    last_offset_delta: delta,
                }),
                "count {count} delta {delta}"
            );
        }
    }

    #[test]
    fn record_lengths_are_checked() {
        // 2^31 as a varint (zigzag 2^32): does not fit 32 bits.
        let mut body = vec![0x80, 0x80, 0x80, 0x80, 0x10];
        body.extend_from_slice(&hello()[1..]);
        assert_eq!(
            malformed(check(&with(1, 0, 0, &body))).1,
            "varint out of i32 range"
        );
        // i32::MAX: beyond the batch.
        let mut body = vec![0xfe, 0xff, 0xff, 0xff, 0x0f];
        body.extend_from_slice(&hello()[1..]);
        assert_eq!(malformed(check(&with(1, 0, 0, &body))).0, 0);
        // Zero, negative, and one byte short of the fields.
        for length in [0u8, 0x01, hello()[0] - 2] {
            let mut body = hello();
            body[0] = length;
            malformed(check(&with(1, 0, 0, &body)));
        }
        // A varint of six bytes.
        let mut body = vec![0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
        body.extend_from_slice(&hello()[1..]);
        assert_eq!(
            malformed(check(&with(1, 0, 0, &body))).1,
            "varint longer than 5 bytes"
        );
    }

    #[test]
    fn a_value_length_of_minus_five_is_refused() {
        // With the value's bytes still there: the record length disagrees.
        let mut body = hello();
        body[5] = 0x09; // zigzag -5
        malformed(check(&with(1, 0, 0, &body)));
        // Without them (a consistent record): still refused.
        let mut body = hello();
        body[5] = 0x09;
        body.drain(6..11);
        body[0] -= 10; // zigzag of 5 fewer bytes
        assert_eq!(
            malformed(check(&with(1, 0, 0, &body))).1,
            "value length below -1"
        );
        // -1 is null and accepted.
        body[5] = 0x01;
        check(&with(1, 0, 0, &body)).unwrap();
    }

    #[test]
    fn offset_deltas_timestamps_headers_and_trailing_bytes_are_checked() {
        let mut body = hello();
        body[3] = 0x02; // offset delta 1 for record 0
        assert_eq!(
            malformed(check(&with(1, 0, 0, &body))).1,
            "offset delta is not the record's index"
        );
        // A timestamp delta that overflows the base timestamp.
        let (body, _) = build::records_body(&[NewRecord {
            timestamp_delta: i64::MAX,
            ..Default::default()
        }]);
        assert_eq!(
            malformed(check(&with(1, 0, 0, &body))).1,
            "timestamp delta overflows the base timestamp"
        );
        // A negative header count.
        let mut body = hello();
        *body.last_mut().unwrap() = 0x03;
        assert_eq!(
            malformed(check(&with(1, 0, 0, &body))).1,
            "negative header count"
        );
        // A second record's worth of bytes after the declared one.
        let (body, _) = build::records_body(&records(2));
        assert_eq!(
            check(&with(1, 0, 0, &body)),
            Err(BatchError::TrailingBytes { record_count: 1 })
        );
        // And one record fewer than declared.
        assert_eq!(
            malformed(check(&with(3, 2, 0, &body))),
            (2, "record truncated")
        );
    }

    #[test]
    fn garbage_in_every_codec_is_corrupt() {
        let garbage = build::pattern(99, 4000);
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let batch = with(3, 2, build::codec_attributes(codec), &garbage);
            match check(&batch) {
                Err(BatchError::CorruptCompressed { codec: c, .. }) => assert_eq!(c, codec),
                other => panic!("{codec:?}: expected corrupt, got {other:?}"),
            }
            // Framing that is right but truncated halfway.
            let good = build::compressed(codec, TS, &records(40));
            let body = &good[HEADER_LEN..];
            let cut = with(
                40,
                39,
                build::codec_attributes(codec),
                &body[..body.len() / 2],
            );
            assert!(check(&cut).is_err(), "{codec:?}: truncated stream accepted");
        }
    }

    #[test]
    fn a_complete_compressed_stream_with_too_few_or_too_many_records_is_invalid() {
        let (body, _) = build::records_body(&records(2));
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let attributes = build::codec_attributes(codec);
            let compressed = build::compress(codec, &body);
            assert_eq!(
                malformed(check(&with(3, 2, attributes, &compressed))),
                (2, "record truncated"),
                "{codec:?}"
            );
            assert_eq!(
                check(&with(1, 0, attributes, &compressed)),
                Err(BatchError::TrailingBytes { record_count: 1 }),
                "{codec:?}"
            );
        }
    }

    #[test]
    fn a_decompression_bomb_stops_at_the_bound() {
        // ~1 MiB of gzip expanding to 1 GiB.
        let body = build::gzip_bomb_body(1 << 30);
        assert!(body.len() < 2 << 20, "{}", body.len());
        let batch = with(1, 0, 1, &body);
        let header = validate(&batch).unwrap();
        let mut scratch = Vec::new();
        let started = std::time::Instant::now();
        assert_eq!(
            validate_producer_batch(&batch, &header, 8 << 20, &mut scratch),
            Err(BatchError::DecompressedTooLarge {
                limit_bytes: 8 << 20
            })
        );
        assert_eq!(scratch.len(), SCRATCH_CHUNK_BYTES, "nothing but one chunk");
        // Stopped early: expanding all of it takes seconds in a debug build.
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        // Under a bound that fits it, the same stream is a valid record.
        let small = with(1, 0, 1, &build::gzip_bomb_body(3 << 20));
        let header = validate(&small).unwrap();
        validate_producer_batch(&small, &header, 8 << 20, &mut scratch).unwrap();
    }

    #[test]
    fn a_snappy_block_declaring_a_huge_size_is_refused_before_allocating() {
        // A raw snappy block header declaring 2^31 bytes from 4 bytes.
        let body = [0x80, 0x80, 0x80, 0x80, 0x08, 0, 0, 0];
        let batch = with(1, 0, 2, &body);
        let header = validate(&batch).unwrap();
        assert_eq!(
            validate_producer_batch(&batch, &header, usize::MAX, &mut Vec::new()),
            Err(BatchError::CorruptCompressed {
                codec: Compression::Snappy,
                reason: "snappy block declares more than it can expand to".into()
            })
        );
    }

    proptest! {
        #[test]
        fn arbitrary_record_sections_never_panic(
            body in proptest::collection::vec(any::<u8>(), 0..400),
            codec in 0i16..5,
            count in 1i32..20,
        ) {
            let _ = check(&with(count, count - 1, codec, &body));
        }

        #[test]
        fn one_flipped_byte_in_the_records_never_panics(
            at in 0usize..200,
            bit in 0u8..8,
        ) {
            let (mut body, _) = build::records_body(&records(5));
            let at = at % body.len();
            body[at] ^= 1 << bit;
            let _ = check(&with(5, 4, 0, &body));
        }
    }
}
