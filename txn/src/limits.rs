//! The coordinator's bounds. Every per-id structure is bounded, so a
//! `__transaction_state` record always fits its encoding and a
//! coordinator's memory is bounded by the ids it holds.

/// Longest transactional id: the record key stores it as a Kafka STRING
/// (an i16 length), so this is the longest Kafka itself can write.
pub const TRANSACTIONAL_ID_BYTES_MAX: usize = i16::MAX as usize;
/// Longest topic name (Kafka's own limit). The broker checks topics exist
/// before it asks the coordinator; a longer name is refused with
/// INVALID_REQUEST all the same, so every record encodes.
pub const TOPIC_NAME_BYTES_MAX: usize = 249;
/// Partitions one transaction may span. Kafka bounds them only by the
/// record size `__transaction_state` accepts; a request that would take a
/// transaction beyond this is refused with INVALID_REQUEST.
pub const TRANSACTION_PARTITIONS_MAX: usize = 10_000;
/// Transactional ids one coordinator (one `__transaction_state` partition)
/// holds. A new id beyond it is refused with COORDINATOR_NOT_AVAILABLE;
/// ids loaded from the log are never refused.
pub const TRANSACTIONAL_IDS_MAX: usize = 1_000_000;
/// Tombstones one [`expire_ids`](crate::coordinator::Coordinator::expire_ids)
/// call plans; the rest wait for the next call.
pub const EXPIRATIONS_PER_CALL_MAX: usize = 1_000;

/// A producer id that is not one (Kafka's `NO_PRODUCER_ID`).
pub const NO_PRODUCER_ID: i64 = -1;
/// A producer epoch that is not one (Kafka's `NO_PRODUCER_EPOCH`).
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// From this epoch on a producer id's epochs are exhausted: the client
/// never gets `i16::MAX`, which stays free so the coordinator can always
/// fence the last producer, and its next InitProducerId gets a new
/// producer id.
pub const PRODUCER_EPOCH_EXHAUSTED: i16 = i16::MAX - 1;

const _: () = assert!(TOPIC_NAME_BYTES_MAX <= i16::MAX as usize);
const _: () = assert!(TRANSACTION_PARTITIONS_MAX <= i32::MAX as usize);
const _: () = assert!(EXPIRATIONS_PER_CALL_MAX <= TRANSACTIONAL_IDS_MAX);
const _: () = assert!(PRODUCER_EPOCH_EXHAUSTED < i16::MAX);
