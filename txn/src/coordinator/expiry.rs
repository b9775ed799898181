//! Time-driven work, checked whenever the runtime asks (Kafka checks every
//! `transaction.abort.timed.out.transaction.cleanup.interval.ms` and
//! `transaction.remove.expired.transaction.cleanup.interval.ms`):
//! transactions open longer than their timeout are aborted, fencing their
//! producer; ids idle longer than `transactional.id.expiration.ms` are
//! removed with a tombstone.

use crate::limits::EXPIRATIONS_PER_CALL_MAX;
use crate::state::TxnState;

use super::{AfterAppend, Coordinator, Pending, Plan, Transaction};

impl Coordinator {
    /// The ids whose open transaction started longer than its timeout ago
    /// (`start + timeout < now`, as Kafka compares), with no transition
    /// pending. Abort each with [`Coordinator::abort_expired`].
    pub fn expired(&self, now_ms: i64) -> Vec<String> {
        if self.loading {
            return Vec::new();
        }
        self.transactions
            .iter()
            .filter(|(_, txn)| timed_out(txn, now_ms))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Aborts the id's timed-out transaction: its producer is fenced (the
    /// epoch bumped in the same record that moves the transaction to
    /// PrepareAbort, as InitProducerId fences an open transaction), so the
    /// old producer's later requests are PRODUCER_FENCED. `None` when the
    /// transaction is no longer one to abort (it ended, or a transition is
    /// pending).
    pub fn abort_expired(&mut self, transactional_id: &str, now_ms: i64) -> Option<Plan> {
        let txn = self.transactions.get(transactional_id)?;
        if self.loading || !timed_out(txn, now_ms) {
            return None;
        }
        Some(self.fence(transactional_id, now_ms))
    }

    /// Tombstones for the ids with no transaction open whose last change
    /// is at least `transactional_id_expiration_ms` old (Kafka's
    /// `transactional.id.expiration.ms`, 7 days by default), at most
    /// [`EXPIRATIONS_PER_CALL_MAX`] of them. Each is pending until its
    /// plan completes (the id is removed) or is abandoned (the id stays).
    pub fn expire_ids(&mut self, now_ms: i64, transactional_id_expiration_ms: i64) -> Vec<Plan> {
        if self.loading {
            return Vec::new();
        }
        let cutoff_ms = now_ms.saturating_sub(transactional_id_expiration_ms);
        let idle: Vec<String> = self
            .transactions
            .iter()
            .filter(|(_, txn)| {
                txn.durable
                    && txn.pending.is_none()
                    && txn.metadata.state.expiration_allowed()
                    && txn.metadata.last_update_ms <= cutoff_ms
            })
            .map(|(id, _)| id.clone())
            .take(EXPIRATIONS_PER_CALL_MAX)
            .collect();
        idle.into_iter()
            .map(|id| {
                let mut next = self.transactions[&id].metadata.clone();
                next.state = TxnState::Dead;
                next.partitions.clear();
                self.plan(
                    &id,
                    next,
                    Pending::Append(TxnState::Dead),
                    AfterAppend::Expired,
                )
            })
            .collect()
    }
}

fn timed_out(txn: &Transaction, now_ms: i64) -> bool {
    let metadata = &txn.metadata;
    txn.durable
        && txn.pending.is_none()
        && metadata.state == TxnState::Ongoing
        && metadata
            .txn_start_ms
            .saturating_add(i64::from(metadata.timeout_ms))
            < now_ms
}
