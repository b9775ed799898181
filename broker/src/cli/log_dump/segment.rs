//! Segment files (`<base offset>.log`, Kafka record batches v2) and their
//! `.index` and `.timeindex`, as `strom log dump` reads them: every batch
//! with its header and whether its CRC-32C holds; with `--records` every
//! record (compressed batches decompressed); with `--verify-index` every
//! index entry checked against the batches found. Damage is reported with
//! its byte position and the scan goes on at the next valid batch, found by
//! searching the bytes after the damage (a damaged length says nothing of
//! where the next batch starts). The file is opened read-only and read
//! with positional reads: a live segment of a running broker is read as it
//! is at the moment, up to its size when it was opened.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use bytes::Bytes;
use protocol::batch::{
    self, BatchHeader, Compression, Records, HEADER_LEN, LOG_OVERHEAD, MAGIC_V2,
};
use storage::index::{OFFSET_ENTRY_BYTES, TIME_ENTRY_BYTES};

use super::output::{quoted, Line, Printer};

/// Bytes read from a segment file at a time.
const WINDOW_BYTES: usize = 4 << 20;
/// Where a batch's magic byte sits: after its base offset, length and
/// partition leader epoch.
const MAGIC_POSITION: usize = LOG_OVERHEAD + 4;
/// A batch found by searching past damage is believed only when it
/// declares at most this many bytes (and its CRC holds), so that a length
/// read from garbage does not make the search read that much for nothing.
const SEARCH_BATCH_BYTES_MAX: usize = 64 << 20;
const _: () = assert!(SEARCH_BATCH_BYTES_MAX >= WINDOW_BYTES);
/// What the records of one compressed batch may decompress to: the
/// broker's own bound for a batch it accepts.
const DECOMPRESSED_BYTES_MAX: usize = broker::limits::DECOMPRESSED_BATCH_BYTES_MAX;

/// What to print beyond the batches.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Every record of every batch whose CRC holds.
    pub records: bool,
    /// Every record's value too (implies `records`).
    pub values: bool,
    /// Check the `.index` and `.timeindex` beside the segment.
    pub verify_index: bool,
}

/// A batch the scan found, as the indexes are checked against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub position: u64,
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
}

/// The base offset a segment or index file's name gives
/// (`00000000000000016933.log` is 16933), if it is such a name.
pub fn base_offset_of(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    let (stem, _) = name.split_once('.')?;
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

/// The segment file's bytes, through a window of positional reads.
struct Reader {
    file: File,
    /// The file's size when it was opened: a live segment grows, and what
    /// is written after that is not read.
    size: u64,
    start: u64,
    window: Vec<u8>,
}

impl Reader {
    fn open(path: &Path) -> Result<Self, String> {
        // Read-only, no lock: a running broker's files are never touched.
        let file = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let size = file
            .metadata()
            .map_err(|e| format!("cannot stat {}: {e}", path.display()))?
            .len();
        Ok(Self {
            file,
            size,
            start: 0,
            window: Vec::new(),
        })
    }

    /// The `len` bytes at `position`, fewer where the file ends.
    fn at(&mut self, position: u64, len: usize) -> Result<&[u8], String> {
        let left = self.size.saturating_sub(position);
        let len = len.min(usize::try_from(left).unwrap_or(usize::MAX));
        let end = position + len as u64;
        if position < self.start || end > self.start + self.window.len() as u64 {
            let want = len
                .max(WINDOW_BYTES)
                .min(usize::try_from(left).unwrap_or(usize::MAX));
            self.window.resize(want, 0);
            if let Err(error) = self.file.read_exact_at(&mut self.window, position) {
                self.window.clear();
                return Err(format!(
                    "cannot read {want} bytes at byte {position}: {error} (a live file cut meanwhile?)"
                ));
            }
            self.start = position;
        }
        let from = (position - self.start) as usize;
        Ok(&self.window[from..from + len])
    }

    /// Whether every byte from `position` to the end is zero.
    fn zeros_to_end(&mut self, mut position: u64) -> Result<bool, String> {
        while position < self.size {
            let chunk = self.at(position, WINDOW_BYTES)?;
            if chunk.iter().any(|&b| b != 0) {
                return Ok(false);
            }
            position += chunk.len() as u64;
        }
        Ok(true)
    }

    /// The position of the first batch at or after `from` whose header
    /// parses, that fits in the file and whose CRC holds.
    fn next_valid_batch(&mut self, from: u64) -> Result<Option<u64>, String> {
        let mut position = from;
        while position + HEADER_LEN as u64 <= self.size {
            let window = self.at(position, WINDOW_BYTES)?.to_vec();
            let candidates = window.len() - HEADER_LEN + 1;
            for at in 0..candidates {
                if window[at + MAGIC_POSITION] != MAGIC_V2 as u8 {
                    continue;
                }
                let Ok(header) = BatchHeader::parse(&window[at..]) else {
                    continue;
                };
                let candidate = position + at as u64;
                let size = header.size();
                if size > SEARCH_BATCH_BYTES_MAX || candidate + size as u64 > self.size {
                    continue;
                }
                let crc = match window.get(at..at + size) {
                    Some(bytes) => batch::compute_crc(bytes),
                    None => batch::compute_crc(self.at(candidate, size)?),
                };
                if crc == header.crc {
                    return Ok(Some(candidate));
                }
            }
            position += candidates as u64;
        }
        Ok(None)
    }
}

/// What happened at one position of the scan.
enum Step {
    /// A batch was read; the next one starts here.
    Next(u64),
    /// No batch can be read here, and why.
    Lost(String),
}

/// One pass over a segment file.
struct Scan<'p> {
    reader: Reader,
    printer: &'p mut Printer,
    /// Print nothing (the log under an index being checked); problems are
    /// still counted.
    quiet: bool,
    options: Options,
    /// The base offset the file's name gives.
    base_offset: Option<u64>,
    found: Vec<Found>,
    records: u64,
    problems: usize,
}

impl Scan<'_> {
    fn line(&mut self, line: Line) {
        if !self.quiet {
            self.printer.line(line);
        }
    }

    fn problem(&mut self, position: u64, reason: String) {
        self.problems += 1;
        if !self.quiet {
            self.printer.problem(
                Line::new("problem")
                    .num("position", position)
                    .reason(reason),
            );
        }
    }

    /// Reads the file batch by batch to its end.
    fn run(&mut self) -> Result<(), String> {
        let size = self.reader.size;
        let mut position = 0u64;
        while position < size {
            let head = self.reader.at(position, HEADER_LEN)?.to_vec();
            if head.iter().all(|&b| b == 0) && self.reader.zeros_to_end(position)? {
                self.line(
                    Line::new("tail")
                        .num("position", position)
                        .num("bytes", size - position)
                        .reason(
                            "zeros to the end of the file: space preallocated for the \
                             batches to come, not damage",
                        ),
                );
                break;
            }
            match self.batch_at(position, &head)? {
                Step::Next(next) => position = next,
                Step::Lost(reason) => match self.reader.next_valid_batch(position + 1)? {
                    Some(next) => {
                        self.problem(
                            position,
                            format!(
                                "{reason}; {} bytes skipped: the next valid batch starts at \
                                 byte {next}",
                                next - position
                            ),
                        );
                        position = next;
                    }
                    None => {
                        self.problem(
                            position,
                            format!(
                                "{reason}; no valid batch in the {} bytes to the end of the file",
                                size - position
                            ),
                        );
                        break;
                    }
                },
            }
        }
        Ok(())
    }

    /// Reads and prints the batch at `position`, whose first bytes are
    /// `head`.
    fn batch_at(&mut self, position: u64, head: &[u8]) -> Result<Step, String> {
        let left = self.reader.size - position;
        if head.len() < HEADER_LEN {
            return Ok(Step::Lost(format!(
                "{left} bytes left, too few for a batch header ({HEADER_LEN} bytes): a truncated \
                 batch"
            )));
        }
        let header = match BatchHeader::parse(head) {
            Ok(header) => header,
            Err(error) => return Ok(Step::Lost(format!("no batch header here: {error}"))),
        };
        let size = header.size() as u64;
        if size > left {
            return Ok(Step::Lost(format!(
                "the batch at offset {} declares {size} bytes, {left} are left in the file: a \
                 truncated batch",
                header.base_offset
            )));
        }
        let bytes = self.reader.at(position, size as usize)?.to_vec();
        let computed = batch::compute_crc(&bytes);
        let crc_valid = computed == header.crc;
        self.line(batch_line(position, &header, crc_valid));
        let mut next = position + size;
        if !crc_valid {
            // The length is not covered by the CRC: the next batch is
            // searched for rather than believed to start after this one.
            let found = self.reader.next_valid_batch(position + 1)?;
            let after = match found {
                Some(at) if at == next => String::new(),
                Some(at) => {
                    next = at;
                    format!("; the next valid batch starts at byte {at}, not where its length ends")
                }
                None if next == self.reader.size => String::new(),
                None => {
                    next = self.reader.size;
                    "; no valid batch after it".to_string()
                }
            };
            self.problem(
                position,
                format!(
                    "CRC mismatch in the batch at offset {}: stored {:08x}, computed {computed:08x} \
                     (its bytes are damaged){after}",
                    header.base_offset, header.crc
                ),
            );
        }
        self.check_offsets(position, &header);
        self.found.push(Found {
            position,
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
            max_timestamp: header.max_timestamp,
        });
        self.records += u64::try_from(header.record_count).unwrap_or(0);
        if crc_valid && (self.options.records || self.options.values) && !self.quiet {
            self.print_records(position, &header, bytes);
        }
        Ok(Step::Next(next))
    }

    /// Offsets only grow through a segment, from its base offset on.
    fn check_offsets(&mut self, position: u64, header: &BatchHeader) {
        let previous = self.found.last().map(|f| f.last_offset);
        if let Some(previous) = previous {
            if header.base_offset <= previous {
                self.problem(
                    position,
                    format!(
                        "the batch's base offset {} is not above {previous}, the last offset of \
                         the batch before it",
                        header.base_offset
                    ),
                );
            }
        } else if let Some(base) = self.base_offset {
            if header.base_offset < 0 || (header.base_offset as u64) < base {
                self.problem(
                    position,
                    format!(
                        "the first batch's base offset {} is below {base}, the segment's base \
                         offset (its file name)",
                        header.base_offset
                    ),
                );
            }
        }
    }

    /// Prints every record of the batch at `position`, decompressed.
    fn print_records(&mut self, position: u64, header: &BatchHeader, batch: Vec<u8>) {
        let codec = header.compression();
        let body = match codec {
            Compression::None => Bytes::from(batch).slice(HEADER_LEN..),
            codec => match protocol::records::decompress_records(
                &batch[HEADER_LEN..],
                codec,
                DECOMPRESSED_BYTES_MAX,
            ) {
                Ok(records) => Bytes::from(records),
                Err(error) => {
                    self.problem(
                        position,
                        format!("the batch's records do not decompress: {error}"),
                    );
                    return;
                }
            },
        };
        let records = Records::new(
            body,
            header.base_offset,
            header.base_timestamp,
            header.record_count,
        );
        for record in records {
            match record {
                Ok(record) => {
                    let line = record_line(header, &record, self.options.values);
                    self.line(line);
                }
                Err(error) => {
                    self.problem(position, format!("in the batch here, {error}"));
                    return;
                }
            }
        }
    }
}

pub fn codec_name(codec: Compression) -> &'static str {
    match codec {
        Compression::None => "none",
        Compression::Gzip => "gzip",
        Compression::Snappy => "snappy",
        Compression::Lz4 => "lz4",
        Compression::Zstd => "zstd",
    }
}

fn batch_line(position: u64, header: &BatchHeader, crc_valid: bool) -> Line {
    Line::new("batch")
        .num("position", position)
        .num("base_offset", header.base_offset)
        .num("last_offset", header.last_offset())
        .num("records", header.record_count)
        .num("size", header.size())
        .word("codec", codec_name(header.compression()))
        .num("leader_epoch", header.partition_leader_epoch)
        .num("producer_id", header.producer_id)
        .num("producer_epoch", header.producer_epoch)
        .num("base_sequence", header.base_sequence)
        .flag("transactional", header.is_transactional())
        .flag("control", header.is_control())
        .word(
            "timestamp_type",
            if header.is_log_append_time() {
                "log_append"
            } else {
                "create"
            },
        )
        .num("max_timestamp", header.max_timestamp)
        .word("crc", format!("{:08x}", header.crc))
        .flag("crc_valid", crc_valid)
}

/// What a control record says: `commit` or `abort` (a transaction's end
/// marker) and the coordinator's epoch, from Kafka's layout (key: version
/// i16, type i16; value: version i16, coordinator epoch i32).
fn control_marker(key: Option<&[u8]>, value: Option<&[u8]>) -> (String, Option<i32>) {
    let kind = match key.and_then(|k| k.get(2..4)) {
        Some([0, 0]) => "abort".to_string(),
        Some([0, 1]) => "commit".to_string(),
        Some(other) => format!("unknown_{}", i16::from_be_bytes([other[0], other[1]])),
        None => "malformed".to_string(),
    };
    let epoch = value
        .and_then(|v| v.get(2..6))
        .map(|e| i32::from_be_bytes(e.try_into().expect("4 bytes")));
    (kind, epoch)
}

fn record_line(header: &BatchHeader, record: &batch::Record, values: bool) -> Line {
    // Every record of a LogAppendTime batch has the batch's time, as
    // Kafka's consumers read it.
    let timestamp = if header.is_log_append_time() {
        header.max_timestamp
    } else {
        record.timestamp
    };
    let mut line = Line::indented("record")
        .num("offset", record.offset)
        .num("timestamp", timestamp);
    if header.base_sequence >= 0 {
        let delta = record.offset - header.base_offset;
        let sequence = (i64::from(header.base_sequence) + delta) % (i64::from(i32::MAX) + 1);
        line = line.num("sequence", sequence);
    }
    line = line
        .data("key", record.key.as_deref())
        .maybe_num("value_bytes", record.value.as_ref().map(|v| v.len()));
    match &record.value {
        None => line = line.flag("tombstone", true),
        Some(value) if values => line = line.data("value", Some(value)),
        Some(_) => {}
    }
    let headers_text: Vec<String> = record
        .headers
        .iter()
        .map(|h| {
            let size = h
                .value
                .as_ref()
                .map_or("null".to_string(), |v| v.len().to_string());
            format!("{}:{size}", super::output::bytes_text(Some(&h.key)))
        })
        .collect();
    let headers_json = record
        .headers
        .iter()
        .map(|h| {
            let mut object = serde_json::Map::new();
            match std::str::from_utf8(&h.key) {
                Ok(key) => object.insert("key".into(), key.into()),
                Err(_) => object.insert("key_hex".into(), super::output::hex(&h.key).into()),
            };
            object.insert(
                "value_bytes".into(),
                h.value
                    .as_ref()
                    .map_or(serde_json::Value::Null, |v| v.len().into()),
            );
            serde_json::Value::Object(object)
        })
        .collect();
    line = line.custom(
        "headers",
        format!("[{}]", headers_text.join(",")),
        serde_json::Value::Array(headers_json),
    );
    if header.is_control() {
        let (marker, epoch) = control_marker(record.key.as_deref(), record.value.as_deref());
        line = line
            .word("marker", marker)
            .maybe_num("coordinator_epoch", epoch);
    }
    line
}

/// Dumps the segment at `path`: a `segment` line, its batches (and
/// records), a `tail` line for a preallocated end, `problem` lines, the
/// index checks asked for, and a `summary` line. An `Err` is a file that
/// cannot be read at all.
pub fn dump(path: &Path, options: Options, printer: &mut Printer) -> Result<(), String> {
    let base_offset = base_offset_of(path);
    let reader = Reader::open(path)?;
    let problems_before = printer.problems();
    printer.line(
        Line::new("segment")
            .text("path", &path.display().to_string())
            .num("bytes", reader.size)
            .maybe_num("base_offset", base_offset),
    );
    let mut scan = Scan {
        reader,
        printer,
        quiet: false,
        options,
        base_offset,
        found: Vec::new(),
        records: 0,
        problems: 0,
    };
    if let Err(reason) = scan.run() {
        let at = scan.found.last().map_or(0, |f| f.position);
        scan.problem(at, reason);
    }
    let Scan {
        reader,
        found,
        records,
        ..
    } = scan;
    if options.verify_index {
        verify_beside(path, base_offset, reader.size, &found, printer);
    }
    printer.line(
        Line::new("summary")
            .num("batches", found.len())
            .num("records", records)
            .maybe_num("first_offset", found.first().map(|f| f.base_offset))
            .maybe_num("last_offset", found.last().map(|f| f.last_offset))
            .num("problems", printer.problems() - problems_before),
    );
    Ok(())
}

/// The batches of the segment at `path` without printing them, and its
/// size, for checking an index dumped on its own; problems of the log are
/// counted in the second value.
fn batches_of(path: &Path, printer: &mut Printer) -> Result<(Vec<Found>, u64, usize), String> {
    let reader = Reader::open(path)?;
    let size = reader.size;
    let mut scan = Scan {
        reader,
        printer,
        quiet: true,
        options: Options::default(),
        base_offset: base_offset_of(path),
        found: Vec::new(),
        records: 0,
        problems: 0,
    };
    scan.run()?;
    Ok((scan.found, size, scan.problems))
}

/// An index entry that does not agree with the log, or a file that is no
/// index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The entry's number (0 the first), `None` for the file as a whole.
    pub entry: Option<usize>,
    pub reason: String,
}

/// The log an index is checked against: its batches and size.
#[derive(Clone, Copy)]
pub struct LogView<'a> {
    pub found: &'a [Found],
    pub size: u64,
}

/// One `.index` entry: (relative offset, position), big-endian (see
/// `storage::index`).
fn offset_entries(bytes: &[u8]) -> impl Iterator<Item = (u32, u32)> + '_ {
    bytes.chunks_exact(OFFSET_ENTRY_BYTES).map(|chunk| {
        (
            u32::from_be_bytes(chunk[..4].try_into().expect("4 bytes")),
            u32::from_be_bytes(chunk[4..].try_into().expect("4 bytes")),
        )
    })
}

/// One `.timeindex` entry: (timestamp, relative offset), big-endian.
fn time_entries(bytes: &[u8]) -> impl Iterator<Item = (i64, u32)> + '_ {
    bytes.chunks_exact(TIME_ENTRY_BYTES).map(|chunk| {
        (
            i64::from_be_bytes(chunk[..8].try_into().expect("8 bytes")),
            u32::from_be_bytes(chunk[8..].try_into().expect("4 bytes")),
        )
    })
}

fn partial_entry(bytes: &[u8], entry_bytes: usize) -> Option<Mismatch> {
    let rest = bytes.len() % entry_bytes;
    (rest != 0).then(|| Mismatch {
        entry: None,
        reason: format!(
            "{} bytes are not a whole number of {entry_bytes}-byte entries: the last {rest} bytes \
             are no entry",
            bytes.len()
        ),
    })
}

/// Checks an offset index against the log (when given): entries grow in
/// both fields, and each names a position where a batch starts that ends at
/// the entry's offset, as the broker's reads rely on.
pub fn check_offset_index(bytes: &[u8], base_offset: u64, log: Option<LogView>) -> Vec<Mismatch> {
    let mut mismatches: Vec<Mismatch> = partial_entry(bytes, OFFSET_ENTRY_BYTES)
        .into_iter()
        .collect();
    let mut previous: Option<(u32, u32)> = None;
    for (entry, (relative, position)) in offset_entries(bytes).enumerate() {
        let offset = base_offset + u64::from(relative);
        let mut wrong = |reason: String| {
            mismatches.push(Mismatch {
                entry: Some(entry),
                reason,
            })
        };
        if let Some((last_relative, last_position)) = previous {
            if relative <= last_relative || position <= last_position {
                wrong(format!(
                    "offset {offset} at byte {position} does not grow over the entry before it \
                     (offset {} at byte {last_position})",
                    base_offset + u64::from(last_relative)
                ));
            }
        }
        previous = Some((relative, position));
        let Some(log) = log else { continue };
        let position = u64::from(position);
        if position >= log.size {
            wrong(format!(
                "names byte {position}, past the end of the log ({} bytes)",
                log.size
            ));
            continue;
        }
        match log.found.binary_search_by_key(&position, |f| f.position) {
            Ok(at) => {
                let batch = log.found[at];
                if batch.last_offset != offset as i64 {
                    wrong(format!(
                        "names offset {offset} at byte {position}, but the batch there holds \
                         offsets {} to {}",
                        batch.base_offset, batch.last_offset
                    ));
                }
            }
            Err(_) => wrong(format!(
                "names offset {offset} at byte {position}, where no batch starts"
            )),
        }
    }
    mismatches
}

/// Checks a time index against the log (when given): entries grow in both
/// fields, and each names an offset of a batch whose max timestamp is the
/// entry's timestamp (the largest timestamp up to that batch).
pub fn check_time_index(bytes: &[u8], base_offset: u64, log: Option<LogView>) -> Vec<Mismatch> {
    let mut mismatches: Vec<Mismatch> =
        partial_entry(bytes, TIME_ENTRY_BYTES).into_iter().collect();
    let mut previous: Option<(i64, u32)> = None;
    for (entry, (timestamp, relative)) in time_entries(bytes).enumerate() {
        let offset = (base_offset + u64::from(relative)) as i64;
        let mut wrong = |reason: String| {
            mismatches.push(Mismatch {
                entry: Some(entry),
                reason,
            })
        };
        if let Some((last_timestamp, last_relative)) = previous {
            if timestamp <= last_timestamp || relative <= last_relative {
                wrong(format!(
                    "timestamp {timestamp} at offset {offset} does not grow over the entry \
                     before it (timestamp {last_timestamp} at offset {})",
                    base_offset + u64::from(last_relative)
                ));
            }
        }
        previous = Some((timestamp, relative));
        let Some(log) = log else { continue };
        let at = log.found.partition_point(|f| f.last_offset < offset);
        match log.found.get(at) {
            Some(batch) if batch.base_offset <= offset => {
                if batch.max_timestamp != timestamp {
                    wrong(format!(
                        "says timestamp {timestamp} for offset {offset}, but the batch holding it \
                         (at byte {}) has max timestamp {}",
                        batch.position, batch.max_timestamp
                    ));
                }
            }
            _ => wrong(format!(
                "names offset {offset}, which no batch of the log holds"
            )),
        }
    }
    mismatches
}

/// The two index kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    Offset,
    Time,
}

impl IndexKind {
    fn extension(self) -> &'static str {
        match self {
            Self::Offset => "index",
            Self::Time => "timeindex",
        }
    }

    fn line_kind(self) -> &'static str {
        match self {
            Self::Offset => "offset_index",
            Self::Time => "time_index",
        }
    }

    fn check(self, bytes: &[u8], base_offset: u64, log: Option<LogView>) -> Vec<Mismatch> {
        match self {
            Self::Offset => check_offset_index(bytes, base_offset, log),
            Self::Time => check_time_index(bytes, base_offset, log),
        }
    }

    fn entries(self, bytes: &[u8]) -> usize {
        match self {
            Self::Offset => bytes.len() / OFFSET_ENTRY_BYTES,
            Self::Time => bytes.len() / TIME_ENTRY_BYTES,
        }
    }
}

fn print_mismatches(printer: &mut Printer, path: &Path, mismatches: Vec<Mismatch>) {
    for mismatch in mismatches {
        printer.problem(
            Line::new("problem")
                .text("file", &path.display().to_string())
                .maybe_num("entry", mismatch.entry)
                .reason(mismatch.reason),
        );
    }
}

/// Checks the `.index` and `.timeindex` beside the segment at `log_path`.
fn verify_beside(
    log_path: &Path,
    base_offset: Option<u64>,
    log_size: u64,
    found: &[Found],
    printer: &mut Printer,
) {
    let Some(base_offset) = base_offset else {
        printer.problem(Line::new("problem").reason(
            "cannot check the indexes: the segment's base offset comes from its file name \
             (<20 digits>.log), which this file does not have",
        ));
        return;
    };
    let log = LogView {
        found,
        size: log_size,
    };
    for kind in [IndexKind::Offset, IndexKind::Time] {
        let path = log_path.with_extension(kind.extension());
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                printer.line(
                    Line::new(kind.line_kind())
                        .text("path", &path.display().to_string())
                        .word("state", "missing")
                        .reason(
                            "not beside the segment; the broker writes an active segment's \
                             indexes when the segment is sealed or the broker stops cleanly, \
                             and rebuilds missing ones: nothing to check",
                        ),
                );
                continue;
            }
            Err(error) => {
                printer.problem(
                    Line::new("problem")
                        .text("file", &path.display().to_string())
                        .reason(format!("cannot read: {error}")),
                );
                continue;
            }
        };
        let mismatches = kind.check(&bytes, base_offset, Some(log));
        let count = mismatches.len();
        print_mismatches(printer, &path, mismatches);
        printer.line(
            Line::new(kind.line_kind())
                .text("path", &path.display().to_string())
                .num("entries", kind.entries(&bytes))
                .num("mismatches", count),
        );
    }
}

/// Dumps an index file on its own: every entry, problems of its form and,
/// with `verify`, entries that disagree with the segment beside it.
pub fn dump_index(
    path: &Path,
    kind: IndexKind,
    verify: bool,
    printer: &mut Printer,
) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let base = base_offset_of(path);
    printer.line(
        Line::new(kind.line_kind())
            .text("path", &path.display().to_string())
            .num("bytes", bytes.len())
            .maybe_num("base_offset", base),
    );
    // Offsets print as the file holds them (relative) without a base.
    let base_offset = base.unwrap_or(0);
    match kind {
        IndexKind::Offset => {
            for (entry, (relative, position)) in offset_entries(&bytes).enumerate() {
                printer.line(
                    Line::new("index_entry")
                        .num("entry", entry)
                        .num("offset", base_offset + u64::from(relative))
                        .num("position", position),
                );
            }
        }
        IndexKind::Time => {
            for (entry, (timestamp, relative)) in time_entries(&bytes).enumerate() {
                printer.line(
                    Line::new("time_index_entry")
                        .num("entry", entry)
                        .num("timestamp", timestamp)
                        .num("offset", base_offset + u64::from(relative)),
                );
            }
        }
    }
    let log_path = path.with_extension("log");
    let scanned = if verify {
        if base.is_none() {
            return Err(format!(
                "cannot check {} against its segment: the base offset comes from the file name \
                 (<20 digits>.{}), which this file does not have",
                path.display(),
                kind.extension()
            ));
        }
        let (found, size, log_problems) = batches_of(&log_path, printer)?;
        if log_problems > 0 {
            printer.problem(
                Line::new("problem")
                    .text("file", &log_path.display().to_string())
                    .reason(format!(
                        "the segment has {log_problems} problems of its own; run strom log dump \
                         {} to see them",
                        quoted(&log_path.display().to_string())
                    )),
            );
        }
        Some((found, size))
    } else {
        None
    };
    let log = scanned
        .as_ref()
        .map(|(found, size)| LogView { found, size: *size });
    let mismatches = kind.check(&bytes, base_offset, log);
    let count = mismatches.len();
    print_mismatches(printer, path, mismatches);
    printer.line(
        Line::new("summary")
            .num("entries", kind.entries(&bytes))
            .num("mismatches", count)
            .flag("checked_against_log", log.is_some()),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::batch::build::{self, NewRecord};

    const TS: i64 = 1_700_000_000_000;

    /// A batch of `count` records at `base_offset`.
    fn batch(base_offset: i64, count: usize) -> Vec<u8> {
        let records: Vec<NewRecord> = (0..count)
            .map(|i| NewRecord {
                key: Some(format!("k{i}").into_bytes()),
                value: Some(vec![b'v'; 10 + i]),
                timestamp_delta: i as i64,
                ..Default::default()
            })
            .collect();
        let mut bytes = build::batch(TS + base_offset, &records);
        batch::set_base_offset(&mut bytes, base_offset);
        bytes
    }

    /// Three batches of offsets 0-2, 3-4 and 5; their positions.
    fn segment() -> (Vec<u8>, [u64; 3]) {
        let mut bytes = Vec::new();
        let mut positions = [0u64; 3];
        for (i, (base, count)) in [(0, 3), (3, 2), (5, 1)].into_iter().enumerate() {
            positions[i] = bytes.len() as u64;
            bytes.extend_from_slice(&batch(base, count));
        }
        (bytes, positions)
    }

    /// Scans `bytes` written as a segment file: the batches found, the
    /// problems' count.
    fn scan(bytes: &[u8]) -> (Vec<Found>, usize) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.log");
        std::fs::write(&path, bytes).unwrap();
        let mut printer = Printer::sink();
        let (found, _, problems) = batches_of(&path, &mut printer).unwrap();
        (found, problems)
    }

    fn positions(found: &[Found]) -> Vec<u64> {
        found.iter().map(|f| f.position).collect()
    }

    #[test]
    fn a_whole_segment_scans_without_problems_and_a_zero_tail_is_no_damage() {
        let (mut bytes, at) = segment();
        let (found, problems) = scan(&bytes);
        assert_eq!((positions(&found), problems), (at.to_vec(), 0));
        assert_eq!(found[1].base_offset, 3);
        assert_eq!(found[1].last_offset, 4);
        bytes.extend_from_slice(&[0u8; 5000]);
        assert_eq!(scan(&bytes), (found, 0));
        assert_eq!(scan(&[0u8; 30]), (vec![], 0));
        assert_eq!(scan(&[]), (vec![], 0));
    }

    #[test]
    fn damage_is_skipped_to_the_next_valid_batch() {
        let (bytes, at) = segment();
        // A flipped byte in the second batch's records: it is still listed
        // (CRC invalid), the third follows.
        let mut flipped = bytes.clone();
        flipped[at[1] as usize + HEADER_LEN + 3] ^= 0x40;
        let (found, problems) = scan(&flipped);
        assert_eq!((positions(&found), problems), (at.to_vec(), 1));
        // A damaged length in the second batch: the third is found anyway.
        let mut length = bytes.clone();
        length[at[1] as usize + 8..at[1] as usize + 12].copy_from_slice(&9999i32.to_be_bytes());
        let (found, problems) = scan(&length);
        assert_eq!(positions(&found), vec![at[0], at[2]]);
        assert_eq!(problems, 1);
        // Garbage between batches.
        let mut garbage = bytes[..at[1] as usize].to_vec();
        garbage.extend_from_slice(&[0x02; 7]);
        garbage.extend_from_slice(&bytes[at[1] as usize..]);
        let (found, problems) = scan(&garbage);
        assert_eq!(positions(&found), vec![at[0], at[1] + 7, at[2] + 7]);
        assert_eq!(problems, 1);
        // A bad magic byte at the start.
        let mut magic = bytes.clone();
        magic[MAGIC_POSITION] = 1;
        let (found, problems) = scan(&magic);
        assert_eq!((positions(&found), problems), (vec![at[1], at[2]], 1));
        // Zeros inside the file, with batches after them, are damage.
        let mut hole = bytes.clone();
        hole[..at[1] as usize].fill(0);
        assert_eq!(scan(&hole).1, 1);
    }

    #[test]
    fn a_truncated_batch_or_header_is_a_problem() {
        let (bytes, at) = segment();
        for cut in [
            at[2] as usize + 10,
            at[2] as usize + HEADER_LEN + 2,
            bytes.len() - 1,
        ] {
            let (found, problems) = scan(&bytes[..cut]);
            assert_eq!(
                (positions(&found), problems),
                (vec![at[0], at[1]], 1),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn offsets_that_do_not_grow_are_a_problem() {
        let mut bytes = batch(0, 3);
        bytes.extend_from_slice(&batch(2, 1));
        assert_eq!(scan(&bytes).1, 1);
    }

    fn offset_index(entries: &[(u32, u32)]) -> Vec<u8> {
        entries
            .iter()
            .flat_map(|(r, p)| [r.to_be_bytes(), p.to_be_bytes()].concat())
            .collect()
    }

    fn time_index(entries: &[(i64, u32)]) -> Vec<u8> {
        entries
            .iter()
            .flat_map(|(t, r)| [t.to_be_bytes().to_vec(), r.to_be_bytes().to_vec()].concat())
            .collect()
    }

    fn reasons(mismatches: Vec<Mismatch>) -> Vec<(Option<usize>, String)> {
        mismatches
            .into_iter()
            .map(|m| (m.entry, m.reason))
            .collect()
    }

    #[test]
    fn index_entries_must_point_at_the_batches_they_name() {
        let (bytes, at) = segment();
        let (found, _) = scan(&bytes);
        let log = Some(LogView {
            found: &found,
            size: bytes.len() as u64,
        });
        let [a, b, c] = at.map(|p| p as u32);
        let check =
            |entries: &[(u32, u32)]| reasons(check_offset_index(&offset_index(entries), 0, log));
        assert!(check(&[(2, a), (4, b), (5, c)]).is_empty());
        assert!(check(&[(2, a), (5, c)]).is_empty(), "sparse is fine");
        let wrong = check(&[(2, a), (3, b), (5, c + 1)]);
        assert_eq!(wrong.len(), 2, "{wrong:?}");
        assert_eq!(wrong[0].0, Some(1));
        assert!(wrong[0].1.contains("holds offsets 3 to 4"), "{wrong:?}");
        assert!(wrong[1].1.contains("no batch starts"), "{wrong:?}");
        let past = check(&[(9, bytes.len() as u32)]);
        assert!(past[0].1.contains("past the end"), "{past:?}");
        let shrinking = check(&[(4, b), (2, a)]);
        assert!(shrinking[0].1.contains("does not grow"), "{shrinking:?}");
        let mut partial = offset_index(&[(2, a)]);
        partial.push(7);
        assert_eq!(reasons(check_offset_index(&partial, 0, log))[0].0, None);
        // Without the log, only the form is checked.
        assert!(check_offset_index(&offset_index(&[(2, 999_999)]), 0, None).is_empty());
    }

    #[test]
    fn time_index_entries_must_name_the_max_timestamp_of_their_batch() {
        let (bytes, _) = segment();
        let (found, _) = scan(&bytes);
        let log = Some(LogView {
            found: &found,
            size: bytes.len() as u64,
        });
        // Batch at offset 3 has timestamps TS+3 and TS+4.
        let check =
            |entries: &[(i64, u32)]| reasons(check_time_index(&time_index(entries), 0, log));
        assert!(check(&[(TS + 2, 2), (TS + 4, 4), (TS + 5, 5)]).is_empty());
        let wrong = check(&[(TS + 2, 2), (TS + 3, 4)]);
        assert_eq!(wrong.len(), 1);
        assert!(
            wrong[0].1.contains("max timestamp 1700000000004"),
            "{wrong:?}"
        );
        let missing = check(&[(TS + 9, 9)]);
        assert!(missing[0].1.contains("no batch"), "{missing:?}");
    }

    #[test]
    fn control_markers_read_as_kafka_writes_them() {
        assert_eq!(
            control_marker(Some(&[0, 0, 0, 1]), Some(&[0, 0, 0, 0, 0, 7])),
            ("commit".to_string(), Some(7))
        );
        assert_eq!(
            control_marker(Some(&[0, 0, 0, 0]), None),
            ("abort".to_string(), None)
        );
        assert_eq!(control_marker(Some(&[0]), None).0, "malformed");
    }

    #[test]
    fn base_offsets_come_from_twenty_digit_names() {
        assert_eq!(
            base_offset_of(Path::new("/d/t-0/00000000000000016933.log")),
            Some(16933)
        );
        assert_eq!(
            base_offset_of(Path::new("00000000000000016933.timeindex")),
            Some(16933)
        );
        assert_eq!(base_offset_of(Path::new("copy.log")), None);
    }
}
