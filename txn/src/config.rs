//! The transaction settings the coordinator runs by, under Kafka's broker
//! config names.

use crate::records::ValueVersion;

/// `transaction.max.timeout.ms`'s default: 15 minutes.
pub const TRANSACTION_MAX_TIMEOUT_MS_DEFAULT: i32 = 900_000;
/// `transactional.id.expiration.ms`'s default: 7 days.
pub const TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT: i64 = 7 * 24 * 60 * 60 * 1000;

/// Transaction settings (Kafka's broker names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnConfig {
    /// `transaction.max.timeout.ms`: the longest transaction timeout an
    /// InitProducerId may ask for.
    pub max_timeout_ms: i32,
    /// The TransactionLogValue version written: Kafka writes version 0
    /// while the cluster's `transaction.version` is 0 (every 3.x cluster)
    /// and version 1 from `transaction.version` 1.
    pub log_value_version: ValueVersion,
}

impl Default for TxnConfig {
    fn default() -> Self {
        Self {
            max_timeout_ms: TRANSACTION_MAX_TIMEOUT_MS_DEFAULT,
            log_value_version: ValueVersion::V0,
        }
    }
}
