//! The metadata-log quorum: a plain wrapper over `raft::RawNode` that enforces persist-before-send.
//!
//! Invariants the types hold:
//! - Messages and committed entries come only from [`Quorum::advance`], which needs the
//!   [`Persisted`] token that only [`Quorum::persist`] returns after the store said `Ok`.
//! - One [`Pending`] at a time: `ready` returns `None` while one is out (raft-rs requires
//!   each `Ready` to be persisted and advanced before the next).
//! - Committed entries are returned in log order, each index exactly once per incarnation;
//!   an installed snapshot comes before the entries that follow it, and replaces all before.
//!
//! Snapshots: the application calls [`Quorum::compact`] with its state at an applied index
//! (when [`SnapshotPolicy::is_due`] says the log since the last snapshot has grown past its
//! bound); the store keeps that snapshot with its data and drops the entries it covers. A
//! leader sends it to a follower that needs those entries; the follower's application gets it
//! as [`Actions::snapshot`]. After a restart the application starts from
//! [`Quorum::latest_snapshot`] and is given only the committed entries after it.

use raft::eraftpb::{ConfState, Entry, EntryType, HardState, Message, MessageType, Snapshot};
use raft::{RawNode, SnapshotStatus, StateRole};

use crate::store::LogStore;
use crate::Error;

/// Static settings of one quorum member.
#[derive(Debug, Clone)]
pub struct QuorumConfig {
    /// This node's id (non-zero, unique among the voters).
    pub node_id: u64,
    /// All voters' ids (`controller.quorum.voters`), including this node.
    pub voters: Vec<u64>,
    /// A follower campaigns after a random timeout in `[min, max)` ticks without a leader.
    pub election_ticks_min: usize,
    pub election_ticks_max: usize,
    /// The leader sends heartbeats every this many ticks.
    pub heartbeat_ticks: usize,
    /// The last index the caller's state machine has applied: 0 after a restart that lost it
    /// (the quorum then starts after the stored snapshot, see [`Quorum::latest_snapshot`]),
    /// else at least the stored snapshot's index.
    pub applied_index: u64,
}

impl QuorumConfig {
    /// Defaults close to KRaft's: heartbeats every tick, elections after 10..20 ticks.
    pub fn new(node_id: u64, voters: Vec<u64>) -> Self {
        QuorumConfig {
            node_id,
            voters,
            election_ticks_min: 10,
            election_ticks_max: 20,
            heartbeat_ticks: 1,
            applied_index: 0,
        }
    }
}

/// One member of the controller quorum over the metadata log.
pub struct Quorum<S: LogStore> {
    node: RawNode<S>,
    /// The `Ready` handed out and not yet advanced.
    outstanding: Option<u64>,
}

/// State that must become durable before anything else from this round happens.
#[must_use = "persist it with Quorum::persist, then Quorum::advance"]
pub struct Pending {
    ready: raft::Ready,
}

impl Pending {
    /// Entries to append to the log (may overwrite a conflicting tail).
    pub fn entries(&self) -> &[Entry] {
        self.ready.entries()
    }
    /// The new hard state (term, vote, commit), if it changed.
    pub fn hard_state(&self) -> Option<&HardState> {
        self.ready.hs()
    }
    /// A snapshot to install, if the leader sent one.
    pub fn snapshot(&self) -> Option<&Snapshot> {
        let snapshot = self.ready.snapshot();
        (!snapshot.is_empty()).then_some(snapshot)
    }
}

/// Proof that a [`Pending`] is durable. Only [`Quorum::persist`] makes one.
#[must_use = "advance the quorum with it"]
pub struct Persisted {
    ready: raft::Ready,
}

/// A message for another voter.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub to: u64,
    pub message: Message,
}

impl Outgoing {
    /// Whether the message carries a snapshot, whose delivery the transport must report with
    /// [`Quorum::report_snapshot`].
    pub fn is_snapshot(&self) -> bool {
        self.message.get_msg_type() == MessageType::MsgSnapshot
    }
}

/// What the caller must do after a persist, in this order: send, then install the snapshot,
/// then apply the committed entries.
#[derive(Debug, Default)]
pub struct Actions {
    pub messages: Vec<Outgoing>,
    /// A snapshot the leader sent, now durable: the application replaces its whole state with
    /// the snapshot's data, then applies `committed`, which starts right after it.
    pub snapshot: Option<InstalledSnapshot>,
    /// Committed entries in log order; apply those with non-empty `data` (empty ones are the
    /// leaders' no-op entries, kept so that indexes are contiguous).
    pub committed: Vec<Committed>,
}

/// The application's state as of log entry `index` (of term `term`): what an application
/// made with [`Quorum::compact`], on this node or on the leader that sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledSnapshot {
    pub index: u64,
    pub term: u64,
    pub data: Vec<u8>,
}

impl InstalledSnapshot {
    fn of(snapshot: &Snapshot) -> Self {
        InstalledSnapshot {
            index: snapshot.get_metadata().index,
            term: snapshot.get_metadata().term,
            data: snapshot.get_data().to_vec(),
        }
    }
}

/// When to compact: once the applied entries since the latest snapshot take more than
/// `log_bytes_max` bytes (encoded). The application checks it after applying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotPolicy {
    pub log_bytes_max: u64,
}

impl SnapshotPolicy {
    /// The default bound on the log a restart replays and a lagging follower is sent entry
    /// by entry; a metadata image is expected to be far smaller than that much log.
    pub const LOG_BYTES_MAX_DEFAULT: u64 = 16 * 1024 * 1024;

    /// Whether `quorum` should be compacted at its applied index now.
    pub fn is_due<S: LogStore>(&self, quorum: &Quorum<S>) -> bool {
        quorum.log_bytes_applied_since_snapshot() > self.log_bytes_max
    }
}

impl Default for SnapshotPolicy {
    fn default() -> Self {
        SnapshotPolicy {
            log_bytes_max: Self::LOG_BYTES_MAX_DEFAULT,
        }
    }
}

/// What the transport knows of a snapshot message it carried (a `MsgSnapshot` in
/// [`Actions::messages`]): the leader sends the follower nothing more until it hears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotDelivery {
    /// The follower received it (whether it then persisted it, its replies tell).
    Delivered,
    /// It was lost: the leader tries again after a heartbeat.
    Failed,
}

/// An entry the quorum has committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub index: u64,
    pub term: u64,
    pub data: Vec<u8>,
}

impl<S: LogStore> Quorum<S> {
    /// Starts (or restarts) a member from what `store` holds.
    pub fn new(config: &QuorumConfig, store: S) -> Result<Self, Error> {
        assert!(
            config.voters.contains(&config.node_id),
            "node must be a voter"
        );
        let snapshot_index = store.first_index().map_err(|source| Error::Raft {
            op: "first index",
            source,
        })? - 1;
        assert!(
            config.applied_index == 0 || config.applied_index >= snapshot_index,
            "applied index {} is below the stored snapshot's {snapshot_index}: start the \
             application from Quorum::latest_snapshot",
            config.applied_index
        );
        let raft_config = raft::Config {
            id: config.node_id,
            election_tick: config.election_ticks_min,
            min_election_tick: config.election_ticks_min,
            max_election_tick: config.election_ticks_max,
            heartbeat_tick: config.heartbeat_ticks,
            applied: config.applied_index,
            pre_vote: true,
            check_quorum: true,
            max_size_per_msg: 1024 * 1024,
            max_inflight_msgs: 256,
            ..Default::default()
        };
        raft_config.validate().map_err(|source| Error::Raft {
            op: "config",
            source,
        })?;
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let node = RawNode::new(&raft_config, store, &logger).map_err(|source| Error::Raft {
            op: "start",
            source,
        })?;
        Ok(Quorum {
            node,
            outstanding: None,
        })
    }

    /// The conf state every member of a fresh quorum starts with.
    pub fn initial_conf_state(voters: &[u64]) -> ConfState {
        ConfState::from((voters.to_vec(), Vec::new()))
    }

    /// Proposes `data` for the metadata log. Only the leader accepts.
    pub fn propose(&mut self, data: Vec<u8>) -> Result<(), Error> {
        self.node
            .propose(Vec::new(), data)
            .map_err(|source| Error::Raft {
                op: "propose",
                source,
            })
    }

    /// Advances logical time by one tick. Returns whether there may be work (`ready`).
    pub fn tick(&mut self) -> bool {
        self.node.tick()
    }

    /// Feeds a message received from another voter.
    pub fn step(&mut self, message: Message) -> Result<(), Error> {
        self.node
            .step(message)
            .map_err(|source| Error::Raft { op: "step", source })
    }

    /// The next state to persist, or `None` if there is none or a `Pending` is still out.
    pub fn ready(&mut self) -> Option<Pending> {
        if self.outstanding.is_some() || !self.node.has_ready() {
            return None;
        }
        let ready = self.node.ready();
        self.outstanding = Some(ready.number());
        Some(Pending { ready })
    }

    /// Makes `pending` durable through the store: snapshot, entries, then hard state.
    pub fn persist(&mut self, pending: Pending) -> Result<Persisted, Error> {
        assert_eq!(self.outstanding, Some(pending.ready.number()));
        let Pending { ready } = pending;
        let store = self.node.mut_store();
        if !ready.snapshot().is_empty() {
            store.apply_snapshot(ready.snapshot().clone())?;
        }
        if !ready.entries().is_empty() {
            store.append(ready.entries())?;
        }
        if let Some(hard_state) = ready.hs() {
            store.set_hard_state(hard_state)?;
        }
        Ok(Persisted { ready })
    }

    /// Consumes a persisted round: messages to send, a snapshot to install, then committed
    /// entries to apply.
    pub fn advance(&mut self, persisted: Persisted) -> Result<Actions, Error> {
        let Persisted { mut ready } = persisted;
        assert_eq!(self.outstanding.take(), Some(ready.number()));
        let mut actions = Actions::default();
        if !ready.snapshot().is_empty() {
            actions.snapshot = Some(InstalledSnapshot::of(ready.snapshot()));
        }
        push_messages(&mut actions, ready.take_messages());
        push_messages(&mut actions, ready.take_persisted_messages());
        push_committed(&mut actions, ready.take_committed_entries());
        let mut light = self.node.advance(ready);
        if let Some(commit) = light.commit_index() {
            let mut hard_state = self.node.raft.hard_state();
            hard_state.commit = commit;
            self.node.mut_store().set_hard_state(&hard_state)?;
        }
        push_messages(&mut actions, light.take_messages());
        push_committed(&mut actions, light.take_committed_entries());
        self.node.advance_apply();
        Ok(actions)
    }

    /// Records the application's state `data` as of `applied_index` as the latest snapshot
    /// (durably), then drops the log entries it covers. Call it between rounds (no
    /// [`Pending`] out), with an index the application has applied. An index at or below the
    /// latest snapshot's changes nothing (a leader's snapshot got there first).
    pub fn compact(&mut self, applied_index: u64, data: Vec<u8>) -> Result<(), Error> {
        assert!(
            self.outstanding.is_none(),
            "compact between rounds, not while a Pending is out"
        );
        let applied = self.node.raft.raft_log.applied;
        assert!(
            applied_index <= applied,
            "compact at {applied_index}, past the applied index {applied}"
        );
        let store = self.node.store();
        let snapshot_index = store.first_index().map_err(|source| Error::Raft {
            op: "first index",
            source,
        })? - 1;
        if applied_index <= snapshot_index {
            return Ok(());
        }
        let term = store.term(applied_index).map_err(|source| Error::Raft {
            op: "term of the applied index",
            source,
        })?;
        let conf_state = store
            .initial_state()
            .map_err(|source| Error::Raft {
                op: "conf state",
                source,
            })?
            .conf_state;
        let mut snapshot = Snapshot::default();
        snapshot.set_data(data.into());
        let metadata = snapshot.mut_metadata();
        metadata.index = applied_index;
        metadata.term = term;
        metadata.set_conf_state(conf_state);
        self.node.mut_store().compact(snapshot)
    }

    /// The latest snapshot in the store, with its data: after a restart the application
    /// starts from it; the committed entries it is then given start right after it.
    pub fn latest_snapshot(&self) -> Option<InstalledSnapshot> {
        self.node
            .store()
            .latest_snapshot()
            .map(|snapshot| InstalledSnapshot::of(&snapshot))
    }

    /// Encoded bytes of the log entries after the latest snapshot up to the applied index:
    /// what a compaction now would drop. See [`SnapshotPolicy`].
    pub fn log_bytes_applied_since_snapshot(&self) -> u64 {
        self.node
            .store()
            .log_bytes_through(self.node.raft.raft_log.applied)
    }

    /// Tells the leader what became of a snapshot message it sent to `to`. Until it hears, it
    /// sends that follower nothing more (raft-rs pauses it), so a transport reports every
    /// `MsgSnapshot` it was given, either way.
    pub fn report_snapshot(&mut self, to: u64, delivery: SnapshotDelivery) {
        let status = match delivery {
            SnapshotDelivery::Delivered => SnapshotStatus::Finish,
            SnapshotDelivery::Failed => SnapshotStatus::Failure,
        };
        self.node.report_snapshot(to, status);
    }

    /// Whether this node believes it is the leader.
    pub fn is_leader(&self) -> bool {
        self.node.raft.state == StateRole::Leader
    }

    /// The current term.
    pub fn term(&self) -> u64 {
        self.node.raft.term
    }

    /// The leader this node knows of (0 if none).
    pub fn leader_id(&self) -> u64 {
        self.node.raft.leader_id
    }

    /// The store, for inspection.
    pub fn store(&self) -> &S {
        self.node.store()
    }
}

/// What the broker around a quorum member reads of its state: indexes for
/// proposals and status, and committed entries for brokers that keep no
/// copy of the log.
impl<S: LogStore> Quorum<S> {
    /// The index of the last entry in this member's log (a proposal just
    /// accepted by a leader sits there).
    pub fn last_index(&self) -> u64 {
        self.node.raft.raft_log.last_index()
    }

    /// The highest index this member knows to be committed.
    pub fn commit_index(&self) -> u64 {
        self.node.raft.raft_log.committed
    }

    /// Whether an entry of the current term is committed: a new leader
    /// knows every earlier committed entry only from then on.
    pub fn committed_in_current_term(&self) -> bool {
        let log = &self.node.raft.raft_log;
        log.term(log.committed).ok() == Some(self.node.raft.term)
    }

    /// The term of the entry at `index`, if the log still holds it.
    pub fn term_at(&self, index: u64) -> Option<u64> {
        self.node.raft.raft_log.term(index).ok()
    }

    /// Committed entries after `after`, up to about `max_bytes`; `None`
    /// when the log no longer holds the first of them (compacted behind a
    /// snapshot).
    pub fn committed_after(&self, after: u64, max_bytes: u64) -> Option<Vec<Committed>> {
        let log = &self.node.raft.raft_log;
        let high = log.committed + 1;
        if after + 1 >= high {
            return Some(Vec::new());
        }
        let entries = log
            .store
            .entries(
                after + 1,
                high,
                max_bytes,
                raft::GetEntriesContext::empty(false),
            )
            .ok()?;
        Some(
            entries
                .into_iter()
                .map(|entry| Committed {
                    index: entry.index,
                    term: entry.term,
                    data: entry.data.to_vec(),
                })
                .collect(),
        )
    }

    /// On a leader, each voter's highest replicated index (the leader's
    /// own included); empty on other members.
    pub fn replication_progress(&self) -> Vec<(u64, u64)> {
        if !self.is_leader() {
            return Vec::new();
        }
        let mut progress: Vec<(u64, u64)> = self
            .node
            .raft
            .prs()
            .iter()
            .map(|(&id, pr)| (id, pr.matched))
            .collect();
        progress.sort_unstable();
        progress
    }
}

fn push_messages(actions: &mut Actions, messages: Vec<Message>) {
    actions
        .messages
        .extend(messages.into_iter().map(|message| Outgoing {
            to: message.to,
            message,
        }));
}

fn push_committed(actions: &mut Actions, entries: Vec<Entry>) {
    for entry in entries {
        // Static voters: no conf-change entries are ever proposed.
        assert_eq!(entry.get_entry_type(), EntryType::EntryNormal);
        let previous = actions
            .committed
            .last()
            .map(|last| last.index)
            .or(actions.snapshot.as_ref().map(|snapshot| snapshot.index));
        if let Some(previous) = previous {
            assert_eq!(
                previous + 1,
                entry.index,
                "committed entries are contiguous and follow an installed snapshot"
            );
        }
        actions.committed.push(Committed {
            index: entry.index,
            term: entry.term,
            data: entry.data.to_vec(),
        });
    }
}
