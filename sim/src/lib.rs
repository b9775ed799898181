//! The whole-cluster simulator: N brokers and a controller on one thread,
//! over the simulated network ([`SimulatedNetwork`]), a manual clock (one
//! step is one millisecond) and a disk model with the log's contract
//! (append, a durable offset that a sync moves up, truncate; a crash loses
//! what was not durable, an emptied disk loses everything). The deciding
//! code is the product's own: the controller's decisions on heartbeats,
//! fencing and ISR changes are `replication::placement`'s, its brokers'
//! sessions `replication::sessions`', applied to a
//! real `MetadataImage`; each broker's copy of each partition is a real
//! `ReplicaState`; a follower's truncation is `replica::divergence`. What
//! the simulator writes itself is the edge the broker's I/O code is:
//! sending, timers, the disk, and an idempotent client producing with
//! acks=all and resending a request that timed out.
//!
//! The records' partition is also a `__consumer_offsets` partition: its
//! leader runs the real group coordinator (`groups::coordinator`), takes
//! over by the real load rule and replay (`groups::load`), and writes each
//! offset commit as a real Kafka offset record (`groups::records`) into
//! the log, answering it once `acks=all` holds. A consumer is a member of
//! a group there: it joins (JoinGroup, MEMBER_ID_REQUIRED first), syncs,
//! heartbeats, rejoins now and then (each rebalance a new generation,
//! whose membership record the coordinator writes and answers SyncGroup
//! only once `acks=all` holds), and commits, as a member of its
//! generation, how many records it has had acknowledged.
//!
//! Scenarios with transactions ([`txn_scenario`]) add a replicated
//! `__transaction_state` partition and three data partitions, each led
//! first by another broker: the leader of `__transaction_state` runs the
//! real transaction coordinator (the `txn` crate, as the broker drives it:
//! loaded once its log is committed, one record appended at a time and
//! applied once `acks=all` holds, dropped and loaded again when an append
//! fails or times out), two transactional producers init, add partitions,
//! produce and commit or abort, and a read_committed reader reads every
//! data partition (see [`transactions`] for the pieces and what each
//! mirrors). An ISR change left unanswered there is sent again and stays
//! proposed until an image says (the scenarios before transactions keep
//! their schedules: they never send one again).
//!
//! A seed picks every timing and fault; [`run`] replays a seed exactly.
//! After every step the invariants are checked ([`check`]):
//! - at most one broker leads a partition at any leader epoch;
//! - a replica's high watermark never moves back within a process;
//! - every acknowledged record is in the log of the partition's leader,
//!   at the offset it was acknowledged with;
//! - no two replicas hold different records below their high watermarks;
//! - no broker is fenced that the controller could hear throughout the
//!   session before (a paused controller's own stall does not count);
//! - the coordinator of the partition's current leader, once loaded,
//!   holds at least the latest offset commit acknowledged to the consumer
//!   (committed group offsets are never lost), and the group at least at
//!   the generation of the latest SyncGroup acknowledged to it (unless the
//!   group was deleted since, which writes a tombstone);
//! - with transactions: the read_committed reader gets, of each
//!   transaction on a partition, every record its producer had
//!   acknowledged there once it passes the commit marker, and none of an
//!   aborted or undecided one; no leader's last stable offset passes the
//!   first record of a transaction open in its log; a partition's
//!   records of a producer between two markers are of one transaction, a
//!   marker ends only the transaction it was written for, and a
//!   producer's epochs never go back in a log; no transaction is decided
//!   both ways, and every EndTxn answered to a producer matches the
//!   decision; no two producer instances are given the same epoch, and
//!   the current coordinator never holds a producer behind the epoch last
//!   given to it. At the end, no transaction is left open on any
//!   partition or in the coordinator, every decided one has its marker
//!   on each of its partitions, after every record acknowledged there if
//!   it committed, and no marker says otherwise than its transaction's
//!   decision.
//!
//! A [`Mutation`] breaks one rule on purpose, to show the checks find it.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use replication::metadata::{BrokerMeta, MetadataImage, MetadataRecord, PartitionState, TopicMeta};
use replication::placement::{self, AlterPartition, Arrival, Refused};
use replication::replica::{
    divergence, Action, Assignment, Divergence, FollowerLog, NodeId, ReplicaConfig, ReplicaState,
    Role, WaiterId,
};
use replication::sessions::{SessionTiming, Sessions};
use replication::transport::{Faults, SimulatedNetwork, Transport};
use storage::epoch_cache::EpochCache;

use bytes::Bytes;
use groups::coordinator::{
    Answer, CommitPartition, CommittedOffset, Committer, Coordinator, GroupConfig, JoinRequest,
    JoinResponse, Reply, SyncRequest, SyncResponse,
};
use groups::error::GroupError;
use groups::{load, records};

pub mod consumer_groups;
mod group_net;
pub mod share_groups;
pub mod share_membership;
mod transactions;

use transactions::{
    Appended, Batch, BatchCheck, Caller, ClientFault, CoordinatorEdge, Leaders, MarkerWrite,
    Producers, Refusal, Turns, TxnEntry, TxnMessage, APPS, DATA_PARTITIONS, DATA_TOPIC, PRODUCERS,
    READER, READ_ENTRIES_MAX, TRANSACTION_STATE_TOPIC, VERIFY_TIMEOUT_MS,
};

/// The controller's node id on the simulated network.
pub const CONTROLLER: NodeId = 0;
/// The client's node id on the simulated network.
pub const CLIENT: NodeId = 1_000;
const TOPIC: &str = "simulated";
/// The consumer group whose offsets the partition's leader coordinates.
const GROUP: &str = "simulated-group";
/// How often the consumer commits.
const COMMIT_EVERY_MS: u64 = 30;
/// The consumer's group session (and rebalance) timeout, how often it
/// heartbeats, and how long it waits for a JoinGroup or SyncGroup answer
/// (they wait for the rebalance, and for the membership record's acks).
const GROUP_SESSION_MS: u64 = 600;
const GROUP_HEARTBEAT_MS: u64 = 60;
const GROUP_CALL_TIMEOUT_MS: u64 = GROUP_SESSION_MS + 200;
/// After a rebalance completed, the consumer rejoins within this (so the
/// group goes through many generations in a run).
const REJOIN_AFTER_MS: std::ops::Range<u64> = 150..500;
/// How often a loaded coordinator checks its groups' deadlines.
const GROUP_TICK_MS: u64 = 10;

const HEARTBEAT_MS: u64 = 50;
const SESSION_MS: u64 = 400;
/// What a broker gets to be heard after the controller stalled.
const FAILOVER_GRACE_MS: u64 = 150;
const TICK_MS: u64 = 20;
const LAG_TIME_MAX_MS: u64 = 300;
const REBROADCAST_MS: u64 = 100;
const REQUEST_TIMEOUT_MS: u64 = 150;
const FETCH_ENTRIES_MAX: usize = 8;
/// How often replicas are compared below their high watermarks.
const AGREEMENT_CHECK_MS: u64 = 25;
/// After the faulty part, everything is healed and runs this long more.
const DRAIN_MS: u64 = 2_000;
/// The same with transactions: long enough for every transaction left
/// open to time out and its markers to be written.
const TXN_DRAIN_MS: u64 = 4_000;
/// The transactions' partitions: `__transaction_state`'s, then the data
/// topic's.
const TXN_STATE: usize = 1;
const DATA_FIRST: usize = 2;

/// The partition index of data partition `index`.
fn data(index: usize) -> usize {
    DATA_FIRST + index
}

/// A fault the seed may inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// kill -9 of a broker: what was not durable is lost; it restarts.
    Crash,
    /// kill -9, and the broker restarts with an emptied data dir.
    EmptyDisk,
    /// The broker's process stops running (SIGSTOP) for up to 1.5 s.
    Pause,
    /// The broker is cut from the controller (not from clients or peers).
    CutFromController,
    /// The broker is cut from the other brokers (not from the controller).
    CutFromPeers,
    /// The broker's syncs take 20–60 ms for a while.
    SlowDisk,
    /// The controller's process stops running (SIGSTOP) for up to 1.5 s,
    /// several sessions: what it is sent meanwhile waits until it runs.
    PauseController,
    /// kill -9 of the broker leading `__transaction_state` (its
    /// transaction coordinator fails over).
    CrashCoordinator,
    /// The transaction coordinator's next append fails: refused before it
    /// is written, or timed out with its record in the log or not.
    FailCoordinatorAppend,
    /// The markers' connection from the transaction coordinator to
    /// another broker stalls for up to 1.5 s; what it held is delivered
    /// in order then, or lost with the connection.
    StallMarkers,
    /// A transactional producer's process dies mid-whatever; another
    /// starts with the same transactional id.
    CrashProducer,
    /// A transactional producer freezes for up to 1.5 s (its transaction
    /// may time out meanwhile).
    FreezeProducer,
    /// A transactional producer freezes and another starts with the same
    /// transactional id: the frozen one comes back a zombie.
    ZombieProducer,
    /// A transactional producer's connection to a leader sticks for up to
    /// 1.5 s from its next record on: its records to that leader (the
    /// retries too) arrive late, in order, maybe after the producer gave
    /// them up and aborted its transaction.
    LateRecord,
}

/// A rule broken on purpose: the simulator must catch each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    None,
    /// A resent batch the leader already has is answered at once, before
    /// the ISR has it.
    AnswerDuplicateAtOnce,
    /// A broker back with an emptied data dir registers as if it stopped
    /// cleanly.
    EmptiedReturnsClean,
    /// A fenced leader's partitions go to the lowest-id live replica,
    /// in sync or not.
    ElectIgnoringIsr,
    /// A broker back from a crash leads on an image that does not hold its
    /// new registration yet (its earlier process's leadership).
    LeadOnAnEarlierIncarnation,
    /// The time the controller did not run counts against the brokers'
    /// sessions: on resuming it fences every broker at once.
    StallCountsAgainstSessions,
    /// An offset commit is answered once appended, before the ISR has it.
    AnswerCommitAtAppend,
    /// A new leader's coordinator loads up to its high watermark at once,
    /// not waiting for it to reach the log end it took over with.
    LoadBeforeCaughtUp,
    /// A leader tells its followers its high watermark even past what it
    /// has made durable itself.
    UncappedFollowerHighWatermark,
    /// A SyncGroup is answered once the group's membership record is
    /// appended, before the ISR has it.
    AnswerSyncAtAppend,
    /// A broker records its data dir as the cluster's at start, before the
    /// controller registered it: a crash before the registration makes an
    /// emptied disk return as a mere crash.
    RecordDirectoryAtStart,
    /// The last stable offset is the high watermark: open transactions
    /// are ignored.
    LastStableIgnoresOpenTransactions,
    /// The transaction coordinator counts a marker written once it is
    /// sent, without waiting for the partition's answer.
    MarkersNotAwaited,
    /// A leader appends a producer's first transactional record without
    /// checking with the coordinator that the partition is in its
    /// transaction.
    FirstRecordUnchecked,
    /// A leader writes a marker from any coordinator, also one older than
    /// a coordinator that already wrote a marker for the producer.
    MarkersOfAnyCoordinator,
    /// A leader whose ISR change goes unanswered gives it up (as if the
    /// controller had refused it), though the controller may have taken
    /// it.
    IsrChangeGivenUp,
}

#[derive(Debug, Clone)]
pub struct Scenario {
    pub brokers: usize,
    pub faults: Vec<Fault>,
    /// Messages are lost (2%) and delayed up to 8 ms (reordered).
    pub lossy: bool,
    /// How long faults are injected, in simulated milliseconds.
    pub duration_ms: u64,
    /// How long everything runs healed after the faults.
    pub drain_ms: u64,
    /// Transactional producers, a transaction coordinator and a
    /// read_committed reader run beside the idempotent client and the
    /// group member.
    pub transactions: bool,
    pub mutation: Mutation,
}

/// What a run did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    pub acknowledged: usize,
    /// Offset commits acknowledged to the consumer.
    pub commits_acknowledged: usize,
    /// SyncGroups acknowledged to the consumer (completed rebalances).
    pub syncs_acknowledged: usize,
    pub faults: usize,
    pub leader_epochs: i32,
    pub refused_truncations: usize,
    /// Transactions whose commit was acknowledged to their producer.
    pub transactions_committed: usize,
    /// Transactions decided aborted (by their producer, fencing or
    /// timeout).
    pub transactions_aborted: usize,
    /// Records the read_committed reader delivered.
    pub records_read: usize,
    /// Transactional producer instances fenced (or refused for good).
    pub producers_fenced: usize,
    /// Transaction coordinator loads.
    pub coordinator_loads: usize,
    /// How often each thing worth counting in the transactions happened
    /// (refusals, markers held, coordinator appends failed, ...).
    pub events: BTreeMap<&'static str, usize>,
}

/// One record of a partition's log: a client's record (`value` > 0),
/// an offset commit the coordinator wrote (`value` 0, its record in
/// `__consumer_offsets`' format), or, on the transactions' partitions, a
/// `__transaction_state` record, a transactional record or a marker.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    epoch: i32,
    value: u64,
    offsets_record: Option<Rc<OffsetsRecord>>,
    txn: Option<Rc<TxnEntry>>,
}

/// A `__consumer_offsets` record: key and value (`None`, a tombstone).
#[derive(Debug, PartialEq, Eq)]
struct OffsetsRecord {
    key: Vec<u8>,
    value: Option<Vec<u8>>,
}

#[derive(Debug, Clone)]
enum Message {
    Heartbeat {
        broker: BrokerMeta,
        arrival: Arrival,
    },
    /// The controller's image as of a decision: the partition's state and
    /// the brokers' registrations, which say whether a broker may lead.
    Assign {
        image: Rc<MetadataImage>,
    },
    Alter(AlterPartition),
    AlterRefused {
        partition: usize,
        why: Refused,
    },
    EpochQuery {
        partition: usize,
        leader_epoch: i32,
        epoch: i32,
    },
    EpochAnswer {
        partition: usize,
        leader_epoch: i32,
        epoch: i32,
        end: i64,
    },
    Fetch {
        partition: usize,
        leader_epoch: i32,
        offset: u64,
    },
    FetchReply {
        partition: usize,
        leader_epoch: i32,
        offset: u64,
        entries: Vec<Entry>,
        high_watermark: u64,
    },
    FetchRefused {
        partition: usize,
        leader_epoch: i32,
    },
    Produce {
        value: u64,
    },
    Produced {
        value: u64,
        offset: Option<u64>,
    },
    /// The consumer's OffsetCommit of its position in the partition, as a
    /// member of `generation`.
    Commit {
        offset: i64,
        generation: i32,
        member_id: String,
    },
    Committed {
        offset: i64,
        ok: bool,
    },
    /// The consumer's group call `call` (its id, which the answer
    /// carries back: a late answer to a call given up is told apart).
    Group {
        call: u64,
        request: GroupRequest,
    },
    GroupAnswer {
        call: u64,
        answer: GroupAnswer,
    },
    /// The transactions' messages (producers, coordinators, leaders and
    /// the reader).
    Txn(TxnMessage),
}

#[derive(Debug, Clone)]
enum GroupRequest {
    Join { member_id: String },
    Sync { member_id: String, generation: i32 },
    Heartbeat { member_id: String, generation: i32 },
}

#[derive(Debug, Clone)]
enum GroupAnswer {
    Joined(JoinResponse),
    Synced(SyncResponse),
    Heartbeat(Result<(), GroupError>),
}

/// A request a leader answers once acks=all holds for what it appended.
#[derive(Debug, Clone)]
enum Parked {
    /// The client's record `value`.
    Produce { value: u64 },
    /// The consumer's commit of `offset`.
    Commit { offset: i64 },
    /// The coordinator's answers that wait for the membership records
    /// they took.
    Group(Vec<Message>),
    /// A transaction coordinator's `__transaction_state` record, by the
    /// ticket of its append.
    TxnAppend { ticket: u64 },
    /// A producer's transactional record.
    TxnProduce { caller: Caller, sequence: i32 },
    /// A marker, answered to the coordinator on broker `coordinator`.
    TxnMarker {
        marker: MarkerWrite,
        coordinator: NodeId,
    },
}

/// Where a follower's fetching stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fetching {
    /// Not following anyone.
    Idle,
    /// Must ask the leader where its latest epoch ends.
    AskEpoch,
    AwaitEpoch {
        since: u64,
    },
    /// May fetch once its log is durable.
    Fetch,
    AwaitFetch {
        since: u64,
    },
    /// Waits until this time before it asks again.
    Backoff {
        until: u64,
        then_ask: bool,
    },
}

/// A broker's copy of one partition: its log on the simulated disk and
/// the replica state deciding over it.
struct Partition {
    log: Vec<Entry>,
    durable: usize,
    sync_at: Option<u64>,
    replica: ReplicaState,
    fetching: Fetching,
    /// What waits for acks=all, and at which log offset.
    waiters: BTreeMap<WaiterId, (Parked, u64)>,
    next_waiter: WaiterId,
    /// The log end this process had when it last became leader: a
    /// coordinator on the partition loads once the high watermark reaches
    /// it.
    log_end_at_takeover: u64,
    high_watermark_seen: u64,
    /// When this leader last sent its ISR change, and how often it has.
    proposed_at: u64,
    proposals_sent: u32,
    /// The producers' state on a data partition (a function of the log).
    producers: Producers,
    /// A leader's transactional records waiting for their producer's turn.
    turns: Turns,
}

impl Partition {
    fn new(id: NodeId, min_insync: usize) -> Self {
        Self {
            log: Vec::new(),
            durable: 0,
            sync_at: None,
            replica: fresh_replica(id, min_insync, 0),
            fetching: Fetching::Idle,
            waiters: BTreeMap::new(),
            next_waiter: 0,
            log_end_at_takeover: 0,
            high_watermark_seen: 0,
            proposed_at: 0,
            proposals_sent: 0,
            producers: Producers::default(),
            turns: Turns::default(),
        }
    }

    /// The producers' state rebuilt from the log (after a restart or a
    /// truncation).
    fn rebuild_producers(&mut self) {
        self.producers = Producers::rebuild(
            self.log
                .iter()
                .enumerate()
                .filter_map(|(offset, e)| Some((offset as u64, e.txn.as_deref()?))),
        );
    }

    /// The offset read_committed readers read up to: the first offset of
    /// the oldest open transaction, or the high watermark.
    fn last_stable_offset(&self, ignore_open: bool) -> u64 {
        let high_watermark = self.replica.high_watermark();
        match self.producers.first_unstable() {
            Some(first) if !ignore_open => first.min(high_watermark),
            _ => high_watermark,
        }
    }

    /// The transactions' entries of the log below `end`, with offsets.
    fn txn_entries(&self, end: u64) -> impl Iterator<Item = (u64, &TxnEntry)> {
        self.log[..(end as usize).min(self.log.len())]
            .iter()
            .enumerate()
            .filter_map(|(offset, e)| Some((offset as u64, e.txn.as_deref()?)))
    }

    /// OffsetForLeaderEpoch on this log, by the storage's own leader-epoch
    /// cache (`EpochCache::end_offset_for`, what the broker answers and
    /// reconciles with): the largest epoch at or below `epoch` and where it
    /// ends; a leader (`current`) counts its current epoch from its log end
    /// when no entry carries it yet, as `Partition::end_offset_for_epoch`
    /// does.
    fn epoch_end(&self, epoch: i32, current: Option<i32>) -> (i32, i64) {
        let mut cache = EpochCache::default();
        for (offset, entry) in self.log.iter().enumerate() {
            cache.assign(entry.epoch, offset as u64);
        }
        let log_end = self.log.len() as u64;
        if let Some(current) = current.filter(|&c| cache.latest_epoch().is_none_or(|l| l < c)) {
            cache.assign(current, log_end);
        }
        cache.end_offset_for(epoch, log_end)
    }
}

struct Broker {
    id: NodeId,
    incarnation: u64,
    up: bool,
    restart_at: u64,
    paused_until: u64,
    slow_disk_until: u64,
    inbox: Vec<(NodeId, Message)>,
    /// Its copies of the cluster's partitions, by partition index (every
    /// broker holds a replica of every partition).
    parts: Vec<Partition>,
    /// How the running process found its data dir.
    clean_start: bool,
    new_directory: bool,
    /// Whether the data dir records the cluster (`meta.properties`): a
    /// start without it is a new directory.
    directory_recorded: bool,
    /// The newest image from the controller this process has.
    assigned: Option<Rc<MetadataImage>>,
    /// The group coordinator, once this leader has loaded the partition.
    coordinator: Option<Coordinator>,
    /// The transaction coordinator, once this leader of
    /// `__transaction_state` has loaded it.
    txn_coordinator: Option<CoordinatorEdge>,
    /// Names the coordinator's parked JoinGroup and SyncGroup calls, and
    /// the consumer's call each answers.
    next_group_waiter: u64,
    group_calls: BTreeMap<u64, u64>,
    next_group_tick: u64,
    next_heartbeat: u64,
    next_tick: u64,
    /// The last millisecond the controller could not hear this broker
    /// (down, paused, or cut from the controller).
    unheard_at: u64,
}

impl Broker {
    fn new(id: NodeId, min_insync: usize, partitions: usize) -> Self {
        Self {
            id,
            incarnation: 1,
            up: true,
            restart_at: 0,
            paused_until: 0,
            slow_disk_until: 0,
            inbox: Vec::new(),
            parts: (0..partitions)
                .map(|_| Partition::new(id, min_insync))
                .collect(),
            clean_start: true,
            new_directory: true,
            directory_recorded: false,
            assigned: None,
            coordinator: None,
            txn_coordinator: None,
            next_group_waiter: 0,
            group_calls: BTreeMap::new(),
            next_group_tick: 0,
            next_heartbeat: 0,
            next_tick: 0,
            unheard_at: 0,
        }
    }

    fn meta(&self) -> BrokerMeta {
        BrokerMeta {
            id: self.id,
            incarnation: self.incarnation,
            host: format!("broker-{}", self.id),
            port: 9092,
            rack: None,
            controller_address: String::new(),
            fenced: false,
            endpoints: Vec::new(),
        }
    }

    fn running(&self, now: u64) -> bool {
        self.up && now >= self.paused_until
    }
}

fn fresh_replica(id: NodeId, min_insync: usize, log_end: u64) -> ReplicaState {
    ReplicaState::new(
        ReplicaConfig {
            local_id: id,
            min_insync_replicas: min_insync,
            lag_time_max_ms: LAG_TIME_MAX_MS,
        },
        0,
        log_end,
        log_end,
    )
}

struct Controller {
    image: MetadataImage,
    sessions: Sessions<u64>,
    paused_until: u64,
    inbox: Vec<(NodeId, Message)>,
    next_broadcast: u64,
}

struct Client {
    next_value: u64,
    in_flight: Option<u64>,
    retry_at: u64,
    acked: BTreeMap<u64, u64>,
    /// The offset commit sent and not answered yet.
    commit_in_flight: Option<i64>,
    commit_at: u64,
    /// The latest commit acknowledged (-1: none yet), and how many were.
    commit_acked: i64,
    commits_acked: usize,
    /// The consumer's group membership: its member id (empty until the
    /// coordinator gave one) and where it stands.
    member_id: String,
    membership: Membership,
    /// The group call sent and not answered yet: its kind, id, and when
    /// it is given up.
    group_call: Option<(GroupCall, u64, u64)>,
    next_group_call: u64,
    group_at: u64,
    rejoin_at: u64,
    /// The generation of the latest SyncGroup acknowledged (-1: none),
    /// and how many were.
    synced_acked: i32,
    syncs_acked: usize,
}

/// Where the consumer stands in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Membership {
    /// Must (re)join.
    Unjoined,
    /// Joined `generation`, must sync.
    Joined { generation: i32 },
    /// Has its assignment for `generation`: heartbeats and commits.
    Synced { generation: i32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GroupCall {
    Join,
    Sync,
    Heartbeat,
}

/// The coordinator's settings in the simulation: a short first-rebalance
/// delay, and sessions as short as the simulated consumer's.
fn group_config() -> GroupConfig {
    GroupConfig {
        initial_rebalance_delay_ms: 20,
        min_session_timeout_ms: 100,
        ..GroupConfig::default()
    }
}

/// A run's state.
struct Sim {
    now: u64,
    rng: fastrand::Rng,
    net: SimulatedNetwork<Message>,
    scenario: Scenario,
    min_insync: usize,
    brokers: Vec<Broker>,
    controller: Controller,
    client: Client,
    cuts: Vec<(u64, NodeId, NodeId)>,
    report: Report,
    /// The cluster's partitions by index, as (topic, partition): the
    /// first is the records' and consumer offsets' partition.
    partitions: Vec<(String, i32)>,
    /// Who led each partition (by index) at each leader epoch.
    leaders: BTreeMap<(usize, i32), NodeId>,
    /// A broker fenced though the controller could hear it for the whole
    /// session before (the first such fence).
    wrongly_fenced: Option<String>,
    /// Print what happens (`STROM_SIM_TRACE=1`), to read a failing seed.
    trace: bool,
    /// The leadership (broker, incarnation, epoch) last checked to hold
    /// every acknowledged record, and how many it was checked for.
    checked: (Option<(NodeId, u64, i32)>, usize),
    group_log: GroupLog,
    /// The transactions' producers, reader and oracle, in scenarios with
    /// transactions.
    txn: Option<transactions::World>,
    /// The transaction coordinator's next append fails so.
    append_fault: Option<Appended>,
    /// Markers' connections stalled, by broker pair (smaller id first):
    /// until when, and whether what they hold is lost then.
    stalls: BTreeMap<(NodeId, NodeId), (u64, bool)>,
    /// What stalled connections hold, in the order sent.
    held: Vec<Held>,
    /// The producers' next record's connection sticks this long.
    late_record_ms: Option<u64>,
    /// A stuck producer's connection: its app, leader, and until when.
    stuck: Option<(usize, NodeId, u64)>,
    /// Records held on their way: when they arrive, where, and what.
    late: Vec<(u64, NodeId, TxnMessage)>,
}

/// A marker message a stalled connection holds: its connection (a broker
/// pair, smaller id first), the sender and the receiver with the
/// incarnations they had (a connection does not outlive a process).
#[derive(Debug)]
struct Held {
    pair: (NodeId, NodeId),
    sender: (NodeId, u64),
    receiver: (NodeId, u64),
    message: TxnMessage,
}

/// Where the group's membership records stand in the log, for the check
/// that no acknowledged generation is lost.
#[derive(Debug, Default)]
struct GroupLog {
    /// The offset of the record the latest SyncGroup the consumer had
    /// acknowledged waited for.
    synced_at: u64,
    /// The same, by the consumer's call, for answers on their way.
    synced_records: BTreeMap<u64, u64>,
    /// The offset of the latest tombstone written for the group (it was
    /// deleted: every generation before it goes, on purpose).
    tombstone_at: Option<u64>,
}

/// The seeds a test runs: only `STROM_SIM_SEED` when it is set, else
/// the first `STROM_SIM_SEEDS` (default `default`).
pub fn seeds_from_env(default: u64) -> Vec<u64> {
    if let Ok(seed) = std::env::var("STROM_SIM_SEED") {
        return vec![seed.parse().expect("STROM_SIM_SEED is a number")];
    }
    let count = std::env::var("STROM_SIM_SEEDS")
        .map(|n| n.parse().expect("STROM_SIM_SEEDS is a number"))
        .unwrap_or(default);
    (0..count).collect()
}

/// Runs `scenario` over `seeds`, handing each run's report to `each`
/// (and printing it when one seed runs): the first failing seed and why
/// (a check that failed, or a runtime assertion, whose panic is printed).
pub fn run_seeds(
    scenario: &Scenario,
    seeds: &[u64],
    mut each: impl FnMut(&Report),
) -> Result<(), (u64, String)> {
    for &seed in seeds {
        match std::panic::catch_unwind(|| run(seed, scenario)) {
            Ok(Ok(report)) => {
                if seeds.len() == 1 {
                    println!("seed {seed}: {report:?}");
                }
                each(&report);
            }
            Ok(Err(broken)) => return Err((seed, broken)),
            Err(_) => {
                return Err((
                    seed,
                    "a runtime assertion failed (see the panic above)".into(),
                ))
            }
        }
    }
    Ok(())
}

/// Runs `scenario` under `seed`: the report, or the first invariant broken
/// (with the simulated time it broke at).
pub fn run(seed: u64, scenario: &Scenario) -> Result<Report, String> {
    let mut sim = Sim::new(seed, scenario.clone());
    let end = scenario.duration_ms + scenario.drain_ms;
    while sim.now < end {
        if sim.now < scenario.duration_ms {
            sim.inject();
        } else if sim.now == scenario.duration_ms {
            sim.heal_all();
        }
        sim.step();
        sim.check()
            .map_err(|broken| format!("at {} ms: {broken}", sim.now))?;
        sim.now += 1;
    }
    sim.final_check()
        .map_err(|broken| format!("at the end: {broken}"))?;
    Ok(sim.report)
}

impl Sim {
    fn new(seed: u64, scenario: Scenario) -> Self {
        let n = scenario.brokers;
        let min_insync = n / 2 + 1;
        let ids: Vec<NodeId> = (1..=n as NodeId).collect();
        let mut nodes = ids.clone();
        nodes.push(CONTROLLER);
        nodes.push(CLIENT);
        let faults = if scenario.lossy {
            Faults {
                drop_per_million: 20_000,
                delay_ms_max: 8,
            }
        } else {
            Faults {
                drop_per_million: 0,
                delay_ms_max: 2,
            }
        };
        let mut image = MetadataImage::new(CONTROLLER);
        let mut configs = BTreeMap::new();
        configs.insert("min.insync.replicas".to_string(), min_insync.to_string());
        image.apply(&MetadataRecord::TopicCreated(TopicMeta {
            name: TOPIC.to_string(),
            topic_id: 7,
            partition_cores: vec![0],
            configs,
            partitions: vec![PartitionState::new(ids.clone())],
        }));
        let mut partitions = vec![(TOPIC.to_string(), 0)];
        if scenario.transactions {
            // Each partition led first by another broker.
            let rotated =
                |by: usize| -> Vec<NodeId> { (0..n).map(|i| ids[(i + by) % n]).collect() };
            let mut configs = BTreeMap::new();
            configs.insert("min.insync.replicas".to_string(), min_insync.to_string());
            image.apply(&MetadataRecord::TopicCreated(TopicMeta {
                name: TRANSACTION_STATE_TOPIC.to_string(),
                topic_id: 8,
                partition_cores: vec![0],
                configs: configs.clone(),
                partitions: vec![PartitionState::new(rotated(1))],
            }));
            partitions.push((TRANSACTION_STATE_TOPIC.to_string(), 0));
            image.apply(&MetadataRecord::TopicCreated(TopicMeta {
                name: DATA_TOPIC.to_string(),
                topic_id: 9,
                partition_cores: vec![0; DATA_PARTITIONS],
                configs,
                partitions: (0..DATA_PARTITIONS)
                    .map(|i| PartitionState::new(rotated(2 + i)))
                    .collect(),
            }));
            for i in 0..DATA_PARTITIONS {
                partitions.push((DATA_TOPIC.to_string(), i as i32));
            }
            nodes.push(PRODUCERS);
            nodes.push(READER);
        }
        Self {
            now: 0,
            rng: fastrand::Rng::with_seed(seed),
            net: SimulatedNetwork::new(seed ^ 0x5eed, &nodes, faults),
            min_insync,
            brokers: ids
                .iter()
                .map(|&id| Broker::new(id, min_insync, partitions.len()))
                .collect(),
            controller: Controller {
                image,
                sessions: Sessions::new(
                    SessionTiming {
                        timeout: Duration::from_millis(SESSION_MS),
                        failover_grace: Duration::from_millis(FAILOVER_GRACE_MS),
                        stall_min: Duration::from_millis(3 * TICK_MS),
                    },
                    0,
                ),
                paused_until: 0,
                inbox: Vec::new(),
                next_broadcast: 0,
            },
            client: Client {
                next_value: 1,
                in_flight: None,
                retry_at: 0,
                acked: BTreeMap::new(),
                commit_in_flight: None,
                commit_at: 0,
                commit_acked: -1,
                commits_acked: 0,
                member_id: String::new(),
                membership: Membership::Unjoined,
                group_call: None,
                next_group_call: 0,
                group_at: 0,
                rejoin_at: 0,
                synced_acked: -1,
                syncs_acked: 0,
            },
            cuts: Vec::new(),
            report: Report::default(),
            partitions,
            leaders: BTreeMap::new(),
            wrongly_fenced: None,
            trace: std::env::var_os("STROM_SIM_TRACE").is_some(),
            checked: (None, 0),
            group_log: GroupLog::default(),
            txn: scenario.transactions.then(|| {
                // Odd seeds write `__transaction_state` values in
                // version 1 (with the previous producer id).
                let version = if seed % 2 == 0 {
                    txn::records::ValueVersion::V0
                } else {
                    txn::records::ValueVersion::V1
                };
                transactions::World::new(scenario.duration_ms + scenario.drain_ms / 4, version)
            }),
            append_fault: None,
            stalls: BTreeMap::new(),
            held: Vec::new(),
            late_record_ms: None,
            stuck: None,
            late: Vec::new(),
            scenario,
        }
    }

    fn note(&self, what: impl FnOnce() -> String) {
        if self.trace {
            println!("{:>5} ms  {}", self.now, what());
        }
    }

    fn send(&mut self, from: NodeId, to: NodeId, message: Message) {
        if let Message::Txn(
            marker @ (TxnMessage::WriteMarker(_) | TxnMessage::MarkerWritten { .. }),
        ) = message
        {
            // Markers go over a connection of their own between brokers.
            let pair = (from.min(to), from.max(to));
            if self.stalls.contains_key(&pair) {
                let sender = (from, self.brokers[(from - 1) as usize].incarnation);
                let receiver = (to, self.brokers[(to - 1) as usize].incarnation);
                self.held.push(Held {
                    pair,
                    sender,
                    receiver,
                    message: marker,
                });
                return;
            }
            let _ = self.net.send(from, to, Message::Txn(marker));
            return;
        }
        // A full queue is a lost message: senders retry on their timers.
        let _ = self.net.send(from, to, message);
    }

    /// Stalled markers' connections whose stall is over deliver what they
    /// held, in order (or lose it, as a connection that broke).
    fn release_stalls(&mut self) {
        let now = self.now;
        let over: Vec<((NodeId, NodeId), bool)> = self
            .stalls
            .iter()
            .filter(|(_, (until, _))| *until <= now)
            .map(|(&pair, &(_, lost))| (pair, lost))
            .collect();
        for (pair, lost) in over {
            self.stalls.remove(&pair);
            let held = std::mem::take(&mut self.held);
            let (released, kept): (Vec<_>, Vec<_>) = held.into_iter().partition(|h| h.pair == pair);
            self.held = kept;
            if lost {
                continue;
            }
            if let Some(world) = self.txn.as_mut() {
                for _ in &released {
                    world.count("markers held by a stalled connection");
                }
            }
            for Held {
                sender: (from, sent_by),
                receiver: (to, sent_to),
                message,
                ..
            } in released
            {
                // A connection does not outlive either end's process.
                let alive = |b: &Broker, incarnation: u64| b.up && b.incarnation == incarnation;
                if alive(&self.brokers[(from - 1) as usize], sent_by)
                    && alive(&self.brokers[(to - 1) as usize], sent_to)
                {
                    self.deliver(from, to, Message::Txn(message));
                }
            }
        }
    }

    /// A message reaches broker `id`: handled now, kept for when it runs
    /// again, or lost when it is down.
    fn deliver(&mut self, from: NodeId, id: NodeId, message: Message) {
        let now = self.now;
        let broker = self.broker(id);
        if !broker.up {
            return;
        }
        if !broker.running(now) {
            broker.inbox.push((from, message));
            return;
        }
        self.on_broker(id, from, message);
    }

    fn broker(&mut self, id: NodeId) -> &mut Broker {
        &mut self.brokers[(id - 1) as usize]
    }

    /// A broker's copy of partition `p`.
    fn part(&mut self, id: NodeId, p: usize) -> &mut Partition {
        &mut self.brokers[(id - 1) as usize].parts[p]
    }

    /// The records' partition's state in the controller's image.
    fn state(&self) -> &PartitionState {
        self.state_of(0)
    }

    /// Partition `p`'s state in the controller's image.
    fn state_of(&self, p: usize) -> &PartitionState {
        let (topic, index) = &self.partitions[p];
        &self.controller.image.topics[topic].partitions[*index as usize]
    }

    /// The index of `topic`'s partition `index`.
    fn partition_index(&self, topic: &str, index: i32) -> Option<usize> {
        self.partitions
            .iter()
            .position(|(t, i)| t == topic && *i == index)
    }

    // ---- faults ----

    fn inject(&mut self) {
        for cut in std::mem::take(&mut self.cuts) {
            if cut.0 <= self.now {
                self.net.heal(cut.1, cut.2);
            } else {
                self.cuts.push(cut);
            }
        }
        if self.scenario.faults.is_empty() || self.rng.u64(0..400) != 0 {
            return;
        }
        let fault = self.scenario.faults[self.rng.usize(0..self.scenario.faults.len())];
        let mut id = self.rng.i32(1..=self.scenario.brokers as i32);
        let down = self.brokers.iter().filter(|b| !b.up).count();
        let tolerated = (self.scenario.brokers - 1) / 2;
        let now = self.now;
        let length = self.rng.u64(100..1_500);
        if fault == Fault::CrashCoordinator {
            id = self.state_of(TXN_STATE).leader;
            if id < 0 {
                return;
            }
        }
        match fault {
            Fault::Crash | Fault::EmptyDisk | Fault::CrashCoordinator => {
                // A minority at most, and only while the ISR still holds
                // min.insync replicas: beyond that a loss is allowed.
                let short = (0..self.partitions.len())
                    .any(|p| self.state_of(p).isr.len() < self.min_insync);
                if down >= tolerated || !self.broker(id).up || short {
                    return;
                }
                let restart_at = now + self.rng.u64(50..600);
                let broker = self.broker(id);
                broker.up = false;
                broker.restart_at = restart_at;
                for part in &mut broker.parts {
                    part.log.truncate(part.durable);
                    if fault == Fault::EmptyDisk {
                        part.log.clear();
                        part.durable = 0;
                    }
                }
                if fault == Fault::EmptyDisk {
                    broker.directory_recorded = false;
                }
                broker.new_directory = !broker.directory_recorded;
                broker.clean_start = false;
            }
            Fault::Pause => {
                let broker = self.broker(id);
                broker.paused_until = broker.paused_until.max(now + length);
            }
            Fault::CutFromController => {
                self.net.partition(id, CONTROLLER);
                self.cuts.push((now + length, id, CONTROLLER));
            }
            Fault::CutFromPeers => {
                for other in 1..=self.scenario.brokers as NodeId {
                    if other != id {
                        self.net.partition(id, other);
                        self.cuts.push((now + length, id, other));
                    }
                }
            }
            Fault::SlowDisk => {
                let broker = self.broker(id);
                broker.slow_disk_until = now + length;
            }
            Fault::PauseController => {
                self.controller.paused_until = self.controller.paused_until.max(now + length);
            }
            Fault::FailCoordinatorAppend => {
                self.append_fault = Some(if self.rng.bool() {
                    Appended::Refused
                } else {
                    Appended::Unknown
                });
            }
            Fault::StallMarkers => {
                // The coordinator's connection to another broker.
                let other = self.rng.i32(1..=self.scenario.brokers as i32);
                id = self.state_of(TXN_STATE).leader;
                if other == id || id < 0 {
                    return;
                }
                let lost = self.rng.bool();
                let until = now + length;
                self.stalls
                    .insert((id.min(other), id.max(other)), (until, lost));
            }
            Fault::LateRecord => self.late_record_ms = Some(length),
            Fault::CrashProducer | Fault::FreezeProducer | Fault::ZombieProducer => {
                let app = self.rng.usize(0..APPS);
                let restart_ms = self.rng.u64(20..300);
                let fault = match fault {
                    Fault::CrashProducer => ClientFault::Crash,
                    Fault::FreezeProducer => ClientFault::Freeze { ms: length },
                    _ => ClientFault::Zombie { ms: length },
                };
                if let Some(world) = self.txn.as_mut() {
                    world.client_fault(now, app, fault, restart_ms);
                }
            }
        }
        self.report.faults += 1;
        self.note(|| format!("fault: {fault:?} (broker {id} if a broker's, {length} ms; controller paused until {})", self.controller.paused_until));
    }

    fn heal_all(&mut self) {
        for (_, a, b) in std::mem::take(&mut self.cuts) {
            self.net.heal(a, b);
        }
        let now = self.now;
        self.controller.paused_until = self.controller.paused_until.min(now);
        for broker in &mut self.brokers {
            broker.paused_until = broker.paused_until.min(now);
            broker.slow_disk_until = now;
            if !broker.up {
                broker.restart_at = now;
            }
        }
        self.append_fault = None;
        self.late_record_ms = None;
        self.stuck = None;
        for (until, _) in self.stalls.values_mut() {
            *until = now;
        }
        if let Some(world) = self.txn.as_mut() {
            world.thaw(now);
        }
    }

    fn restart(&mut self, index: usize) {
        self.note(|| {
            let b = &self.brokers[index];
            format!(
                "broker {} restarts with {:?} records (new directory: {})",
                b.id,
                b.parts.iter().map(|p| p.log.len()).collect::<Vec<_>>(),
                b.new_directory
            )
        });
        let min_insync = self.min_insync;
        let broker = &mut self.brokers[index];
        broker.up = true;
        broker.incarnation += 1;
        if self.scenario.mutation == Mutation::EmptiedReturnsClean {
            broker.new_directory = false;
            broker.clean_start = true;
        }
        if self.scenario.mutation == Mutation::RecordDirectoryAtStart {
            broker.directory_recorded = true;
        }
        broker.assigned = None;
        for part in &mut broker.parts {
            part.replica = fresh_replica(broker.id, min_insync, part.log.len() as u64);
            part.fetching = Fetching::Idle;
            part.waiters.clear();
            part.sync_at = None;
            part.high_watermark_seen = 0;
            part.turns = Turns::default();
            part.rebuild_producers();
        }
        broker.coordinator = None;
        broker.txn_coordinator = None;
        broker.group_calls.clear();
        broker.inbox.clear();
        broker.next_heartbeat = self.now;
    }

    // ---- one millisecond ----

    fn step(&mut self) {
        for index in 0..self.brokers.len() {
            let broker = &self.brokers[index];
            if !broker.running(self.now) || self.net.is_cut(broker.id, CONTROLLER) {
                self.brokers[index].unheard_at = self.now;
            }
            if !self.brokers[index].up && self.brokers[index].restart_at <= self.now {
                self.restart(index);
            }
        }
        if !self.stalls.is_empty() {
            self.release_stalls();
        }
        while let Some(envelope) = self.net.receive(self.now) {
            let (from, to, message) = (envelope.from, envelope.to, envelope.message);
            match to {
                CONTROLLER if self.now < self.controller.paused_until => {
                    self.controller.inbox.push((from, message));
                }
                CONTROLLER => self.on_controller(from, message),
                CLIENT => self.on_client(message),
                PRODUCERS | READER => self.on_txn_client(message),
                id => self.deliver(from, id, message),
            }
        }
        for id in 1..=self.brokers.len() as NodeId {
            let now = self.now;
            if self.broker(id).running(now) {
                for (from, message) in std::mem::take(&mut self.broker(id).inbox) {
                    self.on_broker(id, from, message);
                }
                self.broker_timers(id);
            }
        }
        if self.now >= self.controller.paused_until {
            // Back from a pause, the controller's loop turns before it
            // reads what waited for it (as the voter's does).
            self.controller_timers();
            for (from, message) in std::mem::take(&mut self.controller.inbox) {
                self.on_controller(from, message);
            }
        }
        self.client_timers();
        if self.txn.is_some() {
            self.txn_client_timers();
        }
    }

    // ---- the controller: placement's decisions on a real image ----

    fn decide(&mut self, records: Vec<MetadataRecord>) {
        if records.is_empty() {
            return;
        }
        let mut records = records;
        if self.scenario.mutation == Mutation::ElectIgnoringIsr {
            for record in &mut records {
                if let MetadataRecord::PartitionChanged { state, name, index } = record {
                    let live = state
                        .replicas
                        .iter()
                        .copied()
                        .find(|&r| self.controller.image.is_live(r) && r != state.leader);
                    let was =
                        &self.controller.image.topics[name.as_str()].partitions[*index as usize];
                    if state.leader != was.leader {
                        if let Some(live) = live {
                            state.leader = live;
                            if !state.isr.contains(&live) {
                                state.isr.push(live);
                            }
                        }
                    }
                }
            }
        }
        for record in &records {
            self.note(|| format!("controller decides {record:?}"));
            self.controller.image.apply(record);
        }
        // One image per decision, as one committed log entry gives one.
        self.controller.image.offset += 1;
        self.broadcast();
    }

    fn broadcast(&mut self) {
        let image = Rc::new(self.controller.image.clone());
        for id in 1..=self.brokers.len() as NodeId {
            self.send(
                CONTROLLER,
                id,
                Message::Assign {
                    image: image.clone(),
                },
            );
        }
    }

    fn on_controller(&mut self, from: NodeId, message: Message) {
        match message {
            Message::Heartbeat { broker, arrival } => {
                self.controller.sessions.heard(from, self.now);
                let records = placement::heartbeat(&self.controller.image, &broker, arrival, false);
                self.decide(records);
            }
            Message::Alter(alter) => {
                match placement::alter_partition(&self.controller.image, &alter) {
                    Ok(record) => self.decide(vec![record]),
                    Err(why) => {
                        let partition = self
                            .partition_index(&alter.topic, alter.partition)
                            .expect("leaders alter the cluster's partitions");
                        self.send(CONTROLLER, from, Message::AlterRefused { partition, why });
                    }
                }
            }
            _ => {}
        }
    }

    fn controller_timers(&mut self) {
        let now = self.now;
        if self.scenario.mutation != Mutation::StallCountsAgainstSessions {
            self.controller.sessions.turn(now);
        }
        let expired: Vec<NodeId> = self
            .controller
            .image
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .filter(|b| self.controller.sessions.expired(b.id, now))
            .map(|b| b.id)
            .collect();
        for id in expired {
            // Heartbeats go every HEARTBEAT_MS and arrive within a few
            // milliseconds: one the controller could hear throughout its
            // last session is never silent that long.
            let heard_for = now.saturating_sub(self.broker(id).unheard_at);
            if heard_for > SESSION_MS && self.wrongly_fenced.is_none() {
                self.wrongly_fenced = Some(format!(
                    "broker {id} fenced though the controller could hear it for the last {heard_for} ms"
                ));
            }
            let records = placement::fence(&self.controller.image, id, false);
            self.decide(records);
        }
        if now >= self.controller.next_broadcast {
            self.controller.next_broadcast = now + REBROADCAST_MS;
            self.broadcast();
        }
    }

    // ---- a broker: the replica state and its edge ----

    fn apply_actions(&mut self, id: NodeId, p: usize, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::HighWatermarkAdvanced { .. } => {}
                Action::CompleteAcks { waiter, result } => {
                    let Some((parked, at)) = self.part(id, p).waiters.remove(&waiter) else {
                        continue;
                    };
                    let answers = match parked {
                        Parked::Produce { value } => vec![Message::Produced {
                            value,
                            offset: result.is_ok().then_some(at),
                        }],
                        Parked::Commit { offset } => vec![Message::Committed {
                            offset,
                            ok: result.is_ok(),
                        }],
                        // The records not kept, a SyncGroup is answered with
                        // an error (the broker's group manager does so too).
                        Parked::Group(answers) if result.is_err() => answers
                            .into_iter()
                            .map(|answer| match answer {
                                Message::GroupAnswer {
                                    call,
                                    answer: GroupAnswer::Synced(_),
                                } => Message::GroupAnswer {
                                    call,
                                    answer: GroupAnswer::Synced(SyncResponse::error(
                                        GroupError::CoordinatorNotAvailable,
                                    )),
                                },
                                other => other,
                            })
                            .collect(),
                        Parked::Group(answers) => {
                            self.note_synced_record(&answers, at);
                            answers
                        }
                        Parked::TxnAppend { ticket } => {
                            let how = if result.is_ok() {
                                Appended::Kept
                            } else {
                                Appended::Unknown
                            };
                            self.txn_appended(id, ticket, how);
                            continue;
                        }
                        Parked::TxnProduce { caller, sequence } => {
                            let index = p - DATA_FIRST;
                            let outcome = result
                                .map(|()| at)
                                .map_err(|_| Refusal::NotLeaderOrFollower);
                            let answer = TxnMessage::Produced {
                                partition: index,
                                caller,
                                sequence,
                                outcome,
                            };
                            self.send(id, PRODUCERS, Message::Txn(answer));
                            continue;
                        }
                        Parked::TxnMarker {
                            marker,
                            coordinator,
                        } => {
                            let outcome = result.map_err(|_| Refusal::NotLeaderOrFollower);
                            self.note(|| format!("broker {id} answers the marker {marker:?} at {at}: {outcome:?}"));
                            let answer = TxnMessage::MarkerWritten { marker, outcome };
                            self.send(id, coordinator, Message::Txn(answer));
                            continue;
                        }
                    };
                    for answer in answers {
                        self.send(id, CLIENT, answer);
                    }
                }
                Action::ProposeIsr(proposal) => {
                    self.part(id, p).proposals_sent = 0;
                    self.send_proposal(id, p, proposal);
                }
            }
        }
    }

    fn assign(&mut self, id: NodeId, image: Rc<MetadataImage>) {
        let broker = self.broker(id);
        if broker
            .assigned
            .as_ref()
            .is_some_and(|held| held.offset > image.offset)
        {
            return;
        }
        broker.assigned = Some(image.clone());
        // The data dir records the cluster once the image holds this
        // incarnation's registration (the broker's rule).
        if placement::may_record_directory(&image, id, broker.incarnation) {
            broker.directory_recorded = true;
        }
        // Leadership waits until the image holds this incarnation's
        // registration (the broker's own rule).
        let may_lead = placement::may_lead(&image, id, broker.incarnation)
            || self.scenario.mutation == Mutation::LeadOnAnEarlierIncarnation;
        for p in 0..self.partitions.len() {
            let (topic, index) = &self.partitions[p];
            let state = image.topics[topic].partitions[*index as usize].clone();
            self.assign_partition(id, p, state, may_lead);
        }
    }

    /// Takes partition `p`'s `state` from the controller's image.
    fn assign_partition(&mut self, id: NodeId, p: usize, state: PartitionState, may_lead: bool) {
        let now = self.now;
        let leader = if state.leader == id && !may_lead {
            -1
        } else {
            state.leader
        };
        let leading = leader == id;
        let replica = &self.part(id, p).replica;
        let same_role = match replica.role() {
            Role::Leader => leading,
            Role::Follower { leader_id } => !leading && leader_id == leader,
            Role::Offline => false,
        };
        let mut isr = state.isr.clone();
        isr.sort_unstable();
        if same_role
            && replica.leader_epoch() == state.leader_epoch
            && replica.partition_epoch() == state.partition_epoch
            && replica.isr() == isr
        {
            return;
        }
        let new_leadership = !same_role || replica.leader_epoch() != state.leader_epoch;
        let assignment = Assignment {
            leader_epoch: state.leader_epoch,
            partition_epoch: state.partition_epoch,
            replicas: state.replicas.clone(),
            isr: state.isr.clone(),
        };
        self.note(|| format!("broker {id} takes {state:?} (leading: {leading})"));
        let part = self.part(id, p);
        let mut actions = Vec::new();
        let taken = if leading {
            part.replica.become_leader(assignment, now, &mut actions)
        } else {
            part.replica
                .become_follower(leader, assignment, &mut actions)
        };
        if taken.is_ok() && new_leadership {
            part.fetching = if leading || leader < 0 {
                Fetching::Idle
            } else {
                Fetching::AskEpoch
            };
            part.log_end_at_takeover = part.log.len() as u64;
            // What waits for a producer's turn goes with the leadership
            // (its producers send again).
            part.turns = Turns::default();
            if p == TXN_STATE && self.txn.is_some() {
                // The transactions go with the leadership: a new leader
                // loads them again from its log.
                self.broker(id).txn_coordinator = None;
            }
            if p == 0 {
                // The groups go with the leadership: a new leader loads
                // them again from its log.
                let broker = self.broker(id);
                broker.coordinator = None;
                broker.group_calls.clear();
            }
        }
        self.apply_actions(id, p, actions);
    }

    fn on_broker(&mut self, id: NodeId, from: NodeId, message: Message) {
        let now = self.now;
        match message {
            Message::Assign { image } => self.assign(id, image),
            Message::AlterRefused { partition, why } => {
                let given_up = self.scenario.mutation == Mutation::IsrChangeGivenUp;
                let part = self.part(id, partition);
                let stale = matches!(
                    why,
                    Refused::InvalidUpdateVersion | Refused::FencedLeaderEpoch
                );
                if given_up {
                    part.replica.isr_proposal_failed();
                } else {
                    let attempts = part.proposals_sent;
                    part.replica.isr_change_refused(stale, attempts);
                }
            }
            Message::EpochQuery {
                partition,
                leader_epoch,
                epoch,
            } => {
                let part = self.part(id, partition);
                if part.replica.role() != Role::Leader
                    || part.replica.leader_epoch() != leader_epoch
                {
                    return;
                }
                let (epoch, end) = part.epoch_end(epoch, Some(leader_epoch));
                self.send(
                    id,
                    from,
                    Message::EpochAnswer {
                        partition,
                        leader_epoch,
                        epoch,
                        end,
                    },
                );
            }
            Message::EpochAnswer {
                partition,
                leader_epoch,
                epoch,
                end,
            } => {
                self.on_epoch_answer(id, partition, leader_epoch, epoch, end);
            }
            Message::Fetch {
                partition,
                leader_epoch,
                offset,
            } => {
                let uncapped = self.scenario.mutation == Mutation::UncappedFollowerHighWatermark;
                let mut actions = Vec::new();
                let part = self.part(id, partition);
                let taken =
                    part.replica
                        .follower_fetch(from, leader_epoch, offset, now, &mut actions);
                let reply = match taken {
                    Err(_) => Message::FetchRefused {
                        partition,
                        leader_epoch,
                    },
                    Ok(()) => {
                        let start = offset as usize;
                        let end = (start + FETCH_ENTRIES_MAX).min(part.log.len());
                        Message::FetchReply {
                            partition,
                            leader_epoch,
                            offset,
                            entries: part.log[start..end].to_vec(),
                            // Capped at what this leader has kept (the
                            // broker's rule, `Partition::read_for_follower`).
                            high_watermark: if uncapped {
                                part.replica.high_watermark()
                            } else {
                                part.replica.high_watermark().min(part.durable as u64)
                            },
                        }
                    }
                };
                self.apply_actions(id, partition, actions);
                self.send(id, from, reply);
            }
            Message::FetchReply {
                partition,
                leader_epoch,
                offset,
                entries,
                high_watermark,
            } => {
                let slow = self.broker(id).slow_disk_until > now;
                let part = self.part(id, partition);
                let following = matches!(part.replica.role(), Role::Follower { leader_id } if leader_id == from);
                if !following
                    || part.replica.leader_epoch() != leader_epoch
                    || !matches!(part.fetching, Fetching::AwaitFetch { .. })
                    || offset != part.log.len() as u64
                {
                    return;
                }
                let delay = sync_delay(&mut self.rng, slow);
                let mut actions = Vec::new();
                if !entries.is_empty() {
                    self.note(|| format!("broker {id} appends {entries:?} at {offset} of partition {partition} from {from} (leader high watermark {high_watermark})"));
                    let part = self.part(id, partition);
                    for (i, entry) in entries.iter().enumerate() {
                        if let Some(txn) = &entry.txn {
                            part.producers.apply(offset + i as u64, txn);
                        }
                    }
                    part.log.extend_from_slice(&entries);
                    let end = part.log.len() as u64;
                    part.replica.local_append(end, &mut actions);
                    part.sync_at.get_or_insert(now + delay);
                }
                let part = self.part(id, partition);
                part.replica
                    .leader_high_watermark(high_watermark, &mut actions);
                part.fetching = if entries.is_empty() {
                    Fetching::Backoff {
                        until: now + 5,
                        then_ask: false,
                    }
                } else {
                    Fetching::Fetch
                };
                self.apply_actions(id, partition, actions);
            }
            Message::FetchRefused {
                partition,
                leader_epoch,
            } => {
                let part = self.part(id, partition);
                if part.replica.leader_epoch() == leader_epoch
                    && matches!(part.fetching, Fetching::AwaitFetch { .. })
                {
                    part.fetching = Fetching::Backoff {
                        until: now + 20,
                        then_ask: true,
                    };
                }
            }
            Message::Produce { value } => self.on_produce(id, value),
            Message::Commit {
                offset,
                generation,
                member_id,
            } => self.on_commit(id, offset, generation, member_id),
            Message::Group { call, request } => match request {
                GroupRequest::Join { member_id } => self.on_join(id, call, member_id),
                GroupRequest::Sync {
                    member_id,
                    generation,
                } => self.on_sync(id, call, member_id, generation),
                GroupRequest::Heartbeat {
                    member_id,
                    generation,
                } => self.on_group_heartbeat(id, call, member_id, generation),
            },
            Message::Txn(message) => self.on_txn_broker(id, from, message),
            _ => {}
        }
    }

    /// Loads the group coordinator from the log once the high watermark
    /// reaches the log end this leader took over with (the broker's
    /// rule), replaying each offsets record below it.
    fn load_coordinator(&mut self, id: NodeId) -> bool {
        let mutation = self.scenario.mutation;
        let now = self.now;
        let broker = self.broker(id);
        if broker.coordinator.is_some() {
            return true;
        }
        let high_watermark = broker.parts[0].replica.high_watermark() as i64;
        let takeover = if mutation == Mutation::LoadBeforeCaughtUp {
            0
        } else {
            broker.parts[0].log_end_at_takeover as i64
        };
        let Some(end) = load::load_end(takeover, high_watermark) else {
            return false;
        };
        let mut coordinator = Coordinator::new(group_config(), id as u64);
        for entry in &broker.parts[0].log[..end as usize] {
            if let Some(record) = &entry.offsets_record {
                load::replay(&mut coordinator, &record.key, record.value.as_deref(), now);
            }
        }
        broker.coordinator = Some(coordinator);
        self.note(|| format!("broker {id} loads its groups up to {end}"));
        true
    }

    /// An OffsetCommit: the coordinator decides, the commit is written to
    /// the log as Kafka's offset record and answered once acks=all holds.
    fn on_commit(&mut self, id: NodeId, offset: i64, generation: i32, member_id: String) {
        let now = self.now;
        let refused = Message::Committed { offset, ok: false };
        if self.part(id, 0).replica.admit_produce(-1).is_err() || !self.load_coordinator(id) {
            self.send(id, CLIENT, refused);
            return;
        }
        let committer = Committer {
            group_id: GROUP.to_string(),
            generation_id: generation,
            member_id,
            group_instance_id: None,
        };
        let committed = CommittedOffset {
            offset,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: now as i64,
        };
        let partition = CommitPartition {
            topic: TOPIC.to_string(),
            partition: 0,
            offset: committed.clone(),
        };
        let broker = self.broker(id);
        let coordinator = broker.coordinator.as_mut().expect("loaded above");
        if coordinator.commit(now, &committer, &[partition]) != Ok(vec![Ok(())]) {
            self.send(id, CLIENT, refused);
            return;
        }
        let record = OffsetsRecord {
            key: records::offset_key(GROUP, TOPIC, 0),
            value: Some(records::offset_value(&committed)),
        };
        let (at, actions) = self.leader_append(id, 0, 0, Some(Rc::new(record)), None);
        self.note(|| format!("broker {id} writes the commit of {offset} at {at}"));
        if self.scenario.mutation == Mutation::AnswerCommitAtAppend {
            self.apply_actions(id, 0, actions);
            self.send(id, CLIENT, Message::Committed { offset, ok: true });
            return;
        }
        self.park(id, 0, Parked::Commit { offset }, at, actions);
    }

    /// Whether leader `id` coordinates the group now: it leads and has
    /// loaded its groups.
    fn coordinating(&mut self, id: NodeId) -> bool {
        self.part(id, 0).replica.role() == Role::Leader && self.load_coordinator(id)
    }

    /// The coordinator's answers to the consumer: at once, or, when the
    /// call took membership records, once `acks=all` holds for them (the
    /// broker's group manager writes them before it answers anyone).
    fn answer_group(&mut self, id: NodeId, answers: Vec<Message>) {
        let coordinator = self.broker(id).coordinator.as_mut().expect("loaded");
        let changes = coordinator.take_metadata_changes(|_| true);
        if changes.is_empty() {
            for answer in answers {
                self.send(id, CLIENT, answer);
            }
            return;
        }
        let mut last = None;
        for (group_id, metadata) in changes {
            let generation = metadata.as_ref().map(|m| m.generation_id);
            let record = OffsetsRecord {
                key: records::group_metadata_key(&group_id),
                value: metadata.map(|m| records::group_metadata_value(&m)),
            };
            if let Some((_, actions)) = last.take() {
                self.apply_actions(id, 0, actions);
            }
            let (at, actions) = self.leader_append(id, 0, 0, Some(Rc::new(record)), None);
            self.note(|| {
                format!("broker {id} writes the group at generation {generation:?} at {at}")
            });
            if generation.is_none() {
                // The group is deleted: the generations before go with it.
                self.group_log.tombstone_at = self.group_log.tombstone_at.max(Some(at));
            }
            last = Some((at, actions));
        }
        let (at, actions) = last.expect("a change was written");
        if answers.is_empty() {
            self.apply_actions(id, 0, actions);
            return;
        }
        if self.scenario.mutation == Mutation::AnswerSyncAtAppend {
            self.apply_actions(id, 0, actions);
            self.note_synced_record(&answers, at);
            for answer in answers {
                self.send(id, CLIENT, answer);
            }
            return;
        }
        self.park(id, 0, Parked::Group(answers), at, actions);
    }

    /// Notes the log offset of the membership record each successful
    /// SyncGroup among `answers` waited for (taken when the consumer
    /// takes the answer).
    fn note_synced_record(&mut self, answers: &[Message], at: u64) {
        for answer in answers {
            if let Message::GroupAnswer {
                call,
                answer: GroupAnswer::Synced(response),
            } = answer
            {
                if response.error.is_none() {
                    self.group_log.synced_records.insert(*call, at);
                }
            }
        }
    }

    /// A coordinator waiter for the consumer's call `call`.
    fn group_waiter(&mut self, id: NodeId, call: u64) -> u64 {
        let broker = self.broker(id);
        broker.next_group_waiter += 1;
        broker.group_calls.insert(broker.next_group_waiter, call);
        broker.next_group_waiter
    }

    /// The coordinator's replies to parked calls, as messages to the
    /// consumer naming the calls they answer.
    fn replies(&mut self, id: NodeId, replies: Vec<(u64, Reply)>) -> Vec<Message> {
        let broker = self.broker(id);
        replies
            .into_iter()
            .filter_map(|(waiter, reply)| {
                let call = broker.group_calls.remove(&waiter)?;
                let answer = match reply {
                    Reply::Join(response) => GroupAnswer::Joined(response),
                    Reply::Sync(response) => GroupAnswer::Synced(response),
                };
                Some(Message::GroupAnswer { call, answer })
            })
            .collect()
    }

    /// A JoinGroup: the coordinator answers now or parks it until the
    /// join phase ends.
    fn on_join(&mut self, id: NodeId, call: u64, member_id: String) {
        if !self.coordinating(id) {
            let refused = JoinResponse::error(GroupError::NotCoordinator, &member_id);
            let answer = GroupAnswer::Joined(refused);
            self.send(id, CLIENT, Message::GroupAnswer { call, answer });
            return;
        }
        let now = self.now;
        let waiter = self.group_waiter(id, call);
        let request = JoinRequest {
            group_id: GROUP.to_string(),
            member_id,
            group_instance_id: None,
            client_id: "consumer".to_string(),
            client_host: "simulated".to_string(),
            session_timeout_ms: GROUP_SESSION_MS as i32,
            rebalance_timeout_ms: GROUP_SESSION_MS as i32,
            protocol_type: "consumer".to_string(),
            protocols: vec![("range".to_string(), Bytes::new())],
            require_known_member_id: true,
            supports_skip_assignment: false,
            topics: None,
        };
        let mut replies = Vec::new();
        let coordinator = self.broker(id).coordinator.as_mut().expect("loaded");
        let answer = coordinator.join(now, request, waiter, &mut replies);
        let mut answers = self.replies(id, replies);
        if let Answer::Now(response) = answer {
            self.broker(id).group_calls.remove(&waiter);
            let answer = GroupAnswer::Joined(response);
            answers.push(Message::GroupAnswer { call, answer });
        }
        self.answer_group(id, answers);
    }

    /// A SyncGroup: the consumer, the group's only member, leads it and
    /// assigns itself the partition.
    fn on_sync(&mut self, id: NodeId, call: u64, member_id: String, generation: i32) {
        if !self.coordinating(id) {
            let refused = SyncResponse::error(GroupError::NotCoordinator);
            let answer = GroupAnswer::Synced(refused);
            self.send(id, CLIENT, Message::GroupAnswer { call, answer });
            return;
        }
        let now = self.now;
        let waiter = self.group_waiter(id, call);
        let request = SyncRequest {
            group_id: GROUP.to_string(),
            generation_id: generation,
            member_id: member_id.clone(),
            group_instance_id: None,
            protocol_type: Some("consumer".to_string()),
            protocol_name: Some("range".to_string()),
            assignments: vec![(member_id, Bytes::from_static(b"partition 0"))],
        };
        let mut replies = Vec::new();
        let coordinator = self.broker(id).coordinator.as_mut().expect("loaded");
        let answer = coordinator.sync(now, request, waiter, &mut replies);
        let mut answers = self.replies(id, replies);
        if let Answer::Now(response) = answer {
            self.broker(id).group_calls.remove(&waiter);
            let answer = GroupAnswer::Synced(response);
            answers.push(Message::GroupAnswer { call, answer });
        }
        self.answer_group(id, answers);
    }

    fn on_group_heartbeat(&mut self, id: NodeId, call: u64, member_id: String, generation: i32) {
        if !self.coordinating(id) {
            let answer = GroupAnswer::Heartbeat(Err(GroupError::NotCoordinator));
            self.send(id, CLIENT, Message::GroupAnswer { call, answer });
            return;
        }
        let now = self.now;
        let coordinator = self.broker(id).coordinator.as_mut().expect("loaded");
        let answer =
            GroupAnswer::Heartbeat(coordinator.heartbeat(now, GROUP, generation, &member_id, None));
        self.answer_group(id, vec![Message::GroupAnswer { call, answer }]);
    }

    /// A loaded coordinator's deadlines: ends join and sync phases and
    /// expires sessions, answering what was parked.
    fn group_tick(&mut self, id: NodeId) {
        let now = self.now;
        let broker = self.broker(id);
        if now < broker.next_group_tick {
            return;
        }
        broker.next_group_tick = now + GROUP_TICK_MS;
        let Some(coordinator) = broker.coordinator.as_mut() else {
            return;
        };
        let mut replies = Vec::new();
        coordinator.tick(now, &mut replies);
        let answers = self.replies(id, replies);
        self.answer_group(id, answers);
    }

    /// Appends one entry to leader `id`'s log of partition `p` in its
    /// epoch: the replica state learns the new log end and a sync is due.
    /// Its offset, and what the replica state asked for.
    fn leader_append(
        &mut self,
        id: NodeId,
        p: usize,
        value: u64,
        offsets_record: Option<Rc<OffsetsRecord>>,
        txn: Option<Rc<TxnEntry>>,
    ) -> (u64, Vec<Action>) {
        let now = self.now;
        let slow = self.broker(id).slow_disk_until > now;
        let sync = now + sync_delay(&mut self.rng, slow);
        let part = self.part(id, p);
        let epoch = part.replica.leader_epoch();
        if let Some(entry) = &txn {
            part.producers.apply(part.log.len() as u64, entry);
        }
        part.log.push(Entry {
            epoch,
            value,
            offsets_record,
            txn,
        });
        let at = part.log.len() as u64 - 1;
        let mut actions = Vec::new();
        part.replica.local_append(at + 1, &mut actions);
        part.sync_at.get_or_insert(sync);
        (at, actions)
    }

    /// Parks `parked` until acks=all holds for log offset `at` of
    /// partition `p` (it may hold at once), with what the append before
    /// asked for.
    fn park(&mut self, id: NodeId, p: usize, parked: Parked, at: u64, mut actions: Vec<Action>) {
        let part = self.part(id, p);
        let waiter = part.next_waiter;
        part.next_waiter += 1;
        part.waiters.insert(waiter, (parked, at));
        part.replica.await_acks(waiter, at, &mut actions);
        self.apply_actions(id, p, actions);
    }

    fn on_epoch_answer(&mut self, id: NodeId, p: usize, leader_epoch: i32, epoch: i32, end: i64) {
        let now = self.now;
        let part = self.part(id, p);
        if part.replica.leader_epoch() != leader_epoch
            || !matches!(part.fetching, Fetching::AwaitEpoch { .. })
        {
            return;
        }
        let local = part.epoch_end(epoch, None);
        let follower = FollowerLog {
            log_end: part.log.len() as u64,
            high_watermark: part.replica.high_watermark(),
        };
        let decision = divergence(local, (epoch, end), follower);
        self.note(|| {
            format!(
                "broker {id} hears epoch {epoch} of partition {p} ends at {end} at the leader \
                 (here {local:?}): {decision:?}"
            )
        });
        let part = self.part(id, p);
        if let Some(cut) = decision.truncation_offset() {
            if cut < part.replica.high_watermark() {
                // Below what it knows committed: never (no unclean
                // elections here). It waits for another leader.
                self.report.refused_truncations += 1;
                let part = self.part(id, p);
                part.fetching = Fetching::Backoff {
                    until: now + 100,
                    then_ask: true,
                };
                return;
            }
            let (end, high_watermark) = (part.log.len(), part.replica.high_watermark());
            self.note(|| {
                format!(
                    "broker {id} truncates partition {p} from {end} to {cut} (high watermark \
                     {high_watermark})"
                )
            });
            let part = self.part(id, p);
            part.log.truncate(cut as usize);
            part.durable = part.durable.min(cut as usize);
            part.rebuild_producers();
            let mut actions = Vec::new();
            part.replica.truncated(cut, &mut actions);
            self.apply_actions(id, p, actions);
        }
        let part = self.part(id, p);
        part.fetching = match decision {
            Divergence::TruncateAndAskAgain(_) => Fetching::AskEpoch,
            _ => Fetching::Fetch,
        };
    }

    fn on_produce(&mut self, id: NodeId, value: u64) {
        let part = self.part(id, 0);
        if part.replica.admit_produce(-1).is_err() {
            let refused = Message::Produced {
                value,
                offset: None,
            };
            self.send(id, CLIENT, refused);
            return;
        }
        // The idempotent producer's duplicate: the batch is in the log.
        if let Some(at) = part.log.iter().position(|e| e.value == value) {
            let at = at as u64;
            if self.scenario.mutation == Mutation::AnswerDuplicateAtOnce {
                let answer = Message::Produced {
                    value,
                    offset: Some(at),
                };
                self.send(id, CLIENT, answer);
                return;
            }
            self.park(id, 0, Parked::Produce { value }, at, Vec::new());
            return;
        }
        let (at, actions) = self.leader_append(id, 0, value, None, None);
        let epoch = self.part(id, 0).replica.leader_epoch();
        self.note(|| format!("broker {id} appends {value} at {at} in epoch {epoch}"));
        self.park(id, 0, Parked::Produce { value }, at, actions);
    }

    fn broker_timers(&mut self, id: NodeId) {
        let now = self.now;
        for p in 0..self.partitions.len() {
            let part = self.part(id, p);
            if part.sync_at.is_some_and(|at| at <= now) {
                part.sync_at = None;
                part.durable = part.log.len();
                let durable = part.durable as u64;
                let mut actions = Vec::new();
                part.replica.local_durable(durable, &mut actions);
                self.apply_actions(id, p, actions);
            }
        }
        let broker = self.broker(id);
        if now >= broker.next_heartbeat {
            broker.next_heartbeat = now + HEARTBEAT_MS;
            let message = Message::Heartbeat {
                broker: broker.meta(),
                arrival: Arrival {
                    clean: broker.clean_start,
                    new_directory: broker.new_directory,
                    shutting_down: false,
                    storage_full: false,
                },
            };
            self.send(id, CONTROLLER, message);
        }
        // The scenarios before transactions keep their schedules (and the
        // seeds that found their defects): their lost AlterPartition
        // requests are never sent again.
        let resend_proposals = self.scenario.transactions;
        let broker = self.broker(id);
        if now >= broker.next_tick {
            broker.next_tick = now + TICK_MS;
            for p in 0..self.partitions.len() {
                let part = self.part(id, p);
                if resend_proposals && now - part.proposed_at > REQUEST_TIMEOUT_MS {
                    if let Some(proposal) = part.replica.pending_isr().cloned() {
                        self.resend_proposal(id, p, proposal);
                    }
                }
                let mut actions = Vec::new();
                self.part(id, p).replica.tick(now, &mut actions);
                self.apply_actions(id, p, actions);
            }
        }
        // A leader loads its groups as soon as the load rule lets it (in
        // the broker, the first group request after the takeover starts
        // the load): from then on it serves them.
        if self.part(id, 0).replica.role() == Role::Leader && self.load_coordinator(id) {
            self.group_tick(id);
        }
        if self.txn.is_some() {
            self.txn_broker_timers(id);
        }
        for p in 0..self.partitions.len() {
            self.follow(id, p);
        }
    }

    /// Leader `id`'s ISR change of partition `p` went unanswered: it is
    /// sent again, still proposed (the controller may have taken it and
    /// its answer been lost), as Kafka's leaders retry AlterPartition.
    /// Given up instead ([`Mutation::IsrChangeGivenUp`]), the leader counts
    /// its high watermark without the member the controller may have
    /// added.
    fn resend_proposal(
        &mut self,
        id: NodeId,
        p: usize,
        proposal: replication::replica::IsrProposal,
    ) {
        if self.scenario.mutation == Mutation::IsrChangeGivenUp {
            self.part(id, p).replica.isr_proposal_failed();
            return;
        }
        self.send_proposal(id, p, proposal);
    }

    /// Sends leader `id`'s ISR change of partition `p` to the controller,
    /// counting the attempt.
    fn send_proposal(&mut self, id: NodeId, p: usize, proposal: replication::replica::IsrProposal) {
        let now = self.now;
        let part = self.part(id, p);
        part.proposed_at = now;
        part.proposals_sent += 1;
        let (topic, partition) = self.partitions[p].clone();
        let alter = AlterPartition {
            topic,
            partition,
            leader: id,
            leader_epoch: proposal.leader_epoch,
            partition_epoch: proposal.partition_epoch,
            isr: proposal.isr,
        };
        self.send(id, CONTROLLER, Message::Alter(alter));
    }

    /// A follower's next step on partition `p`: ask where its latest epoch
    /// ends at the leader, or fetch.
    fn follow(&mut self, id: NodeId, p: usize) {
        let now = self.now;
        let part = self.part(id, p);
        let Role::Follower { leader_id } = part.replica.role() else {
            return;
        };
        if leader_id < 0 {
            return;
        }
        let leader_epoch = part.replica.leader_epoch();
        let next = match part.fetching {
            Fetching::Idle => None,
            Fetching::Backoff { until, then_ask } if until <= now => Some(if then_ask {
                Fetching::AskEpoch
            } else {
                Fetching::Fetch
            }),
            Fetching::AwaitEpoch { since } if now - since > REQUEST_TIMEOUT_MS => {
                Some(Fetching::AskEpoch)
            }
            Fetching::AwaitFetch { since } if now - since > REQUEST_TIMEOUT_MS => {
                Some(Fetching::Fetch)
            }
            _ => None,
        };
        if let Some(next) = next {
            part.fetching = next;
        }
        match part.fetching {
            Fetching::AskEpoch => {
                let epoch = part.log.last().map_or(-1, |e| e.epoch);
                if epoch < 0 {
                    part.fetching = Fetching::Fetch;
                    return;
                }
                part.fetching = Fetching::AwaitEpoch { since: now };
                self.send(
                    id,
                    leader_id,
                    Message::EpochQuery {
                        partition: p,
                        leader_epoch,
                        epoch,
                    },
                );
            }
            // A follower's fetch offset promises its log is durable.
            Fetching::Fetch if part.durable == part.log.len() => {
                let offset = part.log.len() as u64;
                part.fetching = Fetching::AwaitFetch { since: now };
                self.send(
                    id,
                    leader_id,
                    Message::Fetch {
                        partition: p,
                        leader_epoch,
                        offset,
                    },
                );
            }
            _ => {}
        }
    }

    // ---- the client: idempotent, acks=all, resends what timed out ----

    fn on_client(&mut self, message: Message) {
        match message {
            Message::Produced { value, offset } if self.client.in_flight == Some(value) => {
                match offset {
                    Some(offset) => {
                        self.client.acked.insert(value, offset);
                        self.client.in_flight = None;
                    }
                    None => self.client.retry_at = self.now + 20,
                }
            }
            Message::Committed { offset, ok } if self.client.commit_in_flight == Some(offset) => {
                self.client.commit_in_flight = None;
                self.client.commit_at = self.now + COMMIT_EVERY_MS;
                if ok {
                    self.client.commit_acked = self.client.commit_acked.max(offset);
                    self.client.commits_acked += 1;
                }
            }
            Message::GroupAnswer { call, answer } if self.group_answer(call) => match answer {
                GroupAnswer::Joined(response) => self.on_joined(response),
                GroupAnswer::Synced(response) => self.on_synced(call, response.error),
                GroupAnswer::Heartbeat(Err(error)) => self.group_refused(error),
                GroupAnswer::Heartbeat(Ok(())) => {}
            },
            _ => {}
        }
    }

    /// Whether an answer to call `call` is the one the consumer waits for
    /// (it then waits no more).
    fn group_answer(&mut self, call: u64) -> bool {
        let waited = matches!(self.client.group_call, Some((_, sent, _)) if sent == call);
        if waited {
            self.client.group_call = None;
        }
        waited
    }

    fn on_joined(&mut self, response: JoinResponse) {
        self.note(|| {
            format!(
                "the consumer joined: {:?} at generation {}",
                response.error, response.generation_id
            )
        });
        match response.error {
            None => {
                self.client.member_id = response.member_id;
                self.client.membership = Membership::Joined {
                    generation: response.generation_id,
                };
                self.client.group_at = self.now;
            }
            Some(GroupError::MemberIdRequired) => {
                self.client.member_id = response.member_id;
                self.client.membership = Membership::Unjoined;
                self.client.group_at = self.now;
            }
            Some(error) => self.group_refused(error),
        }
    }

    fn on_synced(&mut self, call: u64, error: Option<GroupError>) {
        let record_at = self.group_log.synced_records.remove(&call);
        let Membership::Joined { generation } = self.client.membership else {
            return;
        };
        match error {
            None => {
                if let Some(at) = record_at {
                    self.group_log.synced_at = at;
                }
                self.client.membership = Membership::Synced { generation };
                self.client.synced_acked = generation;
                self.client.syncs_acked += 1;
                self.client.rejoin_at = self.now + self.rng.u64(REJOIN_AFTER_MS);
                self.note(|| {
                    format!("the consumer has its assignment for generation {generation}")
                });
            }
            Some(error) => self.group_refused(error),
        }
    }

    /// A group call refused: the consumer rejoins (as a new member when
    /// the coordinator no longer knows it), a little later unless the
    /// group is rebalancing.
    fn group_refused(&mut self, error: GroupError) {
        match error {
            GroupError::RebalanceInProgress => {
                self.client.membership = Membership::Unjoined;
                self.client.group_at = self.now;
            }
            GroupError::UnknownMemberId
            | GroupError::IllegalGeneration
            | GroupError::FencedInstanceId => {
                self.client.member_id.clear();
                self.client.membership = Membership::Unjoined;
                self.client.group_at = self.now + 20;
            }
            // Not the coordinator, or not now: the same call again later.
            _ => {
                if let Membership::Joined { .. } = self.client.membership {
                    self.client.membership = Membership::Unjoined;
                }
                self.client.group_at = self.now + 20;
            }
        }
    }

    /// The consumer's group calls: join, sync, then heartbeat until it
    /// rejoins; a call unanswered in time is given up and the consumer
    /// joins again.
    fn group_timers(&mut self) {
        let now = self.now;
        if let Some((_, _, deadline)) = self.client.group_call {
            if now < deadline {
                return;
            }
            self.client.group_call = None;
            self.client.membership = Membership::Unjoined;
        }
        let leader = self.state().leader;
        if now < self.client.group_at || leader < 0 {
            return;
        }
        let member_id = self.client.member_id.clone();
        let (kind, request, timeout) = match self.client.membership {
            Membership::Unjoined => (
                GroupCall::Join,
                GroupRequest::Join { member_id },
                GROUP_CALL_TIMEOUT_MS,
            ),
            Membership::Joined { generation } => (
                GroupCall::Sync,
                GroupRequest::Sync {
                    member_id,
                    generation,
                },
                GROUP_CALL_TIMEOUT_MS,
            ),
            Membership::Synced { .. } if now >= self.client.rejoin_at => (
                GroupCall::Join,
                GroupRequest::Join { member_id },
                GROUP_CALL_TIMEOUT_MS,
            ),
            Membership::Synced { generation } => (
                GroupCall::Heartbeat,
                GroupRequest::Heartbeat {
                    member_id,
                    generation,
                },
                REQUEST_TIMEOUT_MS,
            ),
        };
        if kind == GroupCall::Join {
            self.client.membership = Membership::Unjoined;
        }
        self.client.next_group_call += 1;
        let call = self.client.next_group_call;
        self.note(|| format!("the consumer sends call {call}, {request:?}, to broker {leader}"));
        self.client.group_call = Some((kind, call, now + timeout));
        self.client.group_at = now + GROUP_HEARTBEAT_MS;
        self.send(CLIENT, leader, Message::Group { call, request });
    }

    fn client_timers(&mut self) {
        let now = self.now;
        // New records until half the drain, so the last can be answered.
        let producing = now < self.scenario.duration_ms + self.scenario.drain_ms / 2;
        if self.client.in_flight.is_none() && producing {
            self.client.in_flight = Some(self.client.next_value);
            self.client.next_value += 1;
            self.client.retry_at = now;
        }
        self.consumer_timers();
        let Some(value) = self.client.in_flight else {
            return;
        };
        if now < self.client.retry_at {
            return;
        }
        let leader = self.state().leader;
        if leader < 0 {
            self.client.retry_at = now + 20;
            return;
        }
        // Sent again (the same record) once the answer is overdue.
        self.client.retry_at = now + REQUEST_TIMEOUT_MS;
        self.send(CLIENT, leader, Message::Produce { value });
    }

    /// The consumer commits how many records it has had acknowledged (a
    /// position that only grows); a commit not answered in time is sent
    /// again.
    fn consumer_timers(&mut self) {
        self.group_timers();
        let now = self.now;
        let leader = self.state().leader;
        // It commits as a member of the generation it has its assignment for.
        let Membership::Synced { generation } = self.client.membership else {
            return;
        };
        if now < self.client.commit_at || leader < 0 {
            return;
        }
        let offset = match self.client.commit_in_flight {
            Some(offset) => offset,
            None => self.client.acked.len() as i64,
        };
        if offset == 0 {
            return;
        }
        self.client.commit_in_flight = Some(offset);
        self.client.commit_at = now + REQUEST_TIMEOUT_MS;
        let member_id = self.client.member_id.clone();
        let commit = Message::Commit {
            offset,
            generation,
            member_id,
        };
        self.send(CLIENT, leader, commit);
    }

    /// The group's generation on the coordinator of the current leader
    /// is at least that of the latest SyncGroup acknowledged.
    fn check_group(&self) -> Result<(), String> {
        let acked = self.client.synced_acked;
        if self
            .group_log
            .tombstone_at
            .is_some_and(|tombstone| tombstone > self.group_log.synced_at)
        {
            return Ok(());
        }
        let Some((leader, coordinator)) = self.current_coordinator() else {
            return Ok(());
        };
        let held = coordinator.group(GROUP).map_or(-1, |g| g.generation_id());
        if held < acked {
            return Err(format!(
                "the consumer's SyncGroup of generation {acked} was acknowledged, but the \
                 coordinator on leader {leader} holds the group at generation {held}"
            ));
        }
        Ok(())
    }

    /// The coordinator of the partition's current leader, if that leader
    /// has loaded its groups.
    fn current_coordinator(&self) -> Option<(NodeId, &Coordinator)> {
        let state = self.state();
        if state.leader < 0 {
            return None;
        }
        let leader = &self.brokers[(state.leader - 1) as usize];
        let replica = &leader.parts[0].replica;
        if !leader.up
            || replica.role() != Role::Leader
            || replica.leader_epoch() != state.leader_epoch
        {
            return None;
        }
        Some((leader.id, leader.coordinator.as_ref()?))
    }

    /// The offset the coordinator of the current leader serves for the
    /// consumer, if that leader has loaded its groups.
    fn served_commit(&self) -> Option<(NodeId, i64)> {
        let (leader, coordinator) = self.current_coordinator()?;
        let wanted = [(TOPIC.to_string(), 0)];
        let served = coordinator.fetch_offsets(GROUP, Some(&wanted))[0]
            .1
            .as_ref()
            .map_or(-1, |c| c.offset);
        Some((leader, served))
    }

    fn check_commits(&self) -> Result<(), String> {
        self.check_group()?;
        if let Some((leader, served)) = self.served_commit() {
            if served < self.client.commit_acked {
                return Err(format!(
                    "the consumer's commit of {} was acknowledged, but the coordinator on \
                     leader {leader} serves {served}",
                    self.client.commit_acked
                ));
            }
        }
        Ok(())
    }

    // ---- transactions: producers, coordinators, leaders, reader ----

    /// Where the leaders are, as the clients' metadata (the controller's
    /// image) says.
    fn client_leaders(&self) -> Leaders {
        Leaders {
            coordinator: self.state_of(TXN_STATE).leader,
            data: (0..DATA_PARTITIONS)
                .map(|i| self.state_of(data(i)).leader)
                .collect(),
        }
    }

    /// The leaders of the data partitions and of `__transaction_state` as
    /// broker `id`'s own image has them (the broker sends markers and
    /// checks by it).
    fn broker_leaders(&mut self, id: NodeId) -> (BTreeMap<txn::TopicPartition, NodeId>, NodeId) {
        let Some(image) = self.broker(id).assigned.clone() else {
            return (BTreeMap::new(), -1);
        };
        let leader = |topic: &str, index: usize| {
            image
                .topics
                .get(topic)
                .map_or(-1, |t| t.partitions[index].leader)
        };
        let data = (0..DATA_PARTITIONS)
            .map(|i| (transactions::data_partition(i), leader(DATA_TOPIC, i)))
            .filter(|&(_, l)| l > 0)
            .collect();
        (data, leader(TRANSACTION_STATE_TOPIC, 0))
    }

    fn world(&mut self) -> &mut transactions::World {
        self.txn.as_mut().expect("a scenario with transactions")
    }

    /// The producers' and the reader's timers.
    fn txn_client_timers(&mut self) {
        let now = self.now;
        let leaders = self.client_leaders();
        let world = self.txn.as_mut().expect("a scenario with transactions");
        let sends = world.producer_timers(now, &leaders, &mut self.rng);
        let fetches = world.reader_timers(now);
        for (to, message) in sends {
            if let TxnMessage::Produce { batch, .. } = &message {
                if let Some(held_ms) = self.late_record_ms.take() {
                    self.stuck = Some((batch.app, to, now + held_ms));
                }
                if let Some((app, leader, until)) = self.stuck {
                    if app == batch.app && leader == to && now < until {
                        self.world().count("records held on a stuck connection");
                        self.late.push((until, to, message));
                        continue;
                    }
                }
            }
            self.send(PRODUCERS, to, Message::Txn(message));
        }
        for (arrive_at, to, message) in std::mem::take(&mut self.late) {
            if arrive_at <= now {
                self.deliver(PRODUCERS, to, Message::Txn(message));
            } else {
                self.late.push((arrive_at, to, message));
            }
        }
        for (partition, offset) in fetches {
            match leaders.data[partition] {
                leader if leader > 0 => {
                    let fetch = TxnMessage::Fetch { partition, offset };
                    self.send(READER, leader, Message::Txn(fetch));
                }
                _ => self.world().fetch_refused(now, partition, offset),
            }
        }
    }

    /// A message to the producers or the reader.
    fn on_txn_client(&mut self, message: Message) {
        let now = self.now;
        let Message::Txn(message) = message else {
            return;
        };
        let world = self.txn.as_mut().expect("a scenario with transactions");
        match message {
            TxnMessage::Fetched {
                partition,
                offset,
                entries,
                aborted,
                last_stable,
            } => world.on_fetched(now, partition, offset, &entries, &aborted, last_stable),
            TxnMessage::FetchRefused { partition, offset } => {
                world.fetch_refused(now, partition, offset)
            }
            message => world.on_producer_message(now, message, &mut self.rng),
        }
    }

    fn on_txn_broker(&mut self, id: NodeId, from: NodeId, message: TxnMessage) {
        let now = self.now;
        match message {
            TxnMessage::Request { caller, request } => {
                if !self.txn_load(id) {
                    let refused = if self.part(id, TXN_STATE).replica.role() == Role::Leader {
                        txn::error::TxnError::CoordinatorLoadInProgress
                    } else {
                        txn::error::TxnError::NotCoordinator
                    };
                    let answer = TxnMessage::Answer {
                        caller,
                        answer: transactions::CoordinatorAnswer::Refused(refused),
                    };
                    self.send(id, PRODUCERS, Message::Txn(answer));
                    return;
                }
                let Sim { txn, brokers, .. } = self;
                let world = txn.as_mut().expect("a scenario with transactions");
                let edge = brokers[(id - 1) as usize]
                    .txn_coordinator
                    .as_mut()
                    .expect("loaded above");
                let outs = edge.request(now, caller, request, &mut || world.allocate());
                self.txn_outs(id, outs);
            }
            TxnMessage::Verify {
                partition,
                app,
                producer,
                token,
            } => {
                let outcome = if self.txn_load(id) {
                    let edge = self.broker(id).txn_coordinator.as_ref().expect("loaded");
                    edge.verify(app, producer, &transactions::data_partition(partition))
                } else {
                    Err(txn::error::TxnError::NotCoordinator)
                };
                let answer = TxnMessage::Verified {
                    partition,
                    producer_id: producer.producer_id,
                    token,
                    outcome,
                };
                self.send(id, from, Message::Txn(answer));
            }
            TxnMessage::Verified {
                partition,
                producer_id,
                token,
                outcome,
            } => self.on_verified(id, data(partition), producer_id, token, outcome),
            TxnMessage::Produce { partition, batch } => {
                self.on_txn_produce(id, data(partition), batch)
            }
            TxnMessage::WriteMarker(marker) => self.on_write_marker(id, from, marker),
            TxnMessage::MarkerWritten { marker, outcome } => {
                self.note(|| {
                    format!("broker {id} hears the marker {marker:?} is written: {outcome:?}")
                });
                if let Some(edge) = self.broker(id).txn_coordinator.as_mut() {
                    if edge.coordinator_epoch() == marker.coordinator_epoch {
                        edge.marker_written(now, &marker, outcome);
                    }
                }
            }
            TxnMessage::Fetch { partition, offset } => self.on_txn_read(id, partition, offset),
            _ => {}
        }
    }

    /// Loads the transaction coordinator on leader `id` of
    /// `__transaction_state` once every record of its log is committed
    /// (the broker waits for its high watermark to reach its log end),
    /// replaying the log; whether it is loaded.
    fn txn_load(&mut self, id: NodeId) -> bool {
        let now = self.now;
        let fire_and_forget = self.scenario.mutation == Mutation::MarkersNotAwaited;
        let version = self.world().value_version;
        let broker = self.broker(id);
        if broker.txn_coordinator.is_some() {
            return true;
        }
        let part = &broker.parts[TXN_STATE];
        let high_watermark = part.replica.high_watermark();
        if part.replica.role() != Role::Leader || high_watermark < part.log.len() as u64 {
            return false;
        }
        let epoch = part.replica.leader_epoch();
        let records = part
            .txn_entries(high_watermark)
            .filter_map(|(_, e)| match e {
                TxnEntry::State { key, value } => Some((key.as_slice(), value.as_deref())),
                _ => None,
            });
        let loaded = CoordinatorEdge::load(epoch, version, records, now, fire_and_forget);
        let (edge, outs) = match loaded {
            Ok(loaded) => loaded,
            Err(broken) => {
                self.world().broken.get_or_insert(broken);
                return false;
            }
        };
        self.broker(id).txn_coordinator = Some(edge);
        self.world().oracle.loads += 1;
        self.note(|| {
            format!("broker {id} loads its transactions up to {high_watermark} at epoch {epoch}")
        });
        self.txn_outs(id, outs);
        true
    }

    /// What coordinator `id` asked for: messages sent, the oracle told,
    /// the coordinator dropped when it must go; then its next append.
    fn txn_outs(&mut self, id: NodeId, outs: Vec<transactions::Out>) {
        let (sends, unload) = self.world().outs(outs);
        for (to, message) in sends {
            self.send(id, to, Message::Txn(message));
        }
        if unload {
            self.note(|| format!("broker {id} drops its transaction coordinator"));
            self.broker(id).txn_coordinator = None;
            return;
        }
        self.txn_append(id);
    }

    /// Appends coordinator `id`'s next record to `__transaction_state`,
    /// if it has one and none is being appended.
    fn txn_append(&mut self, id: NodeId) {
        let now = self.now;
        let ticket = self.world().ticket();
        let Some(edge) = self.broker(id).txn_coordinator.as_mut() else {
            return;
        };
        let Some((key, value)) = edge.next_append(now, ticket) else {
            return;
        };
        let fault = self.append_fault.take();
        if fault == Some(Appended::Refused) {
            self.world().count("coordinator appends refused");
            self.note(|| format!("broker {id}'s transaction append is refused"));
            self.txn_appended(id, ticket, Appended::Refused);
            return;
        }
        if self.part(id, TXN_STATE).replica.admit_produce(-1).is_err() {
            self.txn_appended(id, ticket, Appended::Unknown);
            return;
        }
        let entry = Rc::new(TxnEntry::State { key, value });
        let (at, actions) = self.leader_append(id, TXN_STATE, 0, None, Some(entry.clone()));
        self.note(|| {
            let TxnEntry::State { key, value } = entry.as_ref() else {
                unreachable!("appended above");
            };
            let id_of = txn::records::decode_key(key);
            let value = value.as_deref().map(txn::records::decode_value);
            format!("broker {id} appends {id_of:?}'s transaction record {value:?} at {at}")
        });
        if fault == Some(Appended::Unknown) {
            self.world().count("coordinator appends given up");
            // Its append times out: in the log, yet given up.
            self.apply_actions(id, TXN_STATE, actions);
            self.note(|| format!("broker {id}'s transaction append at {at} times out"));
            self.txn_appended(id, ticket, Appended::Unknown);
            return;
        }
        self.park(id, TXN_STATE, Parked::TxnAppend { ticket }, at, actions);
    }

    /// Coordinator `id`'s append under `ticket` ended as `how`.
    fn txn_appended(&mut self, id: NodeId, ticket: u64, how: Appended) {
        let now = self.now;
        let Some(edge) = self.broker(id).txn_coordinator.as_mut() else {
            return;
        };
        let outs = edge.appended(now, ticket, how);
        self.txn_outs(id, outs);
    }

    /// A broker's transactions timers: its coordinator loads and ticks;
    /// its leaders give up checks with coordinators that went unanswered.
    fn txn_broker_timers(&mut self, id: NodeId) {
        let now = self.now;
        if self.part(id, TXN_STATE).replica.role() == Role::Leader && self.txn_load(id) {
            let (leaders, _) = self.broker_leaders(id);
            if let Some(edge) = self.broker(id).txn_coordinator.as_mut() {
                let outs = edge.tick(now, &leaders);
                self.txn_outs(id, outs);
            }
        }
        for index in 0..DATA_PARTITIONS {
            let p = data(index);
            let overdue = self.part(id, p).turns.overdue(now);
            for (producer_id, token) in overdue {
                self.on_verified(
                    id,
                    p,
                    producer_id,
                    token,
                    Err(txn::error::TxnError::CoordinatorNotAvailable),
                );
            }
        }
    }

    fn refuse_produce(&mut self, id: NodeId, p: usize, batch: &Batch, why: Refusal) {
        self.world().count(match why {
            Refusal::NotLeaderOrFollower => "records refused: not the leader",
            Refusal::NotEnoughReplicas => "records refused: not enough replicas",
            Refusal::InvalidProducerEpoch => "records refused: fenced",
            Refusal::InvalidProducerIdMapping => "records refused: unknown producer",
            Refusal::OutOfOrderSequence => "records refused: out of order",
            Refusal::TransactionAbortable => "records refused: not in the transaction",
            Refusal::InvalidTxnState => "records refused: a marker came meanwhile",
            Refusal::CoordinatorFenced => "records refused: coordinator fenced",
        });
        let caller = Caller {
            app: batch.app,
            instance: batch.instance,
            call: batch.call,
        };
        let answer = TxnMessage::Produced {
            partition: p - DATA_FIRST,
            caller,
            sequence: batch.sequence,
            outcome: Err(why),
        };
        self.send(id, PRODUCERS, Message::Txn(answer));
    }

    /// A producer's transactional record at leader `id` of partition `p`:
    /// appended now when its producer's transaction is open here, else
    /// checked with the coordinator first, behind the producer's earlier
    /// records.
    fn on_txn_produce(&mut self, id: NodeId, p: usize, batch: Batch) {
        let unchecked = self.scenario.mutation == Mutation::FirstRecordUnchecked;
        let part = self.part(id, p);
        if part.replica.role() != Role::Leader {
            self.refuse_produce(id, p, &batch, Refusal::NotLeaderOrFollower);
            return;
        }
        let producer_id = batch.producer.producer_id;
        if unchecked || (part.producers.in_txn(producer_id) && !part.turns.busy(producer_id)) {
            self.txn_append_batch(id, p, batch, None);
            return;
        }
        if part.turns.queue(batch) {
            self.txn_next_turn(id, p, producer_id);
        }
    }

    /// The next of a producer's waiting records at leader `id` of
    /// partition `p`: appended when its transaction is open here, else
    /// checked with the coordinator.
    fn txn_next_turn(&mut self, id: NodeId, p: usize, producer_id: i64) {
        let now = self.now;
        let (_, coordinator) = self.broker_leaders(id);
        loop {
            let part = self.part(id, p);
            let Some(batch) = part.turns.next(producer_id) else {
                return;
            };
            if part.producers.in_txn(producer_id) {
                part.turns.done(producer_id);
                self.txn_append_batch(id, p, batch, None);
                continue;
            }
            if coordinator < 0 {
                part.turns.done(producer_id);
                self.refuse_produce(id, p, &batch, Refusal::NotEnoughReplicas);
                continue;
            }
            let token = part.producers.start_verification(producer_id);
            part.turns
                .checking(producer_id, token, now + VERIFY_TIMEOUT_MS);
            let verify = TxnMessage::Verify {
                partition: p - DATA_FIRST,
                app: batch.app,
                producer: batch.producer,
                token,
            };
            self.send(id, coordinator, Message::Txn(verify));
            return;
        }
    }

    /// The coordinator answered leader `id`'s check `token` (or the check
    /// was given up).
    fn on_verified(
        &mut self,
        id: NodeId,
        p: usize,
        producer_id: i64,
        token: u64,
        outcome: Result<(), txn::error::TxnError>,
    ) {
        let part = self.part(id, p);
        if part.replica.role() != Role::Leader {
            return;
        }
        let Some(batch) = part.turns.checked(producer_id, token) else {
            return;
        };
        part.turns.done(producer_id);
        match outcome {
            Ok(()) => self.txn_append_batch(id, p, batch, Some(token)),
            Err(error) => {
                part.producers.end_verification(producer_id, token);
                self.refuse_produce(id, p, &batch, Refusal::of_check(error));
            }
        }
        self.txn_next_turn(id, p, producer_id);
    }

    /// Appends a producer's transactional record at leader `id` of
    /// partition `p` (its producer's turn come, checked with the
    /// coordinator under `verified` if it opens the transaction here),
    /// answered once acks=all holds.
    fn txn_append_batch(&mut self, id: NodeId, p: usize, batch: Batch, verified: Option<u64>) {
        let producer = batch.producer;
        let part = self.part(id, p);
        if let Some(token) = verified {
            if !part.producers.end_verification(producer.producer_id, token) {
                // The transaction ended while the coordinator was asked.
                self.refuse_produce(id, p, &batch, Refusal::InvalidTxnState);
                return;
            }
        }
        if let Err(why) = part.replica.admit_produce(-1) {
            let why = match why {
                replication::replica::ReplicaError::NotEnoughReplicas => Refusal::NotEnoughReplicas,
                _ => Refusal::NotLeaderOrFollower,
            };
            self.refuse_produce(id, p, &batch, why);
            return;
        }
        let caller = Caller {
            app: batch.app,
            instance: batch.instance,
            call: batch.call,
        };
        let parked = Parked::TxnProduce {
            caller,
            sequence: batch.sequence,
        };
        let check = part.producers.check_batch(
            producer.producer_id,
            producer.producer_epoch,
            batch.sequence,
        );
        match check {
            BatchCheck::Append => {
                let entry = TxnEntry::Data {
                    producer_id: producer.producer_id,
                    producer_epoch: producer.producer_epoch,
                    sequence: batch.sequence,
                    record: batch.record,
                    txn: batch.txn,
                };
                let (at, actions) = self.leader_append(id, p, 0, None, Some(Rc::new(entry)));
                self.note(|| {
                    format!(
                        "broker {id} appends {:?} at {at} of partition {p}",
                        batch.record
                    )
                });
                self.park(id, p, parked, at, actions);
            }
            // A retry: answered as its original, once that holds acks=all.
            BatchCheck::Duplicate(at) => self.park(id, p, parked, at, Vec::new()),
            BatchCheck::Refuse(why) => self.refuse_produce(id, p, &batch, why),
        }
    }

    /// A coordinator's marker at leader `id`: written unless the
    /// producer's epoch here is newer (or, by Kafka's rule, a newer
    /// coordinator already wrote for it), answered once acks=all holds.
    fn on_write_marker(&mut self, id: NodeId, from: NodeId, marker: MarkerWrite) {
        let p = data(marker.partition);
        let coordinator_checked = self.scenario.mutation != Mutation::MarkersOfAnyCoordinator;
        let part = self.part(id, p);
        let checked = part
            .replica
            .admit_produce(-1)
            .map_err(|_| Refusal::NotLeaderOrFollower);
        let checked = checked.and_then(|()| {
            part.producers.check_marker(
                marker.producer_id,
                marker.producer_epoch,
                marker.coordinator_epoch,
                coordinator_checked,
            )
        });
        if let Err(why) = checked {
            self.world().count(match why {
                Refusal::InvalidProducerEpoch => "markers refused: older epoch",
                Refusal::CoordinatorFenced => "markers refused: older coordinator",
                _ => "markers refused: not the leader or too few replicas",
            });
            let answer = TxnMessage::MarkerWritten {
                marker,
                outcome: Err(why),
            };
            self.send(id, from, Message::Txn(answer));
            return;
        }
        let entry = TxnEntry::Marker {
            producer_id: marker.producer_id,
            producer_epoch: marker.producer_epoch,
            coordinator_epoch: marker.coordinator_epoch,
            commit: marker.commit,
            txn: marker.txn,
        };
        let (at, actions) = self.leader_append(id, p, 0, None, Some(Rc::new(entry)));
        self.note(|| format!("broker {id} writes the marker {marker:?} at {at}"));
        let parked = Parked::TxnMarker {
            marker,
            coordinator: from,
        };
        self.park(id, p, parked, at, actions);
    }

    /// The reader's read_committed fetch at leader `id`: entries up to the
    /// last stable offset, and the aborted transactions among them. The
    /// last stable offset is checked against the log itself first.
    fn on_txn_read(&mut self, id: NodeId, partition: usize, offset: u64) {
        let ignore_open = self.scenario.mutation == Mutation::LastStableIgnoresOpenTransactions;
        let part = &self.brokers[(id - 1) as usize].parts[data(partition)];
        if part.replica.role() != Role::Leader {
            let refused = TxnMessage::FetchRefused { partition, offset };
            self.send(id, READER, Message::Txn(refused));
            return;
        }
        let last_stable = part.last_stable_offset(ignore_open);
        let checked = self.check_last_stable(id, data(partition));
        if let Err(broken) = checked {
            self.world().broken.get_or_insert(broken);
            return;
        }
        let part = &self.brokers[(id - 1) as usize].parts[data(partition)];
        let upper = last_stable.min(offset + READ_ENTRIES_MAX as u64);
        let entries: Vec<(u64, Rc<TxnEntry>)> = (offset..upper.max(offset))
            .filter_map(|o| Some((o, part.log[o as usize].txn.clone()?)))
            .collect();
        let aborted = part.producers.aborted_between(offset, upper);
        let answer = TxnMessage::Fetched {
            partition,
            offset,
            entries,
            aborted,
            last_stable,
        };
        self.send(id, READER, Message::Txn(answer));
    }

    /// Leader `id`'s last stable offset of partition `p` is not past the
    /// first record of a transaction open in its log, and the log keeps
    /// the transactions' rules ([`transactions::scan_log`]).
    fn check_last_stable(&self, id: NodeId, p: usize) -> Result<(), String> {
        let ignore_open = self.scenario.mutation == Mutation::LastStableIgnoresOpenTransactions;
        let part = &self.brokers[(id - 1) as usize].parts[p];
        let last_stable = part.last_stable_offset(ignore_open);
        let end = part.log.len() as u64;
        let first_open = transactions::scan_log(p - DATA_FIRST, part.txn_entries(end))?;
        if let Some(first) = first_open.filter(|&f| f < last_stable) {
            return Err(format!(
                "leader {id}'s last stable offset of partition {} is {last_stable}, past the \
                 first record of a transaction open at {first}",
                p - DATA_FIRST
            ));
        }
        Ok(())
    }

    /// The transactions' invariants: nothing broken while handling a
    /// message; every leading replica of a data partition keeps its last
    /// stable offset behind open transactions; the coordinator of the
    /// current `__transaction_state` leader holds each producer at least
    /// at the epoch last given to it.
    fn check_transactions(&self) -> Result<(), String> {
        let world = self.txn.as_ref().expect("a scenario with transactions");
        if let Some(broken) = &world.broken {
            return Err(broken.clone());
        }
        if self.now % AGREEMENT_CHECK_MS != 0 {
            return Ok(());
        }
        for broker in &self.brokers {
            if !broker.up {
                continue;
            }
            for index in 0..DATA_PARTITIONS {
                if broker.parts[data(index)].replica.role() == Role::Leader {
                    self.check_last_stable(broker.id, data(index))?;
                }
            }
        }
        let state = self.state_of(TXN_STATE);
        if state.leader > 0 {
            let leader = &self.brokers[(state.leader - 1) as usize];
            let replica = &leader.parts[TXN_STATE].replica;
            if leader.up
                && replica.role() == Role::Leader
                && replica.leader_epoch() == state.leader_epoch
            {
                if let Some(edge) = &leader.txn_coordinator {
                    world.check_coordinator(edge)?;
                }
            }
        }
        Ok(())
    }

    /// At the end: every transaction decided, marked on each of its
    /// partitions and complete, on the final leaders.
    fn final_check_transactions(&mut self) -> Result<(), String> {
        let mut logs = Vec::new();
        for index in 0..DATA_PARTITIONS {
            let leader = self.state_of(data(index)).leader;
            if leader < 0 {
                // Only an emptied last in-sync replica leaves no leader.
                return Ok(());
            }
            let part = &self.brokers[(leader - 1) as usize].parts[data(index)];
            let high_watermark = part.replica.high_watermark();
            logs.push(
                (0..high_watermark)
                    .filter_map(|o| Some((o, part.log[o as usize].txn.clone()?)))
                    .collect::<Vec<_>>(),
            );
        }
        let world = self.txn.as_ref().expect("a scenario with transactions");
        world.final_check(&logs)?;
        let leader = self.state_of(TXN_STATE).leader;
        if leader > 0 && self.brokers[(leader - 1) as usize].up && self.txn_load(leader) {
            let edge = self.brokers[(leader - 1) as usize]
                .txn_coordinator
                .as_ref()
                .expect("loaded");
            transactions::World::final_coordinator_check(edge)?;
        }
        Ok(())
    }

    // ---- the invariants ----

    fn check(&mut self) -> Result<(), String> {
        if let Some(wrong) = &self.wrongly_fenced {
            return Err(wrong.clone());
        }
        for broker in &mut self.brokers {
            if !broker.up {
                continue;
            }
            for (p, part) in broker.parts.iter_mut().enumerate() {
                let replica = &part.replica;
                if replica.role() == Role::Leader {
                    let epoch = replica.leader_epoch();
                    let first = *self.leaders.entry((p, epoch)).or_insert(broker.id);
                    if first != broker.id {
                        return Err(format!(
                            "brokers {first} and {} both lead partition {p} at leader epoch \
                             {epoch}",
                            broker.id
                        ));
                    }
                    if p == 0 {
                        self.report.leader_epochs = self.report.leader_epochs.max(epoch);
                    }
                }
                let high_watermark = replica.high_watermark();
                if high_watermark < part.high_watermark_seen {
                    return Err(format!(
                        "broker {}'s high watermark of partition {p} went back from {} to \
                         {high_watermark}",
                        broker.id, part.high_watermark_seen
                    ));
                }
                part.high_watermark_seen = high_watermark;
            }
        }
        let state = self.state().clone();
        if state.leader > 0 {
            let leader = &self.brokers[(state.leader - 1) as usize];
            let part = &leader.parts[0];
            // Every acknowledged record, whenever the leadership changed;
            // those acknowledged since, as they come.
            let leadership = (leader.id, leader.incarnation, state.leader_epoch);
            let from = if self.checked.0 == Some(leadership) {
                self.checked.1
            } else {
                0
            };
            if leader.up
                && part.replica.role() == Role::Leader
                && part.replica.leader_epoch() == state.leader_epoch
            {
                self.checked = (Some(leadership), self.client.acked.len());
                for (&value, &offset) in self.client.acked.iter().skip(from) {
                    let held = part.log.get(offset as usize).map(|e| e.value);
                    if held != Some(value) {
                        return Err(format!(
                            "record {value}, acknowledged at offset {offset}, is not in the log of \
                             leader {} at epoch {} (it holds {held:?} there, log end {})",
                            leader.id,
                            state.leader_epoch,
                            part.log.len()
                        ));
                    }
                }
            }
        }
        self.check_commits()?;
        if self.txn.is_some() {
            self.check_transactions()?;
        }
        if self.now % AGREEMENT_CHECK_MS != 0 {
            return Ok(());
        }
        for p in 0..self.partitions.len() {
            self.check_agreement(p)?;
        }
        Ok(())
    }

    /// No two replicas of partition `p` hold different records below
    /// their high watermarks.
    fn check_agreement(&self, p: usize) -> Result<(), String> {
        for a in &self.brokers {
            for b in &self.brokers {
                if a.id >= b.id || !a.up || !b.up {
                    continue;
                }
                let (pa, pb) = (&a.parts[p], &b.parts[p]);
                let below = pa.replica.high_watermark().min(pb.replica.high_watermark()) as usize;
                let below = below.min(pa.log.len()).min(pb.log.len());
                if pa.log[..below] != pb.log[..below] {
                    let at = (0..below)
                        .find(|&i| pa.log[i] != pb.log[i])
                        .unwrap_or(below);
                    return Err(format!(
                        "brokers {} and {} disagree below their high watermarks ({below}) of \
                         partition {p}: at offset {at}, {:?} against {:?} (high watermarks {} and \
                         {}, log ends {} and {})",
                        a.id,
                        b.id,
                        (pa.log[at].epoch, pa.log[at].value),
                        (pb.log[at].epoch, pb.log[at].value),
                        pa.replica.high_watermark(),
                        pb.replica.high_watermark(),
                        pa.log.len(),
                        pb.log.len()
                    ));
                }
            }
        }
        Ok(())
    }

    fn final_check(&mut self) -> Result<(), String> {
        self.report.acknowledged = self.client.acked.len();
        self.report.commits_acknowledged = self.client.commits_acked;
        self.report.syncs_acknowledged = self.client.syncs_acked;
        if let Some(world) = &self.txn {
            let (committed, aborted) = world.oracle.counts();
            self.report.transactions_committed = committed;
            self.report.transactions_aborted = aborted;
            self.report.records_read = world.oracle.records_read;
            self.report.producers_fenced = world.oracle.instances_stopped;
            self.report.coordinator_loads = world.oracle.loads;
            self.report.events = world.oracle.events.clone();
            self.final_check_transactions()?;
        }
        let state = self.state().clone();
        if state.leader < 0 {
            // Only an emptied last in-sync replica leaves no leader; what
            // was acknowledged must still be somewhere in sync.
            return Ok(());
        }
        // The last leader's groups, loaded if it has not yet.
        if self.served_commit().is_none()
            && self.brokers[(state.leader - 1) as usize].up
            && self.load_coordinator(state.leader)
        {
            self.check_commits()?;
        }
        let leader = &self.brokers[(state.leader - 1) as usize];
        for (&value, &offset) in &self.client.acked {
            if leader.parts[0].log.get(offset as usize).map(|e| e.value) != Some(value) {
                return Err(format!(
                    "record {value}, acknowledged at offset {offset}, is lost (leader {})",
                    leader.id
                ));
            }
        }
        Ok(())
    }
}

fn sync_delay(rng: &mut fastrand::Rng, slow: bool) -> u64 {
    if slow {
        rng.u64(20..=60)
    } else {
        rng.u64(1..=3)
    }
}

/// The scenarios CI runs, by name.
pub fn scenario(name: &str, brokers: usize) -> Option<Scenario> {
    let faults = match name {
        "crash" => vec![Fault::Crash],
        "emptied_disk" => vec![Fault::EmptyDisk],
        "pause" => vec![Fault::Pause],
        "cut_from_controller" => vec![Fault::CutFromController],
        "cut_from_peers" => vec![Fault::CutFromPeers],
        "slow_disk" => vec![Fault::SlowDisk, Fault::Crash],
        "paused_controller" => vec![Fault::PauseController],
        "lossy" | "quiet" => Vec::new(),
        "everything" => vec![
            Fault::Crash,
            Fault::EmptyDisk,
            Fault::Pause,
            Fault::CutFromController,
            Fault::CutFromPeers,
            Fault::SlowDisk,
            Fault::PauseController,
        ],
        _ => return None,
    };
    Some(Scenario {
        brokers,
        faults,
        lossy: matches!(name, "lossy" | "everything"),
        duration_ms: 4_000,
        drain_ms: DRAIN_MS,
        transactions: false,
        mutation: Mutation::None,
    })
}

/// The scenarios with transactions CI runs, by name: the faults above
/// and those of transactions (the coordinator's leader crashing, its
/// appends failing, markers' connections stalling, producers crashing,
/// freezing past their transaction timeout, or left zombies).
pub fn txn_scenario(name: &str, brokers: usize) -> Option<Scenario> {
    let producers = [
        Fault::CrashProducer,
        Fault::FreezeProducer,
        Fault::ZombieProducer,
        Fault::LateRecord,
    ];
    let faults = match name {
        "txn_quiet" | "txn_lossy" => Vec::new(),
        "txn_coordinator_failover" => vec![Fault::CrashCoordinator, Fault::Pause],
        "txn_failed_appends" => vec![Fault::FailCoordinatorAppend],
        "txn_stalled_markers" => vec![
            Fault::StallMarkers,
            Fault::CrashCoordinator,
            Fault::Pause,
            Fault::CutFromController,
        ],
        "txn_producers" => producers.to_vec(),
        "txn_everything" => {
            let mut all = vec![
                Fault::Crash,
                Fault::EmptyDisk,
                Fault::Pause,
                Fault::CutFromController,
                Fault::CutFromPeers,
                Fault::SlowDisk,
                Fault::PauseController,
                Fault::CrashCoordinator,
                Fault::FailCoordinatorAppend,
                Fault::StallMarkers,
            ];
            all.extend(producers);
            all
        }
        _ => return None,
    };
    Some(Scenario {
        brokers,
        faults,
        lossy: matches!(name, "txn_lossy" | "txn_everything"),
        duration_ms: 4_000,
        drain_ms: TXN_DRAIN_MS,
        transactions: true,
        mutation: Mutation::None,
    })
}

/// Every scenario with transactions' name.
pub const TXN_SCENARIOS: [&str; 7] = [
    "txn_quiet",
    "txn_lossy",
    "txn_coordinator_failover",
    "txn_failed_appends",
    "txn_stalled_markers",
    "txn_producers",
    "txn_everything",
];

/// Every scenario's name.
pub const SCENARIOS: [&str; 10] = [
    "quiet",
    "lossy",
    "crash",
    "emptied_disk",
    "pause",
    "cut_from_controller",
    "cut_from_peers",
    "slow_disk",
    "paused_controller",
    "everything",
];
