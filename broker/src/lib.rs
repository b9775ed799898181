//! The Strom broker: thread-per-core runtime, listeners, request handlers,
//! the controller's front end (a single node's own, or the cluster's
//! through the Raft quorum) and a cluster member's threads and per-core
//! replication. See `docs/broker.md`.

pub mod admin_http;
pub mod allocator;
pub mod authorizer;
pub mod change;
pub mod clean_shutdown;
pub mod cluster;
pub mod compaction;
pub mod config;
pub mod controller;
pub mod coordinator_forward;
pub mod credentials;
pub mod disk_usage;
pub mod environment;
pub mod errors;
pub mod exclusive;
pub mod fatal;
pub mod group;
pub mod group_state;
pub mod handlers;
pub mod internal_topic;
pub mod kraft_config;
pub mod limits;
pub mod memory;
pub mod meta_properties;
pub mod metadata;
pub mod metrics;
pub mod oauth;
pub mod partition;
pub mod principal;
pub mod producer_state;
pub mod reconciler;
pub use ::replication::replica;
pub mod runtime;
pub mod sasl;
pub mod scrape;
pub mod server;
pub mod shard;
pub mod share_state;
pub mod stages;
pub mod storage_health;
pub mod sync;
pub mod tls;
pub mod topic_config;
pub mod txn;
pub mod txn_state;
pub use ::replication::transport;
