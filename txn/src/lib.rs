//! Transactions as plain, deterministic code: Kafka's transaction
//! coordinator as a state machine ([`coordinator`]), its refusals
//! ([`error`]), the states a transactional id goes through ([`state`]),
//! the records it keeps in `__transaction_state` in Kafka's formats
//! ([`records`]), its settings ([`config`]) and bounds ([`limits`]).
//!
//! No I/O, no clock and no producer id source of its own: every call takes
//! `now_ms`, producer ids come from a caller's allocator, and a change is a
//! [`coordinator::Plan`] that the runtime appends to the id's
//! `__transaction_state` partition before the coordinator applies it. The
//! broker's runtime edge drives it with requests, time and the partition's
//! log; a simulator can drive the same code over a simulated log.
//!
//! Architecture invariant: this crate knows Kafka's error codes and record
//! formats, nothing of the broker, its network or its storage.

pub mod config;
pub mod coordinator;
pub mod error;
pub mod limits;
pub mod records;
pub mod state;

/// A partition of a topic: (topic, partition index).
pub type TopicPartition = (String, i32);
