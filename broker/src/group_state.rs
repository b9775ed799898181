//! A core's consumer-group state as the per-core context carries it: the
//! plain coordinator (the `groups` crate's) and the bookkeeping of its
//! runtime edge, `group::manager`, which alone reads and changes it. It
//! sits below the per-core context so that the context needs nothing of
//! the groups' code.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use glommio::channels::local_channel::LocalSender;
use groups::coordinator::{Coordinator, Reply, WaiterId};

use crate::sync::Notify;

/// One core's groups: the plain coordinator plus what runs it.
#[derive(Default)]
pub struct GroupManager {
    pub(crate) coordinator: RefCell<Option<Coordinator>>,
    /// `__consumer_offsets` partitions whose offsets are in the coordinator.
    pub(crate) loaded: RefCell<HashSet<i32>>,
    pub(crate) loading: RefCell<HashMap<i32, Rc<Notify>>>,
    pub(crate) waiters: RefCell<HashMap<WaiterId, LocalSender<Reply>>>,
    pub(crate) next_waiter: Cell<WaiterId>,
    pub(crate) ticking: Cell<bool>,
    /// Serialises appends per offsets partition, so the log holds commits
    /// in the order the coordinator applied them.
    pub(crate) write_locks: crate::sync::KeyedLocks,
    /// Per offsets partition: records held above which compaction is
    /// considered again (twice the live offsets last counted, plus slack).
    pub(crate) compact_check_at: RefCell<HashMap<i32, u64>>,
    /// A task writes the membership records the tick took.
    pub(crate) metadata_writer: Cell<bool>,
    /// Share partitions (KIP-932) of the partitions this core owns, by
    /// (share group, topic, partition).
    pub(crate) share_partitions:
        RefCell<std::collections::BTreeMap<(String, String, i32), HeldShare>>,
    /// Share sessions of this core's connections, by (share group,
    /// member): the session epoch expected next and the partitions in it.
    pub(crate) share_sessions: RefCell<HashMap<(String, String), ShareSession>>,
    /// One ShareFetch or ShareAcknowledge at a time per share partition
    /// (by a hash of its key): each writes its state before it answers.
    pub(crate) share_turns: crate::sync::KeyedLocks,
    /// The share coordinator's states (`share_state`).
    pub(crate) share_states: ShareStates,
    /// Counts the changes of this core's share partitions that may make
    /// records available again (acknowledgements, expired locks, a
    /// member's records given back); an empty ShareFetch waits on it.
    pub(crate) share_changes: Cell<u64>,
    pub(crate) share_changed: crate::sync::Condition,
}

/// A share partition served on this core: its state, the leader epoch
/// and state epoch it was read at, and its durable part as the share
/// coordinator last stored it (a request writes only when that changed).
#[derive(Debug)]
pub struct HeldShare {
    pub partition: groups::share::SharePartition,
    pub leader_epoch: i32,
    pub state_epoch: i32,
    pub written: groups::share::ShareSnapshot,
}

/// The share coordinator's state on one core: the states of the
/// `__share_group_state` partitions this core leads, each loaded at a
/// leader epoch.
#[derive(Default)]
pub struct ShareStates {
    pub(crate) loaded: RefCell<HashMap<i32, i32>>,
    pub(crate) states: RefCell<
        HashMap<
            i32,
            HashMap<groups::share_records::SharePartitionKey, groups::share_records::ShareState>,
        >,
    >,
    /// One load or write at a time per state partition.
    pub(crate) locks: crate::sync::KeyedLocks,
}

/// A share fetch session (KIP-932): the epoch its next request carries,
/// and the partitions it fetches (topic id, partition).
#[derive(Debug, Default)]
pub struct ShareSession {
    pub epoch: i32,
    pub partitions: std::collections::BTreeSet<(u128, i32)>,
}
