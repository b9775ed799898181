//! A core's transaction coordinators as the per-core context carries
//! them; `txn::manager` alone reads and changes them. It sits below the
//! per-core context so that the context needs nothing of the
//! transactions' code.

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
