//! A transaction's requests: AddPartitionsToTxn (and its verify-only form),
//! AddOffsetsToTxn, EndTxn, and the completion once its markers are
//! written.

use std::collections::BTreeSet;

use crate::error::TxnError;
use crate::limits::{TOPIC_NAME_BYTES_MAX, TRANSACTION_PARTITIONS_MAX};
use crate::state::TxnState;
use crate::TopicPartition;

use super::{AfterAppend, Coordinator, Pending, Plan, ProducerIdAndEpoch};

/// The verify-only AddPartitionsToTxn's answer: each partition asked
/// about, and whether it is in the transaction.
pub type Verified = Vec<(TopicPartition, Result<(), TxnError>)>;

/// The internal topic whose partitions hold consumer group offsets.
pub const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";

impl Coordinator {
    /// AddPartitionsToTxn: adds `partitions` to the producer's open
    /// transaction, opening one (and starting its timeout) if none is.
    /// `Ok(None)`: every partition is in the open transaction already, so
    /// the request succeeds with nothing to write.
    ///
    /// Kafka's rules, in order: an empty id is INVALID_REQUEST; an unknown
    /// id or another producer id is INVALID_PRODUCER_ID_MAPPING; another
    /// epoch is PRODUCER_FENCED; a pending transition or a decided
    /// transaction is CONCURRENT_TRANSACTIONS.
    pub fn add_partitions(
        &mut self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        partitions: &BTreeSet<TopicPartition>,
        now_ms: i64,
    ) -> Result<Option<Plan>, TxnError> {
        self.serving()?;
        Self::check_id(transactional_id)?;
        if partitions
            .iter()
            .any(|(topic, _)| topic.len() > TOPIC_NAME_BYTES_MAX)
        {
            return Err(TxnError::InvalidRequest);
        }
        let txn = self.producer_state(transactional_id, producer)?;
        if txn.pending.is_some() {
            return Err(TxnError::ConcurrentTransactions);
        }
        let current = &txn.metadata;
        match current.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                return Err(TxnError::ConcurrentTransactions)
            }
            TxnState::Ongoing if partitions.is_subset(&current.partitions) => return Ok(None),
            TxnState::Dead | TxnState::PrepareEpochFence => return Err(TxnError::InvalidTxnState),
            TxnState::Empty
            | TxnState::Ongoing
            | TxnState::CompleteCommit
            | TxnState::CompleteAbort => {}
        }
        let mut next = current.clone();
        next.partitions.extend(partitions.iter().cloned());
        if next.partitions.len() > TRANSACTION_PARTITIONS_MAX {
            return Err(TxnError::InvalidRequest);
        }
        if current.state != TxnState::Ongoing {
            next.txn_start_ms = now_ms;
        }
        next.state = TxnState::Ongoing;
        next.last_update_ms = now_ms;
        Ok(Some(self.plan(
            transactional_id,
            next,
            Pending::Append(TxnState::Ongoing),
            AfterAppend::Added,
        )))
    }

    /// AddOffsetsToTxn: adds the group's `__consumer_offsets` partition
    /// (the request's handler maps the group to it) to the transaction, as
    /// [`Coordinator::add_partitions`] does.
    pub fn add_offsets(
        &mut self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        offsets_partition: i32,
        now_ms: i64,
    ) -> Result<Option<Plan>, TxnError> {
        let partition = (CONSUMER_OFFSETS_TOPIC.to_string(), offsets_partition);
        self.add_partitions(
            transactional_id,
            producer,
            &BTreeSet::from([partition]),
            now_ms,
        )
    }

    /// The verify-only form of AddPartitionsToTxn (version 4 on, sent by a
    /// partition leader before it appends a transactional batch): whether
    /// each partition is in the producer's transaction. Read-only; a
    /// pending transition is not checked, as Kafka does not. A partition
    /// not in it is TRANSACTION_ABORTABLE (Kafka before 3.8 answered
    /// INVALID_TXN_STATE, which the leader still answers old producers).
    pub fn verify_partitions(
        &self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        partitions: &BTreeSet<TopicPartition>,
    ) -> Result<Verified, TxnError> {
        self.serving()?;
        Self::check_id(transactional_id)?;
        let txn = self.producer_state(transactional_id, producer)?;
        if txn.metadata.state.is_prepare() {
            return Err(TxnError::ConcurrentTransactions);
        }
        Ok(partitions
            .iter()
            .map(|partition| {
                let outcome = if txn.metadata.partitions.contains(partition) {
                    Ok(())
                } else {
                    Err(TxnError::TransactionAbortable)
                };
                (partition.clone(), outcome)
            })
            .collect())
    }

    /// EndTxn: decides the producer's open transaction. The plan moves it
    /// to PrepareCommit or PrepareAbort; once that is durable the client is
    /// answered and the markers are written ([`AfterAppend::Ended`]).
    /// `Ok(None)`: a retry of an EndTxn whose transaction completed the
    /// same way, answered with success.
    ///
    /// Kafka's rules: an empty id is INVALID_REQUEST; an unknown id or
    /// another producer id is INVALID_PRODUCER_ID_MAPPING; another epoch is
    /// PRODUCER_FENCED; a pending transition (its markers being written,
    /// too) is CONCURRENT_TRANSACTIONS. Then by state: a decided
    /// transaction ended the same way again is CONCURRENT_TRANSACTIONS, the
    /// other way INVALID_TXN_STATE; a completed one the same way is
    /// success, the other way INVALID_TXN_STATE; with no transaction
    /// (Empty) both are INVALID_TXN_STATE.
    pub fn end_txn(
        &mut self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        commit: bool,
        now_ms: i64,
    ) -> Result<Option<Plan>, TxnError> {
        self.serving()?;
        Self::check_id(transactional_id)?;
        let txn = self.producer_state(transactional_id, producer)?;
        if txn.pending.is_some() {
            return Err(TxnError::ConcurrentTransactions);
        }
        let current = &txn.metadata;
        let decided = |same: bool, outcome| {
            if same {
                outcome
            } else {
                Err(TxnError::InvalidTxnState)
            }
        };
        match current.state {
            TxnState::Ongoing => {}
            TxnState::PrepareCommit => {
                return decided(commit, Err(TxnError::ConcurrentTransactions))
            }
            TxnState::PrepareAbort => {
                return decided(!commit, Err(TxnError::ConcurrentTransactions))
            }
            TxnState::CompleteCommit => return decided(commit, Ok(None)),
            TxnState::CompleteAbort => return decided(!commit, Ok(None)),
            TxnState::Empty | TxnState::Dead | TxnState::PrepareEpochFence => {
                return Err(TxnError::InvalidTxnState)
            }
        }
        let mut next = current.clone();
        next.state = if commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        next.last_update_ms = now_ms;
        let then = AfterAppend::Ended(self.markers(transactional_id, &next, commit));
        let pending = Pending::Append(next.state);
        Ok(Some(self.plan(transactional_id, next, pending, then)))
    }

    /// Every marker of the id's decided transaction is written: the plan
    /// completes it (CompleteCommit or CompleteAbort, no partitions). An id
    /// this coordinator does not hold is NOT_COORDINATOR; one whose
    /// markers are not being written is INVALID_TXN_STATE.
    pub fn markers_written(
        &mut self,
        transactional_id: &str,
        now_ms: i64,
    ) -> Result<Plan, TxnError> {
        let txn = self
            .transactions
            .get(transactional_id)
            .ok_or(TxnError::NotCoordinator)?;
        if txn.pending != Some(Pending::Markers) {
            return Err(TxnError::InvalidTxnState);
        }
        let mut next = txn.metadata.clone();
        next.state = match next.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            _ => return Err(TxnError::InvalidTxnState),
        };
        next.partitions.clear();
        next.last_update_ms = now_ms;
        let pending = Pending::Completion(next.state);
        Ok(self.plan(transactional_id, next, pending, AfterAppend::Completed))
    }
}
