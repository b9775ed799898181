//! Taking over a `__transaction_state` partition: its log is replayed
//! record by record into a new coordinator (the last record of an id wins,
//! a tombstone removes it), then [`Coordinator::after_load`] opens it for
//! requests and hands back the decided transactions whose markers must be
//! written (again): the previous coordinator may have stopped halfway.

use crate::records::{self, RecordError, TxnRecord};
use crate::state::TxnState;

use super::{Coordinator, Markers, Pending, Transaction, TxnMetadata};

/// What one record did to the coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replayed {
    /// The id's state is the record's.
    Stored,
    /// A tombstone (or a Dead state): the id is gone.
    Removed,
    /// A key version Kafka does not write to this topic: skipped, as Kafka
    /// skips it.
    UnknownKey { version: i16 },
}

impl Coordinator {
    /// Replays one record of the partition's log (`value` `None` is a
    /// tombstone). A damaged record is an error and the load should stop:
    /// skipping it would serve an older state of the id, which could end a
    /// decided transaction the other way.
    pub fn replay(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<Replayed, RecordError> {
        let record = match records::decode(key, value) {
            Ok(record) => record,
            Err(RecordError::UnknownKeyVersion { version }) => {
                return Ok(Replayed::UnknownKey { version })
            }
            Err(error) => return Err(error),
        };
        match record {
            TxnRecord::Tombstone { transactional_id } => {
                self.transactions.remove(&transactional_id);
                Ok(Replayed::Removed)
            }
            TxnRecord::Value {
                transactional_id,
                value,
            } => match value.state {
                TxnState::Dead => {
                    self.transactions.remove(&transactional_id);
                    Ok(Replayed::Removed)
                }
                TxnState::PrepareEpochFence => {
                    Err(RecordError::StateNotInLog { state: value.state })
                }
                _ => {
                    let loaded = Transaction {
                        metadata: TxnMetadata::from_log_value(value),
                        durable: true,
                        pending: None,
                        plan_seq: 0,
                    };
                    self.transactions.insert(transactional_id, loaded);
                    Ok(Replayed::Stored)
                }
            },
        }
    }

    /// Ends the load: requests are served from now on. Returns the markers
    /// of every transaction found decided (PrepareCommit, PrepareAbort),
    /// at this coordinator's epoch; each waits for its markers as after an
    /// EndTxn, until [`Coordinator::markers_written`].
    pub fn after_load(&mut self) -> Vec<Markers> {
        self.loading = false;
        let decided: Vec<String> = self
            .transactions
            .iter()
            .filter(|(_, t)| t.durable && t.pending.is_none() && t.metadata.state.is_prepare())
            .map(|(id, _)| id.clone())
            .collect();
        decided
            .into_iter()
            .map(|id| {
                let txn = self.transactions.get_mut(&id).expect("listed above");
                txn.pending = Some(Pending::Markers);
                let commit = txn.metadata.state == TxnState::PrepareCommit;
                let metadata = txn.metadata.clone();
                self.markers(&id, &metadata, commit)
            })
            .collect()
    }
}
