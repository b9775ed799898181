//! Kafka wire protocol pieces for Strom.
//!
//! Architecture invariant: this crate does no I/O and knows nothing of the
//! broker or storage; it turns bytes into typed views and back.

pub mod batch;
