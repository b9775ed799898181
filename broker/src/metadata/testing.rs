//! Test doubles for the metadata log.

use std::collections::BTreeMap;

use super::{MetadataError, MetadataLog, MetadataRecord, PartitionState, TopicMeta};

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

/// A topic as the tests create it: id 42, no config overrides, each
/// partition on the core `cores` names, its replica broker 0 (epochs 0).
pub fn topic_meta(name: &str, cores: &[u32]) -> TopicMeta {
    TopicMeta {
        name: name.to_string(),
        topic_id: 42,
        partition_cores: cores.to_vec(),
        configs: BTreeMap::new(),
        partitions: cores.iter().map(|_| PartitionState::new(vec![0])).collect(),
    }
}
