//! Kafka's transaction coordinator as a plain, deterministic state machine:
//! one `Coordinator` per `__transaction_state` partition its broker leads,
//! created at the leader epoch it leads at (the coordinator epoch every
//! marker carries) and dropped when leadership moves.
//!
//! Every change is two-phase, as Kafka's `TransactionMetadata` makes it: an
//! operation validates a request against the id's state and returns a
//! [`Plan`] (the id's next state, already encoded as its record, and what
//! to do once that record is durable) and marks the id's transition
//! pending. The runtime appends the record to the partition, then calls
//! [`Coordinator::complete`] (the transition applies) or
//! [`Coordinator::abandon`] (the append failed: the transition is dropped).
//! While a transition is pending every other request on that id is
//! answered CONCURRENT_TRANSACTIONS, as it is while a decided
//! transaction's markers are being written.
//!
//! A transaction's life: InitProducerId (Empty) → AddPartitionsToTxn /
//! AddOffsetsToTxn (Ongoing) → EndTxn (PrepareCommit or PrepareAbort; the
//! client is answered once that is durable) → the runtime writes a marker
//! to every partition and calls [`Coordinator::markers_written`] →
//! CompleteCommit or CompleteAbort. An InitProducerId during an open
//! transaction, or the transaction's timeout, fences the producer: its
//! epoch is bumped in the same record that moves the transaction to
//! PrepareAbort, so the old producer's later requests are PRODUCER_FENCED.
//!
//! No clock and no producer id source: every call takes `now_ms`, and
//! producer ids come from the caller's allocator. The files split it by
//! concern: `producer` (InitProducerId), `transaction` (adding partitions,
//! ending, markers), `expiry` (timeouts and idle ids), `load` (taking over
//! a partition's log) and `admin` (DescribeTransactions,
//! ListTransactions).

use std::collections::{BTreeMap, BTreeSet};

use crate::config::TxnConfig;
use crate::error::TxnError;
use crate::limits::{NO_PRODUCER_ID, TRANSACTIONAL_ID_BYTES_MAX};
use crate::records::{self, TxnLogValue};
use crate::state::TxnState;
use crate::TopicPartition;

mod admin;
mod expiry;
mod load;
mod producer;
#[cfg(test)]
mod tests;
mod transaction;

pub use admin::{ListFilter, Listing, TxnDescription, TxnListing};
pub use load::Replayed;
pub use producer::ProducerIdAndEpoch;
pub use transaction::{Verified, CONSUMER_OFFSETS_TOPIC};

/// One transactional id's state: what its latest durable record says, and
/// two fields the log keeps only partly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub producer_id: i64,
    /// The producer id the last InitProducerId replaced (the same one
    /// unless the epochs ran out): a retry of the call that rotated it is
    /// still recognised. Only version 1 records keep it: -1 after a load of
    /// version 0 records.
    pub previous_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before InitProducerId bumped it for a producer that named
    /// its own id and epoch, so a retry of that call gets the same epoch
    /// again; -1 otherwise. Not in the log: -1 after a load.
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TopicPartition>,
    /// When the open transaction's first partition was added; -1 in Empty.
    pub txn_start_ms: i64,
    pub last_update_ms: i64,
}

impl TxnMetadata {
    /// The record value this state is written as.
    pub fn log_value(&self) -> TxnLogValue {
        TxnLogValue {
            producer_id: self.producer_id,
            previous_producer_id: self.previous_producer_id,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch: self.producer_epoch,
            timeout_ms: self.timeout_ms,
            state: self.state,
            partitions: self.partitions.clone(),
            last_update_ms: self.last_update_ms,
            start_ms: self.txn_start_ms,
            client_transaction_version: 0,
        }
    }

    /// The state a loaded record value says.
    pub fn from_log_value(value: TxnLogValue) -> TxnMetadata {
        TxnMetadata {
            producer_id: value.producer_id,
            previous_producer_id: value.previous_producer_id,
            producer_epoch: value.producer_epoch,
            last_producer_epoch: crate::limits::NO_PRODUCER_EPOCH,
            timeout_ms: value.timeout_ms,
            state: value.state,
            partitions: value.partitions,
            txn_start_ms: value.start_ms,
            last_update_ms: value.last_update_ms,
        }
    }
}

/// A transition of an id that has not applied yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pending {
    /// A record moving the id to this state is being appended.
    Append(TxnState),
    /// The decided transaction's markers are being written.
    Markers,
    /// The markers are written; the record completing the transaction
    /// (to this state) is being appended.
    Completion(TxnState),
}

/// What a transaction's markers say and where they go: one marker per
/// partition, written by the partition's leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Markers {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub commit: bool,
    pub partitions: BTreeSet<TopicPartition>,
}

/// What the runtime does once a plan's record is durable (what
/// [`Coordinator::complete`] returns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterAppend {
    /// Answer InitProducerId with this producer id and epoch.
    ProducerId {
        producer_id: i64,
        producer_epoch: i16,
    },
    /// Answer AddPartitionsToTxn or AddOffsetsToTxn with success.
    Added,
    /// Answer EndTxn with success, write the markers, then call
    /// [`Coordinator::markers_written`].
    Ended(Markers),
    /// The open transaction is being aborted to fence its producer: the
    /// InitProducerId that asked (if one did) is answered
    /// CONCURRENT_TRANSACTIONS, so its client retries once the abort is
    /// complete. Write the abort markers, then call
    /// [`Coordinator::markers_written`].
    Fenced(Markers),
    /// The transaction is complete: nothing more to do.
    Completed,
    /// The transactional id expired and is gone.
    Expired,
}

/// A validated transition: the record to append and what to do once it
/// is durable. Only the coordinator makes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    transactional_id: String,
    coordinator_epoch: i32,
    next: TxnMetadata,
    key: Vec<u8>,
    value: Option<Vec<u8>>,
    then: AfterAppend,
    seq: u64,
}

impl Plan {
    pub fn transactional_id(&self) -> &str {
        &self.transactional_id
    }

    pub fn coordinator_epoch(&self) -> i32 {
        self.coordinator_epoch
    }

    /// The id's state once the record is durable (Dead for a tombstone).
    pub fn next(&self) -> &TxnMetadata {
        &self.next
    }

    /// The record's key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The record's value; `None` is a tombstone.
    pub fn value(&self) -> Option<&[u8]> {
        self.value.as_deref()
    }

    pub fn then(&self) -> &AfterAppend {
        &self.then
    }
}

struct Transaction {
    metadata: TxnMetadata,
    /// Whether a record of the id is in the log: a new id is not until its
    /// first plan completes, and is dropped if that plan is abandoned.
    durable: bool,
    pending: Option<Pending>,
    /// The plan the pending transition waits for.
    plan_seq: u64,
}

/// The transactional ids of one `__transaction_state` partition.
pub struct Coordinator {
    config: TxnConfig,
    coordinator_epoch: i32,
    /// Until [`Coordinator::after_load`]: requests are answered
    /// COORDINATOR_LOAD_IN_PROGRESS.
    loading: bool,
    transactions: BTreeMap<String, Transaction>,
    plan_seq: u64,
}

impl Coordinator {
    /// A coordinator for a partition led at `coordinator_epoch`, loading
    /// until [`Coordinator::after_load`] (call it after replaying the log,
    /// even an empty one).
    pub fn new(config: TxnConfig, coordinator_epoch: i32) -> Self {
        Self {
            config,
            coordinator_epoch,
            loading: true,
            transactions: BTreeMap::new(),
            plan_seq: 0,
        }
    }

    pub fn config(&self) -> &TxnConfig {
        &self.config
    }

    pub fn coordinator_epoch(&self) -> i32 {
        self.coordinator_epoch
    }

    pub fn is_loading(&self) -> bool {
        self.loading
    }

    /// The id's durable state.
    pub fn metadata(&self, transactional_id: &str) -> Option<&TxnMetadata> {
        self.transactions
            .get(transactional_id)
            .filter(|t| t.durable)
            .map(|t| &t.metadata)
    }

    /// The id's pending transition.
    pub fn pending(&self, transactional_id: &str) -> Option<Pending> {
        self.transactions.get(transactional_id)?.pending
    }

    /// Every id with a durable state, in id order.
    pub fn transactions(&self) -> impl Iterator<Item = (&str, &TxnMetadata)> {
        self.transactions
            .iter()
            .filter(|(_, t)| t.durable)
            .map(|(id, t)| (id.as_str(), &t.metadata))
    }

    /// Ids held, including new ones whose first record is being written.
    pub fn transactional_id_count(&self) -> usize {
        self.transactions.len()
    }

    /// Applies `plan`, made for `transactional_id`, once its record is
    /// durable; what to do next. A plan this coordinator is not waiting for
    /// (made for another id or at another coordinator epoch, already
    /// completed or abandoned) changes nothing and is NOT_COORDINATOR, as
    /// Kafka answers when the partition moved during the append.
    pub fn complete(
        &mut self,
        transactional_id: &str,
        plan: Plan,
    ) -> Result<AfterAppend, TxnError> {
        if plan.coordinator_epoch != self.coordinator_epoch
            || plan.transactional_id != transactional_id
        {
            return Err(TxnError::NotCoordinator);
        }
        let Some(txn) = self.transactions.get_mut(transactional_id) else {
            return Err(TxnError::NotCoordinator);
        };
        let waiting = matches!(
            txn.pending,
            Some(Pending::Append(_) | Pending::Completion(_))
        ) && txn.plan_seq == plan.seq;
        if !waiting {
            return Err(TxnError::NotCoordinator);
        }
        // Kafka's completeTransitionTo checks: the same edge as planned.
        assert!(
            plan.next.state.can_follow(txn.metadata.state),
            "{}: {} cannot follow {}",
            plan.transactional_id,
            plan.next.state,
            txn.metadata.state
        );
        if plan.next.state == TxnState::Dead {
            self.transactions.remove(transactional_id);
            return Ok(plan.then);
        }
        txn.metadata = plan.next;
        txn.durable = true;
        txn.pending = match plan.then {
            AfterAppend::Ended(_) | AfterAppend::Fenced(_) => Some(Pending::Markers),
            _ => None,
        };
        Ok(plan.then)
    }

    /// Drops the id's pending transition because its record could not be
    /// appended: the id is as it was before the plan (a new id is
    /// forgotten; a completion waits for another
    /// [`Coordinator::markers_written`]). Call it only when the record is
    /// known not to be in the log; when that is unknown, the partition's
    /// log must be loaded again. Whether a transition was dropped.
    pub fn abandon(&mut self, transactional_id: &str) -> bool {
        let Some(txn) = self.transactions.get_mut(transactional_id) else {
            return false;
        };
        match txn.pending {
            Some(Pending::Append(_)) => {
                txn.pending = None;
                if !txn.durable {
                    self.transactions.remove(transactional_id);
                }
                true
            }
            Some(Pending::Completion(_)) => {
                txn.pending = Some(Pending::Markers);
                true
            }
            Some(Pending::Markers) | None => false,
        }
    }

    /// COORDINATOR_LOAD_IN_PROGRESS until the log is loaded.
    fn serving(&self) -> Result<(), TxnError> {
        if self.loading {
            Err(TxnError::CoordinatorLoadInProgress)
        } else {
            Ok(())
        }
    }

    fn check_id(transactional_id: &str) -> Result<(), TxnError> {
        if transactional_id.is_empty() || transactional_id.len() > TRANSACTIONAL_ID_BYTES_MAX {
            Err(TxnError::InvalidRequest)
        } else {
            Ok(())
        }
    }

    /// The id's state for a request from producer `producer`: an unknown
    /// id or another producer id is INVALID_PRODUCER_ID_MAPPING, another
    /// epoch is PRODUCER_FENCED.
    fn producer_state(
        &self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
    ) -> Result<&Transaction, TxnError> {
        let txn = self
            .transactions
            .get(transactional_id)
            .ok_or(TxnError::InvalidProducerIdMapping)?;
        if txn.metadata.producer_id != producer.producer_id {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        if txn.metadata.producer_epoch != producer.producer_epoch {
            return Err(TxnError::ProducerFenced);
        }
        Ok(txn)
    }

    /// Marks the id's transition to `next` pending and returns its plan.
    /// The transition must be one Kafka allows: asserted, as a wrong one
    /// would be written to the log.
    fn plan(
        &mut self,
        transactional_id: &str,
        next: TxnMetadata,
        pending: Pending,
        then: AfterAppend,
    ) -> Plan {
        self.plan_seq += 1;
        let seq = self.plan_seq;
        let txn = self
            .transactions
            .get_mut(transactional_id)
            .expect("plans are made for held ids");
        let current = &txn.metadata;
        let free = match pending {
            Pending::Completion(_) => txn.pending == Some(Pending::Markers),
            _ => txn.pending.is_none(),
        };
        assert!(free, "{transactional_id}: a transition is already pending");
        assert!(
            next.state.can_follow(current.state),
            "{transactional_id}: {} cannot follow {}",
            next.state,
            current.state
        );
        // A producer epoch never goes back: it stays or grows, or starts
        // at 0 with a new producer id.
        let same_producer = next.producer_id == current.producer_id;
        assert!(
            (same_producer && next.producer_epoch >= current.producer_epoch)
                || (!same_producer && next.producer_epoch == 0),
            "{transactional_id}: producer {}/{} cannot follow {}/{}",
            next.producer_id,
            next.producer_epoch,
            current.producer_id,
            current.producer_epoch
        );
        txn.pending = Some(pending);
        txn.plan_seq = seq;
        let key = records::encode_key(transactional_id).expect("ids are bounded by limits");
        let value = (next.state != TxnState::Dead).then(|| {
            records::encode_value(&next.log_value(), self.config.log_value_version)
                .expect("records are bounded by limits")
        });
        Plan {
            transactional_id: transactional_id.to_string(),
            coordinator_epoch: self.coordinator_epoch,
            next,
            key,
            value,
            then,
            seq,
        }
    }

    fn markers(&self, transactional_id: &str, next: &TxnMetadata, commit: bool) -> Markers {
        Markers {
            transactional_id: transactional_id.to_string(),
            producer_id: next.producer_id,
            producer_epoch: next.producer_epoch,
            coordinator_epoch: self.coordinator_epoch,
            commit,
            partitions: next.partitions.clone(),
        }
    }
}
