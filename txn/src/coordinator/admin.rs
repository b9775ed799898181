//! DescribeTransactions and ListTransactions (KIP-664): what the
//! coordinator holds, as Kafka shows it. Ids whose first record is still
//! being written are not shown; ids being expired show their last state.

use std::collections::BTreeSet;

use crate::error::TxnError;
use crate::state::TxnState;
use crate::TopicPartition;

use super::Coordinator;

/// One transactional id as DescribeTransactions shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnDescription {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub state: TxnState,
    pub timeout_ms: i32,
    pub txn_start_ms: i64,
    pub partitions: BTreeSet<TopicPartition>,
}

/// ListTransactions' filters; an empty list does not filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListFilter {
    /// State names, as Kafka names them; unknown ones are reported back.
    pub states: Vec<String>,
    pub producer_ids: Vec<i64>,
    /// Only transactions started longer ago than this (version 1 on);
    /// negative: no filter.
    pub duration_ms: i64,
}

impl Default for ListFilter {
    fn default() -> Self {
        Self {
            states: Vec::new(),
            producer_ids: Vec::new(),
            duration_ms: -1,
        }
    }
}

/// One listed transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnListing {
    pub transactional_id: String,
    pub producer_id: i64,
    pub state: TxnState,
}

/// ListTransactions' answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Listing {
    pub unknown_state_filters: Vec<String>,
    pub transactions: Vec<TxnListing>,
}

impl Coordinator {
    /// DescribeTransactions for one id: an empty id is INVALID_REQUEST, an
    /// id this coordinator does not hold is TRANSACTIONAL_ID_NOT_FOUND.
    pub fn describe(&self, transactional_id: &str) -> Result<TxnDescription, TxnError> {
        self.serving()?;
        if transactional_id.is_empty() {
            return Err(TxnError::InvalidRequest);
        }
        let metadata = self
            .metadata(transactional_id)
            .ok_or(TxnError::TransactionalIdNotFound)?;
        Ok(TxnDescription {
            transactional_id: transactional_id.to_string(),
            producer_id: metadata.producer_id,
            producer_epoch: metadata.producer_epoch,
            state: metadata.state,
            timeout_ms: metadata.timeout_ms,
            txn_start_ms: metadata.txn_start_ms,
            partitions: metadata.partitions.clone(),
        })
    }

    /// ListTransactions: the ids matching every filter given, in id order.
    /// As Kafka filters: a state filter of only unknown names matches
    /// nothing, and the duration filter compares `now - start` (so an
    /// Empty transaction, started at -1, passes it).
    pub fn list(&self, filter: &ListFilter, now_ms: i64) -> Result<Listing, TxnError> {
        self.serving()?;
        let mut listing = Listing::default();
        let mut states = BTreeSet::new();
        for name in &filter.states {
            match TxnState::from_name(name) {
                Some(state) => {
                    states.insert(state);
                }
                None => listing.unknown_state_filters.push(name.clone()),
            }
        }
        listing.transactions = self
            .transactions()
            .filter(|(_, m)| m.state != TxnState::Dead)
            .filter(|(_, m)| {
                filter.producer_ids.is_empty() || filter.producer_ids.contains(&m.producer_id)
            })
            .filter(|(_, m)| filter.states.is_empty() || states.contains(&m.state))
            .filter(|(_, m)| {
                filter.duration_ms < 0 || now_ms.saturating_sub(m.txn_start_ms) > filter.duration_ms
            })
            .map(|(id, m)| TxnListing {
                transactional_id: id.to_string(),
                producer_id: m.producer_id,
                state: m.state,
            })
            .collect();
        Ok(listing)
    }
}
