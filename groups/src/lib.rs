//! Consumer groups as plain, deterministic code: the classic group
//! protocol's coordinator state machine ([`coordinator`]) and its refusals
//! ([`error`]), the records it
//! keeps in `__consumer_offsets` in Kafka's formats ([`records`]), how a
//! new leader of an offsets partition loads them ([`load`]), its
//! settings ([`config`]) and bounds ([`limits`]). No I/O and no clock: the
//! broker's runtime edge (`group::manager` in the broker) drives it with
//! requests, time and the partition's log, and the whole-cluster
//! simulator drives the same code over its simulated log.

pub mod config;
pub mod consumer_records;
pub mod coordinator;
pub mod error;
pub mod limits;
pub mod load;
mod reader;
pub mod records;
pub mod share;
pub mod share_group_records;
pub mod share_records;
