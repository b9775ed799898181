//! Test doubles for the metadata log.

use super::{MetadataError, MetadataLog, MetadataRecord};

pub use replication::metadata::testing::topic_meta;

/// A metadata log in memory. Faults it injects: none by itself; a crash is
/// modelled by [`MemoryMetadataLog::crash`], which drops what was appended
/// but not synced, as a file loses an unsynced tail.
#[derive(Debug, Default, Clone)]
pub struct MemoryMetadataLog {
    records: Vec<MetadataRecord>,
    /// Records below this index are durable.
    synced: usize,
}

impl MemoryMetadataLog {
    /// The log as it is after a crash: only the synced records.
    pub fn crash(&self) -> MemoryMetadataLog {
        MemoryMetadataLog {
            records: self.records[..self.synced].to_vec(),
            synced: self.synced,
        }
    }
}

impl MetadataLog for MemoryMetadataLog {
    fn replay(&mut self) -> Result<Vec<MetadataRecord>, MetadataError> {
        Ok(self.records.clone())
    }

    fn append(&mut self, records: &[MetadataRecord]) -> Result<(), MetadataError> {
        self.records.extend_from_slice(records);
        Ok(())
    }

    fn sync(&mut self) -> Result<(), MetadataError> {
        self.synced = self.records.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::MetadataImage;

    fn created(name: &str) -> MetadataRecord {
        MetadataRecord::TopicCreated(topic_meta(name, &[0]))
    }

    #[test]
    fn a_crash_loses_only_what_was_not_synced() {
        let mut log = MemoryMetadataLog::default();
        log.append(&[created("a")]).unwrap();
        log.sync().unwrap();
        log.append(&[created("b")]).unwrap();
        let image = MetadataImage::replay(3, &log.crash().replay().unwrap());
        assert_eq!(image.topics.keys().collect::<Vec<_>>(), vec!["a"]);
    }
}
