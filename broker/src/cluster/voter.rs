//! A voter of the controller quorum: one thread (`strom-quorum`) that owns
//! the raft-rs member and its file store under `__metadata/raft/`, ticks
//! it, steps the messages the controller listener receives, persists each
//! round before sending, applies committed entries to the metadata image
//! and publishes it for the cores. Persisting is blocking file I/O with
//! fsyncs, so it runs here and never on an executor, as the single node's
//! metadata writer does.
//!
//! On the active controller (the Raft leader) this thread also keeps the
//! brokers' sessions: a heartbeat registers or unfences its broker, a
//! broker silent for `broker.session.timeout.ms` is fenced and its
//! leaderships move (`placement::fence`). Topic changes are decided on
//! core 0 (`controller`) and arrive here as proposals.
//!
//! The active controller decides its own changes (registrations, fencing,
//! ISR changes, preferred leaders) on the image with its proposals not yet
//! applied laid over it ([`Voter::deciding_image`]): a record carries a
//! partition's whole state, so two changes decided on the same image
//! before the first commits would have the second undo the first.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use replication::file_store::FileStore;
use replication::quorum::{Quorum, QuorumConfig, SnapshotDelivery, SnapshotPolicy, VoterChange};
use replication::sessions::{SessionTiming, Sessions};

use super::wire::{self, FetchReply, Heartbeat, HeartbeatReply, HeartbeatStatus};
use super::{membership, placement, Cluster, Role};
use crate::metadata::{MetadataImage, MetadataRecord};
use replication::transport::Transport;

/// Entries sent to a broker per fetch, about.
const FETCH_BYTES_MAX: u64 = 4 << 20;
/// Longest a broker's metadata fetch is held for something newer,
/// whatever it asks: well within the time the controller listener waits
/// for this thread's answer.
pub const FETCH_WAIT_MAX: Duration = Duration::from_secs(1);
const _: () = assert!(FETCH_WAIT_MAX.as_millis() * 2 < super::transport::IO_TIMEOUT.as_millis());
/// Fetches held at once: each controller-listener connection has at most
/// one in flight. One more is answered at once.
const FETCHES_PARKED_MAX: usize = super::transport::CONNECTIONS_MAX;
/// A change proposed for a broker is not proposed again sooner than this.
const REPROPOSE_AFTER: Duration = Duration::from_secs(2);
/// The key of the cluster id's proposal among the brokers' (ids are >= 0).
const CLUSTER_ID_KEY: i32 = -1;
/// The quorum thread turns its loop at least once a tick; a turn that
/// comes this many ticks late means the thread did not run (the process
/// was stopped, a VM stalled): heartbeats sent meanwhile could not be
/// taken, so the time does not count against the brokers' sessions.
const STALL_TICKS_MIN: u32 = 3;

/// Work for the quorum thread.
pub enum Input {
    /// Raft messages arrived from other voters: taken from the peers'
    /// transport.
    Arrived,
    Heartbeat(Heartbeat, flume::Sender<HeartbeatReply>),
    /// A broker's metadata fetch: answered once something after `after`
    /// is applied, or when `wait` has passed (long polling).
    Fetch {
        after: u64,
        wait: Duration,
        reply: flume::Sender<Option<FetchReply>>,
    },
    Propose(
        Vec<MetadataRecord>,
        flume::Sender<Result<u64, ProposeError>>,
    ),
    /// A leader's ISR change, answered with a Kafka error code once
    /// committed (or refused).
    AlterPartition(wire::AlterPartition, flume::Sender<i16>),
    /// The connection a broker heartbeats on ended.
    ConnectionLost(i32),
    /// An admin's change of the quorum's voters (AddRaftVoter,
    /// RemoveRaftVoter), answered once done or refused.
    ChangeVoters(VoterRequest, Duration, flume::Sender<VoterOutcome>),
}

/// A change of the quorum's voters an admin asks for. A directory, when
/// given, must be the one the node is known by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VoterRequest {
    /// Add the node (it must be running, outside the quorum): first as a
    /// learner that gets a snapshot and catches up, then as a voter.
    Add {
        node: i32,
        directory: Option<String>,
    },
    Remove {
        node: i32,
        directory: Option<String>,
    },
}

/// How a voter change ended: done, or a Kafka error code and why.
pub type VoterOutcome = Result<(), (i16, String)>;

/// The voter change under way on the active controller.
struct VoterChangeInProgress {
    request: VoterRequest,
    /// The log index of its step under way (learner, promotion, removal).
    index: u64,
    deadline: Instant,
    reply: flume::Sender<VoterOutcome>,
}

/// Who hears how a proposal ended.
enum Reply {
    Propose(flume::Sender<Result<u64, ProposeError>>),
    Code(flume::Sender<i16>),
}

impl Reply {
    fn send(self, outcome: Result<u64, ProposeError>) {
        match self {
            Reply::Propose(reply) => {
                let _ = reply.send(outcome);
            }
            Reply::Code(reply) => {
                let _ = reply.send(match outcome {
                    Ok(_) => crate::errors::NONE,
                    Err(ProposeError::NotController { .. } | ProposeError::LeadershipLost) => {
                        crate::errors::NOT_CONTROLLER
                    }
                    Err(ProposeError::Failed(_)) => crate::errors::UNKNOWN_SERVER_ERROR,
                });
            }
        }
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ProposeError {
    #[error("this node is not the active controller (the active one is {leader})")]
    NotController { leader: i32 },
    #[error("the active controller lost its leadership before the change committed")]
    LeadershipLost,
    #[error("the controller quorum failed: {0}")]
    Failed(String),
}

struct Pending {
    index: u64,
    term: u64,
    reply: Reply,
}

/// How a voter reaches the others: the controller channel in a running
/// broker, a loopback in tests.
pub type Peers = Box<dyn Transport<replication::Message> + Send>;

pub struct Voter {
    cluster: Arc<Cluster>,
    quorum: Quorum<FileStore>,
    peers: Peers,
    inbox: flume::Receiver<Input>,
    tick: Duration,
    /// The image of every entry applied so far.
    image: MetadataImage,
    applied: u64,
    pending: VecDeque<Pending>,
    /// The records of this controller's proposals not applied yet, by log
    /// index, oldest first (dropped when its leadership ends).
    unapplied: VecDeque<(u64, Vec<MetadataRecord>)>,
    /// The brokers' sessions, kept by the active controller.
    sessions: Sessions<Instant>,
    /// When a registration or fencing change was last proposed per broker.
    proposed: HashMap<i32, Instant>,
    was_leader: bool,
    /// The commit index the store held at open: images before it are not
    /// published, so a restart's replay never makes the cores open or
    /// delete partitions for states long gone (a topic deleted and created
    /// again under its name would lose the new data).
    replayed_to: u64,
    /// When a snapshot is taken (by the bytes of log applied since the last).
    snapshots: SnapshotPolicy,
    /// When the active controller last looked for partitions not led by
    /// their preferred replica.
    last_rebalance: Instant,
    /// When a Raft message last came from each other voter. The active
    /// controller fences only while it has heard a majority within an
    /// election timeout (it may no longer lead otherwise: it learns of a
    /// newer term only from those messages).
    voters_heard: HashMap<u64, Instant>,
    /// Brokers whose heartbeat connection closed since their last
    /// heartbeat: their session is the short grace, not the whole one.
    connections_lost: HashSet<i32>,
    /// The voter change an admin asked for, while it is under way.
    voter_change: Option<VoterChangeInProgress>,
    /// Brokers whose last heartbeat said their data dir refuses writes:
    /// they lead nothing and join no ISR until it takes writes again.
    storage_full: HashSet<i32>,
    /// Brokers' metadata fetches held until something newer is applied.
    parked_fetches: Vec<ParkedFetch>,
    /// When `applied` was reached, in microseconds since the Unix epoch.
    applied_at_us: u64,
}

/// A broker's metadata fetch waiting for an entry after `after`.
struct ParkedFetch {
    after: u64,
    until: Instant,
    reply: flume::Sender<Option<FetchReply>>,
}

impl Voter {
    /// Opens the store of `dir` and starts the member from what it holds.
    pub fn open(
        cluster: Arc<Cluster>,
        dir: &std::path::Path,
        peers: Peers,
        inbox: flume::Receiver<Input>,
        image: MetadataImage,
    ) -> anyhow::Result<Self> {
        Self::open_as(cluster, dir, peers, inbox, image, membership::Start::Voter)
    }

    /// As [`Voter::open`]; with [`membership::Start::Join`] an empty store
    /// starts outside the quorum (no voters known: the leader's snapshot
    /// tells them once a voter change adds this node).
    pub fn open_as(
        cluster: Arc<Cluster>,
        dir: &std::path::Path,
        peers: Peers,
        inbox: flume::Receiver<Input>,
        image: MetadataImage,
        start: membership::Start,
    ) -> anyhow::Result<Self> {
        let voters: Vec<u64> = match start {
            membership::Start::Voter => cluster.voters.iter().map(|v| v.id as u64).collect(),
            membership::Start::Join => Vec::new(),
        };
        std::fs::create_dir_all(dir)?;
        let (store, recovery) = FileStore::open(dir, &voters)?;
        tracing::info!(
            dir = %dir.display(),
            entries_replayed = recovery.entries_replayed,
            torn_bytes_cut = recovery.torn_bytes_cut,
            entries_dropped_by_snapshot = recovery.entries_dropped_by_snapshot,
            "controller quorum store opened"
        );
        let timing = cluster.timing;
        let tick = Duration::from_millis((timing.election_timeout_ms / 10).max(10));
        let mut config = QuorumConfig::new(cluster.node_id as u64, voters);
        config.election_ticks_min = 10;
        config.election_ticks_max = 20;
        config.heartbeat_ticks = 2;
        let quorum = Quorum::new(&config, store)?;
        let replayed_to = quorum.commit_index();
        // The image starts from the last snapshot; entries after it follow.
        let image = match quorum.latest_snapshot() {
            Some(snapshot) => {
                let mut loaded = crate::metadata::decode_snapshot(&snapshot.data, cluster.node_id)
                    .map_err(|error| {
                        anyhow::anyhow!(
                            "the metadata snapshot at index {} in {} does not decode: {error}",
                            snapshot.index,
                            dir.display()
                        )
                    })?;
                loaded.offset = snapshot.index;
                tracing::info!(index = snapshot.index, "metadata snapshot loaded");
                loaded
            }
            None => image,
        };
        Ok(Voter {
            replayed_to,
            last_rebalance: Instant::now(),
            voters_heard: HashMap::new(),
            connections_lost: HashSet::new(),
            voter_change: None,
            storage_full: HashSet::new(),
            parked_fetches: Vec::new(),
            applied_at_us: super::unix_time_us(),
            snapshots: SnapshotPolicy {
                log_bytes_max: cluster.snapshot_log_bytes,
            },
            quorum,
            peers,
            inbox,
            tick,
            applied: image.offset,
            image,
            pending: VecDeque::new(),
            unapplied: VecDeque::new(),
            sessions: Sessions::new(
                SessionTiming {
                    timeout: Duration::from_millis(timing.session_timeout_ms),
                    failover_grace: failover_grace(&timing),
                    stall_min: tick * STALL_TICKS_MIN,
                },
                Instant::now(),
            ),
            proposed: HashMap::new(),
            was_leader: false,
            cluster,
        })
    }

    /// Runs until the process ends; a store failure is fatal (the promises
    /// this member made are void without it).
    pub fn run(mut self) {
        let mut next_tick = Instant::now() + self.tick;
        loop {
            let now = Instant::now();
            self.observe_stall(now);
            if now >= next_tick {
                // What arrived while this thread did not run first: a
                // newer term among it ends this leadership before any
                // duty is decided on a stale view.
                while let Ok(input) = self.inbox.try_recv() {
                    self.handle(input);
                }
                // Also what arrived while a full inbox refused the wake-up.
                self.take_arrivals();
                self.quorum.tick();
                next_tick = now + self.tick;
                self.duties();
            }
            match self
                .inbox
                .recv_timeout(next_tick.saturating_duration_since(now))
            {
                Ok(input) => self.handle(input),
                Err(flume::RecvTimeoutError::Timeout) => {}
                Err(flume::RecvTimeoutError::Disconnected) => return,
            }
            while let Ok(input) = self.inbox.try_recv() {
                self.handle(input);
            }
            if let Err(error) = self.process_ready() {
                crate::fatal::exit(&format!("the controller quorum's store failed: {error}"));
            }
        }
    }

    /// Notes a loop turn at `now`. A turn [`STALL_TICKS_MIN`] ticks late
    /// means this thread was not running: the stall does not count against
    /// the brokers' sessions (see `replication::sessions`).
    fn observe_stall(&mut self, now: Instant) {
        let Some(stalled) = self.sessions.turn(now) else {
            return;
        };
        if self.quorum.is_leader() {
            tracing::warn!(
                stalled_ms = stalled.as_millis() as u64,
                "the controller did not run for a while: brokers' sessions resume from now, none is fenced for the time it could not hear them"
            );
        }
    }

    /// Whether the active controller heard a majority of the voters
    /// (itself included) within an election timeout at `now`.
    fn majority_heard(&self, now: Instant) -> bool {
        let window = Duration::from_millis(self.cluster.timing.election_timeout_ms);
        // The voters of the configuration the quorum applied, not the
        // static list: voters may have been added or removed since.
        let voters = self.quorum.voters();
        let heard = voters
            .iter()
            .filter(|&&id| {
                id == self.cluster.node_id as u64
                    || self
                        .voters_heard
                        .get(&id)
                        .is_some_and(|at| now.saturating_duration_since(*at) <= window)
            })
            .count();
        heard * 2 > voters.len()
    }

    /// Steps every Raft message from the other voters that has arrived.
    fn take_arrivals(&mut self) {
        while let Some(arrived) = self.peers.receive(0) {
            let message = arrived.message;
            self.voters_heard.insert(message.from, Instant::now());
            match self.quorum.step(message) {
                Ok(()) => {}
                Err(error @ replication::Error::LogLost { .. }) => crate::fatal::exit(&format!(
                    "{error}. This voter stops rather than rejoin the quorum with a log \
                             it does not have; replace it as docs/operations.md (Replacing a \
                             voter) says"
                )),
                Err(error) => tracing::debug!(%error, "raft message not taken"),
            }
        }
    }

    fn handle(&mut self, input: Input) {
        match input {
            Input::Arrived => self.take_arrivals(),
            Input::Heartbeat(heartbeat, reply) => {
                let answer = self.heartbeat(heartbeat);
                let _ = reply.send(answer);
            }
            Input::Fetch { after, wait, reply } => self.fetch_or_park(after, wait, reply),
            Input::Propose(records, reply) => {
                if !self.ready_to_lead() {
                    let _ = reply.send(Err(ProposeError::NotController {
                        leader: self.leader(),
                    }));
                    return;
                }
                self.propose(records, Some(Reply::Propose(reply)));
            }
            Input::ConnectionLost(broker) => {
                // A live broker reconnects at its next heartbeat; a dead
                // one (its kernel closed the connection) is fenced after a
                // grace of one and a half heartbeat intervals instead of
                // the whole session. A network partition closes nothing:
                // the session timeout applies there.
                if !self.ready_to_lead() || !self.image.is_live(broker) {
                    return;
                }
                let interval = Duration::from_millis(self.cluster.timing.heartbeat_interval_ms);
                let grace = interval + interval / 2;
                if grace < self.sessions.timing().timeout
                    && self.sessions.shorten(broker, Instant::now() + grace)
                {
                    self.connections_lost.insert(broker);
                    tracing::info!(broker, grace_ms = grace.as_millis() as u64, "a broker's heartbeat connection closed: fenced unless it heartbeats again soon");
                }
            }
            Input::ChangeVoters(request, timeout, reply) => {
                if let Err(refusal) = self.start_voter_change(request.clone(), timeout, &reply) {
                    tracing::info!(?request, reason = %refusal.1, "voter change refused");
                    let _ = reply.send(Err(refusal));
                }
            }
            Input::AlterPartition(alter, reply) => {
                if !self.ready_to_lead() {
                    let _ = reply.send(crate::errors::NOT_CONTROLLER);
                    return;
                }
                let image = self.deciding_image();
                let was_isr = image
                    .topics
                    .get(&alter.topic)
                    .and_then(|t| t.partition(alter.partition))
                    .map(|p| p.isr.clone())
                    .unwrap_or_default();
                if alter
                    .isr
                    .iter()
                    .any(|r| !was_isr.contains(r) && self.storage_full.contains(r))
                {
                    // A replica that cannot write cannot stay in sync.
                    let _ = reply.send(crate::errors::INELIGIBLE_REPLICA);
                    return;
                }
                match placement::alter_partition(&image, &alter) {
                    Ok(record) => self.propose(vec![record], Some(Reply::Code(reply))),
                    Err(code) => {
                        let _ = reply.send(crate::errors::refused(code));
                    }
                }
            }
        }
    }

    fn leader(&self) -> i32 {
        match self.quorum.leader_id() {
            0 => -1,
            id => id as i32,
        }
    }

    /// Leads and has applied everything committed before its term: only
    /// then does it decide on the image.
    fn ready_to_lead(&self) -> bool {
        self.quorum.is_leader()
            && self.quorum.committed_in_current_term()
            && self.applied >= self.quorum.commit_index()
    }

    /// The image this controller decides on: the applied one with its
    /// own proposals not applied yet laid over it.
    fn deciding_image(&self) -> Cow<'_, MetadataImage> {
        if self.unapplied.is_empty() {
            return Cow::Borrowed(&self.image);
        }
        let mut image = self.image.clone();
        for (_, records) in &self.unapplied {
            for record in records {
                image.apply(record);
            }
        }
        Cow::Owned(image)
    }

    fn propose(&mut self, records: Vec<MetadataRecord>, reply: Option<Reply>) {
        let data = wire::encode_records(&records);
        match self.quorum.propose(data) {
            Ok(()) => {
                let index = self.quorum.last_index();
                if let Some(reply) = reply {
                    self.pending.push_back(Pending {
                        index,
                        term: self.quorum.term(),
                        reply,
                    });
                }
                self.unapplied.push_back((index, records));
            }
            Err(error) => {
                if let Some(reply) = reply {
                    reply.send(Err(ProposeError::Failed(error.to_string())));
                }
            }
        }
    }

    /// Whether a change for `key` (a broker id, or [`CLUSTER_ID_KEY`]) may
    /// be proposed now: not within [`REPROPOSE_AFTER`] of the last one,
    /// which may still be on its way to commit. Records the attempt.
    fn may_propose(&mut self, key: i32, now: Instant) -> bool {
        if self
            .proposed
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < REPROPOSE_AFTER)
        {
            return false;
        }
        self.proposed.insert(key, now);
        true
    }

    fn heartbeat(&mut self, heartbeat: Heartbeat) -> HeartbeatReply {
        let not_controller = HeartbeatReply {
            status: HeartbeatStatus::NotController,
            leader: self.leader(),
            applied: self.applied,
        };
        if !self.ready_to_lead() {
            return not_controller;
        }
        let now = Instant::now();
        let broker = heartbeat.broker;
        let id = broker.id;
        self.sessions.heard(id, now);
        self.connections_lost.remove(&id);
        if heartbeat.storage_full && self.storage_full.insert(id) {
            tracing::warn!(
                broker = id,
                "broker's data dir refuses writes: it leaves the ISRs and its leaderships move"
            );
        } else if !heartbeat.storage_full && self.storage_full.remove(&id) {
            tracing::info!(
                broker = id,
                "broker's data dir takes writes again: it rejoins the ISRs as it catches up"
            );
        }
        // The answer says what is applied; the decision what will be.
        let fenced = self.image.brokers.get(&id).is_none_or(|b| b.fenced);
        if self.may_propose(id, now) {
            let image = self.deciding_image();
            let records = placement::heartbeat(
                &image,
                &broker,
                placement::Arrival {
                    clean: heartbeat.startup.clean,
                    new_directory: heartbeat.startup.new_directory,
                    shutting_down: heartbeat.shutting_down,
                    storage_full: heartbeat.storage_full,
                },
                self.cluster.unclean_default,
            );
            if records.is_empty() {
                // Nothing to change: the next change may come at once.
                self.proposed.remove(&id);
            } else {
                self.propose(records, None);
            }
        }
        HeartbeatReply {
            status: HeartbeatStatus::Accepted { fenced },
            leader: self.leader(),
            applied: self.applied,
        }
    }

    fn fetch(&self, after: u64) -> Option<FetchReply> {
        let after = after.min(self.applied);
        match self.quorum.committed_after(after, FETCH_BYTES_MAX) {
            Some(entries) => {
                let mut out = Vec::with_capacity(entries.len());
                for entry in entries.into_iter().filter(|e| e.index <= self.applied) {
                    let records = if entry.data.is_empty() {
                        Vec::new()
                    } else {
                        wire::decode_records(&entry.data).ok()?
                    };
                    out.push((entry.index, records));
                }
                Some(FetchReply::Entries {
                    entries: out,
                    applied: self.applied,
                    applied_at_us: self.applied_at_us,
                })
            }
            None => Some(FetchReply::Snapshot {
                index: self.applied,
                image: crate::metadata::encode_snapshot(&self.image),
            }),
        }
    }

    /// Answers a broker's metadata fetch now when this voter has applied
    /// something after `after` (or it asks no wait), else holds it until
    /// it has or `wait` ([`FETCH_WAIT_MAX`] at most) passed: a broker that
    /// is not a voter follows the metadata log as it commits, as Kafka's
    /// brokers do, instead of learning of changes at its next heartbeat.
    fn fetch_or_park(
        &mut self,
        after: u64,
        wait: Duration,
        reply: flume::Sender<Option<FetchReply>>,
    ) {
        if self.applied > after || wait.is_zero() || self.parked_fetches.len() >= FETCHES_PARKED_MAX
        {
            let _ = reply.send(self.fetch(after));
            return;
        }
        self.parked_fetches.push(ParkedFetch {
            after,
            until: Instant::now() + wait.min(FETCH_WAIT_MAX),
            reply,
        });
    }

    /// Answers the held fetches that something newer was applied for, or
    /// whose wait passed (with what there is: nothing newer).
    fn serve_parked_fetches(&mut self) {
        if self.parked_fetches.is_empty() {
            return;
        }
        let now = Instant::now();
        let parked = std::mem::take(&mut self.parked_fetches);
        for fetch in parked {
            if self.applied > fetch.after || now >= fetch.until {
                let _ = fetch.reply.send(self.fetch(fetch.after));
            } else {
                self.parked_fetches.push(fetch);
            }
        }
    }

    /// The active controller's periodic work: give the cluster an id, and
    /// fence the brokers whose sessions ran out.
    fn duties(&mut self) {
        let leading = self.ready_to_lead();
        if leading && !self.was_leader {
            // Each broker gets a grace (at most a session) to be heard, so
            // that a broker that died with the old controller is fenced
            // soon rather than a whole session later.
            // A heartbeat taken since the election (its registration may
            // not be applied yet) counts as it is.
            self.sessions
                .took_over(self.image.brokers.keys().copied(), Instant::now());
            self.proposed.clear();
            tracing::info!(
                term = self.quorum.term(),
                "this node is the active controller"
            );
        }
        self.was_leader = leading;
        self.publish_status();
        if !leading {
            return;
        }
        let now = Instant::now();
        if self.image.cluster_id.is_empty() && self.may_propose(CLUSTER_ID_KEY, now) {
            let id = crate::metadata::new_cluster_id();
            tracing::info!(cluster_id = %id, "a new cluster: its id is proposed");
            self.propose(vec![MetadataRecord::ClusterId(id)], None);
        }
        let timing = self.cluster.timing;
        if timing.auto_leader_rebalance
            && now.duration_since(self.last_rebalance)
                >= Duration::from_millis(timing.leader_imbalance_check_interval_ms)
        {
            self.last_rebalance = now;
            let moves = placement::preferred_leaders(&self.deciding_image());
            if !moves.is_empty() {
                tracing::info!(
                    partitions = moves.len(),
                    "leadership moves back to preferred replicas"
                );
                self.propose(moves, None);
            }
        }
        if !self.majority_heard(now) {
            // Not heard from a majority: this node may have been cut off
            // or stopped while another took over; it fences no one on a
            // view that may be stale.
            return;
        }
        let expired: Vec<i32> = self
            .deciding_image()
            .live_brokers()
            .filter(|b| self.sessions.expired(b.id, now))
            .map(|b| b.id)
            .collect();
        for id in expired {
            if !self.may_propose(id, now) {
                continue;
            }
            let silent_ms = self
                .sessions
                .last_heard(id)
                .map(|at| now.saturating_duration_since(at).as_millis() as u64);
            if self.connections_lost.remove(&id) {
                tracing::warn!(
                    broker = id,
                    silent_ms,
                    "broker's heartbeat connection closed and it did not heartbeat again within the grace: fenced, its leaderships move"
                );
            } else {
                tracing::warn!(
                    broker = id,
                    silent_ms,
                    session_timeout_ms = self.sessions.timing().timeout.as_millis() as u64,
                    "broker missed its heartbeats for the session timeout: fenced, its leaderships move"
                );
            }
            // On the image with the fences just proposed: brokers expiring
            // together each move their leaderships once, to a live broker.
            let records =
                placement::fence(&self.deciding_image(), id, self.cluster.unclean_default);
            if let Some(heard) = self.sessions.last_heard(id) {
                let leaderships = self
                    .deciding_image()
                    .partition_states()
                    .filter(|(_, _, state)| state.leader == id)
                    .count();
                self.cluster
                    .probe
                    .fenced_for_silence(now.saturating_duration_since(heard), leaderships as u64);
            }
            self.propose(records, None);
        }
    }

    fn process_ready(&mut self) -> Result<(), replication::Error> {
        let mut changed = false;
        while let Some(pending) = self.quorum.ready() {
            let persisted = self.quorum.persist(pending)?;
            let actions = self.quorum.advance(persisted)?;
            for outgoing in actions.messages {
                let to = outgoing.to;
                let snapshot = outgoing.is_snapshot();
                let queued = self
                    .peers
                    .send(self.cluster.node_id, to as i32, outgoing.message)
                    .is_ok();
                if snapshot {
                    // raft-rs sends that follower nothing more until told.
                    let delivery = if queued {
                        SnapshotDelivery::Delivered
                    } else {
                        SnapshotDelivery::Failed
                    };
                    self.quorum.report_snapshot(to, delivery);
                }
            }
            if let Some(snapshot) = actions.snapshot {
                match crate::metadata::decode_snapshot(&snapshot.data, self.cluster.node_id) {
                    Ok(mut loaded) => {
                        loaded.offset = snapshot.index;
                        tracing::info!(
                            index = snapshot.index,
                            "metadata snapshot installed from the leader"
                        );
                        self.image = loaded;
                        self.applied = snapshot.index;
                        changed = true;
                    }
                    Err(error) => crate::fatal::exit(&format!(
                        "the leader's metadata snapshot at index {} does not decode ({error}); \
                         this broker cannot follow the cluster's metadata",
                        snapshot.index
                    )),
                }
            }
            for entry in actions.committed {
                self.apply(entry.index, entry.term, &entry.data);
                changed = true;
            }
            for applied in &actions.voter_changes {
                tracing::info!(
                    index = applied.index,
                    change = ?applied.change,
                    voters = ?applied.voters,
                    learners = ?applied.learners,
                    "controller quorum voter change applied"
                );
                if let Some(directories) = self.cluster.directories.get() {
                    directories.applied(applied.change, &applied.context);
                }
            }
        }
        if changed {
            self.applied_at_us = super::unix_time_us();
        }
        if changed && self.applied >= self.replayed_to {
            self.cluster.publish(&self.image);
        }
        // Every turn: the brokers hear of what was just applied at once,
        // and held fetches whose wait passed are answered.
        self.serve_parked_fetches();
        // A node added to the quorum must be sent a snapshot: taken before
        // anything more is sent or taken.
        if (changed && self.snapshots.is_due(&self.quorum))
            || self.quorum.snapshot_required().is_some()
        {
            let data = crate::metadata::encode_snapshot(&self.image);
            let bytes = data.len();
            self.quorum.compact(self.applied, data)?;
            tracing::info!(
                index = self.applied,
                bytes,
                "metadata snapshot taken, the log behind it dropped"
            );
        }
        if !self.quorum.is_leader() {
            for pending in self.pending.drain(..) {
                pending.reply.send(Err(ProposeError::LeadershipLost));
            }
            self.unapplied.clear();
        }
        self.drive_voter_change();
        self.publish_status();
        Ok(())
    }

    /// Starts the voter change `request` asks for, or says why not.
    fn start_voter_change(
        &mut self,
        request: VoterRequest,
        timeout: Duration,
        reply: &flume::Sender<VoterOutcome>,
    ) -> VoterOutcome {
        if !self.ready_to_lead() {
            return Err((
                crate::errors::NOT_CONTROLLER,
                format!("this node is not the active controller ({})", self.leader()),
            ));
        }
        if self.voter_change.is_some() {
            return Err((
                crate::errors::INVALID_REQUEST,
                "another voter change is under way".to_string(),
            ));
        }
        let (node, asked) = match &request {
            VoterRequest::Add { node, directory } | VoterRequest::Remove { node, directory } => {
                (*node, directory.clone())
            }
        };
        let known = self
            .cluster
            .directories
            .get()
            .and_then(|directories| directories.known(node));
        if let (Some(asked), Some(known)) = (&asked, &known) {
            if asked != known {
                return Err((
                    crate::errors::INVALID_REQUEST,
                    format!("node {node}'s log is in directory {known}, not {asked}"),
                ));
            }
        }
        let id = node as u64;
        let (voters, learners) = (self.quorum.voters(), self.quorum.learners());
        let step = match request {
            VoterRequest::Add { .. } => {
                if voters.contains(&id) {
                    return Err((
                        crate::errors::DUPLICATE_VOTER,
                        format!("node {node} is a voter already"),
                    ));
                }
                if !self.cluster.voters.iter().any(|v| v.id == node) {
                    return Err((
                        crate::errors::INVALID_REQUEST,
                        format!(
                            "node {node} has no controller address here: a voter must be in \
                             every node's controller.quorum.voters"
                        ),
                    ));
                }
                let Some(directory) = known else {
                    return Err((
                        crate::errors::INVALID_REQUEST,
                        format!(
                            "node {node} has not told its directory: start it first (it \
                             starts outside the quorum and asks the voters)"
                        ),
                    ));
                };
                if learners.contains(&id) {
                    // A learner from an earlier request: promoted once caught up.
                    self.applied
                } else {
                    self.quorum
                        .propose_voter_change(VoterChange::AddLearner(id), directory.into_bytes())
                        .map_err(|error| (crate::errors::INVALID_REQUEST, error.to_string()))?
                }
            }
            VoterRequest::Remove { .. } => {
                if !voters.contains(&id) && !learners.contains(&id) {
                    return Err((
                        crate::errors::VOTER_NOT_FOUND,
                        format!("node {node} is not in the quorum"),
                    ));
                }
                self.quorum
                    .propose_voter_change(VoterChange::Remove(id), Vec::new())
                    .map_err(|error| (crate::errors::INVALID_REQUEST, error.to_string()))?
            }
        };
        tracing::info!(?request, index = step, "voter change started");
        self.voter_change = Some(VoterChangeInProgress {
            request,
            index: step,
            deadline: Instant::now() + timeout,
            reply: reply.clone(),
        });
        Ok(())
    }

    /// Moves the voter change under way on: a learner caught up with the
    /// commit index is promoted; a change whose last step is applied is
    /// answered; a lost leadership or the deadline ends it.
    fn drive_voter_change(&mut self) {
        let Some(change) = &self.voter_change else {
            return;
        };
        let outcome = if !self.quorum.is_leader() {
            Some(Err((
                crate::errors::NOT_CONTROLLER,
                "the active controller lost its leadership: ask again".to_string(),
            )))
        } else if Instant::now() >= change.deadline {
            Some(Err((
                crate::errors::REQUEST_TIMED_OUT,
                "the voter change did not finish in time (a learner is promoted when asked again \
                 once it caught up)"
                    .to_string(),
            )))
        } else if self.applied < change.index {
            None
        } else {
            let (voters, learners) = (self.quorum.voters(), self.quorum.learners());
            match change.request {
                VoterRequest::Remove { node, .. } => {
                    let id = node as u64;
                    Some(if voters.contains(&id) || learners.contains(&id) {
                        Err((
                            crate::errors::NOT_CONTROLLER,
                            "the removal was lost with a change of leader: ask again".to_string(),
                        ))
                    } else {
                        Ok(())
                    })
                }
                VoterRequest::Add { node, .. } => {
                    let id = node as u64;
                    if voters.contains(&id) {
                        Some(Ok(()))
                    } else if learners.contains(&id) {
                        let commit = self.quorum.commit_index();
                        let caught_up = self
                            .quorum
                            .replication_progress()
                            .iter()
                            .any(|(learner, matched)| *learner == id && *matched >= commit);
                        if caught_up {
                            match self
                                .quorum
                                .propose_voter_change(VoterChange::Promote(id), Vec::new())
                            {
                                Ok(index) => {
                                    tracing::info!(node, index, "learner caught up: promoted");
                                    if let Some(change) = self.voter_change.as_mut() {
                                        change.index = index;
                                    }
                                }
                                Err(error) => {
                                    tracing::debug!(%error, "promotion not proposed yet")
                                }
                            }
                        }
                        None
                    } else {
                        Some(Err((
                            crate::errors::NOT_CONTROLLER,
                            "the addition was lost with a change of leader: ask again".to_string(),
                        )))
                    }
                }
            }
        };
        if let Some(outcome) = outcome {
            let change = self.voter_change.take().expect("a change under way");
            tracing::info!(request = ?change.request, ?outcome, "voter change ended");
            let _ = change.reply.send(outcome);
        }
    }

    fn apply(&mut self, index: u64, term: u64, data: &[u8]) {
        if index <= self.applied {
            return;
        }
        if !data.is_empty() {
            match wire::decode_records(data) {
                Ok(records) => {
                    for record in &records {
                        self.image.apply(record);
                    }
                }
                Err(error) => crate::fatal::exit(&format!(
                    "committed metadata entry {index} does not decode ({error}); \
                     this broker cannot follow the cluster's metadata"
                )),
            }
        }
        self.image.offset = index;
        self.applied = index;
        // Applied now, or replaced by another term's entry at its index.
        while self.unapplied.front().is_some_and(|(at, _)| *at <= index) {
            self.unapplied.pop_front();
        }
        while let Some(front) = self.pending.front() {
            if front.index > index {
                break;
            }
            let pending = self.pending.pop_front().expect("front exists");
            // An entry of another term at its index replaced it.
            let outcome = if pending.index == index && pending.term == term {
                Ok(index)
            } else {
                Err(ProposeError::LeadershipLost)
            };
            pending.reply.send(outcome);
        }
    }

    fn publish_status(&self) {
        let role = if self.quorum.is_leader() {
            Role::Leader
        } else if self.quorum.leader_id() != 0 {
            Role::Follower
        } else {
            Role::Candidate
        };
        self.cluster.set_quorum_status(super::QuorumStatus {
            role,
            leader: self.leader(),
            term: self.quorum.term(),
            commit_index: self.quorum.commit_index(),
            applied: self.applied,
            progress: self
                .quorum
                .replication_progress()
                .into_iter()
                .map(|(id, matched)| (id as i32, matched))
                .collect(),
            voters: self
                .quorum
                .voters()
                .into_iter()
                .map(|id| id as i32)
                .collect(),
            learners: self
                .quorum
                .learners()
                .into_iter()
                .map(|id| id as i32)
                .collect(),
        });
    }
}

/// How long a new active controller waits to hear each broker before it
/// fences it: long enough for a live broker whose heartbeat hangs on the
/// old controller (cut off by a network partition) to give up on it
/// ([`super::agent::heartbeat_timeout`]) and find the new one within three
/// more heartbeat intervals; at most a session.
pub fn failover_grace(timing: &crate::config::ClusterTiming) -> Duration {
    let interval = Duration::from_millis(timing.heartbeat_interval_ms);
    (super::agent::heartbeat_timeout(timing) + interval * 3)
        .min(Duration::from_millis(timing.session_timeout_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::{BrokerMeta, PartitionState, TopicMeta};

    const TICKS_MAX: usize = 1_000;

    /// A voter alone in its quorum (node 1), leading once it returns.
    fn leading_voter(dir: &std::path::Path) -> Voter {
        let mut voter = elected_voter(dir);
        voter.duties();
        voter
    }

    /// A voter alone in its quorum, elected but not yet through the
    /// duties of a new active controller.
    fn elected_voter(dir: &std::path::Path) -> Voter {
        let config = crate::config::load(&crate::config::flags_with(&[
            ("node.id", "1"),
            ("process.roles", "broker,controller"),
            ("controller.quorum.voters", "1@127.0.0.1:9093"),
        ]))
        .expect("valid config");
        let (inbox_tx, inbox) = flume::unbounded();
        let image = MetadataImage::new(1);
        let cluster = Arc::new(Cluster::new(&config, Some(inbox_tx), image.clone()));
        let peers: Peers = Box::new(replication::transport::Loopback::new(1));
        let mut voter = Voter::open(cluster, dir, peers, inbox, image).unwrap();
        for _ in 0..TICKS_MAX {
            if voter.ready_to_lead() {
                return voter;
            }
            voter.quorum.tick();
            voter.process_ready().unwrap();
        }
        panic!("a voter alone did not lead within {TICKS_MAX} ticks");
    }

    fn broker(id: i32) -> BrokerMeta {
        BrokerMeta {
            id,
            incarnation: 7,
            host: "127.0.0.1".to_string(),
            port: 9000 + id as u16,
            rack: None,
            controller_address: String::new(),
            fenced: false,
            endpoints: Vec::new(),
        }
    }

    fn heartbeat(voter: &mut Voter, id: i32) {
        heartbeat_as(voter, broker(id));
    }

    /// A clean heartbeat of `broker` (as registered, or a new incarnation).
    fn heartbeat_as(voter: &mut Voter, broker: BrokerMeta) {
        voter.heartbeat(Heartbeat {
            broker,
            applied: 0,
            shutting_down: false,
            startup: wire::Startup {
                clean: true,
                new_directory: false,
            },
            storage_full: false,
        });
        voter.process_ready().unwrap();
    }

    /// Brokers 1-3 registered, and topic "t" with a partition led by each
    /// (replicas in that order, all in sync).
    fn three_brokers_and_a_topic(voter: &mut Voter) {
        for id in 1..=3 {
            heartbeat(voter, id);
        }
        let led = |leader: i32| PartitionState {
            isr: vec![1, 2, 3],
            ..PartitionState::new((0..3).map(|i| (leader - 1 + i) % 3 + 1).collect())
        };
        voter.propose(
            vec![MetadataRecord::TopicCreated(TopicMeta {
                name: "t".to_string(),
                topic_id: 42,
                partition_cores: vec![0; 3],
                configs: Default::default(),
                partitions: (1..=3).map(led).collect(),
            })],
            None,
        );
        voter.process_ready().unwrap();
        assert!(voter.unapplied.is_empty());
        let image = &voter.image;
        assert!((1..=3).all(|id| image.is_live(id)), "{image:?}");
    }

    fn partitions(voter: &Voter) -> Vec<PartitionState> {
        voter.image.topics["t"].partitions.clone()
    }

    /// Two brokers whose sessions run out in the same tick: the second
    /// fence is decided with the first in it, so every partition ends led
    /// by the one live broker with the leader epochs only grown. (Decided
    /// on the applied image alone, the second fence undid the first:
    /// partitions led by a fenced broker, an epoch taken back.)
    #[test]
    fn brokers_fenced_together_each_move_their_leaderships_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut voter = leading_voter(dir.path());
        three_brokers_and_a_topic(&mut voter);
        let before = partitions(&voter);
        let long_ago = Instant::now() - voter.sessions.timing().timeout * 2;
        voter.sessions.heard(1, long_ago);
        voter.sessions.heard(2, long_ago);
        voter.sessions.heard(3, Instant::now());
        // The registrations were proposed more than REPROPOSE_AFTER ago.
        voter.proposed.clear();
        voter.duties();
        voter.process_ready().unwrap();
        let after = partitions(&voter);
        assert!(!voter.image.is_live(1) && !voter.image.is_live(2));
        for (was, now) in before.iter().zip(&after) {
            assert_eq!(now.leader, 3, "{after:?}");
            assert_eq!(now.isr, vec![3], "{after:?}");
            assert!(now.leader_epoch >= was.leader_epoch, "{after:?}");
            assert!(now.partition_epoch > was.partition_epoch, "{after:?}");
        }
    }

    /// A controller that did not run for longer than a session (stopped,
    /// a stalled VM) fences no one for the time it could not hear them:
    /// the brokers' sessions resume when it does. Without the stall seen,
    /// every broker, this node's own included, was fenced at once.
    #[test]
    fn a_controller_that_did_not_run_fences_no_live_broker() {
        let dir = tempfile::tempdir().unwrap();
        let mut voter = leading_voter(dir.path());
        three_brokers_and_a_topic(&mut voter);
        let before = partitions(&voter);
        let stall = voter.sessions.timing().timeout * 2;
        let now = Instant::now();
        let heard = now - stall - Duration::from_millis(100);
        for id in 1..=3 {
            voter.sessions.heard(id, heard);
        }
        voter.sessions.turn(now - stall);
        voter.proposed.clear();
        voter.observe_stall(now);
        voter.duties();
        voter.process_ready().unwrap();
        assert!(
            (1..=3).all(|id| voter.image.is_live(id)),
            "{:?}",
            voter.image.brokers
        );
        assert_eq!(partitions(&voter), before);
        // Time it runs without hearing a broker still counts: a session
        // later, a silent broker is fenced.
        for id in [1, 2] {
            voter.sessions.heard(id, Instant::now());
        }
        voter
            .sessions
            .heard(3, Instant::now() - voter.sessions.timing().timeout * 2);
        voter.sessions.turn(Instant::now());
        voter.duties();
        voter.process_ready().unwrap();
        assert!(!voter.image.is_live(3), "{:?}", voter.image.brokers);
        assert!(voter.image.is_live(1) && voter.image.is_live(2));
    }

    /// A broker back with a new incarnation after a crash leaves the ISRs
    /// that have other members and leads nothing on its old word; one
    /// back after a clean stop keeps its place, at a new leader epoch.
    #[test]
    fn a_broker_back_from_a_crash_leads_nothing_until_it_caught_up() {
        let dir = tempfile::tempdir().unwrap();
        let mut voter = leading_voter(dir.path());
        three_brokers_and_a_topic(&mut voter);
        let before = partitions(&voter);
        voter.proposed.clear();
        voter.heartbeat(Heartbeat {
            broker: BrokerMeta {
                incarnation: 8,
                ..broker(1)
            },
            applied: 0,
            shutting_down: false,
            startup: wire::Startup {
                clean: false,
                new_directory: true,
            },
            storage_full: false,
        });
        voter.process_ready().unwrap();
        assert_eq!(voter.image.brokers[&1].incarnation, 8);
        let after = partitions(&voter);
        for (was, now) in before.iter().zip(&after) {
            assert!(!now.isr.contains(&1), "{after:?}");
            assert_ne!(now.leader, 1, "{after:?}");
            assert!(now.leader_epoch >= was.leader_epoch);
            if was.leader == 1 {
                assert!(now.leader_epoch > was.leader_epoch, "{after:?}");
            }
        }
        voter.proposed.clear();
        heartbeat_as(
            &mut voter,
            BrokerMeta {
                incarnation: 9,
                ..broker(2)
            },
        );
        let clean = partitions(&voter);
        for (was, now) in after.iter().zip(&clean) {
            assert_eq!(now.isr, was.isr, "a clean return keeps its ISR places");
            if was.leader == 2 {
                assert_eq!(now.leader, 2);
                assert_eq!(now.leader_epoch, was.leader_epoch + 1, "{clean:?}");
            } else {
                assert_eq!(now, was);
            }
        }
    }

    /// A broker that registers between the election and the new
    /// controller's first duties keeps the session its heartbeat started,
    /// though its registration is not applied yet.
    #[test]
    fn a_registration_right_after_the_election_is_not_fenced() {
        let dir = tempfile::tempdir().unwrap();
        let mut voter = elected_voter(dir.path());
        voter.heartbeat(Heartbeat {
            broker: broker(2),
            applied: 0,
            shutting_down: false,
            startup: wire::Startup {
                clean: true,
                new_directory: false,
            },
            storage_full: false,
        });
        voter.duties();
        voter.process_ready().unwrap();
        assert!(voter.image.is_live(2), "{:?}", voter.image.brokers);
    }

    /// An ISR change decided while a fence that moves the partition's
    /// leadership is not applied yet is refused: it names a leader the
    /// controller has already replaced.
    #[test]
    fn an_isr_change_by_a_leader_being_fenced_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut voter = leading_voter(dir.path());
        three_brokers_and_a_topic(&mut voter);
        let state = partitions(&voter)[0].clone();
        assert_eq!(state.leader, 1);
        let records = placement::fence(&voter.image, 1, false);
        voter.propose(records, None);
        // Not applied yet: the ISR change arrives before the fence commits.
        let (reply, answer) = flume::bounded(1);
        voter.handle(Input::AlterPartition(
            wire::AlterPartition {
                topic: "t".to_string(),
                partition: 0,
                leader: 1,
                leader_epoch: state.leader_epoch,
                partition_epoch: state.partition_epoch,
                isr: vec![1],
            },
            reply,
        ));
        voter.process_ready().unwrap();
        assert_eq!(
            answer.try_recv().unwrap(),
            crate::errors::FENCED_LEADER_EPOCH
        );
        let now = &partitions(&voter)[0];
        assert_eq!((now.leader, now.isr.clone()), (2, vec![2, 3]), "{now:?}");
    }

    /// A live broker whose heartbeat hangs on an old controller cut off
    /// from it gives up and finds the new one within the new controller's
    /// grace (one more heartbeat interval and a round of asking), with
    /// the harness's timings and Kafka's.
    #[test]
    fn a_broker_stuck_on_the_old_controller_is_heard_within_the_failover_grace() {
        use crate::config::ClusterTiming;
        let tests = ClusterTiming {
            session_timeout_ms: 2_000,
            heartbeat_interval_ms: 250,
            ..ClusterTiming::default()
        };
        for timing in [tests, ClusterTiming::default()] {
            let interval = Duration::from_millis(timing.heartbeat_interval_ms);
            let found = super::super::agent::heartbeat_timeout(&timing) + interval * 2;
            let grace = failover_grace(&timing);
            assert!(found < grace, "{timing:?}: {found:?} >= {grace:?}");
            assert!(grace <= Duration::from_millis(timing.session_timeout_ms));
        }
    }

    /// A broker's metadata fetch with nothing newer to send is held; it
    /// is answered as soon as an entry is applied (with the voter's
    /// applied offset and when it applied it), and with nothing once its
    /// wait has passed. A fetch that asks no wait is answered at once.
    #[test]
    fn a_metadata_fetch_is_held_until_something_newer_is_applied() {
        let dir = tempfile::tempdir().unwrap();
        let mut voter = leading_voter(dir.path());
        // What the new controller proposed (the cluster id) applied first.
        voter.process_ready().unwrap();
        let before = voter.applied;
        let fetch = |voter: &mut Voter, after: u64, wait: Duration| {
            let (reply, answer) = flume::bounded(1);
            voter.handle(Input::Fetch { after, wait, reply });
            voter.process_ready().unwrap();
            answer
        };
        let held = fetch(&mut voter, before, Duration::from_secs(60));
        assert!(held.try_recv().is_err(), "answered with nothing newer");
        assert_eq!(voter.parked_fetches.len(), 1);
        heartbeat(&mut voter, 2);
        let Some(FetchReply::Entries {
            entries,
            applied,
            applied_at_us,
        }) = held.try_recv().expect("answered once an entry is applied")
        else {
            panic!("not entries");
        };
        assert!(applied > before, "{applied} <= {before}");
        assert_eq!(entries.last().map(|(index, _)| *index), Some(applied));
        assert!(applied_at_us > 0);
        assert!(voter.parked_fetches.is_empty());

        let expiring = fetch(&mut voter, applied, Duration::from_secs(60));
        assert!(expiring.try_recv().is_err());
        // Its wait passed (at most `FETCH_WAIT_MAX`, whatever was asked).
        let until = voter.parked_fetches[0].until;
        assert!(until <= Instant::now() + FETCH_WAIT_MAX);
        voter.parked_fetches[0].until = Instant::now();
        voter.process_ready().unwrap();
        let Some(FetchReply::Entries { entries, .. }) = expiring.try_recv().unwrap() else {
            panic!("not entries");
        };
        assert!(entries.is_empty(), "{entries:?}");

        let at_once = fetch(&mut voter, applied, Duration::ZERO);
        assert!(at_once.try_recv().is_ok());
    }
}
