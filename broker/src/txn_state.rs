//! A core's transaction coordinators as the per-core context carries
//! them; `txn::manager` alone changes them (a scrape reads their
//! figures). It sits below the per-core context so that the context needs
//! nothing of the transactions' code.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use crate::sync::Notify;

/// One core's transaction coordinator: the plain state machine (the `txn`
/// crate's) and what runs it; `manager` alone reads and changes it.
#[derive(Default)]
pub struct TxnManager {
    /// One coordinator per `__transaction_state` partition led here,
    /// made at the leader epoch it is led at (the coordinator epoch its
    /// markers carry).
    pub(crate) coordinators: RefCell<HashMap<i32, ::txn::coordinator::Coordinator>>,
    pub(crate) loading: RefCell<HashMap<i32, Rc<Notify>>>,
    /// Serialises appends per partition, so the log holds transitions in
    /// the order the coordinator planned them.
    pub(crate) write_locks: crate::sync::KeyedLocks,
    pub(crate) ticking: Cell<bool>,
}

impl TxnManager {
    /// The figures of this core's loaded coordinators at `now_ms`, for
    /// `/metrics`: per `__transaction_state` partition, the transactions
    /// open and the age of the oldest, and those decided whose markers
    /// are being written.
    pub fn figures(&self, now_ms: i64) -> Vec<crate::metrics::TxnCoordinatorSnapshot> {
        use ::txn::state::TxnState;
        let coordinators = self.coordinators.borrow();
        let mut figures: Vec<crate::metrics::TxnCoordinatorSnapshot> = coordinators
            .iter()
            .filter(|(_, coordinator)| !coordinator.is_loading())
            .map(|(&partition, coordinator)| {
                let mut figure = crate::metrics::TxnCoordinatorSnapshot {
                    partition,
                    ..Default::default()
                };
                let mut oldest_start_ms: Option<i64> = None;
                for (_, metadata) in coordinator.transactions() {
                    match metadata.state {
                        TxnState::Ongoing => {
                            figure.open += 1;
                            let start = metadata.txn_start_ms;
                            oldest_start_ms = Some(oldest_start_ms.map_or(start, |o| o.min(start)));
                        }
                        TxnState::PrepareCommit | TxnState::PrepareAbort => {
                            figure.markers_pending += 1
                        }
                        _ => {}
                    }
                }
                figure.oldest_open_ms = oldest_start_ms.map_or(0, |start| {
                    u64::try_from(now_ms.saturating_sub(start)).unwrap_or(0)
                });
                figure
            })
            .collect();
        figures.sort_by_key(|figure| figure.partition);
        figures
    }
}
