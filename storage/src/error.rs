//! The storage crate's one error type. I/O failures carry the operation,
//! the file and the offset they concern.

use std::path::PathBuf;

use protocol::batch::BatchError;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("invalid record batch: {0}")]
    InvalidBatch(#[from] BatchError),
    #[error("record batch of {size} bytes exceeds max.message.bytes ({max})")]
    BatchTooLarge { size: usize, max: u32 },
    #[error("offset {offset} is out of range: the log holds [{start}, {end})")]
    OffsetOutOfRange { offset: u64, start: u64, end: u64 },
    #[error("{op} failed on {path} at byte {position}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        position: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("corrupt data in {path} at byte {position}: {reason}")]
    Corrupt {
        path: PathBuf,
        position: u64,
        reason: String,
    },
    /// A corrupt batch with acknowledged records after it (in a later
    /// segment): cutting the log there, as after a torn write, would drop
    /// them silently, so the log does not open.
    #[error(
        "corrupt batch in {path} at byte {position} (offset {offset}): {reason}; \
         {later_segments} later segments hold records, so the log is not cut there"
    )]
    CorruptSealed {
        path: PathBuf,
        position: u64,
        offset: u64,
        later_segments: usize,
        reason: String,
    },
    /// After a failed fdatasync the kernel may have dropped the dirty pages
    /// and cleared the error, so a retry could report success for data that
    /// never reached the disk. The log stops accepting and acknowledging.
    #[error("log {path} refuses writes: {reason}")]
    Fenced { path: PathBuf, reason: String },
    #[error("log {path} is closed")]
    Closed { path: PathBuf },
    /// A follower's batch must start exactly at the log end: a gap would
    /// leave offsets no batch holds, an overlap would store offsets twice.
    #[error("log {path}: a batch at offset {base_offset} cannot be appended at the log end {log_end} (a gap or an overlap)")]
    NotAtLogEnd {
        path: PathBuf,
        base_offset: i64,
        log_end: u64,
    },
    /// The filesystem has no room (ENOSPC, or EDQUOT for a quota): nothing
    /// was lost and the log is not fenced. The append or write is refused,
    /// what was acknowledged stays, and the log takes writes again once
    /// space returns.
    #[error("{op} failed on {path} at byte {position}: no space left: {source}")]
    NoSpace {
        op: &'static str,
        path: PathBuf,
        position: u64,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;

impl StorageError {
    pub(crate) fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
        position: u64,
        source: impl Into<std::io::Error>,
    ) -> Self {
        let source = source.into();
        if is_out_of_space(&source) {
            return Self::NoSpace {
                op,
                path: path.into(),
                position,
                source,
            };
        }
        Self::Io {
            op,
            path: path.into(),
            position,
            source,
        }
    }

    /// Whether this failure is the filesystem being full (which passes
    /// once space returns), not a broken disk.
    pub fn is_out_of_space(&self) -> bool {
        matches!(self, Self::NoSpace { .. })
    }
}

/// ENOSPC and EDQUOT: the write may succeed later, nothing is broken.
pub(crate) fn is_out_of_space(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
        || e.kind() == std::io::ErrorKind::StorageFull
        || e.kind() == std::io::ErrorKind::QuotaExceeded
}

/// Attaches operation, path and position to a glommio or std I/O result.
pub(crate) trait IoContext<T> {
    fn ctx(self, op: &'static str, path: &std::path::Path, position: u64) -> Result<T>;
}

impl<T, E: Into<std::io::Error>> IoContext<T> for std::result::Result<T, E> {
    fn ctx(self, op: &'static str, path: &std::path::Path, position: u64) -> Result<T> {
        self.map_err(|e| StorageError::io(op, path, position, e))
    }
}
