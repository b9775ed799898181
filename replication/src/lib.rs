//! Replication: the code that decides the cluster's safety, as plain code a simulator can
//! drive — the metadata records and image ([`metadata`]), the controller's placement,
//! election and fencing decisions ([`placement`]), the brokers' sessions on the active
//! controller ([`sessions`]), one partition's replication state and the
//! follower's truncation rule ([`replica`]), the seam for simulated broker-to-broker messages
//! ([`transport`]) — and the controller quorum that replicates the metadata log (the KRaft
//! design).
//!
//! Consensus is TiKV's `raft` crate (raft-rs), which is sans-I/O: it never reads a clock,
//! a disk or a socket. [`quorum::Quorum`] wraps its `RawNode` for the metadata log and turns
//! each round of work into three steps whose order the types enforce:
//!
//! 1. [`quorum::Quorum::ready`] hands out a [`quorum::Pending`]: the entries, hard state and
//!    snapshot that must become durable.
//! 2. [`quorum::Quorum::persist`] writes them through the [`store::LogStore`] and only then
//!    returns a [`quorum::Persisted`] token, which nothing else can make.
//! 3. [`quorum::Quorum::advance`] takes that token and gives the [`quorum::Actions`]: messages
//!    to send (each with its destination node id), a snapshot from the leader to install, and
//!    committed entries to apply, in log order.
//!
//! Log compaction: the application hands its state at an applied index to
//! [`quorum::Quorum::compact`] when [`quorum::SnapshotPolicy`] says the log since the last
//! snapshot has grown too large. The store keeps that snapshot with its data, drops the entries
//! it covers, and serves it to raft-rs, whose leader sends it to a follower that is too far
//! behind; the transport reports each snapshot message's fate
//! ([`quorum::Quorum::report_snapshot`]).
//!
//! So no vote or append acknowledgement can leave a node before the state it promises is on
//! its store. Time is the caller's `tick()`; the network is the caller's `step(message)`.
//!
//! Stores: [`store::MemoryStore`] (in memory, for tests) and [`file_store::FileStore`] (an
//! append-only entries file with length+CRC-32 frames, torn tail cut at open, rewritten whole
//! after a snapshot; hard state and snapshot replaced atomically). Both implement
//! [`store::LogStore`] over `raft::Storage` and answer reads from one in-memory copy of the
//! log (`store::LogCache`).
//!
//! Architecture invariant: this crate does no I/O of its own except the file store, and knows
//! nothing of glommio, sockets or Kafka requests; a whole quorum runs on one thread in
//! `tests/quorum_simulation.rs` with seeded loss, delay, reordering, partitions and crashes.

pub mod file_store;
pub mod metadata;
pub mod placement;
pub mod quorum;
pub mod replica;
pub mod sessions;
pub mod store;
pub mod transport;

pub use raft::eraftpb::{Entry, EntryType, HardState, Message, Snapshot};

/// Errors of the replication crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The consensus library refused an operation (e.g. a proposal on a node that is not
    /// the leader and knows no leader to forward to).
    #[error("raft: {op}: {source}")]
    Raft {
        op: &'static str,
        #[source]
        source: raft::Error,
    },
    /// A store failed to make state durable; the node must stop (its promises are void).
    #[error("store I/O: {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A change of the voter set that the quorum refuses now (not the leader, another change
    /// still in progress, a node that is not where the change needs it).
    #[error("voter change refused: {reason}")]
    VoterChange { reason: String },
    /// The leader says this node acknowledged log entries it no longer has: its log was lost
    /// (an emptied or replaced disk). Following on would break Raft's safety; the node stops.
    #[error(
        "this node's Raft log ends at {last_index}, but the leader says it acknowledged \
         entries through {acknowledged}: the log was lost"
    )]
    LogLost { last_index: u64, acknowledged: u64 },
    /// The application must take a snapshot ([`quorum::Quorum::compact`]) before the quorum
    /// takes more messages ([`quorum::Quorum::snapshot_required`]).
    #[error("a snapshot is required before the quorum goes on")]
    SnapshotRequired,
    /// A store file holds bytes that do not decode (outside a torn tail, which is cut).
    #[error("store corrupt: {path}: {reason}")]
    Corrupt {
        path: std::path::PathBuf,
        reason: String,
    },
}
