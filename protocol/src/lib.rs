//! Kafka wire protocol pieces for Strom.
//!
//! Architecture invariant: this crate does no I/O and knows nothing of the
//! broker or storage; it turns bytes into typed views and back.

pub mod batch;
pub mod codec;
pub mod frame;

/// The `kafka-protocol` crate this crate builds on, re-exported so that
/// users name the same version.
pub use kafka_protocol;
