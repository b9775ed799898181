//! InitProducerId for a transactional id: a producer id and a new epoch,
//! which fences every older producer of the same id (KIP-98), with the
//! checks of a producer that names its own id and epoch to re-initialise
//! after an error (KIP-360), and a new producer id once the epochs run
//! out.

use crate::error::TxnError;
use crate::limits::{NO_PRODUCER_EPOCH, PRODUCER_EPOCH_EXHAUSTED, TRANSACTIONAL_IDS_MAX};
use crate::state::TxnState;

use super::{AfterAppend, Coordinator, Pending, Plan, Transaction, TxnMetadata};

/// A producer id and epoch, as a producer names itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProducerIdAndEpoch {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

impl Coordinator {
    /// InitProducerId with a transactional id. `expected` is the
    /// producer's own id and epoch when it re-initialises itself (the
    /// request's producer id is not -1). `alloc` hands out a new producer
    /// id; it is called only for a new transactional id or when the
    /// epochs of the current producer id are exhausted.
    ///
    /// Kafka's rules, in order:
    /// - an empty id is INVALID_REQUEST; a timeout not in
    ///   `1..=transaction.max.timeout.ms` is INVALID_TRANSACTION_TIMEOUT;
    /// - a new id gets a new producer id at epoch 0;
    /// - a pending transition is CONCURRENT_TRANSACTIONS;
    /// - `expected` must name the current producer id, or the previous one
    ///   with an exhausted epoch (a retry of the call that replaced it),
    ///   else PRODUCER_FENCED;
    /// - a decided transaction (PrepareCommit, PrepareAbort) is
    ///   CONCURRENT_TRANSACTIONS: the client retries once it completes;
    /// - with no transaction open the epoch is bumped (with `expected`,
    ///   only from the current epoch; naming the epoch before a bump is a
    ///   retry that gets the same epoch again; any other is
    ///   PRODUCER_FENCED), or once exhausted a new producer id starts at
    ///   epoch 0;
    /// - an open transaction is aborted first: the plan fences its
    ///   producer and moves it to PrepareAbort ([`AfterAppend::Fenced`]),
    ///   and the client, answered CONCURRENT_TRANSACTIONS, retries.
    pub fn init_producer_id(
        &mut self,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<ProducerIdAndEpoch>,
        now_ms: i64,
        alloc: &mut impl FnMut() -> Result<i64, TxnError>,
    ) -> Result<Plan, TxnError> {
        self.serving()?;
        Self::check_id(transactional_id)?;
        if timeout_ms <= 0 || timeout_ms > self.config.max_timeout_ms {
            return Err(TxnError::InvalidTransactionTimeout);
        }
        if !self.transactions.contains_key(transactional_id) {
            if self.transactions.len() >= TRANSACTIONAL_IDS_MAX {
                return Err(TxnError::CoordinatorNotAvailable);
            }
            let producer_id = allocate(alloc, None)?;
            // Not in the log until its first plan completes.
            let created = Transaction {
                metadata: TxnMetadata {
                    producer_id,
                    previous_producer_id: crate::limits::NO_PRODUCER_ID,
                    producer_epoch: NO_PRODUCER_EPOCH,
                    last_producer_epoch: NO_PRODUCER_EPOCH,
                    timeout_ms,
                    state: TxnState::Empty,
                    partitions: Default::default(),
                    txn_start_ms: -1,
                    last_update_ms: now_ms,
                },
                durable: false,
                pending: None,
                plan_seq: 0,
            };
            self.transactions
                .insert(transactional_id.to_string(), created);
        }
        let outcome = self.init_existing(transactional_id, timeout_ms, expected, now_ms, alloc);
        if outcome.is_err() {
            // A new id whose first record was never planned is forgotten.
            if let Some(txn) = self.transactions.get(transactional_id) {
                if !txn.durable && txn.pending.is_none() {
                    self.transactions.remove(transactional_id);
                }
            }
        }
        outcome
    }

    fn init_existing(
        &mut self,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<ProducerIdAndEpoch>,
        now_ms: i64,
        alloc: &mut impl FnMut() -> Result<i64, TxnError>,
    ) -> Result<Plan, TxnError> {
        let txn = &self.transactions[transactional_id];
        if txn.pending.is_some() {
            return Err(TxnError::ConcurrentTransactions);
        }
        let current = &txn.metadata;
        if let Some(expected) = expected {
            // A new state (epoch -1) accepts any: the producer lost its
            // id (the id expired) and gets the new one.
            let known = current.producer_epoch == NO_PRODUCER_EPOCH
                || expected.producer_id == current.producer_id
                || (expected.producer_id == current.previous_producer_id
                    && expected.producer_epoch >= PRODUCER_EPOCH_EXHAUSTED);
            if !known {
                return Err(TxnError::ProducerFenced);
            }
        }
        match current.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                Err(TxnError::ConcurrentTransactions)
            }
            TxnState::Ongoing => Ok(self.fence(transactional_id, now_ms)),
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let mut next = current.clone();
                next.state = TxnState::Empty;
                next.partitions.clear();
                next.txn_start_ms = -1;
                next.last_update_ms = now_ms;
                next.timeout_ms = timeout_ms;
                next.previous_producer_id = current.producer_id;
                let exhausted = current.producer_epoch >= PRODUCER_EPOCH_EXHAUSTED;
                let own_epoch = expected.is_none_or(|e| e.producer_epoch == current.producer_epoch);
                if exhausted && own_epoch {
                    next.producer_id = allocate(alloc, Some(current.producer_id))?;
                    next.producer_epoch = 0;
                    next.last_producer_epoch = match expected {
                        Some(_) => current.producer_epoch,
                        None => NO_PRODUCER_EPOCH,
                    };
                } else {
                    match expected {
                        // Not exhausted here: the bump stays a client epoch.
                        None => {
                            next.producer_epoch = current.producer_epoch + 1;
                            next.last_producer_epoch = NO_PRODUCER_EPOCH;
                        }
                        Some(e)
                            if current.producer_epoch == NO_PRODUCER_EPOCH
                                || e.producer_epoch == current.producer_epoch =>
                        {
                            next.producer_epoch = current.producer_epoch + 1;
                            next.last_producer_epoch = current.producer_epoch;
                        }
                        // A retry of a bump this producer asked for: the
                        // epoch it was given, again.
                        Some(e)
                            if current.last_producer_epoch != NO_PRODUCER_EPOCH
                                && e.producer_epoch == current.last_producer_epoch => {}
                        Some(_) => return Err(TxnError::ProducerFenced),
                    }
                }
                let then = AfterAppend::ProducerId {
                    producer_id: next.producer_id,
                    producer_epoch: next.producer_epoch,
                };
                Ok(self.plan(
                    transactional_id,
                    next,
                    Pending::Append(TxnState::Empty),
                    then,
                ))
            }
            // Never a durable state: Dead is removed when loaded and
            // PrepareEpochFence is never written.
            TxnState::Dead | TxnState::PrepareEpochFence => Err(TxnError::InvalidTxnState),
        }
    }

    /// Aborts the id's open transaction, fencing its producer: the epoch is
    /// bumped in the same record that moves it to PrepareAbort, and the
    /// markers carry the bumped epoch, so the partitions fence the old
    /// producer too. The bumped epoch is never given to a client: the next
    /// InitProducerId bumps it again (or rotates the producer id if that
    /// exhausted the epochs). An epoch at `i16::MAX` is not bumped.
    pub(super) fn fence(&mut self, transactional_id: &str, now_ms: i64) -> Plan {
        let current = &self.transactions[transactional_id].metadata;
        debug_assert_eq!(current.state, TxnState::Ongoing);
        let mut next = current.clone();
        next.producer_epoch = current.producer_epoch.saturating_add(1);
        next.last_producer_epoch = NO_PRODUCER_EPOCH;
        next.state = TxnState::PrepareAbort;
        next.last_update_ms = now_ms;
        let then = AfterAppend::Fenced(self.markers(transactional_id, &next, false));
        self.plan(
            transactional_id,
            next,
            Pending::Append(TxnState::PrepareAbort),
            then,
        )
    }
}

/// A producer id from the caller's allocator. One that cannot be a new
/// producer id (negative, or the id's current one) is refused as
/// COORDINATOR_NOT_AVAILABLE rather than written: the client retries.
fn allocate(
    alloc: &mut impl FnMut() -> Result<i64, TxnError>,
    current: Option<i64>,
) -> Result<i64, TxnError> {
    let producer_id = alloc()?;
    if producer_id < 0 || Some(producer_id) == current {
        return Err(TxnError::CoordinatorNotAvailable);
    }
    Ok(producer_id)
}
