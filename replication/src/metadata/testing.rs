//! What tests of the metadata build their records from.

use std::collections::BTreeMap;

use super::{PartitionState, TopicMeta};

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
