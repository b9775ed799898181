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
//!
//! Membership: the voter set starts as the store's conf state (the configured voters of a new
//! quorum, or the latest snapshot's) and changes one node at a time through conf-change
//! entries in the log ([`Quorum::propose_voter_change`]: add a learner, promote it, remove a
//! node; raft-rs's simple changes, never a joint configuration). The quorum applies each as
//! it hands out the committed entry and reports it in [`Actions::voter_changes`]. A node added
//! as a learner must be sent a snapshot, never the log from its first entry (the initial voter
//! set is in no entry): every member that applies an addition takes a snapshot at once
//! ([`Quorum::snapshot_required`]) before it sends or takes anything more. A node outside
//! the configuration (a new member before its snapshot arrives) grants no votes and takes no
//! log from the first entry.

use protobuf::Message as _;
use raft::eraftpb::{
    ConfChange, ConfChangeType, ConfState, Entry, EntryType, HardState, Message, MessageType,
    Snapshot,
};
use raft::{RawNode, SnapshotStatus, StateRole};

use crate::store::LogStore;
use crate::Error;

/// Static settings of one quorum member.
#[derive(Debug, Clone)]
pub struct QuorumConfig {
    /// This node's id (non-zero, unique among the voters).
    pub node_id: u64,
    /// All voters' ids (`controller.quorum.voters`), including this node; or none for a node
    /// that joins an existing quorum (it learns the voters from the leader's snapshot). A store
    /// that holds a snapshot starts from the snapshot's voters instead.
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
    /// The configuration in force from each index on, oldest first: the store's (at its
    /// snapshot, or 0) and one per applied conf change after it. A snapshot at an index takes
    /// the last one at or below it.
    conf_history: Vec<(u64, ConfState)>,
    /// A node was added at this index: a snapshot at or past it must be taken before the
    /// quorum sends or takes anything more (see the module's doc).
    snapshot_required_at: Option<u64>,
}

/// A change of the voter set, one node at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoterChange {
    /// The node starts receiving the log (a snapshot first) without a vote.
    AddLearner(u64),
    /// A learner becomes a voter.
    Promote(u64),
    /// A voter or learner leaves the quorum.
    Remove(u64),
}

impl VoterChange {
    pub fn node(self) -> u64 {
        match self {
            VoterChange::AddLearner(node)
            | VoterChange::Promote(node)
            | VoterChange::Remove(node) => node,
        }
    }

    fn to_conf_change(self, context: Vec<u8>) -> ConfChange {
        let (change_type, node_id) = match self {
            VoterChange::AddLearner(node) => (ConfChangeType::AddLearnerNode, node),
            VoterChange::Promote(node) => (ConfChangeType::AddNode, node),
            VoterChange::Remove(node) => (ConfChangeType::RemoveNode, node),
        };
        let mut change = ConfChange::default();
        change.set_change_type(change_type);
        change.node_id = node_id;
        change.context = context.into();
        change
    }

    /// The change a conf change entry's data holds, with the context its proposer attached
    /// (the broker: the node's directory id), for tools that print the log.
    pub fn decode(data: &[u8]) -> Result<(VoterChange, Vec<u8>), String> {
        let change = ConfChange::parse_from_bytes(data)
            .map_err(|e| format!("conf change does not decode: {e}"))?;
        Ok((Self::of(&change), change.context.to_vec()))
    }

    fn of(change: &ConfChange) -> Self {
        match change.get_change_type() {
            ConfChangeType::AddLearnerNode => VoterChange::AddLearner(change.node_id),
            ConfChangeType::AddNode => VoterChange::Promote(change.node_id),
            ConfChangeType::RemoveNode => VoterChange::Remove(change.node_id),
        }
    }
}

/// A voter change the quorum applied, with the configuration it made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedVoterChange {
    pub index: u64,
    pub change: VoterChange,
    /// What the proposer attached (the broker: the node's directory id).
    pub context: Vec<u8>,
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
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
    /// leaders' no-op entries and the voter changes, kept so that indexes are contiguous).
    pub committed: Vec<Committed>,
    /// The voter changes among `committed`, already applied to the configuration.
    pub voter_changes: Vec<AppliedVoterChange>,
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
            config.voters.is_empty() || config.voters.contains(&config.node_id),
            "node must be a voter, or join with no voters known"
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
        let conf_state = store
            .initial_state()
            .map_err(|source| Error::Raft {
                op: "conf state",
                source,
            })?
            .conf_state;
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let node = RawNode::new(&raft_config, store, &logger).map_err(|source| Error::Raft {
            op: "start",
            source,
        })?;
        Ok(Quorum {
            node,
            outstanding: None,
            conf_history: vec![(snapshot_index, conf_state)],
            snapshot_required_at: None,
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
    ///
    /// Refused (`Ok`, nothing done) on a node outside the configuration: vote requests (it
    /// has no vote to give) and a log from the first entry (it needs the snapshot that says
    /// who the voters are). A heartbeat that says this node acknowledged entries it does not
    /// have is [`Error::LogLost`]: raft-rs would panic on it.
    pub fn step(&mut self, message: Message) -> Result<(), Error> {
        if self.snapshot_required_at.is_some() {
            return Err(Error::SnapshotRequired);
        }
        let kind = message.get_msg_type();
        if !self.is_member() {
            let vote = matches!(
                kind,
                MessageType::MsgRequestVote | MessageType::MsgRequestPreVote
            );
            let whole_log = kind == MessageType::MsgAppend
                && message.index == 0
                && !message.entries.is_empty()
                && self.voters().is_empty();
            if vote || whole_log {
                return Ok(());
            }
        }
        if kind == MessageType::MsgHeartbeat && message.commit > self.last_index() {
            return Err(Error::LogLost {
                last_index: self.last_index(),
                acknowledged: message.commit,
            });
        }
        self.node
            .step(message)
            .map_err(|source| Error::Raft { op: "step", source })
    }

    /// The next state to persist, or `None` if there is none, a `Pending` is still out, or a
    /// snapshot is required first ([`Quorum::snapshot_required`]).
    pub fn ready(&mut self) -> Option<Pending> {
        if self.outstanding.is_some()
            || self.snapshot_required_at.is_some()
            || !self.node.has_ready()
        {
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
            let snapshot = ready.snapshot();
            actions.snapshot = Some(InstalledSnapshot::of(snapshot));
            let metadata = snapshot.get_metadata();
            self.conf_history = vec![(metadata.index, metadata.get_conf_state().clone())];
        }
        push_messages(&mut actions, ready.take_messages());
        push_messages(&mut actions, ready.take_persisted_messages());
        let committed = ready.take_committed_entries();
        self.apply_voter_changes(&mut actions, &committed)?;
        push_committed(&mut actions, committed);
        let mut light = self.node.advance(ready);
        if let Some(commit) = light.commit_index() {
            let mut hard_state = self.node.raft.hard_state();
            hard_state.commit = commit;
            self.node.mut_store().set_hard_state(&hard_state)?;
        }
        push_messages(&mut actions, light.take_messages());
        let committed = light.take_committed_entries();
        self.apply_voter_changes(&mut actions, &committed)?;
        push_committed(&mut actions, committed);
        self.node.advance_apply();
        Ok(actions)
    }

    /// Applies the conf changes among `entries` (committed, in order) to the configuration.
    fn apply_voter_changes(
        &mut self,
        actions: &mut Actions,
        entries: &[Entry],
    ) -> Result<(), Error> {
        for entry in entries {
            match entry.get_entry_type() {
                EntryType::EntryNormal => continue,
                EntryType::EntryConfChange => {}
                EntryType::EntryConfChangeV2 => {
                    panic!(
                        "entry {}: joint configurations are never proposed",
                        entry.index
                    )
                }
            }
            let change =
                ConfChange::parse_from_bytes(&entry.data).map_err(|error| Error::VoterChange {
                    reason: format!(
                        "committed conf change {} does not decode: {error}",
                        entry.index
                    ),
                })?;
            let conf_state =
                self.node
                    .apply_conf_change(&change)
                    .map_err(|source| Error::Raft {
                        op: "apply conf change",
                        source,
                    })?;
            let applied = VoterChange::of(&change);
            if matches!(applied, VoterChange::AddLearner(_)) {
                self.snapshot_required_at = Some(entry.index);
            }
            let mut voters = conf_state.voters.clone();
            voters.sort_unstable();
            let mut learners = conf_state.learners.clone();
            learners.sort_unstable();
            assert!(
                !voters.is_empty(),
                "entry {}: a change left no voter",
                entry.index
            );
            assert!(
                voters.iter().all(|v| !learners.contains(v)),
                "entry {}: a node is both voter and learner",
                entry.index
            );
            self.conf_history.push((entry.index, conf_state));
            actions.voter_changes.push(AppliedVoterChange {
                index: entry.index,
                change: applied,
                context: change.context.to_vec(),
                voters,
                learners,
            });
        }
        Ok(())
    }

    /// Proposes one change of the voter set; the index of its entry. Only the leader, with no
    /// other change in progress, and only a change that makes sense now: a learner added is
    /// in no role yet, a node promoted is a learner, a node removed is in the configuration,
    /// is not this leader, and is not the last voter.
    pub fn propose_voter_change(
        &mut self,
        change: VoterChange,
        context: Vec<u8>,
    ) -> Result<u64, Error> {
        let refuse = |reason: String| Err(Error::VoterChange { reason });
        if !self.is_leader() {
            return refuse("this node is not the leader".to_string());
        }
        if self.node.raft.has_pending_conf() {
            return refuse("another voter change is not applied yet".to_string());
        }
        let node = change.node();
        let (voters, learners) = (self.voters(), self.learners());
        let (voter, learner) = (voters.contains(&node), learners.contains(&node));
        match change {
            VoterChange::AddLearner(_) if voter || learner => {
                return refuse(format!("node {node} is already in the quorum"));
            }
            VoterChange::Promote(_) if !learner => {
                return refuse(format!("node {node} is not a learner"));
            }
            VoterChange::Remove(_) if !voter && !learner => {
                return refuse(format!("node {node} is not in the quorum"));
            }
            VoterChange::Remove(_) if node == self.node.raft.id => {
                return refuse(format!(
                    "node {node} is the leader: it cannot remove itself (stop it, and remove it \
                     from the next leader)"
                ));
            }
            VoterChange::Remove(_) if voter && voters.len() == 1 => {
                return refuse(format!("node {node} is the last voter"));
            }
            _ => {}
        }
        let last_before = self.last_index();
        self.node
            .propose_conf_change(Vec::new(), change.to_conf_change(context))
            .map_err(|source| Error::Raft {
                op: "propose conf change",
                source,
            })?;
        let index = self.last_index();
        assert_eq!(index, last_before + 1, "a proposal appends one entry");
        Ok(index)
    }

    /// The voters of the configuration this node has applied, ascending.
    pub fn voters(&self) -> Vec<u64> {
        let mut voters: Vec<u64> = self.node.raft.prs().conf().voters().ids().iter().collect();
        voters.sort_unstable();
        voters
    }

    /// The learners of that configuration, ascending.
    pub fn learners(&self) -> Vec<u64> {
        let mut learners: Vec<u64> = self
            .node
            .raft
            .prs()
            .conf()
            .learners()
            .iter()
            .copied()
            .collect();
        learners.sort_unstable();
        learners
    }

    /// Whether this node is a voter or a learner of its configuration.
    pub fn is_member(&self) -> bool {
        let id = self.node.raft.id;
        self.voters().contains(&id) || self.learners().contains(&id)
    }

    /// The index of an applied addition of a node past which a snapshot must be taken
    /// ([`Quorum::compact`] at or after it) before the quorum goes on: `ready` gives nothing
    /// and `step` takes nothing until then.
    pub fn snapshot_required(&self) -> Option<u64> {
        self.snapshot_required_at
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
            if self
                .snapshot_required_at
                .is_some_and(|index| index <= snapshot_index)
            {
                self.snapshot_required_at = None;
            }
            return Ok(());
        }
        let term = store.term(applied_index).map_err(|source| Error::Raft {
            op: "term of the applied index",
            source,
        })?;
        let at = self
            .conf_history
            .iter()
            .rposition(|(index, _)| *index <= applied_index)
            .expect("the configuration at the store's snapshot is never dropped");
        let conf_state = self.conf_history[at].1.clone();
        let mut snapshot = Snapshot::default();
        snapshot.set_data(data.into());
        let metadata = snapshot.mut_metadata();
        metadata.index = applied_index;
        metadata.term = term;
        metadata.set_conf_state(conf_state);
        self.node.mut_store().compact(snapshot)?;
        self.conf_history.drain(..at);
        if self
            .snapshot_required_at
            .is_some_and(|index| index <= applied_index)
        {
            self.snapshot_required_at = None;
        }
        Ok(())
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

    #[cfg(test)]
    fn hard_state_vote(&self) -> u64 {
        self.node.raft.vote
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
        // A voter change was applied (`apply_voter_changes`): the application sees an empty
        // entry at its index.
        let data = if entry.get_entry_type() == EntryType::EntryNormal {
            entry.data.to_vec()
        } else {
            Vec::new()
        };
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
            data,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    const ROUNDS_MAX: usize = 2_000;

    /// Nodes on one thread: every message delivered at once, unless its end is down.
    struct Cluster {
        nodes: Vec<Option<Quorum<MemoryStore>>>,
        disks: Vec<MemoryStore>,
        /// What each node applied: (index, data), and the voter changes.
        applied: Vec<Vec<(u64, Vec<u8>)>>,
        changes: Vec<Vec<AppliedVoterChange>>,
    }

    #[test]
    fn a_voter_change_decodes_from_its_entry_data() {
        for change in [
            VoterChange::AddLearner(4),
            VoterChange::Promote(4),
            VoterChange::Remove(2),
        ] {
            let data = change
                .to_conf_change(b"dir-4".to_vec())
                .write_to_bytes()
                .unwrap();
            assert_eq!(
                VoterChange::decode(&data).unwrap(),
                (change, b"dir-4".to_vec())
            );
        }
        assert!(VoterChange::decode(&[0xff; 3]).is_err());
    }

    fn config(id: u64, voters: &[u64]) -> QuorumConfig {
        let mut config = QuorumConfig::new(id, voters.to_vec());
        config.election_ticks_min = 5;
        config.election_ticks_max = 10;
        config
    }

    impl Cluster {
        fn new(size: u64) -> Self {
            let voters: Vec<u64> = (1..=size).collect();
            let disks: Vec<MemoryStore> =
                voters.iter().map(|_| MemoryStore::new(&voters)).collect();
            let nodes = voters
                .iter()
                .map(|&id| {
                    Some(Quorum::new(&config(id, &voters), disks[id as usize - 1].clone()).unwrap())
                })
                .collect();
            Cluster {
                nodes,
                disks,
                applied: vec![Vec::new(); size as usize],
                changes: vec![Vec::new(); size as usize],
            }
        }

        fn node(&mut self, id: u64) -> &mut Quorum<MemoryStore> {
            self.nodes[id as usize - 1].as_mut().expect("node is up")
        }

        /// Runs rounds (a tick each) until `done` holds; panics after ROUNDS_MAX.
        fn run_until(&mut self, what: &str, mut done: impl FnMut(&mut Cluster) -> bool) {
            for _ in 0..ROUNDS_MAX {
                if done(self) {
                    return;
                }
                for node in self.nodes.iter_mut().flatten() {
                    node.tick();
                }
                self.deliver();
            }
            panic!("{what}: not within {ROUNDS_MAX} rounds");
        }

        /// Drains every node's rounds and delivers messages until none are left.
        fn deliver(&mut self) {
            for _ in 0..ROUNDS_MAX {
                let mut messages = Vec::new();
                for i in 0..self.nodes.len() {
                    let Some(node) = self.nodes[i].as_mut() else {
                        continue;
                    };
                    while let Some(pending) = node.ready() {
                        let persisted = node.persist(pending).unwrap();
                        let actions = node.advance(persisted).unwrap();
                        messages.extend(actions.messages);
                        if actions.snapshot.is_some() {
                            self.applied[i].clear();
                        }
                        for entry in actions.committed {
                            self.applied[i].push((entry.index, entry.data));
                        }
                        self.changes[i].extend(actions.voter_changes);
                    }
                    let node = self.nodes[i].as_mut().unwrap();
                    if node.snapshot_required().is_some() {
                        let applied = node.node.raft.raft_log.applied;
                        node.compact(applied, b"state".to_vec()).unwrap();
                    }
                }
                if messages.is_empty() {
                    return;
                }
                for outgoing in messages {
                    let snapshot = outgoing.is_snapshot();
                    let from = outgoing.message.from;
                    let delivered = match self.nodes.get_mut(outgoing.to as usize - 1) {
                        Some(Some(to)) => {
                            let _ = to.step(outgoing.message);
                            true
                        }
                        _ => false,
                    };
                    if snapshot {
                        let delivery = if delivered {
                            SnapshotDelivery::Delivered
                        } else {
                            SnapshotDelivery::Failed
                        };
                        if let Some(Some(leader)) = self.nodes.get_mut(from as usize - 1) {
                            leader.report_snapshot(outgoing.to, delivery);
                        }
                    }
                }
            }
            panic!("messages still flowing after {ROUNDS_MAX} deliveries");
        }

        fn leader(&self) -> Option<u64> {
            self.nodes
                .iter()
                .flatten()
                .find(|n| n.is_leader() && n.committed_in_current_term())
                .map(|n| n.node.raft.id)
        }

        fn elect(&mut self) -> u64 {
            self.run_until("a leader", |c| c.leader().is_some());
            self.leader().unwrap()
        }

        /// Proposes `data` on the leader and runs until every up node applied it.
        fn write(&mut self, data: &[u8]) {
            let leader = self.elect();
            self.node(leader).propose(data.to_vec()).unwrap();
            let up: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].is_some())
                .collect();
            self.run_until("a write applied everywhere", |c| {
                up.iter()
                    .all(|&i| c.applied[i].iter().any(|(_, d)| d == data))
            });
        }

        /// Proposes `change` on the leader and runs until every up node applied it.
        fn change(&mut self, change: VoterChange, context: &[u8]) -> u64 {
            let leader = self.elect();
            let index = self
                .node(leader)
                .propose_voter_change(change, context.to_vec())
                .unwrap();
            // A node being added gets a snapshot past the change, not the change.
            let added = match change {
                VoterChange::AddLearner(node) => Some(node as usize - 1),
                _ => None,
            };
            let up: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].is_some() && Some(i) != added)
                .collect();
            self.run_until("a voter change applied everywhere", |c| {
                up.iter()
                    .all(|&i| c.changes[i].iter().any(|applied| applied.index == index))
            });
            index
        }

        fn crash(&mut self, id: u64) {
            self.nodes[id as usize - 1] = None;
        }

        /// Starts node `id` again on what its disk holds.
        fn restart(&mut self, id: u64, voters: &[u64]) {
            let disk = self.disks[id as usize - 1].clone();
            self.nodes[id as usize - 1] = Some(Quorum::new(&config(id, voters), disk).unwrap());
        }

        /// Starts node `id` on an empty disk, joining: it knows no voters.
        fn start_empty_joining(&mut self, id: u64) {
            let disk = MemoryStore::new(&[]);
            self.disks[id as usize - 1] = disk.clone();
            self.applied[id as usize - 1].clear();
            self.changes[id as usize - 1].clear();
            self.nodes[id as usize - 1] = Some(Quorum::new(&config(id, &[]), disk).unwrap());
        }
    }

    /// The replacement of a voter whose disk was lost: removed, then back on an empty disk as
    /// a learner that gets a snapshot (never the log from its first entry), then promoted.
    /// Every node ends with the same three voters and the same entries after the snapshot.
    #[test]
    fn a_lost_voter_is_removed_then_added_back_as_a_learner_and_promoted() {
        let mut cluster = Cluster::new(3);
        cluster.write(b"one");
        let leader = cluster.elect();
        let lost = (1..=3).find(|&id| id != leader).unwrap();
        cluster.crash(lost);
        cluster.write(b"two");
        cluster.change(VoterChange::Remove(lost), b"");
        let remaining: Vec<u64> = (1..=3).filter(|&id| id != lost).collect();
        for &id in &remaining {
            assert_eq!(cluster.node(id).voters(), remaining);
        }
        cluster.start_empty_joining(lost);
        assert!(!cluster.node(lost).is_member());
        cluster.change(VoterChange::AddLearner(lost), b"dir-2");
        cluster.run_until("the learner has the snapshot", |c| c.node(lost).is_member());
        assert_eq!(cluster.node(lost).learners(), vec![lost]);
        assert!(
            cluster.node(lost).latest_snapshot().is_some(),
            "a new member starts from a snapshot"
        );
        cluster.change(VoterChange::Promote(lost), b"");
        cluster.write(b"three");
        for id in 1..=3 {
            assert_eq!(cluster.node(id).voters(), vec![1, 2, 3], "node {id}");
            assert!(cluster.node(id).learners().is_empty(), "node {id}");
        }
        let added = cluster.changes[leader as usize - 1]
            .iter()
            .find(|c| c.change == VoterChange::AddLearner(lost))
            .unwrap();
        assert_eq!(added.context, b"dir-2");
        // The new member applied what came after its snapshot, in order.
        let joined = &cluster.applied[lost as usize - 1];
        assert!(joined.iter().any(|(_, d)| d == b"three"), "{joined:?}");
        assert!(
            joined.windows(2).all(|w| w[0].0 + 1 == w[1].0),
            "{joined:?}"
        );
        // Without the lost voter's vote the other two still decide.
        cluster.crash(lost);
        cluster.write(b"four");
    }

    /// A restart starts from the snapshot's configuration and the changes after it, so the
    /// voters survive a restart of every node, whatever the configured list says.
    #[test]
    fn the_voter_set_survives_restarts() {
        let mut cluster = Cluster::new(3);
        let leader = cluster.elect();
        let removed = (1..=3).find(|&id| id != leader).unwrap();
        cluster.change(VoterChange::Remove(removed), b"");
        cluster.crash(removed);
        cluster.write(b"after");
        let remaining: Vec<u64> = (1..=3).filter(|&id| id != removed).collect();
        for &id in &remaining {
            cluster.crash(id);
        }
        for &id in &remaining {
            cluster.restart(id, &[1, 2, 3]);
        }
        cluster.run_until("the voters replayed", |c| {
            remaining.iter().all(|&id| c.node(id).voters() == remaining)
        });
        cluster.write(b"again");
    }

    /// A leader refuses what makes no sense now: adding a member, promoting a voter, removing
    /// a stranger or itself, and a second change before the first is applied.
    #[test]
    fn voter_changes_that_make_no_sense_now_are_refused() {
        let mut cluster = Cluster::new(3);
        let leader = cluster.elect();
        let follower = (1..=3).find(|&id| id != leader).unwrap();
        let refused = |cluster: &mut Cluster, on: u64, change| {
            matches!(
                cluster.node(on).propose_voter_change(change, Vec::new()),
                Err(Error::VoterChange { .. })
            )
        };
        assert!(refused(&mut cluster, follower, VoterChange::Remove(leader)));
        assert!(refused(
            &mut cluster,
            leader,
            VoterChange::AddLearner(follower)
        ));
        assert!(refused(
            &mut cluster,
            leader,
            VoterChange::Promote(follower)
        ));
        assert!(refused(&mut cluster, leader, VoterChange::Remove(9)));
        assert!(refused(&mut cluster, leader, VoterChange::Remove(leader)));
        cluster
            .node(leader)
            .propose_voter_change(VoterChange::AddLearner(4), Vec::new())
            .unwrap();
        assert!(refused(&mut cluster, leader, VoterChange::Remove(follower)));
    }

    /// A voter that lost its log while the leader remembers what it acknowledged hears a
    /// heartbeat naming a commit beyond its log: an error naming the loss, not raft-rs's
    /// panic (`to_commit ... is out of range`).
    #[test]
    fn a_voter_that_lost_its_log_gets_an_error_not_a_panic() {
        let mut cluster = Cluster::new(3);
        cluster.write(b"one");
        cluster.write(b"two");
        let leader = cluster.elect();
        let lost = (1..=3).find(|&id| id != leader).unwrap();
        cluster.crash(lost);
        cluster.disks[lost as usize - 1] = MemoryStore::new(&[1, 2, 3]);
        cluster.restart(lost, &[1, 2, 3]);
        let mut heartbeat = Message::default();
        heartbeat.set_msg_type(MessageType::MsgHeartbeat);
        heartbeat.from = leader;
        heartbeat.to = lost;
        heartbeat.term = cluster.node(leader).term();
        heartbeat.commit = cluster.node(leader).commit_index();
        match cluster.node(lost).step(heartbeat) {
            Err(Error::LogLost {
                last_index: 0,
                acknowledged,
            }) => assert!(acknowledged > 0),
            other => panic!("{other:?}"),
        }
    }

    /// A node outside the configuration has no vote to give, and takes no log from the first
    /// entry (it would apply the changes in it to a configuration it does not know).
    #[test]
    fn a_node_outside_the_configuration_grants_no_vote_and_takes_no_whole_log() {
        let mut joining = Quorum::new(&config(4, &[]), MemoryStore::new(&[])).unwrap();
        for kind in [MessageType::MsgRequestVote, MessageType::MsgRequestPreVote] {
            let mut request = Message::default();
            request.set_msg_type(kind);
            request.from = 1;
            request.to = 4;
            request.term = 5;
            request.log_term = 5;
            request.index = 9;
            joining.step(request).unwrap();
        }
        let mut append = Message::default();
        append.set_msg_type(MessageType::MsgAppend);
        append.from = 1;
        append.to = 4;
        append.term = 5;
        append.entries = vec![Entry {
            index: 1,
            term: 1,
            ..Default::default()
        }]
        .into();
        joining.step(append).unwrap();
        assert_eq!(joining.last_index(), 0);
        let granted = joining
            .ready()
            .map(|pending| {
                let persisted = joining.persist(pending).unwrap();
                joining.advance(persisted).unwrap().messages
            })
            .unwrap_or_default();
        assert!(
            granted.iter().all(|m| !matches!(
                m.message.get_msg_type(),
                MessageType::MsgRequestVoteResponse | MessageType::MsgRequestPreVoteResponse
            )),
            "{granted:?}"
        );
        assert_eq!(joining.hard_state_vote(), 0);
    }
}
