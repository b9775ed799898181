//! Transactions in the simulated cluster, as plain state machines the
//! world (the crate root) drives over its replicated logs, network and
//! clock; this module knows none of them:
//! - [`Producers`]: a partition's producer state, the broker's rules
//!   (`producer_state`) mirrored: a transactional record opens its
//!   producer's transaction on the partition, a marker ends it (and, with
//!   a newer epoch, fences the producer), an older epoch or a sequence out
//!   of order is refused, a retry is answered with its original's offset,
//!   the first offset of the oldest open transaction is the last stable
//!   offset, aborted transactions are remembered for read_committed
//!   readers; a leader's check with the coordinator before a producer's
//!   first record opens a transaction is voided by a marker written
//!   meanwhile; a marker from a coordinator older than one that already
//!   wrote for the producer is refused (Kafka's rule, the broker's too;
//!   `Mutation::MarkersOfAnyCoordinator` drops it).
//! - [`CoordinatorEdge`]: the transaction coordinator's runtime edge, the
//!   broker's (`txn::manager`, `txn::markers`) mirrored around the `txn`
//!   crate's real `Coordinator`: loaded from the `__transaction_state` log
//!   (the decided transactions it finds get their markers again), one
//!   record appended at a time, applied once `acks=all` holds, the whole
//!   coordinator dropped when an append fails or its outcome is unknown,
//!   markers written to every partition and retried until each partition's
//!   leader has them (only the answer to the latest attempt on a partition
//!   counts, as the broker waits for each attempt before the next),
//!   timed-out transactions aborted.
//! - [`App`]: a transactional producer application (one transactional
//!   id): InitProducerId, AddPartitionsToTxn, records with sequences,
//!   EndTxn commit or abort; it retries what times out, aborts when a
//!   record is refused or its delivery times out and then initialises
//!   again naming its own epoch (KIP-360), dies when fenced and starts
//!   again with the same transactional id; a fault may crash it, freeze
//!   it past its transaction timeout, or leave it a zombie beside its
//!   successor.
//! - [`Reader`]: a read_committed consumer of every data partition (up to
//!   the last stable offset, skipping what the aborted transactions named
//!   in each answer cover, as Kafka's consumer does).
//! - [`Oracle`]: what happened, from outside the deciding code (each
//!   transaction's decision, what each client was answered), and the
//!   checks against it.
//!
//! A transaction is named by its transactional id and the time its
//! coordinator opened it ([`TxnKey`], the `txn_start_ms` every record of
//! it in `__transaction_state` keeps). The simulator stamps each
//! transactional record and marker with that name; no deciding code reads
//! it, the checks do.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;

use replication::replica::NodeId;
use txn::config::TxnConfig;
use txn::coordinator::{AfterAppend, Coordinator, Markers, Plan, ProducerIdAndEpoch};
use txn::error::TxnError;
use txn::records::ValueVersion;
use txn::state::TxnState;
use txn::TopicPartition;

/// The topic of the coordinator's log (one partition here).
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";
/// The topic the transactions write to.
pub const DATA_TOPIC: &str = "transfers";
/// The data topic's partitions.
pub const DATA_PARTITIONS: usize = 3;
/// The transactional producer applications, one transactional id each.
pub const APPS: usize = 2;
/// The node the producer applications send from.
pub const PRODUCERS: NodeId = 1_001;
/// The node the read_committed reader reads from.
pub const READER: NodeId = 1_002;

/// The producers' transaction timeout (InitProducerId's).
pub const TXN_TIMEOUT_MS: u64 = 1_000;
/// How often a coordinator looks for transactions past their timeout.
pub const ABORT_CHECK_MS: u64 = 50;
/// A coordinator's append not acknowledged within this has an unknown
/// outcome: the coordinator is dropped and loaded again.
pub const APPEND_TIMEOUT_MS: u64 = 500;
/// How long a coordinator waits for a marker's answer before sending it
/// again, and how long it backs off after a refusal.
pub const MARKER_TIMEOUT_MS: u64 = 300;
pub const MARKER_RETRY_MS: u64 = 100;
/// How long a leader waits for the coordinator's answer to its check of
/// a producer's first transactional record.
pub const VERIFY_TIMEOUT_MS: u64 = 200;
/// How long a producer waits for an answer before sending again, and
/// how long it backs off after a retriable refusal.
pub const CALL_TIMEOUT_MS: u64 = 150;
pub const RETRY_BACKOFF_MS: u64 = 20;
/// Records of one transaction, at most.
pub const TXN_RECORDS_MAX: usize = 4;
/// Sends of a record before its delivery times out (its producer then
/// aborts the transaction).
pub const PRODUCE_SENDS_MAX: u32 = 4;
/// Batches a partition remembers per producer to answer retries.
pub const PRODUCER_BATCHES_KEPT: usize = 5;
/// How often the reader fetches each partition, and how many entries an
/// answer holds at most.
pub const READ_EVERY_MS: u64 = 10;
pub const READ_ENTRIES_MAX: usize = 16;

const _: () = assert!(ABORT_CHECK_MS < TXN_TIMEOUT_MS);
const _: () = assert!(MARKER_RETRY_MS < MARKER_TIMEOUT_MS);
const _: () = assert!(RETRY_BACKOFF_MS < CALL_TIMEOUT_MS);
const _: () = assert!(TXN_RECORDS_MAX <= PRODUCER_BATCHES_KEPT);

/// App `app`'s transactional id.
pub fn transactional_id(app: usize) -> String {
    format!("app-{app}")
}

fn app_of(transactional_id: &str) -> usize {
    transactional_id
        .strip_prefix("app-")
        .and_then(|n| n.parse().ok())
        .expect("the simulated transactional ids are app-N")
}

/// Data partition `index` as a topic partition.
pub fn data_partition(index: usize) -> TopicPartition {
    (DATA_TOPIC.to_string(), index as i32)
}

/// A transaction: its app (transactional id) and when its coordinator
/// opened it (`txn_start_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxnKey {
    pub app: usize,
    pub start_ms: i64,
}

/// A transactional record's identity: the producer instance that wrote
/// it, its transaction's number there, and its place in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordId {
    pub app: usize,
    pub instance: u64,
    pub txn: u64,
    pub index: usize,
}

/// What a transactions' partition's log entry holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnEntry {
    /// A `__transaction_state` record (`value` `None`: a tombstone).
    State {
        key: Vec<u8>,
        value: Option<Vec<u8>>,
    },
    /// A transactional producer's record (a batch of one).
    Data {
        producer_id: i64,
        producer_epoch: i16,
        sequence: i32,
        record: RecordId,
        txn: TxnKey,
    },
    /// A COMMIT or ABORT marker.
    Marker {
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
        txn: TxnKey,
    },
}

/// Why a partition leader refused a record or a marker (Kafka's errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    NotLeaderOrFollower,
    /// Retriable: the ISR is short, or the coordinator could not say.
    NotEnoughReplicas,
    /// An epoch older than the partition has seen: the producer is fenced.
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    OutOfOrderSequence,
    /// The coordinator does not have the partition in the producer's
    /// transaction: the producer must abort.
    TransactionAbortable,
    /// A marker of the producer was written while the coordinator was
    /// asked: the record is a late write of a transaction that ended.
    InvalidTxnState,
    /// A marker from an older coordinator than one that already wrote
    /// a marker for the producer here.
    CoordinatorFenced,
}

impl Refusal {
    /// The coordinator's refusal of a leader's check, as the leader
    /// answers the record (the broker's `verify::produce_code`).
    pub fn of_check(error: TxnError) -> Refusal {
        match error {
            TxnError::TransactionAbortable | TxnError::InvalidTxnState => {
                Refusal::TransactionAbortable
            }
            TxnError::ProducerFenced => Refusal::InvalidProducerEpoch,
            TxnError::InvalidProducerIdMapping => Refusal::InvalidProducerIdMapping,
            _ => Refusal::NotEnoughReplicas,
        }
    }
}

// ---- a partition's producer state ----

/// An aborted transaction on a partition: its producer, first offset and
/// marker offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aborted {
    pub producer_id: i64,
    pub first: u64,
    pub marker: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ProducerEntry {
    epoch: i16,
    /// The newest coordinator epoch of a marker written for it (-1: none).
    coordinator_epoch: i32,
    last_sequence: i32,
    /// Its last batches: (sequence, offset).
    batches: VecDeque<(i32, u64)>,
    /// The first offset of its open transaction here.
    ongoing: Option<u64>,
    last_marker: Option<u64>,
}

impl ProducerEntry {
    fn new(epoch: i16) -> Self {
        Self {
            epoch,
            coordinator_epoch: -1,
            last_sequence: -1,
            batches: VecDeque::new(),
            ongoing: None,
            last_marker: None,
        }
    }
}

/// What to do with a transactional record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchCheck {
    Append,
    /// A retry of the record already at this offset.
    Duplicate(u64),
    Refuse(Refusal),
}

/// A partition's producer state: a function of its log (rebuilt from it
/// after a truncation or a restart), plus a leader's checks in progress.
#[derive(Debug, Clone, Default)]
pub struct Producers {
    producers: BTreeMap<i64, ProducerEntry>,
    /// The open transactions: (first offset, producer id).
    ongoing: BTreeSet<(u64, i64)>,
    /// The aborted transactions, in marker order.
    aborted: Vec<Aborted>,
    /// The leader's checks with the coordinator in progress, by producer.
    verifying: BTreeMap<i64, u64>,
    next_token: u64,
}

impl Producers {
    /// The state `entries` (a log, in offset order) leave.
    pub fn rebuild<'a>(entries: impl Iterator<Item = (u64, &'a TxnEntry)>) -> Self {
        let mut producers = Producers::default();
        for (offset, entry) in entries {
            producers.apply(offset, entry);
        }
        producers
    }

    /// `entry` was appended at `offset` (by this leader, or fetched).
    pub fn apply(&mut self, offset: u64, entry: &TxnEntry) {
        match *entry {
            TxnEntry::State { .. } => {}
            TxnEntry::Data {
                producer_id,
                producer_epoch,
                sequence,
                ..
            } => {
                let producer = self
                    .producers
                    .entry(producer_id)
                    .or_insert_with(|| ProducerEntry::new(producer_epoch));
                if producer_epoch < producer.epoch {
                    return;
                }
                if producer_epoch > producer.epoch {
                    producer.epoch = producer_epoch;
                    producer.batches.clear();
                }
                producer.last_sequence = sequence;
                producer.batches.push_back((sequence, offset));
                while producer.batches.len() > PRODUCER_BATCHES_KEPT {
                    producer.batches.pop_front();
                }
                if producer.ongoing.is_none() && producer.last_marker.is_none_or(|m| offset > m) {
                    producer.ongoing = Some(offset);
                    self.ongoing.insert((offset, producer_id));
                }
            }
            TxnEntry::Marker {
                producer_id,
                producer_epoch,
                coordinator_epoch,
                commit,
                ..
            } => {
                self.verifying.remove(&producer_id);
                let producer = self
                    .producers
                    .entry(producer_id)
                    .or_insert_with(|| ProducerEntry::new(producer_epoch));
                if producer.last_marker.is_some_and(|m| offset <= m)
                    || producer_epoch < producer.epoch
                {
                    return;
                }
                if producer_epoch > producer.epoch {
                    producer.epoch = producer_epoch;
                    producer.batches.clear();
                    producer.last_sequence = -1;
                }
                producer.last_marker = Some(offset);
                producer.coordinator_epoch = producer.coordinator_epoch.max(coordinator_epoch);
                if let Some(first) = producer.ongoing.take() {
                    self.ongoing.remove(&(first, producer_id));
                    if !commit {
                        self.aborted.push(Aborted {
                            producer_id,
                            first,
                            marker: offset,
                        });
                    }
                }
            }
        }
    }

    /// Whether a record of `producer_id` at `epoch` with `sequence` may be
    /// appended.
    pub fn check_batch(&self, producer_id: i64, epoch: i16, sequence: i32) -> BatchCheck {
        let Some(producer) = self.producers.get(&producer_id) else {
            return if sequence == 0 {
                BatchCheck::Append
            } else {
                BatchCheck::Refuse(Refusal::OutOfOrderSequence)
            };
        };
        if epoch < producer.epoch {
            return BatchCheck::Refuse(Refusal::InvalidProducerEpoch);
        }
        if epoch > producer.epoch {
            return if sequence == 0 {
                BatchCheck::Append
            } else {
                BatchCheck::Refuse(Refusal::OutOfOrderSequence)
            };
        }
        if let Some(&(_, offset)) = producer.batches.iter().find(|(s, _)| *s == sequence) {
            return BatchCheck::Duplicate(offset);
        }
        if sequence == producer.last_sequence + 1 {
            BatchCheck::Append
        } else {
            BatchCheck::Refuse(Refusal::OutOfOrderSequence)
        }
    }

    /// Whether a marker for `producer_id` at `epoch` from coordinator
    /// epoch `coordinator_epoch` may be written: not with an epoch older
    /// than the producer's here (the broker's rule), nor, when
    /// `coordinator_checked`, from an older coordinator than one that
    /// already wrote a marker for it (Kafka's).
    pub fn check_marker(
        &self,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
        coordinator_checked: bool,
    ) -> Result<(), Refusal> {
        let Some(producer) = self.producers.get(&producer_id) else {
            return Ok(());
        };
        if epoch < producer.epoch {
            return Err(Refusal::InvalidProducerEpoch);
        }
        if coordinator_checked && coordinator_epoch < producer.coordinator_epoch {
            return Err(Refusal::CoordinatorFenced);
        }
        Ok(())
    }

    /// Whether `producer_id` has a transaction open here.
    pub fn in_txn(&self, producer_id: i64) -> bool {
        self.producers
            .get(&producer_id)
            .is_some_and(|p| p.ongoing.is_some())
    }

    /// The first offset of the oldest open transaction.
    pub fn first_unstable(&self) -> Option<u64> {
        self.ongoing.first().map(|&(first, _)| first)
    }

    /// The aborted transactions a read_committed read of
    /// `[from, upper)` must name: marker at or after `from`, first offset
    /// below `upper`.
    pub fn aborted_between(&self, from: u64, upper: u64) -> Vec<Aborted> {
        let start = self.aborted.partition_point(|a| a.marker < from);
        self.aborted[start..]
            .iter()
            .filter(|a| a.first < upper)
            .copied()
            .collect()
    }

    /// Starts a check with the coordinator for `producer_id`'s first
    /// record here; its token.
    pub fn start_verification(&mut self, producer_id: i64) -> u64 {
        self.next_token += 1;
        self.verifying.insert(producer_id, self.next_token);
        self.next_token
    }

    /// Whether check `token` still stands (no marker of the producer was
    /// written since it began), and forgets it.
    pub fn end_verification(&mut self, producer_id: i64, token: u64) -> bool {
        let holds = self.verifying.get(&producer_id) == Some(&token);
        if holds {
            self.verifying.remove(&producer_id);
        }
        holds
    }
}

/// A transactional record as its producer sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub app: usize,
    pub instance: u64,
    pub call: u64,
    pub producer: ProducerIdAndEpoch,
    pub sequence: i32,
    pub record: RecordId,
    pub txn: TxnKey,
}

/// A leader's transactional records waiting for their producer's turn:
/// the first of a producer's records that opens its transaction here is
/// checked with the coordinator, and its later ones wait behind it (the
/// broker's `txn_turns`). Held by the leader only, gone with leadership.
#[derive(Debug, Default)]
pub struct Turns {
    queues: BTreeMap<i64, Turn>,
}

#[derive(Debug, Default)]
struct Turn {
    /// The check of the first record in progress: its token and when it
    /// is given up.
    checking: Option<(u64, u64)>,
    waiting: VecDeque<Batch>,
}

impl Turns {
    /// Whether `producer_id` has records waiting.
    pub fn busy(&self, producer_id: i64) -> bool {
        self.queues.contains_key(&producer_id)
    }

    /// Queues `batch` behind its producer's records; whether it is first.
    pub fn queue(&mut self, batch: Batch) -> bool {
        let turn = self.queues.entry(batch.producer.producer_id).or_default();
        turn.waiting.push_back(batch);
        turn.waiting.len() == 1
    }

    /// The producer's first waiting record, if none is being checked.
    pub fn next(&mut self, producer_id: i64) -> Option<Batch> {
        let turn = self.queues.get_mut(&producer_id)?;
        if turn.checking.is_some() {
            return None;
        }
        match turn.waiting.front() {
            Some(batch) => Some(batch.clone()),
            None => {
                self.queues.remove(&producer_id);
                None
            }
        }
    }

    /// The producer's first record is being checked under `token`.
    pub fn checking(&mut self, producer_id: i64, token: u64, deadline: u64) {
        if let Some(turn) = self.queues.get_mut(&producer_id) {
            turn.checking = Some((token, deadline));
        }
    }

    /// The producer's first record is done with (appended or refused):
    /// the next one's turn.
    pub fn done(&mut self, producer_id: i64) {
        if let Some(turn) = self.queues.get_mut(&producer_id) {
            turn.checking = None;
            turn.waiting.pop_front();
            if turn.waiting.is_empty() {
                self.queues.remove(&producer_id);
            }
        }
    }

    /// The record checked under `token`, if its check is the one in
    /// progress.
    pub fn checked(&self, producer_id: i64, token: u64) -> Option<Batch> {
        let turn = self.queues.get(&producer_id)?;
        (turn.checking.map(|(t, _)| t) == Some(token))
            .then(|| turn.waiting.front().cloned())
            .flatten()
    }

    /// The checks given up by `now`: (producer id, token).
    pub fn overdue(&self, now: u64) -> Vec<(i64, u64)> {
        self.queues
            .iter()
            .filter_map(|(&id, turn)| match turn.checking {
                Some((token, deadline)) if deadline <= now => Some((id, token)),
                _ => None,
            })
            .collect()
    }
}

// ---- messages ----

/// A producer instance's call, which the answer names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub app: usize,
    pub instance: u64,
    pub call: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoordinatorRequest {
    /// InitProducerId; `expected`: the producer's own id and epoch when
    /// it initialises again after an error (KIP-360), which bumps its
    /// epoch.
    Init {
        expected: Option<ProducerIdAndEpoch>,
    },
    Add {
        producer: ProducerIdAndEpoch,
        partitions: BTreeSet<TopicPartition>,
    },
    End {
        producer: ProducerIdAndEpoch,
        commit: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoordinatorAnswer {
    ProducerId(ProducerIdAndEpoch),
    /// The partitions are in the transaction named.
    Added(TxnKey),
    Ended,
    Refused(TxnError),
}

/// A marker a coordinator has a partition's leader write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerWrite {
    /// The coordinator's attempt: only the answer to its latest attempt
    /// on a partition counts (the broker's coordinator waits for each
    /// attempt's answer, or gives it up, before the next).
    pub attempt: u64,
    pub partition: usize,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub commit: bool,
    pub txn: TxnKey,
}

/// The transactions' messages.
#[derive(Debug, Clone)]
pub enum TxnMessage {
    /// A producer's InitProducerId, AddPartitionsToTxn or EndTxn.
    Request {
        caller: Caller,
        request: CoordinatorRequest,
    },
    Answer {
        caller: Caller,
        answer: CoordinatorAnswer,
    },
    /// A producer's record for data partition `partition`.
    Produce { partition: usize, batch: Batch },
    Produced {
        partition: usize,
        caller: Caller,
        sequence: i32,
        outcome: Result<u64, Refusal>,
    },
    /// A leader's check that data partition `partition` is in the
    /// producer's transaction (AddPartitionsToTxn, verify only).
    Verify {
        partition: usize,
        app: usize,
        producer: ProducerIdAndEpoch,
        token: u64,
    },
    Verified {
        partition: usize,
        producer_id: i64,
        token: u64,
        outcome: Result<(), TxnError>,
    },
    /// WriteTxnMarkers for one partition.
    WriteMarker(MarkerWrite),
    MarkerWritten {
        marker: MarkerWrite,
        outcome: Result<(), Refusal>,
    },
    /// The reader's read_committed fetch.
    Fetch { partition: usize, offset: u64 },
    /// Not the partition's leader.
    FetchRefused { partition: usize, offset: u64 },
    Fetched {
        partition: usize,
        offset: u64,
        entries: Vec<(u64, Rc<TxnEntry>)>,
        aborted: Vec<Aborted>,
        last_stable: u64,
    },
}

// ---- the coordinator's runtime edge ----

/// What follows a coordinator's append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    /// Answer a producer.
    Answer(Caller),
    /// Nothing to answer: a timed-out transaction's abort.
    Timeout,
    /// A transaction's completion once its markers are written.
    Completion,
}

#[derive(Debug)]
struct Queued {
    plan: Plan,
    then: Then,
}

/// A decided transaction's markers being written.
#[derive(Debug)]
struct MarkerJob {
    markers: Markers,
    txn: TxnKey,
    /// The partitions not known to have the marker, each with when it is
    /// (re)sent next and its latest attempt.
    left: BTreeMap<TopicPartition, (u64, u64)>,
    /// Its completion is queued or being appended.
    completing: bool,
    /// When its completion is planned again after a failed append.
    complete_at: u64,
}

/// What the world does for a coordinator.
#[derive(Debug)]
pub enum Out {
    Send(NodeId, TxnMessage),
    /// A transaction is decided: its markers go out.
    Decided {
        txn: TxnKey,
        commit: bool,
        partitions: BTreeSet<TopicPartition>,
    },
    /// A producer id and epoch was given to a producer.
    Issued {
        caller: Caller,
        producer: ProducerIdAndEpoch,
    },
    /// The coordinator must go: an append failed with an unknown outcome.
    Unload,
    /// Something worth counting happened.
    Event(&'static str),
}

/// How a coordinator's append ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// On every in-sync replica.
    Kept,
    /// Refused before it was written: known not to be in the log.
    Refused,
    /// Failed or timed out: it may or may not be in the log.
    Unknown,
}

/// A loaded transaction coordinator on the leader of
/// `__transaction_state`, at the leader epoch it loaded at.
pub struct CoordinatorEdge {
    coordinator: Coordinator,
    queue: VecDeque<Queued>,
    /// The plan appended and waiting for acks=all: its ticket and when it
    /// is given up.
    appending: Option<(Queued, u64, u64)>,
    jobs: BTreeMap<String, MarkerJob>,
    next_abort_check: u64,
    /// Names the markers' attempts.
    next_attempt: u64,
    /// Whether a marker counts as written once sent, its answer not
    /// awaited (a rule broken on purpose).
    markers_fire_and_forget: bool,
}

/// The coordinator's settings here: transaction timeouts up to a minute,
/// `__transaction_state` values written in `log_value_version`.
fn txn_config(log_value_version: ValueVersion) -> TxnConfig {
    TxnConfig {
        max_timeout_ms: 60_000,
        log_value_version,
    }
}

impl CoordinatorEdge {
    /// Loads a coordinator at `epoch` from the `__transaction_state`
    /// records `records` (the log up to its high watermark), writing its
    /// values in `version`; the decided transactions it finds have their
    /// markers written again.
    pub fn load<'a>(
        epoch: i32,
        version: ValueVersion,
        records: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>,
        now: u64,
        markers_fire_and_forget: bool,
    ) -> Result<(CoordinatorEdge, Vec<Out>), String> {
        let mut coordinator = Coordinator::new(txn_config(version), epoch);
        for (key, value) in records {
            coordinator
                .replay(key, value)
                .map_err(|error| format!("a __transaction_state record does not load: {error}"))?;
        }
        let decided = coordinator.after_load();
        let mut edge = CoordinatorEdge {
            coordinator,
            queue: VecDeque::new(),
            appending: None,
            jobs: BTreeMap::new(),
            next_abort_check: now + ABORT_CHECK_MS,
            next_attempt: 0,
            markers_fire_and_forget,
        };
        let mut outs = Vec::new();
        for markers in decided {
            outs.push(Out::Event("markers resent after a load"));
            let start_ms = edge
                .coordinator
                .metadata(&markers.transactional_id)
                .expect("a decided transaction is held")
                .txn_start_ms;
            edge.start_markers(markers, start_ms, now, &mut outs);
        }
        Ok((edge, outs))
    }

    pub fn coordinator(&self) -> &Coordinator {
        &self.coordinator
    }

    pub fn coordinator_epoch(&self) -> i32 {
        self.coordinator.coordinator_epoch()
    }

    /// Whether decided transactions' markers are still being written.
    pub fn writing_markers(&self) -> bool {
        !self.jobs.is_empty()
    }

    fn answer(caller: Caller, answer: CoordinatorAnswer) -> Out {
        Out::Send(PRODUCERS, TxnMessage::Answer { caller, answer })
    }

    /// The transaction open for `transactional_id`, by name.
    fn open_txn(&self, transactional_id: &str) -> Option<TxnKey> {
        let metadata = self.coordinator.metadata(transactional_id)?;
        Some(TxnKey {
            app: app_of(transactional_id),
            start_ms: metadata.txn_start_ms,
        })
    }

    /// A producer's request; `allocate` hands out new producer ids.
    pub fn request(
        &mut self,
        now: u64,
        caller: Caller,
        request: CoordinatorRequest,
        allocate: &mut impl FnMut() -> i64,
    ) -> Vec<Out> {
        let id = transactional_id(caller.app);
        let now_ms = now as i64;
        let adding = matches!(request, CoordinatorRequest::Add { .. });
        let planned = match request {
            CoordinatorRequest::Init { expected } => self
                .coordinator
                .init_producer_id(&id, TXN_TIMEOUT_MS as i32, expected, now_ms, &mut || {
                    Ok(allocate())
                })
                .map(Some),
            CoordinatorRequest::Add {
                producer,
                partitions,
            } => self
                .coordinator
                .add_partitions(&id, producer, &partitions, now_ms),
            CoordinatorRequest::End { producer, commit } => {
                self.coordinator.end_txn(&id, producer, commit, now_ms)
            }
        };
        match planned {
            Ok(Some(plan)) => {
                self.queue.push_back(Queued {
                    plan,
                    then: Then::Answer(caller),
                });
                Vec::new()
            }
            Ok(None) => {
                let answer = if adding {
                    match self.open_txn(&id) {
                        Some(txn) => CoordinatorAnswer::Added(txn),
                        None => CoordinatorAnswer::Refused(TxnError::InvalidTxnState),
                    }
                } else {
                    CoordinatorAnswer::Ended
                };
                vec![Self::answer(caller, answer)]
            }
            Err(error) => vec![Self::answer(caller, CoordinatorAnswer::Refused(error))],
        }
    }

    /// A leader's check that `partition` is in the producer's transaction.
    pub fn verify(
        &self,
        app: usize,
        producer: ProducerIdAndEpoch,
        partition: &TopicPartition,
    ) -> Result<(), TxnError> {
        let asked = BTreeSet::from([partition.clone()]);
        let verified =
            self.coordinator
                .verify_partitions(&transactional_id(app), producer, &asked)?;
        verified
            .into_iter()
            .map(|(_, outcome)| outcome)
            .next()
            .unwrap_or(Err(TxnError::TransactionAbortable))
    }

    /// The next record to append, when none is being appended: its key
    /// and value. The caller appends it and calls
    /// [`CoordinatorEdge::appended`] with `ticket`.
    pub fn next_append(&mut self, now: u64, ticket: u64) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
        if self.appending.is_some() {
            return None;
        }
        let queued = self.queue.pop_front()?;
        let record = (
            queued.plan.key().to_vec(),
            queued.plan.value().map(<[u8]>::to_vec),
        );
        self.appending = Some((queued, ticket, now + APPEND_TIMEOUT_MS));
        Some(record)
    }

    /// The append under `ticket` ended as `how`.
    pub fn appended(&mut self, now: u64, ticket: u64, how: Appended) -> Vec<Out> {
        let waited = matches!(self.appending, Some((_, t, _)) if t == ticket);
        if !waited {
            return Vec::new();
        }
        let (queued, _, _) = self.appending.take().expect("checked above");
        let id = queued.plan.transactional_id().to_string();
        let mut outs = Vec::new();
        match how {
            Appended::Unknown => {
                self.queue.push_front(queued);
                return self.unload();
            }
            Appended::Refused => {
                self.coordinator.abandon(&id);
                match queued.then {
                    Then::Answer(caller) => outs.push(Self::answer(
                        caller,
                        CoordinatorAnswer::Refused(TxnError::CoordinatorNotAvailable),
                    )),
                    Then::Timeout => {}
                    Then::Completion => {
                        if let Some(job) = self.jobs.get_mut(&id) {
                            job.completing = false;
                            job.complete_at = now + MARKER_RETRY_MS;
                        }
                    }
                }
                return outs;
            }
            Appended::Kept => {}
        }
        let start_ms = queued.plan.next().txn_start_ms;
        let then = match self.coordinator.complete(&id, queued.plan) {
            Ok(then) => then,
            // The coordinator no longer waits for it: as the broker, the
            // caller is told and tries again.
            Err(error) => {
                if let Then::Answer(caller) = queued.then {
                    outs.push(Self::answer(caller, CoordinatorAnswer::Refused(error)));
                }
                return outs;
            }
        };
        let caller = match queued.then {
            Then::Answer(caller) => Some(caller),
            _ => None,
        };
        match then {
            AfterAppend::ProducerId {
                producer_id,
                producer_epoch,
            } => {
                let producer = ProducerIdAndEpoch {
                    producer_id,
                    producer_epoch,
                };
                if let Some(caller) = caller {
                    outs.push(Out::Issued { caller, producer });
                    outs.push(Self::answer(
                        caller,
                        CoordinatorAnswer::ProducerId(producer),
                    ));
                }
            }
            AfterAppend::Added => {
                if let Some(caller) = caller {
                    let txn = self.open_txn(&id).expect("an added transaction is held");
                    outs.push(Self::answer(caller, CoordinatorAnswer::Added(txn)));
                }
            }
            AfterAppend::Ended(markers) => {
                if let Some(caller) = caller {
                    outs.push(Self::answer(caller, CoordinatorAnswer::Ended));
                }
                self.start_markers(markers, start_ms, now, &mut outs);
            }
            AfterAppend::Fenced(markers) => {
                if let Some(caller) = caller {
                    outs.push(Self::answer(
                        caller,
                        CoordinatorAnswer::Refused(TxnError::ConcurrentTransactions),
                    ));
                }
                self.start_markers(markers, start_ms, now, &mut outs);
            }
            AfterAppend::Completed => {
                self.jobs.remove(&id);
            }
            AfterAppend::Expired => {}
        }
        outs
    }

    /// Drops the coordinator (the world removes it): every producer
    /// waiting on it is answered NOT_COORDINATOR and finds the next one.
    fn unload(&mut self) -> Vec<Out> {
        let mut outs = Vec::new();
        for queued in std::mem::take(&mut self.queue) {
            if let Then::Answer(caller) = queued.then {
                outs.push(Self::answer(
                    caller,
                    CoordinatorAnswer::Refused(TxnError::NotCoordinator),
                ));
            }
        }
        outs.push(Out::Unload);
        outs
    }

    fn start_markers(&mut self, markers: Markers, start_ms: i64, now: u64, outs: &mut Vec<Out>) {
        let txn = TxnKey {
            app: app_of(&markers.transactional_id),
            start_ms,
        };
        outs.push(Out::Decided {
            txn,
            commit: markers.commit,
            partitions: markers.partitions.clone(),
        });
        let left = markers
            .partitions
            .iter()
            .map(|p| (p.clone(), (now, 0)))
            .collect();
        self.jobs.insert(
            markers.transactional_id.clone(),
            MarkerJob {
                markers,
                txn,
                left,
                completing: false,
                complete_at: now,
            },
        );
    }

    /// A partition's leader answered a marker.
    pub fn marker_written(&mut self, now: u64, marker: &MarkerWrite, outcome: Result<(), Refusal>) {
        let id = transactional_id(marker.txn.app);
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        if job.txn != marker.txn || job.markers.producer_epoch != marker.producer_epoch {
            return;
        }
        let partition = data_partition(marker.partition);
        let Some((at, attempt)) = job.left.get_mut(&partition) else {
            return;
        };
        if *attempt != marker.attempt {
            // An attempt given up: its answer is no longer awaited.
            return;
        }
        match outcome {
            Ok(()) => {
                job.left.remove(&partition);
            }
            Err(_) => *at = now + MARKER_RETRY_MS,
        }
    }

    /// The coordinator's timers: the append given up, transactions past
    /// their timeout aborted, markers sent (again) to the partitions'
    /// leaders (`leaders`, as this broker's image has them) and decided
    /// transactions completed once every marker is written.
    pub fn tick(&mut self, now: u64, leaders: &BTreeMap<TopicPartition, NodeId>) -> Vec<Out> {
        if self.appending.as_ref().is_some_and(|(_, _, at)| *at <= now) {
            let (queued, _, _) = self.appending.take().expect("checked above");
            self.queue.push_front(queued);
            return self.unload();
        }
        let mut outs = Vec::new();
        if now >= self.next_abort_check {
            self.next_abort_check = now + ABORT_CHECK_MS;
            for id in self.coordinator.expired(now as i64) {
                if let Some(plan) = self.coordinator.abort_expired(&id, now as i64) {
                    outs.push(Out::Event("transactions timed out"));
                    self.queue.push_back(Queued {
                        plan,
                        then: Then::Timeout,
                    });
                }
            }
        }
        let epoch = self.coordinator.coordinator_epoch();
        let mut completions = Vec::new();
        for (id, job) in &mut self.jobs {
            for (partition, (at, attempt)) in &mut job.left {
                if *at > now {
                    continue;
                }
                let Some(&leader) = leaders.get(partition) else {
                    *at = now + MARKER_RETRY_MS;
                    continue;
                };
                *at = now + MARKER_TIMEOUT_MS;
                self.next_attempt += 1;
                *attempt = self.next_attempt;
                let marker = MarkerWrite {
                    attempt: *attempt,
                    partition: partition.1 as usize,
                    producer_id: job.markers.producer_id,
                    producer_epoch: job.markers.producer_epoch,
                    coordinator_epoch: epoch,
                    commit: job.markers.commit,
                    txn: job.txn,
                };
                outs.push(Out::Send(leader, TxnMessage::WriteMarker(marker)));
            }
            if self.markers_fire_and_forget {
                job.left.retain(|_, (at, _)| *at <= now);
            }
            if job.left.is_empty() && !job.completing && job.complete_at <= now {
                completions.push(id.clone());
            }
        }
        for id in completions {
            match self.coordinator.markers_written(&id, now as i64) {
                Ok(plan) => {
                    self.jobs.get_mut(&id).expect("listed above").completing = true;
                    self.queue.push_back(Queued {
                        plan,
                        then: Then::Completion,
                    });
                }
                // Not waiting for its markers (a load found it complete).
                Err(_) => {
                    self.jobs.remove(&id);
                }
            }
        }
        outs
    }
}

// ---- the producer applications ----

/// Where the cluster's leaders are, as a client's metadata says (-1: none).
#[derive(Debug, Clone)]
pub struct Leaders {
    pub coordinator: NodeId,
    pub data: Vec<NodeId>,
}

/// What a producer instance has sent and waits for.
#[derive(Debug, Clone)]
enum Sent {
    Coordinator(CoordinatorRequest),
    Produce(usize, Batch),
}

#[derive(Debug, Clone)]
struct Call {
    id: u64,
    sent: Sent,
    /// When it is sent again, and how often it was.
    resend_at: u64,
    sends: u32,
}

/// A transaction a producer instance is in.
#[derive(Debug, Clone)]
struct OpenTxn {
    number: u64,
    /// Its name, once the coordinator answered an AddPartitionsToTxn.
    key: Option<TxnKey>,
    /// The data partition of each of its records.
    records: Vec<usize>,
    acked: usize,
    added: BTreeSet<usize>,
    /// How it ends once every record is acknowledged.
    commit: bool,
}

#[derive(Debug, Clone)]
enum Phase {
    /// InitProducerId, naming the producer's own id and epoch when it
    /// initialises again.
    Init {
        expected: Option<ProducerIdAndEpoch>,
    },
    Ready {
        begin_at: u64,
    },
    InTxn(OpenTxn),
    /// EndTxn sent; `reinit`: InitProducerId again after it (a record's
    /// fate was left unknown, so the epoch must move on).
    Ending {
        txn: OpenTxn,
        commit: bool,
        reinit: bool,
    },
}

/// One producer instance of an app (a process with the transactional id).
#[derive(Debug)]
struct Producer {
    instance: u64,
    frozen_until: u64,
    producer: Option<ProducerIdAndEpoch>,
    sequences: BTreeMap<usize, i32>,
    phase: Phase,
    call: Option<Call>,
    next_call: u64,
    txns: u64,
}

/// What a producer instance learned that the oracle must know.
#[derive(Debug)]
enum Learned {
    Nothing,
    RecordAcked(TxnKey, usize, RecordId),
    Ended(TxnKey, bool),
    /// It is fenced (or must otherwise stop): the app starts another.
    Dead,
}

impl Producer {
    fn new(instance: u64) -> Self {
        Self {
            instance,
            frozen_until: 0,
            producer: None,
            sequences: BTreeMap::new(),
            phase: Phase::Init { expected: None },
            call: None,
            next_call: 0,
            txns: 0,
        }
    }

    fn send(&mut self, now: u64, sent: Sent) {
        self.next_call += 1;
        self.call = Some(Call {
            id: self.next_call,
            sent,
            resend_at: now,
            sends: 0,
        });
    }

    /// The next step: the call to send (again), if any.
    fn tick(
        &mut self,
        now: u64,
        app: usize,
        may_begin: bool,
        rng: &mut fastrand::Rng,
    ) -> Option<Call> {
        if now < self.frozen_until {
            return None;
        }
        if self.call.is_none() {
            let sent = match &mut self.phase {
                Phase::Init { expected } => Some(Sent::Coordinator(CoordinatorRequest::Init {
                    expected: *expected,
                })),
                Phase::Ready { begin_at } => {
                    if now < *begin_at || !may_begin {
                        return None;
                    }
                    self.txns += 1;
                    let count = rng.usize(1..=TXN_RECORDS_MAX);
                    let records = (0..count).map(|_| rng.usize(0..DATA_PARTITIONS)).collect();
                    self.phase = Phase::InTxn(OpenTxn {
                        number: self.txns,
                        key: None,
                        records,
                        acked: 0,
                        added: BTreeSet::new(),
                        commit: rng.u32(0..100) < 85,
                    });
                    None
                }
                _ => None,
            };
            if let Some(sent) = sent {
                self.send(now, sent);
            }
        }
        if self.call.is_none() {
            let producer = self.producer.expect("initialised before a transaction");
            let sent = match &self.phase {
                Phase::InTxn(txn) if txn.acked == txn.records.len() => {
                    let (txn, commit) = (txn.clone(), txn.commit);
                    self.phase = Phase::Ending {
                        txn,
                        commit,
                        reinit: false,
                    };
                    Sent::Coordinator(CoordinatorRequest::End { producer, commit })
                }
                Phase::InTxn(txn) => {
                    let partition = txn.records[txn.acked];
                    if !txn.added.contains(&partition) {
                        // All the partitions still to add at once, or just
                        // this one.
                        let partitions = if rng.bool() {
                            txn.records[txn.acked..]
                                .iter()
                                .filter(|p| !txn.added.contains(p))
                                .map(|&p| data_partition(p))
                                .collect()
                        } else {
                            BTreeSet::from([data_partition(partition)])
                        };
                        Sent::Coordinator(CoordinatorRequest::Add {
                            producer,
                            partitions,
                        })
                    } else {
                        let sequence = *self.sequences.get(&partition).unwrap_or(&0);
                        Sent::Produce(
                            partition,
                            Batch {
                                app,
                                instance: self.instance,
                                call: 0,
                                producer,
                                sequence,
                                record: RecordId {
                                    app,
                                    instance: self.instance,
                                    txn: txn.number,
                                    index: txn.acked,
                                },
                                txn: txn.key.expect("named once a partition is added"),
                            },
                        )
                    }
                }
                Phase::Ending {
                    commit, reinit: _, ..
                } => Sent::Coordinator(CoordinatorRequest::End {
                    producer,
                    commit: *commit,
                }),
                _ => return None,
            };
            self.send(now, sent);
        }
        let call = self.call.as_mut().expect("set above");
        if now < call.resend_at {
            return None;
        }
        if matches!(call.sent, Sent::Produce(..)) && call.sends == PRODUCE_SENDS_MAX {
            // Its delivery timed out: the record's fate is unknown, so the
            // transaction is aborted and the epoch bumped.
            self.abort();
            return self.tick(now, app, may_begin, rng);
        }
        call.sends += 1;
        call.resend_at = now + CALL_TIMEOUT_MS;
        if let Sent::Produce(_, batch) = &mut call.sent {
            batch.call = call.id;
        }
        Some(call.clone())
    }

    /// Backs off and sends the call again.
    fn retry(&mut self, now: u64) {
        if let Some(call) = &mut self.call {
            call.resend_at = now + RETRY_BACKOFF_MS;
        }
    }

    /// Aborts the transaction (the producer must: a record was refused,
    /// or its fate is unknown), then initialises again with its own id and
    /// epoch, which bumps the epoch (KIP-360).
    fn abort(&mut self) {
        self.call = None;
        let expected = self.producer;
        let txn = match std::mem::replace(&mut self.phase, Phase::Init { expected }) {
            Phase::InTxn(txn) | Phase::Ending { txn, .. } => txn,
            other => {
                self.phase = other;
                return;
            }
        };
        if txn.key.is_none() {
            // Nothing added, nothing to abort: just a new epoch.
            return;
        }
        self.phase = Phase::Ending {
            txn,
            commit: false,
            reinit: true,
        };
    }

    fn on_answer(
        &mut self,
        now: u64,
        call: u64,
        answer: CoordinatorAnswer,
        rng: &mut fastrand::Rng,
    ) -> Result<Learned, String> {
        if now < self.frozen_until || self.call.as_ref().is_none_or(|c| c.id != call) {
            return Ok(Learned::Nothing);
        }
        let refused = match answer {
            CoordinatorAnswer::Refused(error) => error,
            CoordinatorAnswer::ProducerId(producer) => {
                if !matches!(self.phase, Phase::Init { .. }) {
                    return Ok(Learned::Nothing);
                }
                self.call = None;
                self.producer = Some(producer);
                self.sequences.clear();
                self.phase = Phase::Ready {
                    begin_at: now + rng.u64(0..30),
                };
                return Ok(Learned::Nothing);
            }
            CoordinatorAnswer::Added(key) => {
                let Phase::InTxn(txn) = &mut self.phase else {
                    return Ok(Learned::Nothing);
                };
                let Some(Call {
                    sent: Sent::Coordinator(CoordinatorRequest::Add { partitions, .. }),
                    ..
                }) = self.call.take()
                else {
                    return Ok(Learned::Nothing);
                };
                if txn.key.is_some_and(|known| known != key) {
                    return Err(format!(
                        "producer {} of app {} was told its transaction {} is {key:?}, after \
                         {:?}",
                        self.instance, key.app, txn.number, txn.key
                    ));
                }
                txn.key = Some(key);
                txn.added
                    .extend(partitions.iter().map(|(_, p)| *p as usize));
                return Ok(Learned::Nothing);
            }
            CoordinatorAnswer::Ended => {
                let Phase::Ending {
                    txn,
                    commit,
                    reinit,
                } = &self.phase
                else {
                    return Ok(Learned::Nothing);
                };
                let learned = match txn.key {
                    Some(key) => Learned::Ended(key, *commit),
                    None => Learned::Nothing,
                };
                self.phase = if *reinit {
                    Phase::Init {
                        expected: self.producer,
                    }
                } else {
                    Phase::Ready {
                        begin_at: now + rng.u64(0..30),
                    }
                };
                self.call = None;
                return Ok(learned);
            }
        };
        match refused {
            TxnError::ConcurrentTransactions
            | TxnError::NotCoordinator
            | TxnError::CoordinatorLoadInProgress
            | TxnError::CoordinatorNotAvailable => {
                self.retry(now);
                Ok(Learned::Nothing)
            }
            TxnError::InvalidTxnState if matches!(self.phase, Phase::InTxn(_)) => {
                self.abort();
                Ok(Learned::Nothing)
            }
            // Fenced by a newer instance or by the coordinator (the
            // transaction timed out): this instance is done.
            _ => Ok(Learned::Dead),
        }
    }

    fn on_produced(
        &mut self,
        now: u64,
        call: u64,
        partition: usize,
        sequence: i32,
        outcome: Result<u64, Refusal>,
    ) -> Learned {
        if now < self.frozen_until {
            return Learned::Nothing;
        }
        let Some(Call {
            id,
            sent: Sent::Produce(sent_partition, batch),
            ..
        }) = &self.call
        else {
            return Learned::Nothing;
        };
        if *id != call || *sent_partition != partition || batch.sequence != sequence {
            return Learned::Nothing;
        }
        let (record, key) = (batch.record, batch.txn);
        match outcome {
            Ok(_) => {
                let Phase::InTxn(txn) = &mut self.phase else {
                    return Learned::Nothing;
                };
                txn.acked += 1;
                self.sequences.insert(partition, sequence + 1);
                self.call = None;
                Learned::RecordAcked(key, partition, record)
            }
            Err(Refusal::NotLeaderOrFollower | Refusal::NotEnoughReplicas) => {
                self.retry(now);
                Learned::Nothing
            }
            Err(Refusal::InvalidProducerEpoch | Refusal::InvalidProducerIdMapping) => Learned::Dead,
            Err(_) => {
                self.abort();
                Learned::Nothing
            }
        }
    }
}

/// How a fault takes an app's producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientFault {
    /// It dies; another instance starts a little later.
    Crash,
    /// It freezes (a long GC pause, a SIGSTOP) for `ms`.
    Freeze { ms: u64 },
    /// It freezes for `ms` and another instance starts meanwhile: the
    /// frozen one comes back a zombie.
    Zombie { ms: u64 },
}

/// A transactional producer application: the instance running, and
/// zombies of earlier ones.
#[derive(Debug)]
pub struct App {
    pub index: usize,
    live: Option<Producer>,
    zombies: Vec<Producer>,
    next_instance: u64,
    restart_at: u64,
}

impl App {
    fn new(index: usize) -> Self {
        Self {
            index,
            live: Some(Producer::new(1)),
            zombies: Vec::new(),
            next_instance: 2,
            restart_at: 0,
        }
    }

    fn producer(&mut self, instance: u64) -> Option<&mut Producer> {
        self.live
            .iter_mut()
            .chain(self.zombies.iter_mut())
            .find(|p| p.instance == instance)
    }

    /// The instance `instance` is done: it stops; if it was the running
    /// one, another starts after `delay`.
    fn dead(&mut self, now: u64, instance: u64, delay: u64) {
        self.zombies.retain(|p| p.instance != instance);
        if self.live.as_ref().is_some_and(|p| p.instance == instance) {
            self.live = None;
            self.restart_at = now + delay;
        }
    }
}

// ---- the read_committed reader ----

#[derive(Debug, Default)]
struct ReaderPartition {
    position: u64,
    /// When the fetch in flight is given up.
    waiting_until: Option<u64>,
    next_at: u64,
    /// Producers inside an aborted transaction (their records skipped
    /// until its marker), as Kafka's consumer tracks them.
    skipping: BTreeSet<i64>,
    /// Per producer, the transaction of the records read since its last
    /// marker, and those records.
    open: BTreeMap<i64, (TxnKey, Vec<RecordId>)>,
}

/// A read_committed consumer of every data partition, from the start.
#[derive(Debug, Default)]
pub struct Reader {
    parts: Vec<ReaderPartition>,
}

// ---- what happened, and the checks ----

/// A decided transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decision {
    commit: bool,
    partitions: BTreeSet<TopicPartition>,
}

/// What happened, from outside the deciding code.
#[derive(Debug, Default)]
pub struct Oracle {
    decisions: BTreeMap<TxnKey, Decision>,
    /// EndTxn answered with success to a producer: commit or abort.
    ended: BTreeMap<TxnKey, bool>,
    /// Records acknowledged to producers, per transaction and partition.
    acked: BTreeMap<(TxnKey, usize), Vec<RecordId>>,
    /// The producer ids and epochs given to each app's producers (to which
    /// instance), and the highest of them.
    issued: BTreeMap<(usize, ProducerIdAndEpoch), u64>,
    highest: BTreeMap<usize, ProducerIdAndEpoch>,
    /// Records the reader delivered.
    pub records_read: usize,
    /// Producer instances fenced (or otherwise stopped).
    pub instances_stopped: usize,
    /// Coordinator loads.
    pub loads: usize,
    /// How often each event worth counting happened.
    pub events: BTreeMap<&'static str, usize>,
}

impl Oracle {
    /// A coordinator decided `txn`.
    fn decided(
        &mut self,
        txn: TxnKey,
        commit: bool,
        partitions: BTreeSet<TopicPartition>,
    ) -> Result<(), String> {
        let decision = Decision { commit, partitions };
        match self.decisions.get(&txn) {
            Some(known) if known.commit != commit => Err(format!(
                "transaction {txn:?} was decided both ways (commit {} then {commit})",
                known.commit
            )),
            Some(known) if known.partitions != decision.partitions => Err(format!(
                "transaction {txn:?} was decided on {:?}, then on {:?}",
                known.partitions, decision.partitions
            )),
            Some(_) => Ok(()),
            None => {
                self.decisions.insert(txn, decision);
                Ok(())
            }
        }
    }

    /// A producer was answered that `txn` ended as `commit`.
    fn client_ended(&mut self, txn: TxnKey, commit: bool) -> Result<(), String> {
        match self.decisions.get(&txn) {
            Some(decision) if decision.commit == commit => {
                self.ended.insert(txn, commit);
                Ok(())
            }
            other => Err(format!(
                "a producer was answered that transaction {txn:?} ended (commit {commit}), but \
                 it is decided {other:?}"
            )),
        }
    }

    /// A coordinator gave `producer` to `caller`. A deposed coordinator
    /// may answer late (its record was kept, and its successor bumped the
    /// epoch past it since), so issues may come out of order; and a
    /// producer initialising again with its own epoch gets the same one on
    /// a retry. Never two producer instances the same.
    fn issued(&mut self, caller: Caller, producer: ProducerIdAndEpoch) -> Result<(), String> {
        let app = caller.app;
        let instance = *self
            .issued
            .entry((app, producer))
            .or_insert(caller.instance);
        if instance != caller.instance {
            return Err(format!(
                "producers {instance} and {} of app {app} were both given {producer:?}",
                caller.instance
            ));
        }
        let highest = self.highest.entry(app).or_insert(producer);
        *highest = (*highest).max(producer);
        Ok(())
    }

    /// Transactions whose commit was acknowledged, and those decided
    /// aborted.
    pub fn counts(&self) -> (usize, usize) {
        let committed = self.ended.values().filter(|&&c| c).count();
        let aborted = self.decisions.values().filter(|d| !d.commit).count();
        (committed, aborted)
    }

    /// The read_committed reader delivered `record` of `txn`.
    fn delivered(&mut self, partition: usize, txn: TxnKey, record: RecordId) -> Result<(), String> {
        self.records_read += 1;
        match self.decisions.get(&txn) {
            Some(decision) if decision.commit => Ok(()),
            other => Err(format!(
                "the read_committed reader got record {record:?} of transaction {txn:?} from \
                 partition {partition}, which is decided {other:?}"
            )),
        }
    }

    /// The reader passed the marker ending `txn`'s records on `partition`
    /// (`read`: those it delivered, in order).
    fn ended_on(
        &self,
        partition: usize,
        txn: TxnKey,
        commit: bool,
        read: &[RecordId],
    ) -> Result<(), String> {
        let decision = self.decisions.get(&txn);
        if decision.is_none_or(|d| d.commit != commit) {
            return Err(format!(
                "a marker (commit {commit}) on partition {partition} ends transaction {txn:?}, \
                 which is decided {decision:?}"
            ));
        }
        if !commit {
            return Ok(());
        }
        let acked = self
            .acked
            .get(&(txn, partition))
            .map_or(&[][..], |r| r.as_slice());
        if read != acked {
            return Err(format!(
                "the read_committed reader got {read:?} of committed transaction {txn:?} on \
                 partition {partition}, but its producer had {acked:?} acknowledged there"
            ));
        }
        Ok(())
    }
}

/// What a scan of a data partition's log finds: the first offset of its
/// oldest open transaction, checked on the way: each producer's epochs
/// never go back, a transaction's records are all of one transaction, and
/// a marker ends only the transaction it was written for.
pub fn scan_log<'a>(
    partition: usize,
    entries: impl Iterator<Item = (u64, &'a TxnEntry)>,
) -> Result<Option<u64>, String> {
    let mut open: BTreeMap<i64, (u64, TxnKey)> = BTreeMap::new();
    let mut epochs: BTreeMap<i64, i16> = BTreeMap::new();
    for (offset, entry) in entries {
        let (producer_id, epoch) = match *entry {
            TxnEntry::State { .. } => continue,
            TxnEntry::Data {
                producer_id,
                producer_epoch,
                txn,
                ..
            } => {
                let (_, open_txn) = *open.entry(producer_id).or_insert((offset, txn));
                if open_txn != txn {
                    return Err(format!(
                        "partition {partition} holds a record of transaction {txn:?} at {offset} \
                         inside transaction {open_txn:?} of the same producer"
                    ));
                }
                (producer_id, producer_epoch)
            }
            TxnEntry::Marker {
                producer_id,
                producer_epoch,
                txn,
                ..
            } => {
                if let Some((_, open_txn)) = open.remove(&producer_id) {
                    if open_txn != txn {
                        return Err(format!(
                            "the marker of transaction {txn:?} at {offset} of partition \
                             {partition} ends transaction {open_txn:?}"
                        ));
                    }
                }
                (producer_id, producer_epoch)
            }
        };
        let last = epochs.entry(producer_id).or_insert(epoch);
        if epoch < *last {
            return Err(format!(
                "partition {partition} takes producer {producer_id}'s epoch {epoch} at {offset} \
                 after epoch {last}"
            ));
        }
        *last = epoch;
    }
    Ok(open.values().map(|&(first, _)| first).min())
}

/// The transactions' part of a run: the producer applications, the
/// reader and the oracle.
#[derive(Debug)]
pub struct World {
    pub apps: Vec<App>,
    pub reader: Reader,
    pub oracle: Oracle,
    next_producer_id: i64,
    next_ticket: u64,
    /// Producers begin transactions until then.
    pub begin_until: u64,
    /// The `__transaction_state` value version the coordinators write
    /// (Kafka writes version 0 before `transaction.version` 1).
    pub value_version: ValueVersion,
    /// A rule broken here, found while handling a message.
    pub broken: Option<String>,
}

impl World {
    pub fn new(begin_until: u64, value_version: ValueVersion) -> Self {
        Self {
            apps: (0..APPS).map(App::new).collect(),
            reader: Reader {
                parts: (0..DATA_PARTITIONS)
                    .map(|_| ReaderPartition::default())
                    .collect(),
            },
            oracle: Oracle::default(),
            next_producer_id: 1_000,
            next_ticket: 0,
            begin_until,
            value_version,
            broken: None,
        }
    }

    fn broke(&mut self, outcome: Result<(), String>) {
        if let Err(broken) = outcome {
            self.broken.get_or_insert(broken);
        }
    }

    /// Counts an event of the run.
    pub fn count(&mut self, what: &'static str) {
        *self.oracle.events.entry(what).or_default() += 1;
    }

    /// A new producer id (the controller's, in the broker).
    pub fn allocate(&mut self) -> i64 {
        self.next_producer_id += 1;
        self.next_producer_id
    }

    /// A new ticket for a coordinator's append.
    pub fn ticket(&mut self) -> u64 {
        self.next_ticket += 1;
        self.next_ticket
    }

    /// What a coordinator's outputs tell the oracle; the messages to send
    /// and whether the coordinator must go.
    pub fn outs(&mut self, outs: Vec<Out>) -> (Vec<(NodeId, TxnMessage)>, bool) {
        let mut sends = Vec::new();
        let mut unload = false;
        for out in outs {
            match out {
                Out::Send(to, message) => sends.push((to, message)),
                Out::Decided {
                    txn,
                    commit,
                    partitions,
                } => {
                    let outcome = self.oracle.decided(txn, commit, partitions);
                    self.broke(outcome);
                }
                Out::Issued { caller, producer } => {
                    let outcome = self.oracle.issued(caller, producer);
                    self.broke(outcome);
                }
                Out::Unload => unload = true,
                Out::Event(what) => self.count(what),
            }
        }
        (sends, unload)
    }

    /// The producers' timers: the messages they send.
    pub fn producer_timers(
        &mut self,
        now: u64,
        leaders: &Leaders,
        rng: &mut fastrand::Rng,
    ) -> Vec<(NodeId, TxnMessage)> {
        let may_begin = now < self.begin_until;
        let mut sends = Vec::new();
        for app in &mut self.apps {
            if app.live.is_none() && now >= app.restart_at {
                app.live = Some(Producer::new(app.next_instance));
                app.next_instance += 1;
            }
            let index = app.index;
            for producer in app.live.iter_mut().chain(app.zombies.iter_mut()) {
                let Some(call) = producer.tick(now, index, may_begin, rng) else {
                    continue;
                };
                let caller = Caller {
                    app: index,
                    instance: producer.instance,
                    call: call.id,
                };
                match call.sent {
                    Sent::Coordinator(request) if leaders.coordinator > 0 => {
                        sends.push((leaders.coordinator, TxnMessage::Request { caller, request }))
                    }
                    Sent::Produce(partition, batch) if leaders.data[partition] > 0 => sends.push((
                        leaders.data[partition],
                        TxnMessage::Produce { partition, batch },
                    )),
                    // No leader known: asked again later.
                    _ => producer.retry(now),
                }
            }
        }
        sends
    }

    /// A fault takes app `app`'s running producer.
    pub fn client_fault(&mut self, now: u64, app: usize, fault: ClientFault, restart_ms: u64) {
        let app = &mut self.apps[app];
        let Some(live) = app.live.as_mut() else {
            return;
        };
        match fault {
            ClientFault::Crash => {
                let instance = live.instance;
                app.dead(now, instance, restart_ms);
            }
            ClientFault::Freeze { ms } => live.frozen_until = now + ms,
            ClientFault::Zombie { ms } => {
                live.frozen_until = now + ms;
                let zombie = app.live.take().expect("checked above");
                app.zombies.push(zombie);
                app.restart_at = now + restart_ms;
            }
        }
    }

    /// Every producer thaws (the faults are over).
    pub fn thaw(&mut self, now: u64) {
        for app in &mut self.apps {
            for producer in app.live.iter_mut().chain(app.zombies.iter_mut()) {
                producer.frozen_until = producer.frozen_until.min(now);
            }
            app.restart_at = app.restart_at.min(now);
        }
    }

    /// A message to the producers.
    pub fn on_producer_message(&mut self, now: u64, message: TxnMessage, rng: &mut fastrand::Rng) {
        let (caller, learned) = match message {
            TxnMessage::Answer { caller, answer } => {
                let Some(producer) = self.apps[caller.app].producer(caller.instance) else {
                    return;
                };
                match producer.on_answer(now, caller.call, answer, rng) {
                    Ok(learned) => (caller, learned),
                    Err(broken) => {
                        self.broke(Err(broken));
                        return;
                    }
                }
            }
            TxnMessage::Produced {
                partition,
                caller,
                sequence,
                outcome,
            } => {
                let Some(producer) = self.apps[caller.app].producer(caller.instance) else {
                    return;
                };
                let learned = producer.on_produced(now, caller.call, partition, sequence, outcome);
                (caller, learned)
            }
            _ => return,
        };
        match learned {
            Learned::Nothing => {}
            Learned::RecordAcked(txn, partition, record) => {
                self.oracle
                    .acked
                    .entry((txn, partition))
                    .or_default()
                    .push(record);
            }
            Learned::Ended(txn, commit) => {
                let outcome = self.oracle.client_ended(txn, commit);
                self.broke(outcome);
            }
            Learned::Dead => {
                self.oracle.instances_stopped += 1;
                let delay = rng.u64(20..200);
                self.apps[caller.app].dead(now, caller.instance, delay);
            }
        }
    }

    /// The reader's fetches due: (partition, offset).
    pub fn reader_timers(&mut self, now: u64) -> Vec<(usize, u64)> {
        let mut fetches = Vec::new();
        for (partition, part) in self.reader.parts.iter_mut().enumerate() {
            if part.waiting_until.is_some_and(|until| until > now) || now < part.next_at {
                continue;
            }
            part.waiting_until = Some(now + CALL_TIMEOUT_MS);
            fetches.push((partition, part.position));
        }
        fetches
    }

    /// A leader answered the reader's fetch; the checks of what it read.
    pub fn on_fetched(
        &mut self,
        now: u64,
        partition: usize,
        offset: u64,
        entries: &[(u64, Rc<TxnEntry>)],
        aborted: &[Aborted],
        last_stable: u64,
    ) {
        let part = &mut self.reader.parts[partition];
        if offset != part.position {
            return;
        }
        if let Some(&(beyond, _)) = entries.iter().find(|(o, _)| *o >= last_stable) {
            self.broke(Err(format!(
                "a read_committed fetch of partition {partition} returned offset {beyond}, at or \
                 past its last stable offset {last_stable}"
            )));
            return;
        }
        part.waiting_until = None;
        part.next_at = now + READ_EVERY_MS;
        let outcome = read(part, &mut self.oracle, partition, entries, aborted);
        self.broke(outcome);
    }

    /// The reader's fetch was refused (not the leader): it asks again.
    pub fn fetch_refused(&mut self, now: u64, partition: usize, offset: u64) {
        let part = &mut self.reader.parts[partition];
        if offset == part.position {
            part.waiting_until = None;
            part.next_at = now + RETRY_BACKOFF_MS;
        }
    }

    /// The checks once the run is over, on each data partition's final
    /// log (`logs`, by partition): no transaction is left open, and every
    /// decided one has its marker on each of its partitions, after every
    /// record its producer had acknowledged there if it committed.
    pub fn final_check(&self, logs: &[Vec<(u64, Rc<TxnEntry>)>]) -> Result<(), String> {
        for (partition, log) in logs.iter().enumerate() {
            let open = scan_log(partition, log.iter().map(|(o, e)| (*o, e.as_ref())))?;
            if let Some(first) = open {
                return Err(format!(
                    "a transaction is left open on partition {partition} from offset {first}"
                ));
            }
            // Every marker, also one that ended nothing, says its
            // transaction's decision.
            for (offset, entry) in log {
                if let TxnEntry::Marker { txn, commit, .. } = **entry {
                    let decided = self.oracle.decisions.get(&txn).map(|d| d.commit);
                    if decided != Some(commit) {
                        return Err(format!(
                            "partition {partition} holds a marker (commit {commit}) of \
                             transaction {txn:?} at {offset}, which is decided {decided:?}"
                        ));
                    }
                }
            }
        }
        for (txn, decision) in &self.oracle.decisions {
            for (topic, index) in &decision.partitions {
                assert_eq!(topic, DATA_TOPIC, "transactions write to the data topic");
                let partition = *index as usize;
                let log = &logs[partition];
                let marker = log.iter().find(|(_, e)| {
                    matches!(**e, TxnEntry::Marker { txn: t, commit, .. } if t == *txn && commit == decision.commit)
                });
                let Some(&(marker_at, _)) = marker else {
                    return Err(format!(
                        "transaction {txn:?} is decided (commit {}) but partition {partition} \
                         has no marker of it",
                        decision.commit
                    ));
                };
                if !decision.commit {
                    continue;
                }
                let written: Vec<RecordId> = log
                    .iter()
                    .filter(|(offset, _)| *offset < marker_at)
                    .filter_map(|(_, e)| match **e {
                        TxnEntry::Data { record, txn: t, .. } if t == *txn => Some(record),
                        _ => None,
                    })
                    .collect();
                let acked = self
                    .oracle
                    .acked
                    .get(&(*txn, partition))
                    .map_or(&[][..], |r| r.as_slice());
                if written != acked {
                    return Err(format!(
                        "committed transaction {txn:?} has {written:?} before its marker on \
                         partition {partition}, but its producer had {acked:?} acknowledged"
                    ));
                }
            }
        }
        for (txn, commit) in &self.oracle.ended {
            if !self.oracle.decisions.contains_key(txn) {
                return Err(format!(
                    "transaction {txn:?} was acknowledged ended (commit {commit}) but never \
                     decided"
                ));
            }
        }
        Ok(())
    }

    /// Coordinator `edge` (the current one) holds every app's producer at
    /// least at the producer id and epoch last given to it: what was
    /// acknowledged survives failovers.
    pub fn check_coordinator(&self, edge: &CoordinatorEdge) -> Result<(), String> {
        for (&app, issued) in &self.oracle.highest {
            let id = transactional_id(app);
            let held = edge
                .coordinator()
                .metadata(&id)
                .map(|m| (m.producer_id, m.producer_epoch));
            let behind = match held {
                None => true,
                Some((producer_id, epoch)) => {
                    producer_id == issued.producer_id && epoch < issued.producer_epoch
                }
            };
            if behind {
                return Err(format!(
                    "the coordinator at epoch {} holds {id} at {held:?}, but {issued:?} was \
                     given to its producer",
                    edge.coordinator_epoch()
                ));
            }
        }
        Ok(())
    }

    /// The final coordinator (if loaded) holds no transaction open or
    /// undecided and writes no markers.
    pub fn final_coordinator_check(edge: &CoordinatorEdge) -> Result<(), String> {
        for (id, metadata) in edge.coordinator().transactions() {
            if matches!(
                metadata.state,
                TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort
            ) {
                return Err(format!(
                    "{id}'s transaction is still {} at the end",
                    metadata.state
                ));
            }
        }
        if edge.writing_markers() {
            return Err("a coordinator still writes markers at the end".to_string());
        }
        Ok(())
    }
}

/// The reader takes a fetch's entries, as Kafka's read_committed consumer
/// does: a producer's records from the first offset of an aborted
/// transaction named in the answer up to its abort marker are skipped,
/// markers are not delivered; every record delivered must be of a
/// committed transaction, and at a marker ending a transaction it must
/// have delivered all of that transaction's records there or none.
fn read(
    part: &mut ReaderPartition,
    oracle: &mut Oracle,
    partition: usize,
    entries: &[(u64, Rc<TxnEntry>)],
    aborted: &[Aborted],
) -> Result<(), String> {
    let mut aborted: Vec<Aborted> = aborted.to_vec();
    aborted.sort_by_key(|a| a.first);
    let mut next_aborted = 0;
    for (offset, entry) in entries {
        if *offset != part.position {
            return Err(format!(
                "the reader of partition {partition} got offset {offset} at position {}",
                part.position
            ));
        }
        part.position += 1;
        while next_aborted < aborted.len() && aborted[next_aborted].first <= *offset {
            part.skipping.insert(aborted[next_aborted].producer_id);
            next_aborted += 1;
        }
        match **entry {
            TxnEntry::State { .. } => {}
            TxnEntry::Data {
                producer_id,
                record,
                txn,
                ..
            } => {
                let open = part
                    .open
                    .entry(producer_id)
                    .or_insert_with(|| (txn, Vec::new()));
                if open.0 != txn {
                    return Err(format!(
                        "the reader of partition {partition} got a record of transaction \
                         {txn:?} at {offset} inside {:?}",
                        open.0
                    ));
                }
                if part.skipping.contains(&producer_id) {
                    continue;
                }
                open.1.push(record);
                oracle.delivered(partition, txn, record)?;
            }
            TxnEntry::Marker {
                producer_id,
                commit,
                txn,
                ..
            } => {
                if !commit {
                    part.skipping.remove(&producer_id);
                }
                let Some((open_txn, read)) = part.open.remove(&producer_id) else {
                    continue;
                };
                if open_txn != txn {
                    return Err(format!(
                        "the marker of transaction {txn:?} at {offset} of partition {partition} \
                         ends transaction {open_txn:?}"
                    ));
                }
                if !commit && !read.is_empty() {
                    return Err(format!(
                        "the read_committed reader got {read:?} of aborted transaction {txn:?} on \
                         partition {partition}"
                    ));
                }
                oracle.ended_on(partition, txn, commit, &read)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T1: TxnKey = TxnKey {
        app: 0,
        start_ms: 10,
    };
    const T2: TxnKey = TxnKey {
        app: 0,
        start_ms: 20,
    };

    fn data(producer_id: i64, epoch: i16, sequence: i32, txn: TxnKey) -> TxnEntry {
        TxnEntry::Data {
            producer_id,
            producer_epoch: epoch,
            sequence,
            record: RecordId {
                app: txn.app,
                instance: 1,
                txn: txn.start_ms as u64,
                index: sequence as usize,
            },
            txn,
        }
    }

    fn marker(
        producer_id: i64,
        epoch: i16,
        coordinator: i32,
        commit: bool,
        txn: TxnKey,
    ) -> TxnEntry {
        TxnEntry::Marker {
            producer_id,
            producer_epoch: epoch,
            coordinator_epoch: coordinator,
            commit,
            txn,
        }
    }

    fn producers(log: &[TxnEntry]) -> Producers {
        Producers::rebuild(log.iter().enumerate().map(|(o, e)| (o as u64, e)))
    }

    #[test]
    fn open_transactions_hold_the_last_stable_offset_and_aborted_ones_are_named() {
        let log = [
            data(7, 0, 0, T1),
            data(8, 0, 0, T2),
            marker(7, 0, 1, false, T1),
            data(8, 0, 1, T2),
        ];
        let p = producers(&log);
        assert_eq!(p.first_unstable(), Some(1));
        assert!(p.in_txn(8) && !p.in_txn(7));
        let aborted = Aborted {
            producer_id: 7,
            first: 0,
            marker: 2,
        };
        assert_eq!(p.aborted_between(0, 4), vec![aborted]);
        assert_eq!(p.aborted_between(3, 4), Vec::new());
        let p = producers(&[log.as_slice(), &[marker(8, 0, 1, true, T2)]].concat());
        assert_eq!(p.first_unstable(), None);
    }

    #[test]
    fn records_and_markers_are_checked_against_the_producers_epochs() {
        let p = producers(&[data(7, 1, 0, T1), marker(7, 2, 3, false, T1)]);
        let cases = [
            ((7, 1, 1), BatchCheck::Refuse(Refusal::InvalidProducerEpoch)),
            ((7, 2, 0), BatchCheck::Append),
            ((7, 2, 1), BatchCheck::Refuse(Refusal::OutOfOrderSequence)),
            ((7, 3, 0), BatchCheck::Append),
            ((9, 0, 0), BatchCheck::Append),
            ((9, 0, 3), BatchCheck::Refuse(Refusal::OutOfOrderSequence)),
        ];
        for ((producer_id, epoch, sequence), expected) in cases {
            assert_eq!(p.check_batch(producer_id, epoch, sequence), expected);
        }
        let p = producers(&[data(7, 1, 0, T1), data(7, 1, 1, T1)]);
        assert_eq!(p.check_batch(7, 1, 0), BatchCheck::Duplicate(0));
        assert_eq!(p.check_batch(7, 1, 2), BatchCheck::Append);
        let p = producers(&[marker(7, 2, 3, false, T1)]);
        assert_eq!(
            p.check_marker(7, 1, 3, true),
            Err(Refusal::InvalidProducerEpoch)
        );
        assert_eq!(
            p.check_marker(7, 2, 2, true),
            Err(Refusal::CoordinatorFenced)
        );
        assert_eq!(p.check_marker(7, 2, 2, false), Ok(()));
        assert_eq!(p.check_marker(7, 2, 3, true), Ok(()));
    }

    #[test]
    fn a_marker_written_during_a_check_voids_it() {
        let mut p = producers(&[data(7, 0, 0, T1), marker(7, 0, 1, true, T1)]);
        let token = p.start_verification(7);
        p.apply(2, &marker(7, 0, 1, true, T1));
        assert!(!p.end_verification(7, token));
        let token = p.start_verification(7);
        assert!(p.end_verification(7, token));
    }

    #[test]
    fn a_log_scan_finds_a_marker_ending_another_transaction_and_epochs_going_back() {
        let open = scan_log(
            0,
            [(0, &data(7, 0, 0, T1)), (1, &data(8, 0, 0, T2))].into_iter(),
        );
        assert_eq!(open, Ok(Some(0)));
        let stale = marker(7, 0, 1, true, T2);
        let ends_another = scan_log(0, [(0, &data(7, 0, 0, T1)), (1, &stale)].into_iter());
        assert!(ends_another.unwrap_err().contains("ends transaction"));
        let older = data(7, 0, 1, T2);
        let back = scan_log(
            0,
            [(0, &marker(7, 1, 1, false, T1)), (1, &older)].into_iter(),
        );
        assert!(back.unwrap_err().contains("after epoch 1"));
    }

    #[test]
    fn the_reader_skips_aborted_ranges_and_wants_every_committed_record() {
        let mut oracle = Oracle::default();
        let committed = BTreeSet::from([data_partition(0)]);
        oracle.decided(T1, false, committed.clone()).unwrap();
        oracle.decided(T2, true, committed).unwrap();
        let record = |txn: TxnKey, index: usize| RecordId {
            app: 0,
            instance: 1,
            txn: txn.start_ms as u64,
            index,
        };
        oracle.acked.insert((T2, 0), vec![record(T2, 0)]);
        let log: Vec<(u64, Rc<TxnEntry>)> = [
            data(7, 0, 0, T1),
            data(8, 0, 0, T2),
            marker(7, 0, 1, false, T1),
            marker(8, 0, 1, true, T2),
        ]
        .into_iter()
        .enumerate()
        .map(|(o, e)| (o as u64, Rc::new(e)))
        .collect();
        let aborted = [Aborted {
            producer_id: 7,
            first: 0,
            marker: 2,
        }];
        let mut part = ReaderPartition::default();
        read(&mut part, &mut oracle, 0, &log, &aborted).unwrap();
        assert_eq!(oracle.records_read, 1);
        // Without the aborted range named, the aborted record is delivered.
        let mut part = ReaderPartition::default();
        let broken = read(&mut part, &mut oracle, 0, &log, &[]).unwrap_err();
        assert!(broken.contains("decided Some"), "{broken}");
        // A committed transaction missing a record acknowledged.
        oracle
            .acked
            .insert((T2, 0), vec![record(T2, 0), record(T2, 1)]);
        let mut part = ReaderPartition::default();
        let broken = read(&mut part, &mut oracle, 0, &log, &aborted).unwrap_err();
        assert!(broken.contains("acknowledged there"), "{broken}");
    }
}
