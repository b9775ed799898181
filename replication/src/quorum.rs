//! The metadata-log quorum: a plain wrapper over `raft::RawNode` that enforces persist-before-send.
//!
//! Invariants the types hold:
//! - Messages and committed entries come only from [`Quorum::advance`], which needs the
//!   [`Persisted`] token that only [`Quorum::persist`] returns after the store said `Ok`.
//! - One [`Pending`] at a time: `ready` returns `None` while one is out (raft-rs requires
//!   each `Ready` to be persisted and advanced before the next).
//! - Committed entries are returned in log order, each index exactly once per incarnation.

use raft::eraftpb::{ConfState, Entry, EntryType, HardState, Message, Snapshot};
use raft::{RawNode, StateRole};

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
    /// The last index the caller's state machine has applied (0 after a restart that lost it).
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

/// What the caller must do after a persist, in this order: send, then apply.
#[derive(Debug, Default)]
pub struct Actions {
    pub messages: Vec<Outgoing>,
    /// Committed entries in log order; apply those with non-empty `data` (empty ones are the
    /// leaders' no-op entries, kept so that indexes are contiguous).
    pub committed: Vec<Committed>,
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

    /// Consumes a persisted round: messages to send, then committed entries to apply.
    pub fn advance(&mut self, persisted: Persisted) -> Result<Actions, Error> {
        let Persisted { mut ready } = persisted;
        assert_eq!(self.outstanding.take(), Some(ready.number()));
        let mut actions = Actions::default();
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
        if let Some(last) = actions.committed.last() {
            assert_eq!(
                last.index + 1,
                entry.index,
                "committed entries are contiguous"
            );
        }
        actions.committed.push(Committed {
            index: entry.index,
            term: entry.term,
            data: entry.data.to_vec(),
        });
    }
}
