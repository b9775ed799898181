//! Transactions (KIP-98, KIP-447): the transaction coordinator and the
//! markers it has written.
//!
//! A transactional id belongs to one partition of the internal
//! `__transaction_state` topic (Kafka's placement: the Java
//! `String.hashCode` of the id, made non-negative, modulo the partition
//! count), and the core that owns that partition's leader replica
//! coordinates it, as the group coordinator does for groups. The plain
//! state machine and the records of `__transaction_state` are the `txn`
//! crate's; `manager` is the runtime edge; `markers` writes the markers
//! that end a transaction on its partitions; `verify` is a partition
//! leader's check with the coordinator before a producer's first
//! transactional batch there.

pub mod markers;
pub mod verify;

/// The internal topic holding every transactional id's state.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// The `__transaction_state` partition of a transactional id, as Kafka
/// computes it (`Utils.abs(transactionalId.hashCode) % partitions`).
pub fn transaction_partition_for(transactional_id: &str, partitions: i32) -> i32 {
    crate::internal_topic::partition_for(transactional_id, partitions)
}

pub mod manager;

pub use crate::txn_state::TxnManager;
