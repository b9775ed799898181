//! What the data dir takes on disk: allocated blocks (preallocation and
//! journal chunks included, holes of sparse files not), by kind. Read by
//! walking the directory, off the cores (the admin listener's thread).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Bytes allocated on disk, by what holds them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskUsage {
    /// Partition segment files (`.log`), preallocated space included.
    pub segments: u64,
    /// Offset and time indexes of the partitions.
    pub indexes: u64,
    /// The cores' journal chunks.
    pub journal: u64,
    /// The metadata log.
    pub metadata: u64,
    /// Everything else: checkpoints, producer-state snapshots, `__repair`,
    /// the lock file, directories themselves.
    pub other: u64,
}

impl DiskUsage {
    pub fn total(&self) -> u64 {
        self.segments + self.indexes + self.journal + self.metadata + self.other
    }

    /// The kinds with their label in `/metrics`.
    pub fn by_kind(&self) -> [(&'static str, u64); 5] {
        [
            ("segments", self.segments),
            ("indexes", self.indexes),
            ("journal", self.journal),
            ("metadata", self.metadata),
            ("other", self.other),
        ]
    }
}

/// Bytes the file system allocated for `metadata` (st_blocks is in 512-byte
/// units whatever the block size).
fn allocated(metadata: &std::fs::Metadata) -> u64 {
    metadata.blocks() * 512
}

/// Walks `data_dir` (at most [`crate::limits::DISK_USAGE_ENTRIES_MAX`]
/// entries, so a directory the broker does not own cannot hold a scrape
/// up for long). Entries that vanish while walking are skipped.
pub fn measure(data_dir: &Path) -> DiskUsage {
    let mut usage = DiskUsage::default();
    let mut budget = crate::limits::DISK_USAGE_ENTRIES_MAX;
    let mut walk: Vec<(std::path::PathBuf, Kind)> = vec![(data_dir.to_path_buf(), Kind::Top)];
    while let Some((dir, kind)) = walk.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if budget == 0 {
                return usage;
            }
            budget -= 1;
            let Ok(metadata) = entry.metadata() else {
                continue;
            };
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let bytes = allocated(&metadata);
            if metadata.is_dir() {
                usage.other += bytes;
                let inner = match (kind, name.as_ref()) {
                    (Kind::Top, crate::metadata::METADATA_DIR) => Kind::Metadata,
                    (Kind::Top, storage::journal::DIR_NAME) => Kind::Journal,
                    (Kind::Top, _) => Kind::Partition,
                    (other, _) => other,
                };
                walk.push((entry.path(), inner));
                continue;
            }
            let slot = match kind {
                Kind::Metadata => &mut usage.metadata,
                Kind::Journal => &mut usage.journal,
                Kind::Partition if name.ends_with(".log") => &mut usage.segments,
                Kind::Partition if name.ends_with(".index") || name.ends_with(".timeindex") => {
                    &mut usage.indexes
                }
                _ => &mut usage.other,
            };
            *slot += bytes;
        }
    }
    usage
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Top,
    Metadata,
    Journal,
    Partition,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocated_bytes_are_counted_by_kind() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for sub in ["__metadata", "__journal", "t-0"] {
            std::fs::create_dir(root.join(sub)).unwrap();
        }
        std::fs::write(root.join("__metadata/metadata.log"), vec![1u8; 10_000]).unwrap();
        std::fs::write(root.join("__journal/0-0.journal"), vec![1u8; 100_000]).unwrap();
        std::fs::write(root.join("t-0/00000000000000000000.log"), vec![1u8; 50_000]).unwrap();
        std::fs::write(
            root.join("t-0/00000000000000000000.index"),
            vec![1u8; 5_000],
        )
        .unwrap();
        // Sparse: a length with no blocks behind it counts for nothing.
        let sparse =
            std::fs::File::create(root.join("t-0/00000000000000000000.timeindex")).unwrap();
        sparse.set_len(10 << 20).unwrap();
        let usage = measure(root);
        assert!(
            (10_000..10_000 + 8192).contains(&usage.metadata),
            "{usage:?}"
        );
        assert!(
            (100_000..100_000 + 8192).contains(&usage.journal),
            "{usage:?}"
        );
        assert!(
            (50_000..50_000 + 8192).contains(&usage.segments),
            "{usage:?}"
        );
        assert!((5_000..5_000 + 8192).contains(&usage.indexes), "{usage:?}");
        assert!(usage.other > 0, "directories take blocks too: {usage:?}");
        assert_eq!(
            usage.total(),
            usage.by_kind().iter().map(|(_, b)| b).sum::<u64>()
        );
    }
}
