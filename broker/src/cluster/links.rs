//! Load-balancer mode: the request parts a broker forwards to the brokers
//! that lead their partitions, over connections from this core to each
//! other broker (a core's links live on that core; nothing is shared
//! between cores).
//!
//! - Produce, ListOffsets and OffsetForLeaderEpoch go over one pipelined
//!   connection per destination broker, sent in the order they were handed
//!   over (an idempotent producer's batches reach the leader in its
//!   order), answered in that order by the leader. A partition leader's
//!   check with a transaction coordinator (AddPartitionsToTxn,
//!   verify-only) shares that connection too.
//! - Fetch, which may wait at the leader for data, takes a connection of
//!   its own from a small pool per destination
//!   ([`FORWARD_FETCH_CONNECTIONS_MAX`]): a long poll never holds up
//!   another client's answer.
//! - The other requests that may wait at their destination (DeleteRecords
//!   and WriteTxnMarkers, waiting for the followers; share-state reads and
//!   writes; forwarded ShareFetch) take a connection of their own from
//!   another small pool per destination ([`FORWARD_CALL_CONNECTIONS_MAX`]).
//! - The request bytes in flight to one destination are bounded
//!   ([`FORWARD_IN_FLIGHT_BYTES_MAX`]); a part that does not fit waits, and
//!   so does the client connection it came on (backpressure).
//!
//! A forwarded request carries the client id [`FORWARDED_CLIENT_ID_PREFIX`]
//! and is never forwarded again: two brokers whose images disagree about a
//! leader answer NOT_LEADER_OR_FOLLOWER instead of passing a part back and
//! forth. Any failure (no address, unreachable, timeout, a broken
//! connection) answers the parts NOT_LEADER_OR_FOLLOWER, retriable, as a
//! direct connection to a broker that lost its leadership would.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::{Duration, Instant};

use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::sync::{Semaphore, StaticPermit};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, DeleteRecordsRequest,
    DeleteRecordsResponse, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, ProduceRequest, ProduceResponse,
    WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::{Encodable, Request};
use protocol::client::{ClientError, Connection, Pending};

use super::transport::{self, Pool, Purpose};
use crate::limits::{
    DELETE_RECORDS_WAIT_MS_MAX, FETCH_WAIT_MS_MAX, FORWARD_CALL_CONNECTIONS_MAX,
    FORWARD_FETCH_CONNECTIONS_MAX, FORWARD_IN_FLIGHT_BYTES_MAX, FORWARD_QUEUE_MAX,
    FORWARD_TIMEOUT_MS, TXN_MARKERS_WAIT_MS,
};
use crate::metadata::MetadataImage;
use crate::shard::Shard;

/// After a failed connect to a broker, its link refuses calls for this
/// long before it tries again (the parts are answered
/// NOT_LEADER_OR_FOLLOWER, which clients retry after a metadata refresh).
const RECONNECT_AFTER_MS: u64 = 250;

pub use super::transport::FORWARDED_CLIENT_ID_PREFIX;

/// Where a request came from: a client, whose parts may be forwarded, or
/// another broker forwarding them, whose parts are answered here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Client,
    Forwarded,
}

impl Origin {
    /// The origin of a request with this client id.
    pub fn of(client_id: Option<&str>) -> Self {
        match client_id {
            Some(id) if id.starts_with(FORWARDED_CLIENT_ID_PREFIX) => Origin::Forwarded,
            _ => Origin::Client,
        }
    }
}

/// The broker a part for `topic`/`partition` is forwarded to: its leader,
/// when this broker is in load-balancer mode, the request came from a
/// client, and another live broker leads the partition.
pub fn leader_elsewhere(
    shard: &Shard,
    image: &MetadataImage,
    origin: Origin,
    topic: &str,
    partition: i32,
) -> Option<i32> {
    if !shard.config.balancer_enable || origin == Origin::Forwarded || !shard.in_cluster() {
        return None;
    }
    let state = image.topics.get(topic)?.partition(partition)?;
    let leader = state.leader;
    (leader >= 0 && leader != shard.config.node_id && image.is_live(leader)).then_some(leader)
}

/// Why a forwarded request got no answer.
#[derive(Debug, Clone, thiserror::Error)]
#[error("forwarding {api_key:?} to broker {broker}: {message}")]
pub struct ForwardError {
    pub broker: i32,
    pub api_key: ApiKey,
    pub message: String,
}

/// A request for the pipelined connection, at the client's version.
enum Call {
    Produce(ProduceRequest, i16),
    ListOffsets(ListOffsetsRequest, i16),
    OffsetForLeaderEpoch(OffsetForLeaderEpochRequest, i16),
    AddPartitionsToTxn(AddPartitionsToTxnRequest, i16),
}

impl Call {
    fn api_key(&self) -> ApiKey {
        match self {
            Call::Produce(..) => ApiKey::Produce,
            Call::ListOffsets(..) => ApiKey::ListOffsets,
            Call::OffsetForLeaderEpoch(..) => ApiKey::OffsetForLeaderEpoch,
            Call::AddPartitionsToTxn(..) => ApiKey::AddPartitionsToTxn,
        }
    }
}

/// The leader's answer to a [`Call`]; `Produce(None)` for acks=0.
enum Reply {
    Produce(Option<ProduceResponse>),
    ListOffsets(ListOffsetsResponse),
    OffsetForLeaderEpoch(OffsetForLeaderEpochResponse),
    AddPartitionsToTxn(AddPartitionsToTxnResponse),
}

type ReplyResult = Result<Reply, String>;

/// A call handed to a link's task, with where its answer goes and the
/// in-flight bytes it holds until then.
struct Exchange {
    call: Call,
    reply: LocalSender<ReplyResult>,
    _permit: StaticPermit,
}

/// A call written to the connection, waiting for its answer.
enum Waiting {
    Produce(Pending<ProduceResponse>),
    ListOffsets(Pending<ListOffsetsResponse>),
    OffsetForLeaderEpoch(Pending<OffsetForLeaderEpochResponse>),
    AddPartitionsToTxn(Pending<AddPartitionsToTxnResponse>),
}

struct InFlight {
    waiting: Waiting,
    reply: LocalSender<ReplyResult>,
    _permit: StaticPermit,
}

/// This core's connections to one other broker.
struct Link {
    /// Request bytes in flight to the broker, pipelined and fetches.
    bytes: Rc<Semaphore>,
    queue: LocalSender<Exchange>,
    /// Connections for forwarded fetches.
    fetches: Pool,
    /// Connections for the other requests that may wait at the broker
    /// (see [`call_pooled`]).
    calls: Pool,
}

thread_local! {
    /// This core's links, by destination broker id.
    static LINKS: RefCell<HashMap<i32, Rc<Link>>> = RefCell::new(HashMap::new());
}

fn link(shard: &Rc<Shard>, broker: i32) -> Rc<Link> {
    LINKS.with_borrow_mut(|links| {
        links
            .entry(broker)
            .or_insert_with(|| {
                let (queue, requests) = local_channel::new_bounded(FORWARD_QUEUE_MAX);
                glommio::spawn_local(run_pipelined(shard.clone(), broker, requests)).detach();
                Rc::new(Link {
                    bytes: Rc::new(Semaphore::new(FORWARD_IN_FLIGHT_BYTES_MAX as u64)),
                    queue,
                    fetches: Pool::new(FORWARD_FETCH_CONNECTIONS_MAX),
                    calls: Pool::new(FORWARD_CALL_CONNECTIONS_MAX),
                })
            })
            .clone()
    })
}

/// The in-flight units a request of `bytes` holds: its size, within the
/// bound (a request larger than the whole bound waits for all of it).
fn units(bytes: usize) -> u64 {
    bytes.clamp(1, FORWARD_IN_FLIGHT_BYTES_MAX) as u64
}

fn request_bytes<R: Encodable>(request: &R, version: i16) -> usize {
    request.compute_size(version).unwrap_or(0)
}

/// A forwarded request as it went out: what its metrics and its failures
/// name.
struct Sent {
    broker: i32,
    api_key: ApiKey,
    /// The request's encoded body.
    bytes_out: usize,
    /// When it was handed over, before any wait for room on the link.
    started: Instant,
}

impl Sent {
    /// A forward to `broker` of a request of `bytes_out`, handed over now.
    fn start(broker: i32, api_key: ApiKey, bytes_out: usize) -> Sent {
        Sent {
            broker,
            api_key,
            bytes_out,
            started: Instant::now(),
        }
    }

    /// Why the forward got no answer.
    fn failed(&self, message: String) -> ForwardError {
        ForwardError {
            broker: self.broker,
            api_key: self.api_key,
            message,
        }
    }

    /// Records the forward: its answer's encoded body (`bytes_in`, 0 for
    /// none) or that it failed.
    fn record(&self, bytes_in: usize, failed: bool) {
        crate::metrics::record_forward(crate::metrics::Forwarded {
            broker: self.broker,
            api_key: self.api_key as i16,
            bytes_out: self.bytes_out as u64,
            bytes_in: bytes_in as u64,
            latency_us: self.started.elapsed().as_micros() as u64,
            failed,
        });
    }

    /// Records the forward from its outcome: the answer's size at
    /// `version`, or that it failed.
    fn record_outcome<A: Encodable, E>(&self, outcome: &Result<A, E>, version: i16) {
        match outcome {
            Ok(answer) => self.record(answer.compute_size(version).unwrap_or(0), false),
            Err(_) => self.record(0, true),
        }
    }
}

/// Sends `call` over the pipelined link to `broker`, waits for the answer.
async fn call(shard: &Rc<Shard>, broker: i32, call: Call) -> Result<Reply, ForwardError> {
    let api_key = call.api_key();
    let (bytes_out, version) = match &call {
        Call::Produce(r, v) => (request_bytes(r, *v), *v),
        Call::ListOffsets(r, v) => (request_bytes(r, *v), *v),
        Call::OffsetForLeaderEpoch(r, v) => (request_bytes(r, *v), *v),
        Call::AddPartitionsToTxn(r, v) => (request_bytes(r, *v), *v),
    };
    let link = link(shard, broker);
    let sent = Sent::start(broker, api_key, bytes_out);
    // FIFO: parts handed over in order are sent in order.
    let permit = link
        .bytes
        .acquire_static_permit(units(sent.bytes_out))
        .await
        .map_err(|e| sent.failed(e.to_string()))?;
    let (reply, answer) = local_channel::new_bounded(1);
    let exchange = Exchange {
        call,
        reply,
        _permit: permit,
    };
    if link.queue.send(exchange).await.is_err() {
        return Err(sent.failed("the link's task has stopped".to_string()));
    }
    let outcome = match answer.recv().await {
        Some(Ok(reply)) => Ok(reply),
        Some(Err(message)) => Err(sent.failed(message)),
        None => Err(sent.failed("the link's task dropped the request".to_string())),
    };
    let bytes_in = match &outcome {
        Ok(Reply::Produce(Some(r))) => r.compute_size(version).unwrap_or(0),
        Ok(Reply::ListOffsets(r)) => r.compute_size(version).unwrap_or(0),
        Ok(Reply::OffsetForLeaderEpoch(r)) => r.compute_size(version).unwrap_or(0),
        Ok(Reply::AddPartitionsToTxn(r)) => r.compute_size(version).unwrap_or(0),
        Ok(Reply::Produce(None)) | Err(_) => 0,
    };
    sent.record(bytes_in, outcome.is_err());
    outcome
}

/// A link answers each call with an answer of the call's kind; were it
/// not so, the parts get an error, not a panic.
fn other_kind(broker: i32, api_key: ApiKey) -> ForwardError {
    ForwardError {
        broker,
        api_key,
        message: "the link answered with another API's response".to_string(),
    }
}

/// Forwards a Produce request (acks=0: `None`, nothing is answered).
pub async fn produce(
    shard: &Rc<Shard>,
    broker: i32,
    request: ProduceRequest,
    version: i16,
) -> Result<Option<ProduceResponse>, ForwardError> {
    match call(shard, broker, Call::Produce(request, version)).await? {
        Reply::Produce(response) => Ok(response),
        _ => Err(other_kind(broker, ApiKey::Produce)),
    }
}

/// Forwards a ListOffsets request.
pub async fn list_offsets(
    shard: &Rc<Shard>,
    broker: i32,
    request: ListOffsetsRequest,
    version: i16,
) -> Result<ListOffsetsResponse, ForwardError> {
    match call(shard, broker, Call::ListOffsets(request, version)).await? {
        Reply::ListOffsets(response) => Ok(response),
        _ => Err(other_kind(broker, ApiKey::ListOffsets)),
    }
}

/// Forwards an OffsetForLeaderEpoch request.
pub async fn offset_for_leader_epoch(
    shard: &Rc<Shard>,
    broker: i32,
    request: OffsetForLeaderEpochRequest,
    version: i16,
) -> Result<OffsetForLeaderEpochResponse, ForwardError> {
    match call(shard, broker, Call::OffsetForLeaderEpoch(request, version)).await? {
        Reply::OffsetForLeaderEpoch(response) => Ok(response),
        _ => Err(other_kind(broker, ApiKey::OffsetForLeaderEpoch)),
    }
}

/// The AddPartitionsToTxn version a partition leader asks a coordinator at
/// (the first of the brokers' batched form).
const ADD_PARTITIONS_VERIFY_VERSION: i16 = 4;

/// Asks the transaction coordinator on `broker` whether partitions are in
/// producers' transactions (AddPartitionsToTxn v4 with `verify_only`, as
/// Kafka's partition leaders ask before a producer's first transactional
/// batch): a quick answer, so it shares the pipelined link.
pub async fn add_partitions_to_txn(
    shard: &Rc<Shard>,
    broker: i32,
    request: AddPartitionsToTxnRequest,
) -> Result<AddPartitionsToTxnResponse, ForwardError> {
    let version = ADD_PARTITIONS_VERIFY_VERSION;
    match call(shard, broker, Call::AddPartitionsToTxn(request, version)).await? {
        Reply::AddPartitionsToTxn(response) => Ok(response),
        _ => Err(other_kind(broker, ApiKey::AddPartitionsToTxn)),
    }
}

/// Forwards a Fetch request over a fetch connection of its own; its
/// `max_wait_ms` is what is left until `deadline` when it is sent.
pub async fn fetch(
    shard: &Rc<Shard>,
    broker: i32,
    request: FetchRequest,
    version: i16,
    deadline: Instant,
) -> Result<FetchResponse, ForwardError> {
    let link = link(shard, broker);
    let sent = Sent::start(broker, ApiKey::Fetch, request_bytes(&request, version));
    let address = address(shard, broker).ok_or_else(|| sent.failed(no_address(broker)))?;
    let (_slot, mut connection) = link
        .fetches
        .take(
            shard,
            &address,
            Duration::from_millis(FETCH_WAIT_MS_MAX + FORWARD_TIMEOUT_MS),
        )
        .await
        .map_err(|message| sent.failed(message))?;
    let _bytes = link
        .bytes
        .acquire_static_permit(units(sent.bytes_out))
        .await
        .map_err(|e| sent.failed(e.to_string()))?;
    let wait = deadline.saturating_duration_since(Instant::now());
    let request = request.with_max_wait_ms(wait.as_millis().min(FETCH_WAIT_MS_MAX.into()) as i32);
    let outcome = exchange_typed(&mut connection, &request, version).await;
    sent.record_outcome(&outcome, version);
    match outcome {
        Ok(response) => {
            link.fetches.give_back(connection);
            Ok(response)
        }
        // The connection may be anywhere in a frame: it is dropped.
        Err(error) => Err(sent.failed(error.to_string())),
    }
}

/// Forwards a DeleteRecords request over a pooled connection of its own
/// (it may wait at the leader for the followers, up to its `timeout_ms`:
/// it must not hold up the pipelined link's other answers).
pub async fn delete_records(
    shard: &Rc<Shard>,
    broker: i32,
    request: DeleteRecordsRequest,
    version: i16,
) -> Result<DeleteRecordsResponse, ForwardError> {
    call_pooled(
        shard,
        broker,
        ApiKey::DeleteRecords,
        &request,
        version,
        Duration::from_millis(DELETE_RECORDS_WAIT_MS_MAX),
    )
    .await
}

/// Sends a transaction coordinator's WriteTxnMarkers (v1) to the broker
/// leading the partitions, over a pooled connection of its own: each marker is
/// answered once its partition's in-sync replicas hold it, which must not
/// hold up the pipelined link's other answers.
pub async fn write_txn_markers(
    shard: &Rc<Shard>,
    broker: i32,
    request: WriteTxnMarkersRequest,
) -> Result<WriteTxnMarkersResponse, ForwardError> {
    call_pooled(
        shard,
        broker,
        ApiKey::WriteTxnMarkers,
        &request,
        1,
        Duration::from_millis(TXN_MARKERS_WAIT_MS),
    )
    .await
}

/// Load-balancer mode: a client's share partitions led by `broker`, as a
/// forwarded ShareFetch (v1) over a pooled connection of its own.
pub async fn share_fetch(
    shard: &Rc<Shard>,
    broker: i32,
    request: kafka_protocol::messages::ShareFetchRequest,
) -> Result<kafka_protocol::messages::ShareFetchResponse, ForwardError> {
    let wait = Duration::from_millis(crate::limits::OFFSETS_COMMIT_TIMEOUT_MS);
    call_pooled(shard, broker, ApiKey::ShareFetch, &request, 1, wait).await
}

/// One request to `broker` on a pooled connection of its own (at most
/// [`FORWARD_CALL_CONNECTIONS_MAX`] per destination and core), for
/// requests that may wait there and must not hold up the pipelined link's
/// answers; the answer may take `wait` on top of the forward timeout.
pub(crate) async fn call_pooled<R: Request>(
    shard: &Rc<Shard>,
    broker: i32,
    api_key: ApiKey,
    request: &R,
    version: i16,
    wait: Duration,
) -> Result<R::Response, ForwardError> {
    let link = link(shard, broker);
    let sent = Sent::start(broker, api_key, request_bytes(request, version));
    let address = address(shard, broker).ok_or_else(|| sent.failed(no_address(broker)))?;
    let limit = wait + Duration::from_millis(FORWARD_TIMEOUT_MS);
    let (_slot, mut connection) = link
        .calls
        .take(shard, &address, limit)
        .await
        .map_err(|message| sent.failed(message))?;
    let outcome = exchange_typed(&mut connection, request, version).await;
    sent.record_outcome(&outcome, version);
    match outcome {
        Ok(response) => {
            link.calls.give_back(connection);
            Ok(response)
        }
        // The connection may be anywhere in a frame: it is dropped.
        Err(error) => Err(sent.failed(error.to_string())),
    }
}

/// One request and its answer on a connection with nothing else in flight.
async fn exchange_typed<R: Request>(
    connection: &mut Connection,
    request: &R,
    version: i16,
) -> Result<R::Response, ClientError> {
    let version = connection.version::<R>(version..=version)?;
    connection.call(request, version).await
}

fn address(shard: &Shard, broker: i32) -> Option<String> {
    super::broker_address(&shard.metadata.image(), broker)
}

fn no_address(broker: i32) -> String {
    format!("broker {broker} is not registered or is fenced")
}

/// The task of one pipelined link: sends the calls handed over, in order,
/// on one connection (opened when needed, again after a failure, closed
/// when idle), and hands each answer back as it comes. Runs as long as the
/// core.
async fn run_pipelined(shard: Rc<Shard>, broker: i32, requests: LocalReceiver<Exchange>) {
    let idle_after = Duration::from_millis((shard.config.connections_max_idle_ms / 2).max(1_000));
    let mut connection: Option<Connection> = None;
    let mut in_flight: VecDeque<InFlight> = VecDeque::new();
    // After a failed connect the calls queued behind it are refused at
    // once for a while, not each after its own connect timeout.
    let mut refused_until: Option<(Instant, String)> = None;
    loop {
        let event = match connection.as_mut() {
            Some(open) if !in_flight.is_empty() => {
                futures_lite::future::or(async { Event::Call(requests.recv().await) }, async {
                    open.readable().await;
                    Event::Readable
                })
                .await
            }
            // Nothing in flight: what the connection reads now is its end
            // (the broker stopped or closed it), seen before a call is
            // written to it.
            Some(open) => {
                let ended = async {
                    open.readable().await;
                    Event::Ended
                };
                let idle = async {
                    glommio::timer::sleep(idle_after).await;
                    Event::Idle
                };
                futures_lite::future::or(
                    async { Event::Call(requests.recv().await) },
                    futures_lite::future::or(ended, idle),
                )
                .await
            }
            None => {
                futures_lite::future::or(async { Event::Call(requests.recv().await) }, async {
                    glommio::timer::sleep(idle_after).await;
                    Event::Idle
                })
                .await
            }
        };
        match event {
            Event::Call(None) => return,
            Event::Idle => {
                if connection.take().is_some() {
                    tracing::debug!(broker, "closing an idle forwarding connection");
                }
            }
            Event::Ended => {
                connection = None;
                tracing::debug!(broker, "the broker ended an idle forwarding connection");
            }
            Event::Call(Some(exchange)) => {
                if connection.is_none() {
                    if let Some((until, message)) = &refused_until {
                        if Instant::now() < *until {
                            let _ = exchange.reply.try_send(Err(message.clone()));
                            continue;
                        }
                    }
                    match connect(&shard, broker).await {
                        Ok(open) => {
                            connection = Some(open);
                            refused_until = None;
                        }
                        Err(message) => {
                            tracing::warn!(broker, %message, "cannot forward to the partition leader");
                            let until = Instant::now() + Duration::from_millis(RECONNECT_AFTER_MS);
                            refused_until = Some((until, message.clone()));
                            let _ = exchange.reply.try_send(Err(message));
                            continue;
                        }
                    }
                }
                let open = connection.as_mut().expect("connected above");
                match send(open, exchange).await {
                    Ok(Some(waiting)) => in_flight.push_back(waiting),
                    Ok(None) => {}
                    Err(message) => {
                        tracing::warn!(broker, %message, "forwarding connection failed");
                        fail_all(&mut in_flight, &message);
                        connection = None;
                    }
                }
            }
            Event::Readable => {
                let open = connection.as_mut().expect("readable only when open");
                let InFlight {
                    waiting,
                    reply,
                    _permit,
                } = in_flight
                    .pop_front()
                    .expect("readable only with a call in flight");
                match receive(open, waiting).await {
                    Ok(answer) => {
                        let _ = reply.try_send(Ok(answer));
                    }
                    Err(error) => {
                        let message = error.to_string();
                        tracing::warn!(broker, %message, "forwarding connection failed");
                        let _ = reply.try_send(Err(message.clone()));
                        fail_all(&mut in_flight, &message);
                        connection = None;
                    }
                }
            }
        }
    }
}

enum Event {
    Call(Option<Exchange>),
    /// An answer is arriving.
    Readable,
    /// Nothing to send for a while.
    Idle,
    /// The connection, with nothing in flight, was closed or read bytes
    /// nobody asked for.
    Ended,
}

async fn connect(shard: &Rc<Shard>, broker: i32) -> Result<Connection, String> {
    let address = address(shard, broker).ok_or_else(|| no_address(broker))?;
    let purpose = Purpose::Forward {
        timeout: Duration::from_millis(FORWARD_TIMEOUT_MS),
    };
    let connection = transport::connect_address(shard, &address, purpose).await?;
    tracing::debug!(broker, %address, "forwarding connection open");
    Ok(connection)
}

fn fail_all(in_flight: &mut VecDeque<InFlight>, message: &str) {
    for waiting in in_flight.drain(..) {
        let _ = waiting.reply.try_send(Err(message.to_string()));
    }
}

/// Writes an exchange's call; what then waits for its answer (`None`:
/// answered already, acks=0 or a version the leader does not serve). An
/// error means the connection is unusable.
async fn send(connection: &mut Connection, exchange: Exchange) -> Result<Option<InFlight>, String> {
    let Exchange {
        call,
        reply,
        _permit,
    } = exchange;
    let waiting = match call {
        Call::Produce(request, version) => {
            let Some(version) = same_version::<ProduceRequest>(connection, version, &reply) else {
                return Ok(None);
            };
            // The client's batches go to the socket from the buffers
            // they were read into: no copy into the forwarded frame.
            let batches: Vec<bytes::Bytes> = request
                .topic_data
                .iter()
                .flat_map(|t| &t.partition_data)
                .filter_map(|p| p.records.clone())
                .collect();
            if request.acks == 0 {
                connection
                    .send_without_response_sharing(&request, version, &batches)
                    .await
                    .map_err(|e| e.to_string())?;
                let _ = reply.try_send(Ok(Reply::Produce(None)));
                return Ok(None);
            }
            Waiting::Produce(
                connection
                    .send_sharing(&request, version, &batches)
                    .await
                    .map_err(|e| e.to_string())?,
            )
        }
        Call::ListOffsets(request, version) => {
            let Some(version) = same_version::<ListOffsetsRequest>(connection, version, &reply)
            else {
                return Ok(None);
            };
            Waiting::ListOffsets(
                connection
                    .send(&request, version)
                    .await
                    .map_err(|e| e.to_string())?,
            )
        }
        Call::OffsetForLeaderEpoch(request, version) => {
            let Some(version) =
                same_version::<OffsetForLeaderEpochRequest>(connection, version, &reply)
            else {
                return Ok(None);
            };
            Waiting::OffsetForLeaderEpoch(
                connection
                    .send(&request, version)
                    .await
                    .map_err(|e| e.to_string())?,
            )
        }
        Call::AddPartitionsToTxn(request, version) => {
            let Some(version) =
                same_version::<AddPartitionsToTxnRequest>(connection, version, &reply)
            else {
                return Ok(None);
            };
            Waiting::AddPartitionsToTxn(
                connection
                    .send(&request, version)
                    .await
                    .map_err(|e| e.to_string())?,
            )
        }
    };
    Ok(Some(InFlight {
        waiting,
        reply,
        _permit,
    }))
}

/// The client's version, when the leader serves it too (brokers of one
/// cluster run the same versions but for a rolling upgrade); else the
/// call is answered with the error here.
fn same_version<R: Request>(
    connection: &Connection,
    version: i16,
    reply: &LocalSender<ReplyResult>,
) -> Option<i16> {
    match connection.version::<R>(version..=version) {
        Ok(version) => Some(version),
        Err(error) => {
            let _ = reply.try_send(Err(error.to_string()));
            None
        }
    }
}

async fn receive(connection: &mut Connection, waiting: Waiting) -> Result<Reply, ClientError> {
    Ok(match waiting {
        Waiting::Produce(pending) => Reply::Produce(Some(connection.receive(pending).await?)),
        Waiting::ListOffsets(pending) => Reply::ListOffsets(connection.receive(pending).await?),
        Waiting::OffsetForLeaderEpoch(pending) => {
            Reply::OffsetForLeaderEpoch(connection.receive(pending).await?)
        }
        Waiting::AddPartitionsToTxn(pending) => {
            Reply::AddPartitionsToTxn(connection.receive(pending).await?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_requests_are_recognised_by_client_id() {
        assert_eq!(Origin::of(Some("strom-forward-2")), Origin::Forwarded);
        assert_eq!(Origin::of(Some("rdkafka")), Origin::Client);
        assert_eq!(Origin::of(Some("strom-replica-2")), Origin::Client);
        assert_eq!(Origin::of(None), Origin::Client);
    }

    #[test]
    fn in_flight_units_stay_within_the_bound() {
        assert_eq!(units(0), 1);
        assert_eq!(units(1000), 1000);
        assert_eq!(
            units(FORWARD_IN_FLIGHT_BYTES_MAX * 4),
            FORWARD_IN_FLIGHT_BYTES_MAX as u64
        );
    }
}
