//! Per-core metrics (the broker's `_probe`). Every executor thread keeps
//! its own counters in thread-local `Cell`s: recording is a few plain adds,
//! no atomics, no locks, nothing shared between cores. The admin thread
//! asks each core for a [`ShardSnapshot`] over a flume channel when it is
//! scraped; the core answers (`scrape`) from its counters plus what it owns
//! (partitions, their `storage::LogStats`, connections, hops in flight).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::time::Instant;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::errors::ConnectionError;
use protocol::codec::Encoded;

/// Upper bounds (inclusive, microseconds) of the request latency buckets;
/// the last bucket counts everything slower.
pub const LATENCY_BOUNDS_US: [u64; 14] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 5_000_000,
];
const LATENCY_BUCKETS: usize = LATENCY_BOUNDS_US.len() + 1;

/// Api keys are below this (Kafka's highest is in the 70s); larger keys
/// are counted under the last slot.
const API_KEY_SLOTS: usize = 128;

/// The error label of a request that closed its connection.
pub const CONNECTION_CLOSED: &str = "connection_closed";

#[derive(Default)]
struct ApiCounters {
    requests: Cell<u64>,
    latency_us_total: Cell<u64>,
    latency_buckets: [Cell<u64>; LATENCY_BUCKETS],
    bytes_in: Cell<u64>,
    bytes_out: Cell<u64>,
}

/// What a counted error is; named only when scraped, so counting one
/// never allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum ErrorLabel {
    Code(i16),
    ConnectionClosed,
}

impl ErrorLabel {
    fn name(self) -> String {
        match self {
            ErrorLabel::Code(code) => error_name(code),
            ErrorLabel::ConnectionClosed => CONNECTION_CLOSED.to_string(),
        }
    }
}

/// Produce and fetch traffic of one partition, counted on the core whose
/// connection carried it.
#[derive(Default, Clone, Copy)]
struct Traffic {
    bytes_in: u64,
    records_in: u64,
    bytes_out: u64,
    records_out: u64,
}

/// An authentication counter's labels: listener and mechanism.
type AuthenticationKey = (String, &'static str);

struct Probe {
    apis: Vec<ApiCounters>,
    /// Topic -> partition -> traffic. A map lookup per produced or fetched
    /// partition; allocates only the first time a partition is seen.
    traffic: RefCell<HashMap<String, HashMap<i32, Traffic>>>,
    /// (api key, error) -> count. Errors are the rare path.
    errors: RefCell<BTreeMap<(i16, ErrorLabel), u64>>,
    hops: Cell<u64>,
    closed_idle: Cell<u64>,
    closed_receive_timeout: Cell<u64>,
    tls_handshakes: Cell<u64>,
    tls_handshakes_failed: Cell<u64>,
    /// (listener, mechanism) -> SASL authentications (succeeded, failed).
    /// Both labels are bounded: listeners by the config, mechanisms by
    /// those served.
    authentications: RefCell<BTreeMap<AuthenticationKey, (u64, u64)>>,
    /// Authorization denials by resource type ([`DENIAL_RESOURCES`]).
    denials: [Cell<u64>; 4],
    /// (destination broker, api key) -> forwarded requests (load-balancer
    /// mode). Allocates the first time a pair is seen.
    forwarded: RefCell<BTreeMap<(i32, i16), ForwardSnapshot>>,
    /// The ends of transactions this core's coordinators and partitions
    /// saw.
    txn_committed: Cell<u64>,
    txn_aborted: Cell<u64>,
    txn_timed_out: Cell<u64>,
    txn_operator_aborts: Cell<u64>,
    /// Share groups' record deliveries on this core's share partitions.
    share: RefCell<BTreeMap<String, ShareCounters>>,
}

impl Probe {
    fn count_error(&self, api_key: i16, label: ErrorLabel) {
        *self
            .errors
            .borrow_mut()
            .entry((api_key, label))
            .or_default() += 1;
    }
}

impl Probe {
    fn new() -> Self {
        Self {
            apis: (0..API_KEY_SLOTS).map(|_| ApiCounters::default()).collect(),
            traffic: RefCell::new(HashMap::new()),
            errors: RefCell::new(BTreeMap::new()),
            hops: Cell::new(0),
            closed_idle: Cell::new(0),
            closed_receive_timeout: Cell::new(0),
            tls_handshakes: Cell::new(0),
            tls_handshakes_failed: Cell::new(0),
            authentications: RefCell::new(BTreeMap::new()),
            denials: Default::default(),
            forwarded: RefCell::new(BTreeMap::new()),
            txn_committed: Cell::new(0),
            txn_aborted: Cell::new(0),
            txn_timed_out: Cell::new(0),
            txn_operator_aborts: Cell::new(0),
            share: RefCell::new(BTreeMap::new()),
        }
    }
}

thread_local! {
    static PROBE: Probe = Probe::new();
}

fn bump(cell: &Cell<u64>, by: u64) {
    cell.set(cell.get().wrapping_add(by));
}

fn slot(api_key: i16) -> usize {
    (api_key.max(0) as usize).min(API_KEY_SLOTS - 1)
}

/// Counts a TLS handshake on the client listener that completed (`ok`)
/// or failed or ran out of time.
pub fn record_tls_handshake(ok: bool) {
    PROBE.with(|p| {
        bump(
            if ok {
                &p.tls_handshakes
            } else {
                &p.tls_handshakes_failed
            },
            1,
        )
    });
}

/// Counts a SASL authentication on `listener` with `mechanism` (a served
/// one, or "none": [`crate::sasl::mechanism_label`]): succeeded, or failed
/// (bad credentials, a mechanism not enabled, a request out of order).
pub fn record_authentication(listener: &str, mechanism: &'static str, ok: bool) {
    PROBE.with(|p| {
        let mut counts = p.authentications.borrow_mut();
        let entry = match counts.get_mut(&(listener.to_string(), mechanism)) {
            Some(entry) => entry,
            None => counts.entry((listener.to_string(), mechanism)).or_default(),
        };
        if ok {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
    });
}

/// The resource types authorization denials are counted by, as labelled.
pub const DENIAL_RESOURCES: [&str; 4] = ["topic", "group", "cluster", "transactional_id"];

/// Counts a request (or a part of one) the authorizer refused on a
/// resource of Kafka's type `resource_type`.
pub fn record_denial(resource_type: i8) {
    use crate::authorizer::resource;
    let index = match resource_type {
        resource::TOPIC => 0,
        resource::GROUP => 1,
        resource::CLUSTER => 2,
        _ => 3,
    };
    PROBE.with(|p| bump(&p.denials[index], 1));
}

/// Counts a connection the broker closed for idling (`idle`) or for a
/// request not received in time.
pub fn record_connection_closed(idle: bool) {
    PROBE.with(|p| {
        bump(
            if idle {
                &p.closed_idle
            } else {
                &p.closed_receive_timeout
            },
            1,
        )
    });
}

fn with_traffic(topic: &str, partition: i32, f: impl FnOnce(&mut Traffic)) {
    PROBE.with(|p| {
        let mut traffic = p.traffic.borrow_mut();
        if !traffic.contains_key(topic) {
            traffic.insert(topic.to_string(), HashMap::new());
        }
        let by_partition = traffic.get_mut(topic).expect("inserted above");
        f(by_partition.entry(partition).or_default());
    });
}

/// Counts a batch appended to a partition by a produce request.
pub fn record_produced(topic: &str, partition: i32, bytes: u64, records: u64) {
    with_traffic(topic, partition, |t| {
        t.bytes_in += bytes;
        t.records_in += records;
    });
}

/// Counts the record batches of a partition sent in a fetch response
/// (records of whole batches, as sent: a consumer skips those below its
/// fetch offset).
pub fn record_fetched(topic: &str, partition: i32, batches: &[u8]) {
    if batches.is_empty() {
        return;
    }
    with_traffic(topic, partition, |t| {
        t.bytes_out += batches.len() as u64;
        t.records_out += records_in_batches(batches);
    });
}

/// Records in the whole batches at the start of `bytes`.
pub fn records_in_batches(mut bytes: &[u8]) -> u64 {
    let mut records = 0u64;
    while let Ok(header) = protocol::batch::BatchHeader::parse(bytes) {
        if header.size() > bytes.len() {
            break;
        }
        records += header.record_count.max(0) as u64;
        bytes = &bytes[header.size()..];
    }
    records
}

/// One request forwarded to another broker, as it ended.
pub struct Forwarded {
    pub broker: i32,
    pub api_key: i16,
    /// The request's and the answer's encoded bodies.
    pub bytes_out: u64,
    pub bytes_in: u64,
    /// From handing it over (including the wait for in-flight room) to
    /// its answer.
    pub latency_us: u64,
    /// No answer: the parts were answered NOT_LEADER_OR_FOLLOWER.
    pub failed: bool,
}

/// Counts a request forwarded to another broker.
pub fn record_forward(forwarded: Forwarded) {
    PROBE.with(|p| {
        let mut by_destination = p.forwarded.borrow_mut();
        let counts = by_destination
            .entry((forwarded.broker, forwarded.api_key))
            .or_insert_with(|| ForwardSnapshot {
                broker: forwarded.broker,
                api_key: forwarded.api_key,
                latency_buckets: vec![0; LATENCY_BUCKETS],
                ..ForwardSnapshot::default()
            });
        counts.requests += 1;
        counts.failures += u64::from(forwarded.failed);
        counts.bytes_out += forwarded.bytes_out;
        counts.bytes_in += forwarded.bytes_in;
        counts.latency_us_total += forwarded.latency_us;
        let bucket = LATENCY_BOUNDS_US
            .iter()
            .position(|&bound| forwarded.latency_us <= bound)
            .unwrap_or(LATENCY_BOUNDS_US.len());
        counts.latency_buckets[bucket] += 1;
    });
}

/// Counts a transaction its coordinator ended: committed or aborted,
/// once every marker of it is written.
pub fn record_txn_ended(commit: bool) {
    PROBE.with(|p| {
        bump(
            if commit {
                &p.txn_committed
            } else {
                &p.txn_aborted
            },
            1,
        )
    });
}

/// Counts a transaction its coordinator decided to abort because it was
/// open past its timeout.
pub fn record_txn_timed_out() {
    PROBE.with(|p| bump(&p.txn_timed_out, 1));
}

/// Counts a transaction an operator aborted on one partition
/// (WriteTxnMarkers from outside the coordinators, KIP-664).
pub fn record_operator_abort() {
    PROBE.with(|p| bump(&p.txn_operator_aborts, 1));
}

/// What one ShareFetch's turn on a share partition did.
#[derive(Debug, Clone, Copy, Default)]
pub struct ShareActivity {
    /// Records handed out (each a delivery).
    pub acquired: u64,
    /// Of those, delivered before (a delivery count above one).
    pub redelivered: u64,
    /// Locks that ran out before their records were acknowledged.
    pub lock_expiries: u64,
}

/// Counts a share partition's deliveries for `group`.
pub fn record_share(group: &str, activity: ShareActivity) {
    if activity.acquired == 0 && activity.lock_expiries == 0 {
        return;
    }
    PROBE.with(|p| {
        let mut share = p.share.borrow_mut();
        let counters = match share.get_mut(group) {
            Some(counters) => counters,
            None => share.entry(group.to_string()).or_default(),
        };
        counters.deliveries += activity.acquired;
        counters.redeliveries += activity.redelivered;
        counters.lock_expiries += activity.lock_expiries;
    });
}

/// This core's share-group counters, by group.
pub fn share_counters() -> BTreeMap<String, ShareCounters> {
    PROBE.with(|p| p.share.borrow().clone())
}

/// Counts one hop of work to another core.
pub fn record_hop() {
    PROBE.with(|p| bump(&p.hops, 1));
}

/// Counts a Kafka error code in a response (0 is not an error).
pub fn record_error_code(api_key: i16, error_code: i16) {
    if error_code == 0 {
        return;
    }
    PROBE.with(|p| p.count_error(api_key, ErrorLabel::Code(error_code)));
}

/// Counts every error code `response` carries at `version` (see
/// [`ErrorCodes`]) under `api_key`: one walk over the response, no allocation unless a code is
/// counted under this api for the first time.
pub fn record_response_errors<R: ErrorCodes>(api_key: i16, version: i16, response: &R) {
    PROBE.with(|p| {
        response.each_error_code(version, &mut |code| {
            if code != 0 {
                p.count_error(api_key, ErrorLabel::Code(code));
            }
        })
    });
}

/// Kafka's name of an error code (`UnknownTopicOrPartition`), else the number.
pub fn error_name(error_code: i16) -> String {
    match kafka_protocol::error::ResponseError::try_from_code(error_code) {
        Some(error) => format!("{error:?}"),
        None => format!("error_{error_code}"),
    }
}

/// Kafka's name of an api key, else the number.
pub fn api_name(api_key: i16) -> String {
    match kafka_protocol::messages::ApiKey::try_from(api_key) {
        Ok(key) => format!("{key:?}"),
        Err(_) => format!("api_{api_key}"),
    }
}

/// A request about to be handled: its api key and size, and when it started.
pub struct RequestStart {
    api_key: i16,
    frame_bytes: usize,
    started: Instant,
}

impl RequestStart {
    /// Reads the api key from the frame (its first two bytes).
    pub fn of(frame: &Bytes) -> Self {
        let api_key = match frame.get(..2) {
            Some(b) => i16::from_be_bytes([b[0], b[1]]),
            None => -1,
        };
        Self {
            api_key,
            frame_bytes: frame.len(),
            started: Instant::now(),
        }
    }

    /// Runs the handler and counts the request, its latency and its bytes.
    pub async fn observe<F>(self, handler: F) -> Result<Option<Encoded>, ConnectionError>
    where
        F: Future<Output = Result<Option<Encoded>, ConnectionError>>,
    {
        let outcome = handler.await;
        let latency_us = self.started.elapsed().as_micros() as u64;
        let bytes_out = match &outcome {
            Ok(Some(response)) => response.len() as u64,
            _ => 0,
        };
        PROBE.with(|p| {
            let api = &p.apis[slot(self.api_key)];
            bump(&api.requests, 1);
            bump(&api.latency_us_total, latency_us);
            let bucket = LATENCY_BOUNDS_US.partition_point(|bound| *bound < latency_us);
            bump(&api.latency_buckets[bucket], 1);
            bump(&api.bytes_in, self.frame_bytes as u64);
            bump(&api.bytes_out, bytes_out);
        });
        if outcome.is_err() {
            PROBE.with(|p| p.count_error(self.api_key, ErrorLabel::ConnectionClosed));
        }
        outcome
    }
}

/// One API's figures on one shard.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiSnapshot {
    pub api_key: i16,
    pub requests: u64,
    pub latency_us_total: u64,
    /// Count per bucket of [`LATENCY_BOUNDS_US`], then slower (not cumulative).
    pub latency_buckets: Vec<u64>,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// Storage figures summed over a shard's partitions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageSnapshot {
    pub log_size_bytes: u64,
    pub writes: u64,
    pub bytes_written: u64,
    pub pending_bytes: u64,
    pub syncs: u64,
    pub sync_latency_us_total: u64,
    /// Count per bucket of `storage::SYNC_LATENCY_BOUNDS_US`, then slower.
    pub sync_latency_buckets: Vec<u64>,
    pub reads_cached: u64,
    pub reads_disk: u64,
    /// The core's journal: writes, records and record bytes (absent in
    /// snapshots of brokers from before the journal).
    #[serde(default)]
    pub journal_writes: u64,
    #[serde(default)]
    pub journal_records: u64,
    #[serde(default)]
    pub journal_bytes: u64,
}

/// Everything one core reports when scraped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardSnapshot {
    pub shard: usize,
    pub apis: Vec<ApiSnapshot>,
    /// (api key, error label, count).
    pub errors: Vec<(i16, String, u64)>,
    pub hops: u64,
    pub hops_in_flight: u64,
    pub connections: u64,
    pub partitions: u64,
    /// Partitions this shard leads (every one it owns on a single node).
    pub leaders: u64,
    pub storage: StorageSnapshot,
    /// Times the core went 500 ms or more without running (its watchdog).
    #[serde(default)]
    pub stalls: u64,
    /// Request bytes held in the core's request budget now, and at most.
    #[serde(default)]
    pub queued_request_bytes: u64,
    #[serde(default)]
    pub queued_request_bytes_peak: u64,
    /// Response bytes waiting to be written on the core now, and at most.
    #[serde(default)]
    pub queued_response_bytes: u64,
    #[serde(default)]
    pub queued_response_bytes_peak: u64,
    /// Connections closed for idling and for a request not received in time.
    #[serde(default)]
    pub connections_closed_idle: u64,
    #[serde(default)]
    pub connections_closed_receive_timeout: u64,
    /// TLS handshakes on the client listener: completed, and failed or
    /// timed out.
    #[serde(default)]
    pub tls_handshakes: u64,
    #[serde(default)]
    pub tls_handshakes_failed: u64,
    /// SASL authentications by listener and mechanism.
    #[serde(default)]
    pub authentications: Vec<AuthenticationSnapshot>,
    /// Authorization denials by resource type ([`DENIAL_RESOURCES`]).
    #[serde(default)]
    pub denials: [u64; 4],
    /// Offsets and size of each partition the shard owns.
    #[serde(default)]
    pub partition_logs: Vec<PartitionLogSnapshot>,
    /// The core's cleaner, and the compacted logs it looks after.
    #[serde(default)]
    pub cleaner: CleanerSnapshot,
    #[serde(default)]
    pub cleaner_logs: Vec<CleanerLogSnapshot>,
    /// Produce and fetch traffic carried by the shard's connections.
    #[serde(default)]
    pub traffic: Vec<TrafficSnapshot>,
    /// Committed offsets of the groups the shard coordinates (those loaded).
    #[serde(default)]
    pub committed: Vec<CommittedSnapshot>,
    #[serde(default)]
    pub consumer_groups: Vec<ConsumerGroupSnapshot>,
    /// Share groups' records on the share partitions this core serves.
    #[serde(default)]
    pub share_groups: Vec<ShareGroupFigures>,
    /// Requests forwarded to other brokers, by destination and API.
    #[serde(default)]
    pub forwarded: Vec<ForwardSnapshot>,
    /// The stages of replicated batches this core timed.
    #[serde(default)]
    pub stages: Vec<crate::stages::StageSnapshot>,
    /// The transaction coordinators on this core, one per
    /// `__transaction_state` partition loaded here.
    #[serde(default)]
    pub txn_coordinators: Vec<TxnCoordinatorSnapshot>,
    /// The ends of transactions counted on this core.
    #[serde(default)]
    pub txn_ends: TxnEndsSnapshot,
}

/// One transaction coordinator (a `__transaction_state` partition this
/// broker leads) as it stands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnCoordinatorSnapshot {
    /// The `__transaction_state` partition.
    pub partition: i32,
    /// Transactions open (Ongoing): begun, not yet being ended.
    pub open: u64,
    /// How long the oldest of them has been open (0: none open).
    pub oldest_open_ms: u64,
    /// Transactions decided (PrepareCommit, PrepareAbort) whose markers
    /// are not all written yet.
    pub markers_pending: u64,
}

/// Transactions ended, counted on one core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnEndsSnapshot {
    /// Ended by their coordinator, once every marker was written.
    pub committed: u64,
    pub aborted: u64,
    /// Of the aborts, those decided because the transaction was open past
    /// its timeout (counted at the decision).
    pub timed_out: u64,
    /// Transactions aborted on one partition by an operator.
    pub operator_aborts: u64,
}

impl TxnEndsSnapshot {
    /// Adds the counts of `other`.
    pub fn add(&mut self, other: &TxnEndsSnapshot) {
        self.committed += other.committed;
        self.aborted += other.aborted;
        self.timed_out += other.timed_out;
        self.operator_aborts += other.operator_aborts;
    }
}

/// Requests of one API a shard forwarded to one other broker.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardSnapshot {
    pub broker: i32,
    pub api_key: i16,
    pub requests: u64,
    pub failures: u64,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub latency_us_total: u64,
    /// Count per bucket of [`LATENCY_BOUNDS_US`], then slower.
    pub latency_buckets: Vec<u64>,
}

impl ForwardSnapshot {
    /// Adds the counts of `other` (same destination and API).
    pub fn add(&mut self, other: &ForwardSnapshot) {
        self.requests += other.requests;
        self.failures += other.failures;
        self.bytes_out += other.bytes_out;
        self.bytes_in += other.bytes_in;
        self.latency_us_total += other.latency_us_total;
        if self.latency_buckets.len() < other.latency_buckets.len() {
            self.latency_buckets.resize(other.latency_buckets.len(), 0);
        }
        for (total, count) in self.latency_buckets.iter_mut().zip(&other.latency_buckets) {
            *total += count;
        }
    }
}

/// One partition's log as its owning shard sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionLogSnapshot {
    pub topic: String,
    pub partition: i32,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub high_watermark: i64,
    /// The offset below which every transaction is decided (the high
    /// watermark when none is open).
    #[serde(default)]
    pub last_stable_offset: i64,
    pub size_bytes: u64,
    /// Whether this broker leads the partition: only the leader reports
    /// the partition's figures, so that a sum over brokers counts each
    /// partition once.
    #[serde(default)]
    pub leader: bool,
}

/// One core's cleaner (see `compaction.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanerSnapshot {
    pub runs: u64,
    pub failures: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub records_removed: u64,
    /// Time spent cleaning, in microseconds.
    pub busy_us: u64,
    /// Compacted logs due for a cleaning at the cleaner's last look.
    pub backlog: u64,
}

/// One compacted partition's log, as the cleaner last saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanerLogSnapshot {
    pub topic: String,
    pub partition: i32,
    /// Cleanable bytes (sealed segments below the high watermark) not
    /// cleaned yet, and all of them.
    pub dirty_bytes: u64,
    pub cleanable_bytes: u64,
    /// Milliseconds since its last cleaning; `None`: none since start.
    pub since_cleaned_ms: Option<u64>,
}

/// One partition's produce and fetch traffic on one shard.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrafficSnapshot {
    pub topic: String,
    pub partition: i32,
    pub bytes_in: u64,
    pub records_in: u64,
    pub bytes_out: u64,
    pub records_out: u64,
}

/// A consumer-protocol group (KIP-848) as its coordinator holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerGroupSnapshot {
    pub group: String,
    /// Bumped by each change of members, subscriptions or subscribed
    /// topics: the rebalances the group went through.
    pub epoch: i32,
    pub members: u64,
    /// Members not yet at the target assignment's epoch, or waiting to
    /// give up or get partitions.
    pub reconciling: u64,
}

/// A share group's delivery counters on one core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareCounters {
    pub deliveries: u64,
    pub redeliveries: u64,
    pub lock_expiries: u64,
}

/// A share group's records on the share partitions one core serves.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareGroupFigures {
    pub group: String,
    /// Records between the share partitions' start and end offsets not yet
    /// acknowledged or archived.
    pub in_flight: u64,
    /// Of those, acquired by a member now.
    pub acquired: u64,
    pub counters: ShareCounters,
}

/// A group's committed offset for one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedSnapshot {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// Storage counters of a shard before any log was counted: zero, with a
/// bucket per sync latency bound.
pub fn empty_storage() -> StorageSnapshot {
    StorageSnapshot {
        sync_latency_buckets: vec![0; storage::SYNC_LATENCY_BOUNDS_US.len() + 1],
        ..StorageSnapshot::default()
    }
}

/// Adds a log's counters (not its gauges: size, pending bytes) to `storage`.
pub fn add_log_counters(storage: &mut StorageSnapshot, stats: &storage::LogStats) {
    storage.add(&StorageSnapshot {
        writes: stats.writes,
        bytes_written: stats.bytes_written,
        syncs: stats.syncs,
        sync_latency_us_total: stats.sync_latency_us_total,
        sync_latency_buckets: stats.sync_latency_buckets.to_vec(),
        reads_cached: stats.reads_cached,
        reads_disk: stats.reads_disk,
        ..StorageSnapshot::default()
    });
}

impl StorageSnapshot {
    /// Adds every figure of `other` to this one.
    pub fn add(&mut self, other: &StorageSnapshot) {
        self.log_size_bytes += other.log_size_bytes;
        self.writes += other.writes;
        self.bytes_written += other.bytes_written;
        self.pending_bytes += other.pending_bytes;
        self.syncs += other.syncs;
        self.sync_latency_us_total += other.sync_latency_us_total;
        if self.sync_latency_buckets.len() < other.sync_latency_buckets.len() {
            self.sync_latency_buckets
                .resize(other.sync_latency_buckets.len(), 0);
        }
        for (total, count) in self
            .sync_latency_buckets
            .iter_mut()
            .zip(&other.sync_latency_buckets)
        {
            *total += count;
        }
        self.reads_cached += other.reads_cached;
        self.reads_disk += other.reads_disk;
        self.journal_writes += other.journal_writes;
        self.journal_records += other.journal_records;
        self.journal_bytes += other.journal_bytes;
    }
}

/// SASL authentications on one listener with one mechanism.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthenticationSnapshot {
    pub listener: String,
    pub mechanism: String,
    pub succeeded: u64,
    pub failed: u64,
}

/// This core's request, error, hop, connection and forwarding counters:
/// the part of its snapshot kept in this module.
pub struct CoreCounters {
    pub apis: Vec<ApiSnapshot>,
    pub errors: Vec<(i16, String, u64)>,
    pub hops: u64,
    pub connections_closed_idle: u64,
    pub connections_closed_receive_timeout: u64,
    pub tls_handshakes: u64,
    pub tls_handshakes_failed: u64,
    pub authentications: Vec<AuthenticationSnapshot>,
    pub denials: [u64; 4],
    pub forwarded: Vec<ForwardSnapshot>,
    pub txn_ends: TxnEndsSnapshot,
}

/// This core's counters as they stand.
pub fn core_counters() -> CoreCounters {
    PROBE.with(|p| CoreCounters {
        apis: p
            .apis
            .iter()
            .enumerate()
            .filter(|(_, a)| a.requests.get() > 0)
            .map(|(key, a)| ApiSnapshot {
                api_key: key as i16,
                requests: a.requests.get(),
                latency_us_total: a.latency_us_total.get(),
                latency_buckets: a.latency_buckets.iter().map(Cell::get).collect(),
                bytes_in: a.bytes_in.get(),
                bytes_out: a.bytes_out.get(),
            })
            .collect(),
        errors: p
            .errors
            .borrow()
            .iter()
            .map(|((key, label), count)| (*key, label.name(), *count))
            .collect(),
        hops: p.hops.get(),
        connections_closed_idle: p.closed_idle.get(),
        connections_closed_receive_timeout: p.closed_receive_timeout.get(),
        tls_handshakes: p.tls_handshakes.get(),
        tls_handshakes_failed: p.tls_handshakes_failed.get(),
        authentications: p
            .authentications
            .borrow()
            .iter()
            .map(
                |((listener, mechanism), (succeeded, failed))| AuthenticationSnapshot {
                    listener: listener.clone(),
                    mechanism: mechanism.to_string(),
                    succeeded: *succeeded,
                    failed: *failed,
                },
            )
            .collect(),
        denials: std::array::from_fn(|i| p.denials[i].get()),
        forwarded: p.forwarded.borrow().values().cloned().collect(),
        txn_ends: TxnEndsSnapshot {
            committed: p.txn_committed.get(),
            aborted: p.txn_aborted.get(),
            timed_out: p.txn_timed_out.get(),
            operator_aborts: p.txn_operator_aborts.get(),
        },
    })
}

/// This core's traffic counters; forgets the topics `exists` no longer
/// knows.
pub fn traffic_counters(exists: impl Fn(&str) -> bool) -> Vec<TrafficSnapshot> {
    PROBE.with(|p| {
        let mut traffic = p.traffic.borrow_mut();
        traffic.retain(|topic, _| exists(topic));
        traffic
            .iter()
            .flat_map(|(topic, by_partition)| {
                by_partition.iter().map(|(partition, t)| TrafficSnapshot {
                    topic: topic.clone(),
                    partition: *partition,
                    bytes_in: t.bytes_in,
                    records_in: t.records_in,
                    bytes_out: t.bytes_out,
                    records_out: t.records_out,
                })
            })
            .collect()
    })
}

/// A response whose Kafka error codes are counted: top level and per
/// topic, partition, resource, group or member.
pub trait ErrorCodes {
    /// Calls `each` with every error code the response carries at
    /// `version` (0 included); fields the version does not encode are
    /// skipped.
    fn each_error_code(&self, version: i16, each: &mut impl FnMut(i16));
}

mod error_codes {
    use kafka_protocol::messages::*;

    use super::ErrorCodes;

    impl ErrorCodes for ProduceResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for topic in &self.responses {
                for partition in &topic.partition_responses {
                    each(partition.error_code);
                }
            }
        }
    }

    impl ErrorCodes for FetchResponse {
        fn each_error_code(&self, version: i16, each: &mut impl FnMut(i16)) {
            if version >= 7 {
                each(self.error_code);
            }
            for topic in &self.responses {
                for partition in &topic.partitions {
                    each(partition.error_code);
                }
            }
        }
    }

    impl ErrorCodes for ListOffsetsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for topic in &self.topics {
                for partition in &topic.partitions {
                    each(partition.error_code);
                }
            }
        }
    }

    impl ErrorCodes for DeleteRecordsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for topic in &self.topics {
                for partition in &topic.partitions {
                    each(partition.error_code);
                }
            }
        }
    }

    impl ErrorCodes for EnvelopeResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
        }
    }

    impl ErrorCodes for WriteTxnMarkersResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for marker in &self.markers {
                for topic in &marker.topics {
                    for partition in &topic.partitions {
                        each(partition.error_code);
                    }
                }
            }
        }
    }

    impl ErrorCodes for AddPartitionsToTxnResponse {
        fn each_error_code(&self, version: i16, each: &mut impl FnMut(i16)) {
            if version >= 4 {
                each(self.error_code);
            }
            let topics = self.results_by_topic_v3_and_below.iter().chain(
                self.results_by_transaction
                    .iter()
                    .flat_map(|t| &t.topic_results),
            );
            for topic in topics {
                for partition in &topic.results_by_partition {
                    each(partition.partition_error_code);
                }
            }
        }
    }

    impl ErrorCodes for AddOffsetsToTxnResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
        }
    }

    impl ErrorCodes for EndTxnResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
        }
    }

    impl ErrorCodes for SaslHandshakeResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
        }
    }

    impl ErrorCodes for SaslAuthenticateResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
        }
    }

    impl ErrorCodes for TxnOffsetCommitResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for topic in &self.topics {
                for partition in &topic.partitions {
                    each(partition.error_code);
                }
            }
        }
    }

    impl ErrorCodes for DescribeTransactionsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for state in &self.transaction_states {
                each(state.error_code);
            }
        }
    }

    impl ErrorCodes for ListTransactionsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
        }
    }

    impl ErrorCodes for OffsetForLeaderEpochResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for topic in &self.topics {
                for partition in &topic.partitions {
                    each(partition.error_code);
                }
            }
        }
    }

    impl ErrorCodes for MetadataResponse {
        fn each_error_code(&self, version: i16, each: &mut impl FnMut(i16)) {
            if version >= 13 {
                each(self.error_code);
            }
            for topic in &self.topics {
                each(topic.error_code);
                for partition in &topic.partitions {
                    each(partition.error_code);
                }
            }
        }
    }

    impl ErrorCodes for ApiVersionsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
        }
    }

    impl ErrorCodes for CreateTopicsResponse {
        fn each_error_code(&self, version: i16, each: &mut impl FnMut(i16)) {
            for topic in &self.topics {
                each(topic.error_code);
                if version >= 5 {
                    each(topic.topic_config_error_code);
                }
            }
        }
    }

    impl ErrorCodes for DeleteTopicsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for topic in &self.responses {
                each(topic.error_code);
            }
        }
    }

    impl ErrorCodes for CreatePartitionsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for topic in &self.results {
                each(topic.error_code);
            }
        }
    }

    impl ErrorCodes for InitProducerIdResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
        }
    }

    impl ErrorCodes for DescribeConfigsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for resource in &self.results {
                each(resource.error_code);
            }
        }
    }

    impl ErrorCodes for AlterConfigsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for resource in &self.responses {
                each(resource.error_code);
            }
        }
    }

    impl ErrorCodes for IncrementalAlterConfigsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for resource in &self.responses {
                each(resource.error_code);
            }
        }
    }

    impl ErrorCodes for DescribeClusterResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
        }
    }

    impl ErrorCodes for AddRaftVoterResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
        }
    }

    impl ErrorCodes for RemoveRaftVoterResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
        }
    }

    impl ErrorCodes for ElectLeadersResponse {
        fn each_error_code(&self, version: i16, each: &mut impl FnMut(i16)) {
            if version >= 1 {
                each(self.error_code);
            }
            for topic in &self.replica_election_results {
                for partition in &topic.partition_result {
                    each(partition.error_code);
                }
            }
        }
    }

    impl ErrorCodes for AlterPartitionReassignmentsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
            for topic in &self.responses {
                for partition in &topic.partitions {
                    each(partition.error_code);
                }
            }
        }
    }

    impl ErrorCodes for ListPartitionReassignmentsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
        }
    }

    impl ErrorCodes for DescribeQuorumResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
            for topic in &self.topics {
                for partition in &topic.partitions {
                    each(partition.error_code);
                }
            }
        }
    }

    impl ErrorCodes for DescribeLogDirsResponse {
        fn each_error_code(&self, version: i16, each: &mut impl FnMut(i16)) {
            if version >= 3 {
                each(self.error_code);
            }
            for result in &self.results {
                each(result.error_code);
            }
        }
    }

    impl ErrorCodes for DescribeProducersResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for topic in &self.topics {
                for partition in &topic.partitions {
                    each(partition.error_code);
                }
            }
        }
    }

    impl ErrorCodes for CreateAclsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for result in &self.results {
                each(result.error_code);
            }
        }
    }

    impl ErrorCodes for DescribeAclsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
        }
    }

    impl ErrorCodes for DeleteAclsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for result in &self.filter_results {
                each(result.error_code);
            }
        }
    }

    impl ErrorCodes for DescribeUserScramCredentialsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
            for result in &self.results {
                each(result.error_code);
            }
        }
    }

    impl ErrorCodes for AlterUserScramCredentialsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for result in &self.results {
                each(result.error_code);
            }
        }
    }

    impl ErrorCodes for ListConfigResourcesResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
        }
    }

    impl ErrorCodes for DescribeTopicPartitionsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for topic in &self.topics {
                each(topic.error_code);
                for partition in &topic.partitions {
                    each(partition.error_code);
                }
            }
        }
    }

    impl ErrorCodes for FindCoordinatorResponse {
        fn each_error_code(&self, version: i16, each: &mut impl FnMut(i16)) {
            if version >= 4 {
                for coordinator in &self.coordinators {
                    each(coordinator.error_code);
                }
            } else {
                each(self.error_code);
            }
        }
    }

    impl ErrorCodes for JoinGroupResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            // MEMBER_ID_REQUIRED is the normal first step of a join (v4+:
            // the broker hands out the member id, the client joins again
            // with it), not a failure.
            if self.error_code != crate::errors::MEMBER_ID_REQUIRED {
                each(self.error_code);
            }
        }
    }

    impl ErrorCodes for SyncGroupResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
        }
    }

    impl ErrorCodes for HeartbeatResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
        }
    }

    impl ErrorCodes for ConsumerGroupHeartbeatResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
        }
    }

    impl ErrorCodes for ShareGroupHeartbeatResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
        }
    }

    impl ErrorCodes for ShareFetchResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
            for topic in &self.responses {
                for partition in &topic.partitions {
                    each(partition.error_code);
                    each(partition.acknowledge_error_code);
                }
            }
        }
    }

    impl ErrorCodes for ShareAcknowledgeResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
            for topic in &self.responses {
                for partition in &topic.partitions {
                    each(partition.error_code);
                }
            }
        }
    }

    impl ErrorCodes for ShareGroupDescribeResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for group in &self.groups {
                each(group.error_code);
            }
        }
    }

    impl ErrorCodes for DescribeShareGroupOffsetsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for group in &self.groups {
                each(group.error_code);
                for topic in &group.topics {
                    for partition in &topic.partitions {
                        each(partition.error_code);
                    }
                }
            }
        }
    }

    impl ErrorCodes for AlterShareGroupOffsetsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
            for topic in &self.responses {
                for partition in &topic.partitions {
                    each(partition.error_code);
                }
            }
        }
    }

    impl ErrorCodes for DeleteShareGroupOffsetsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
            for topic in &self.responses {
                each(topic.error_code);
            }
        }
    }

    impl ErrorCodes for ReadShareGroupStateResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for topic in &self.results {
                for partition in &topic.partitions {
                    each(partition.error_code);
                }
            }
        }
    }

    impl ErrorCodes for WriteShareGroupStateResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for topic in &self.results {
                for partition in &topic.partitions {
                    each(partition.error_code);
                }
            }
        }
    }

    impl ErrorCodes for ConsumerGroupDescribeResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for group in &self.groups {
                each(group.error_code);
            }
        }
    }

    impl ErrorCodes for LeaveGroupResponse {
        fn each_error_code(&self, version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
            if version >= 3 {
                for member in &self.members {
                    each(member.error_code);
                }
            }
        }
    }

    impl ErrorCodes for OffsetCommitResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for topic in &self.topics {
                for partition in &topic.partitions {
                    each(partition.error_code);
                }
            }
        }
    }

    impl ErrorCodes for OffsetFetchResponse {
        fn each_error_code(&self, version: i16, each: &mut impl FnMut(i16)) {
            if version >= 8 {
                for group in &self.groups {
                    each(group.error_code);
                    for topic in &group.topics {
                        for partition in &topic.partitions {
                            each(partition.error_code);
                        }
                    }
                }
                return;
            }
            // v0-1 carry a group error on each partition only.
            if version >= 2 {
                each(self.error_code);
            }
            for topic in &self.topics {
                for partition in &topic.partitions {
                    each(partition.error_code);
                }
            }
        }
    }

    impl ErrorCodes for OffsetDeleteResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
            for topic in &self.topics {
                for partition in &topic.partitions {
                    each(partition.error_code);
                }
            }
        }
    }

    impl ErrorCodes for DescribeGroupsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for group in &self.groups {
                each(group.error_code);
            }
        }
    }

    impl ErrorCodes for ListGroupsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            each(self.error_code);
        }
    }

    impl ErrorCodes for DeleteGroupsResponse {
        fn each_error_code(&self, _version: i16, each: &mut impl FnMut(i16)) {
            for group in &self.results {
                each(group.error_code);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    use kafka_protocol::messages::offset_fetch_response::{
        OffsetFetchResponsePartition, OffsetFetchResponseTopic,
    };
    use kafka_protocol::messages::{FindCoordinatorResponse, OffsetFetchResponse};

    use super::ErrorCodes;

    fn codes<R: ErrorCodes>(response: &R, version: i16) -> Vec<i16> {
        let mut codes = Vec::new();
        response.each_error_code(version, &mut |code| codes.push(code));
        codes
    }

    #[test]
    fn records_are_counted_in_whole_batches_only() {
        let mut bytes = protocol::batch::build::patterned(1, 3, 10, 1);
        bytes.extend(protocol::batch::build::patterned(1, 5, 10, 2));
        assert_eq!(super::records_in_batches(&bytes), 8);
        // A cut batch at the end is not counted, nor is garbage.
        let whole = bytes.len();
        bytes.extend(protocol::batch::build::patterned(1, 7, 10, 3));
        assert_eq!(super::records_in_batches(&bytes[..whole + 70]), 8);
        assert_eq!(
            super::records_in_batches(b"not a batch at all, not at all"),
            0
        );
    }

    #[test]
    fn only_the_codes_a_version_encodes_are_counted() {
        // OffsetFetch v1 has no top-level error: each partition carries it.
        let fetched = OffsetFetchResponse::default()
            .with_error_code(16)
            .with_topics(vec![OffsetFetchResponseTopic::default().with_partitions(
                vec![OffsetFetchResponsePartition::default().with_error_code(16); 2],
            )]);
        assert_eq!(codes(&fetched, 1), [16, 16]);
        assert_eq!(codes(&fetched, 2), [16, 16, 16]);
        // FindCoordinator v4 answers per key.
        let found = FindCoordinatorResponse::default()
            .with_error_code(15)
            .with_coordinators(vec![
                Coordinator::default().with_error_code(15),
                Coordinator::default(),
            ]);
        assert_eq!(codes(&found, 3), [15]);
        assert_eq!(codes(&found, 4), [15, 0]);
    }
}
