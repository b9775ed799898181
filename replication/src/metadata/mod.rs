//! The cluster's metadata as plain data: the records of the metadata log
//! ([`MetadataRecord`]), the image they are applied to in log order
//! ([`MetadataImage`]: topics, their partitions' replicas, leaders, epochs
//! and ISRs, brokers, configs, producer id blocks, SCRAM credentials) and the image's snapshot
//! encoding. No I/O: a single node's file log, the controller quorum's
//! Raft log, every core's copy and the simulator apply records the same
//! way.

mod image;
mod records;
mod snapshot;
pub mod testing;

pub use image::{
    place_partitions, AclBinding, BrokerMeta, Endpoint, MetadataImage, PartitionState,
    ScramCredential, TopicMeta,
};
pub use records::MetadataRecord;
pub use snapshot::{decode as decode_snapshot, encode as encode_snapshot};

/// Why this node does not serve a partition as its leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotServed {
    /// No such topic or partition.
    UnknownTopicOrPartition,
    /// The partition exists, and another broker leads it (or none does).
    NotLeaderOrFollower,
}
