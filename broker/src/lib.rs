//! The Strom broker: thread-per-core runtime, listeners, request handlers
//! and the single-node controller. See `docs/broker.md`.

pub mod config;
pub mod controller;
pub mod environment;
pub mod errors;
pub mod group;
pub mod handlers;
pub mod limits;
pub mod metadata;
pub mod partition;
pub mod producer_state;
pub mod runtime;
pub mod server;
pub mod shard;
pub mod sync;
pub mod topic_config;
