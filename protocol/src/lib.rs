//! Kafka wire protocol pieces for Strom.
//!
//! Architecture invariant: this crate knows nothing of the broker or
//! storage; it turns bytes into typed views and back. The only I/O is the
//! client connection (`client`, feature `client`) and the requests built on
//! it (`admin`), which work against any Kafka broker.

#[cfg(feature = "client")]
pub mod admin;
pub mod batch;
#[cfg(feature = "client")]
pub mod client;
pub mod codec;
pub mod compact;
pub mod consumer_protocol;
pub mod control;
pub mod error_codes;
pub mod frame;
pub mod jaas;
pub mod partitioner;
#[cfg(feature = "client")]
pub mod properties;
pub mod recompress;
pub mod records;
pub mod scram;
pub mod shape;
#[cfg(feature = "client")]
pub mod tls;
#[cfg(feature = "client")]
pub mod watchdog;

/// The `kafka-protocol` crate this crate builds on, re-exported so that
/// users name the same version.
pub use kafka_protocol;
