//! The one channel between brokers: every byte one node sends another
//! leaves and arrives here, on glommio connections of an executor (no
//! blocking sockets, no thread per connection). Two listeners, two
//! framings, one set of connect and I/O timeouts:
//!
//! - **Controller listener** (Strom's framed protocol, [`super::wire`]):
//!   Raft messages between voters, brokers' heartbeats (which register
//!   them), ISR changes (AlterPartition), metadata fetches and voter
//!   probes. It runs on core 0 ([`run_controller_channel`]): the listener
//!   and the connections to the voters. The quorum and the agent stay
//!   threads, because raft-rs's store and the metadata snapshots write
//!   and fsync with blocking calls that would stall core 0's clients;
//!   they hand their messages over through a [`ControllerChannel`]
//!   (bounded queues, a `Send` handle) and get answers back the same way.
//!   Raft messages cross as a [`replication::transport::Transport`]
//!   ([`RaftPeers`]), the seam the simulator drives with its own network.
//! - **Client listener** (the Kafka protocol, where a Kafka message
//!   exists): a follower's fetches and OffsetForLeaderEpoch, the parts a
//!   load-balanced broker forwards to their leaders
//!   ([`super::links`]), group requests for another broker's coordinator
//!   and admin requests for the active controller. Each core keeps its
//!   own connections ([`connect_broker`], [`exchange`]); nothing is
//!   shared between cores.
//!
//! Delivery is never promised: a caller that needs an answer gets an
//! error after its timeout and retries on its own schedule.

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalSender};
use glommio::net::{TcpListener, TcpStream};
use glommio::sync::{Semaphore, StaticPermit};
use protocol::client::{ClientConfig, Connection};
use replication::transport::{Envelope as Routed, SendError, Transport, TRANSPORT_QUEUED_MAX};

use super::voter::Input;
use super::wire::{self, Envelope, Frame};
use super::Cluster;
use crate::config::ControllerSecurity;
use crate::limits::{
    FORWARDED_ANSWER_BYTES_MAX, FORWARD_CONNECT_TIMEOUT_MS, FORWARD_GROUP_CONNECTIONS_MAX,
};
use crate::shard::Shard;

/// A controller-channel connection: TCP, or TLS over TCP.
pub trait ChannelStream: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin {}
impl<T: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin> ChannelStream for T {}
type Stream = Box<dyn ChannelStream>;

/// Controller-listener connections served at once.
pub const CONNECTIONS_MAX: usize = 64;
/// How long a connect to a controller listener may take: short, so a
/// broker cut off from one voter soon asks the next.
pub const CONTROLLER_CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a connect to another broker's client listener may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(FORWARD_CONNECT_TIMEOUT_MS);
/// How long a write, or a read of an expected answer on the controller
/// listener, may take.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Raft messages queued for one voter; more are dropped (Raft resends).
const PEER_QUEUE: usize = 1024;
/// Work queued for the controller channel by the threads; more is
/// refused (a Raft message dropped, a call answered with an error).
const JOBS_MAX: usize = 4096;
/// After a failed connect to a voter, what was queued for it is dropped
/// (stale by the time it is back) and the next connect waits this long.
const RECONNECT_AFTER: Duration = Duration::from_millis(100);

/// A caller waits this much past its call's own bounds before it gives up
/// on an answer core 0 did not send.
const CALL_MARGIN: Duration = Duration::from_millis(100);

fn no_answer(address: &str, bound: Duration) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer from {address} within {bound:?}"),
    )
}

fn dropped() -> std::io::Error {
    std::io::Error::other("the controller channel dropped the call")
}

/// Which caller a kept controller connection serves: a connection of its
/// own per voter, taken by one call at a time (a concurrent call opens
/// another). The agent's heartbeats in particular keep theirs, whose
/// closing tells the controller at once that a killed broker is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// The agent: heartbeats, ISR changes.
    Agent,
    /// A broker that is not a voter fetching the committed metadata.
    Follower,
    /// A voter asking the others about itself at start.
    Probe,
    /// The cores' ISR changes for the active controller.
    Isr,
}

enum Job {
    /// A Raft message for the voter at `address`, encoded.
    Raft { address: String, frame: Vec<u8> },
    /// A frame for `address` whose answer goes to `reply`, unless the
    /// caller gave up by `deadline`.
    Call {
        lane: Lane,
        address: String,
        frame: Vec<u8>,
        timeout: Duration,
        deadline: Instant,
        reply: flume::Sender<std::io::Result<Envelope>>,
    },
    /// Drops the kept connections of a lane.
    Reset(Lane),
}

/// What core 0 takes once to run the controller channel.
struct Parts {
    jobs: flume::Receiver<Job>,
    listener: Option<std::net::TcpListener>,
}

/// The threads' handle on the controller channel; cheap to clone, usable
/// from any thread. Work queues until core 0 runs the channel.
pub struct ControllerChannel {
    jobs: flume::Sender<Job>,
    raft_in: flume::Sender<replication::Message>,
    raft_out: flume::Receiver<replication::Message>,
    parts: Mutex<Option<Parts>>,
}

impl Default for ControllerChannel {
    fn default() -> Self {
        let (jobs, jobs_rx) = flume::bounded(JOBS_MAX);
        let (raft_in, raft_out) = flume::bounded(TRANSPORT_QUEUED_MAX);
        ControllerChannel {
            jobs,
            raft_in,
            raft_out,
            parts: Mutex::new(Some(Parts {
                jobs: jobs_rx,
                listener: None,
            })),
        }
    }
}

impl ControllerChannel {
    /// Hands the bound controller listener (a voter's) to the channel.
    pub fn listen(&self, listener: std::net::TcpListener) {
        if let Some(parts) = self.parts.lock().expect("not poisoned").as_mut() {
            parts.listener = Some(listener);
        }
    }

    fn take_parts(&self) -> Option<Parts> {
        self.parts.lock().expect("not poisoned").take()
    }

    /// Queues a call of `frame` to `address` on `lane`'s connection; the
    /// answer arrives on the receiver within `timeout` plus a connect.
    fn queue_call(
        &self,
        lane: Lane,
        address: &str,
        cluster_id: &str,
        frame: Frame,
        timeout: Duration,
    ) -> std::io::Result<flume::Receiver<std::io::Result<Envelope>>> {
        let (reply, answer) = flume::bounded(1);
        let job = Job::Call {
            lane,
            address: address.to_string(),
            frame: Envelope {
                cluster_id: cluster_id.to_string(),
                frame,
            }
            .encode(),
            timeout,
            deadline: Instant::now() + timeout + CONTROLLER_CONNECT_TIMEOUT,
            reply,
        };
        self.jobs
            .try_send(job)
            .map_err(|_| std::io::Error::other("the controller channel is full or has stopped"))?;
        Ok(answer)
    }

    /// Sends `frame` to `address` on `lane`'s connection and waits up to
    /// `timeout` for the answer (plus a connect, if one is needed). Blocks
    /// the calling thread; never call it on an executor.
    pub fn call(
        &self,
        lane: Lane,
        address: &str,
        cluster_id: &str,
        frame: Frame,
        timeout: Duration,
    ) -> std::io::Result<Envelope> {
        let bound = timeout + CONTROLLER_CONNECT_TIMEOUT + CALL_MARGIN;
        let answer = self.queue_call(lane, address, cluster_id, frame, timeout)?;
        match answer.recv_timeout(bound) {
            Ok(result) => result,
            Err(flume::RecvTimeoutError::Timeout) => Err(no_answer(address, bound)),
            Err(flume::RecvTimeoutError::Disconnected) => Err(dropped()),
        }
    }

    /// As [`ControllerChannel::call`], for a task on an executor.
    pub async fn call_async(
        &self,
        lane: Lane,
        address: &str,
        cluster_id: &str,
        frame: Frame,
        timeout: Duration,
    ) -> std::io::Result<Envelope> {
        let bound = timeout + CONTROLLER_CONNECT_TIMEOUT + CALL_MARGIN;
        let answer = self.queue_call(lane, address, cluster_id, frame, timeout)?;
        futures_lite::future::or(
            async { answer.recv_async().await.unwrap_or_else(|_| Err(dropped())) },
            async {
                glommio::timer::sleep(bound).await;
                Err(no_answer(address, bound))
            },
        )
        .await
    }

    /// Drops `lane`'s kept connections: its next call connects anew.
    pub fn reset(&self, lane: Lane) {
        let _ = self.jobs.try_send(Job::Reset(lane));
    }
}

/// The voters' Raft messages, over the controller channel: what the
/// quorum sends goes to the other voters' controller listeners; what
/// they send arrives from this node's listener. Addresses come from
/// `controller.quorum.voters`.
pub struct RaftPeers {
    jobs: flume::Sender<Job>,
    arrived: flume::Receiver<replication::Message>,
    addresses: HashMap<i32, String>,
    cluster: Arc<Cluster>,
}

impl RaftPeers {
    /// The Raft transport of `cluster`'s voter; `peers` are the other
    /// voters (id, address).
    pub fn new(cluster: Arc<Cluster>, peers: &[(i32, String)]) -> Self {
        RaftPeers {
            jobs: cluster.channel.jobs.clone(),
            arrived: cluster.channel.raft_out.clone(),
            addresses: peers
                .iter()
                .map(|(id, address)| (*id, address.clone()))
                .collect(),
            cluster,
        }
    }
}

impl Transport<replication::Message> for RaftPeers {
    fn send(
        &mut self,
        _from: i32,
        to: i32,
        message: replication::Message,
    ) -> Result<(), SendError> {
        let address = self
            .addresses
            .get(&to)
            .ok_or(SendError::UnknownNode { to })?;
        let frame = Envelope {
            cluster_id: self.cluster.cluster_id(),
            frame: Frame::Raft(Box::new(message)),
        }
        .encode();
        self.jobs
            .try_send(Job::Raft {
                address: address.clone(),
                frame,
            })
            .map_err(|_| SendError::Full {
                queued: self.jobs.len(),
                queued_max: JOBS_MAX,
            })
    }

    fn receive(&mut self, _now_ms: u64) -> Option<Routed<replication::Message>> {
        let message = self.arrived.try_recv().ok()?;
        Some(Routed {
            from: message.from as i32,
            to: message.to as i32,
            message,
        })
    }
}

/// Runs the controller channel on this core (core 0) until the process
/// ends: the controller listener of a voter, the connections to the
/// voters, and the threads' calls.
pub async fn run_controller_channel(cluster: Arc<Cluster>) {
    let Some(parts) = cluster.channel.take_parts() else {
        return;
    };
    if let Some(listener) = parts.listener {
        // SAFETY: the descriptor comes from a listening socket this
        // process owns; `into_raw_fd` gives its ownership away.
        let listener = unsafe { TcpListener::from_raw_fd(listener.into_raw_fd()) };
        glommio::spawn_local(serve(listener, cluster.clone())).detach();
    }
    let security = cluster.security.clone();
    let senders: RefCell<HashMap<String, LocalSender<Queued>>> = RefCell::new(HashMap::new());
    let kept: Rc<RefCell<HashMap<(Lane, String), Stream>>> = Rc::default();
    while let Ok(job) = parts.jobs.recv_async().await {
        match job {
            Job::Raft { address, frame } => {
                let mut senders = senders.borrow_mut();
                let sender = senders.entry(address.clone()).or_insert_with(|| {
                    let (tx, rx) = local_channel::new_bounded(PEER_QUEUE);
                    glommio::spawn_local(send_loop(address, rx, security.clone())).detach();
                    tx
                });
                // Full: dropped, Raft sends again.
                let _ = sender.try_send((Instant::now(), frame));
            }
            Job::Call {
                lane,
                address,
                frame,
                timeout,
                deadline,
                reply,
            } => {
                if Instant::now() >= deadline {
                    continue;
                }
                let kept = kept.clone();
                let security = security.clone();
                glommio::spawn_local(async move {
                    let idle = kept.borrow_mut().remove(&(lane, address.clone()));
                    let result = call(idle, &security, &address, &frame, timeout).await;
                    let answer = result.map(|(stream, envelope)| {
                        kept.borrow_mut().insert((lane, address), stream);
                        envelope
                    });
                    let _ = reply.try_send(answer);
                })
                .detach();
            }
            Job::Reset(lane) => kept.borrow_mut().retain(|(l, _), _| *l != lane),
        }
    }
}

/// One call on `stream` (or a new connection to `address`); the
/// connection back with the answer, to be kept.
async fn call(
    stream: Option<Stream>,
    security: &ControllerSecurity,
    address: &str,
    frame: &[u8],
    timeout: Duration,
) -> std::io::Result<(Stream, Envelope)> {
    let mut stream = match stream {
        Some(stream) => stream,
        None => connect(security, address, CONTROLLER_CONNECT_TIMEOUT).await?,
    };
    stream.write_all(frame).await?;
    stream.flush().await?;
    match read_within(&mut stream, timeout.max(Duration::from_millis(1))).await? {
        Some(envelope) => Ok((stream, envelope)),
        None => Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("{address} closed the connection"),
        )),
    }
}

/// [`read_envelope`] within `limit`.
async fn read_within(stream: &mut Stream, limit: Duration) -> std::io::Result<Option<Envelope>> {
    glommio::timer::timeout(limit, async {
        read_envelope(stream)
            .await
            .map_err(glommio::GlommioError::<()>::IoError)
    })
    .await
    .map_err(|error| match error {
        glommio::GlommioError::IoError(error) => error,
        other => std::io::Error::new(std::io::ErrorKind::TimedOut, other.to_string()),
    })
}

/// A Raft message for one voter, encoded, with when it was queued.
type Queued = (Instant, Vec<u8>);

/// Delivers one voter's Raft messages, connecting when needed.
async fn send_loop(
    address: String,
    queue: local_channel::LocalReceiver<Queued>,
    security: Arc<ControllerSecurity>,
) {
    let mut stream: Option<Stream> = None;
    // What was queued before a failed connect is stale once it is back.
    let mut stale_before = Instant::now();
    while let Some((queued, frame)) = queue.recv().await {
        if queued < stale_before {
            continue;
        }
        if stream.is_none() {
            match connect(&security, &address, CONTROLLER_CONNECT_TIMEOUT).await {
                Ok(connected) => stream = Some(connected),
                Err(error) => {
                    tracing::debug!(%address, %error, "voter unreachable");
                    glommio::timer::sleep(RECONNECT_AFTER).await;
                    stale_before = Instant::now();
                    continue;
                }
            }
        }
        let open = stream.as_mut().expect("connected");
        let written = async {
            open.write_all(&frame).await?;
            open.flush().await
        };
        if let Err(error) = written.await {
            tracing::debug!(%address, %error, "connection to voter lost");
            stream = None;
        }
    }
}

/// Connects to the controller listener at `address` (the first of its
/// resolved addresses answering within `limit`), with the channel's write
/// timeout, and secures the connection as the listener asks: TLS (the
/// voter's certificate checked against the host of `address`), then SASL
/// PLAIN with this node's login. A refusal is an error naming why.
async fn connect(
    security: &ControllerSecurity,
    address: &str,
    limit: Duration,
) -> std::io::Result<Stream> {
    let tcp = connect_tcp(address, limit).await?;
    let mut stream: Stream = match &security.client_tls {
        None => Box::new(tcp),
        Some(tls) => {
            let host = address
                .rsplit_once(':')
                .map_or(address, |(host, _)| host)
                .trim_start_matches('[')
                .trim_end_matches(']');
            let name = rustls::pki_types::ServerName::try_from(host.to_string())
                .map_err(|e| std::io::Error::other(format!("{host} is not a server name: {e}")))?;
            let connector = futures_rustls::TlsConnector::from(tls.clone());
            let handshake = glommio::timer::timeout(limit, async {
                connector
                    .connect(name, tcp)
                    .await
                    .map_err(glommio::GlommioError::<()>::IoError)
            })
            .await
            .map_err(|e| {
                std::io::Error::other(format!(
                    "TLS to the controller listener at {address} failed: {e}"
                ))
            })?;
            Box::new(handshake)
        }
    };
    if let Some(login) = &security.login {
        let mut auth = Vec::with_capacity(2 + login.user.len() + login.password.len());
        auth.push(0);
        auth.extend_from_slice(login.user.as_bytes());
        auth.push(0);
        auth.extend_from_slice(login.password.as_bytes());
        let frame = Envelope {
            cluster_id: String::new(),
            frame: Frame::Authenticate {
                mechanism: login.mechanism.clone(),
                auth,
            },
        }
        .encode();
        stream.write_all(&frame).await?;
        stream.flush().await?;
        match read_within(&mut stream, IO_TIMEOUT).await? {
            Some(Envelope {
                frame: Frame::AuthenticateReply { error },
                ..
            }) if error.is_empty() => {}
            Some(Envelope {
                frame: Frame::AuthenticateReply { error },
                ..
            }) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!(
                        "the controller listener at {address} refused {} ({}): {error}",
                        login.user, login.mechanism
                    ),
                ))
            }
            _ => {
                return Err(std::io::Error::other(format!(
                    "the controller listener at {address} did not answer the authentication"
                )))
            }
        }
    }
    Ok(stream)
}

/// Connects to `address` (the first of its resolved addresses answering
/// within `limit`), with the channel's write timeout.
async fn connect_tcp(address: &str, limit: Duration) -> std::io::Result<TcpStream> {
    let mut last = None;
    for candidate in std::net::ToSocketAddrs::to_socket_addrs(address)? {
        match TcpStream::connect_timeout(candidate, limit).await {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                stream.set_write_timeout(Some(IO_TIMEOUT))?;
                return Ok(stream);
            }
            Err(error) => last = Some(std::io::Error::other(error.to_string())),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other(format!("{address} resolves to nothing"))))
}

/// Reads one controller frame; `Ok(None)` at a clean end of stream.
async fn read_envelope<S: futures_lite::AsyncRead + Unpin>(
    stream: &mut S,
) -> std::io::Result<Option<Envelope>> {
    let mut head = [0u8; wire::FRAME_HEAD_BYTES];
    if stream.read(&mut head[..1]).await? == 0 {
        return Ok(None);
    }
    stream.read_exact(&mut head[1..]).await?;
    let (len, crc) = wire::frame_head(&head)?;
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).await?;
    wire::frame_payload(&payload, crc).map(Some)
}

/// Serves the controller listener until the process ends.
async fn serve(listener: TcpListener, cluster: Arc<Cluster>) {
    let open = Rc::new(AtomicUsize::new(0));
    loop {
        let stream = match listener.accept().await {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(%error, "the controller listener cannot accept");
                glommio::timer::sleep(RECONNECT_AFTER).await;
                continue;
            }
        };
        if open.fetch_add(1, Ordering::Relaxed) >= CONNECTIONS_MAX {
            open.fetch_sub(1, Ordering::Relaxed);
            tracing::warn!(
                limit = CONNECTIONS_MAX,
                "controller listener full: a connection is refused"
            );
            continue;
        }
        let (cluster, open) = (cluster.clone(), open.clone());
        glommio::spawn_local(async move {
            let peer = stream.peer_addr().ok();
            match admit(stream, &cluster).await {
                Ok(stream) => {
                    if let Err(error) = serve_connection(stream, &cluster).await {
                        tracing::debug!(?peer, %error, "controller connection closed");
                    }
                }
                Err(why) => tracing::warn!(
                    ?peer,
                    listener = %cluster.security.listener,
                    reason = %why,
                    "closing controller connection: not admitted"
                ),
            }
            open.fetch_sub(1, Ordering::Relaxed);
        })
        .detach();
    }
}

/// Secures an accepted controller connection as the listener asks (TLS,
/// then SASL PLAIN as the first frame), within [`IO_TIMEOUT`], and checks
/// that its principal may use the controller listener: allowed
/// CLUSTER_ACTION on the cluster while the authorizer is on. Why not,
/// else.
async fn admit(tcp: TcpStream, cluster: &Cluster) -> Result<Stream, String> {
    let security = &cluster.security;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    // Voters keep their connections open between messages: no read timeout.
    tcp.set_write_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let host = tcp
        .peer_addr()
        .map(|p| p.ip().to_string())
        .unwrap_or_default();
    let mut principal = None;
    let mut stream: Stream = match &security.server_tls {
        None => Box::new(tcp),
        Some(tls) => {
            let acceptor = futures_rustls::TlsAcceptor::from(tls.clone());
            let secured = glommio::timer::timeout(IO_TIMEOUT, async {
                acceptor
                    .accept(tcp)
                    .await
                    .map_err(glommio::GlommioError::<()>::IoError)
            })
            .await;
            crate::metrics::record_tls_handshake(secured.is_ok());
            let secured = secured.map_err(|e| format!("TLS handshake failed: {e}"))?;
            principal = crate::principal::of_certificates(
                security.principal_mapper.as_deref(),
                secured.get_ref().1.peer_certificates(),
            )?;
            Box::new(secured)
        }
    };
    if let Some(sasl) = &security.sasl {
        let first = read_within(&mut stream, IO_TIMEOUT)
            .await
            .map_err(|e| format!("no authentication: {e}"))?;
        let outcome = match first {
            Some(Envelope {
                frame: Frame::Authenticate { mechanism, auth },
                ..
            }) if mechanism == "PLAIN" => crate::sasl::plain(sasl, &auth),
            Some(Envelope {
                frame: Frame::Authenticate { mechanism, .. },
                ..
            }) => Err(format!("mechanism {mechanism} is not served here (PLAIN)")),
            Some(_) => Err("a frame before authenticating".to_string()),
            None => Err("closed before authenticating".to_string()),
        };
        crate::metrics::record_authentication(&security.listener, "PLAIN", outcome.is_ok());
        let error = outcome.as_ref().err().cloned().unwrap_or_default();
        let reply = Envelope {
            cluster_id: cluster.cluster_id(),
            frame: Frame::AuthenticateReply {
                // What the client hears names no user.
                error: if error.is_empty() {
                    String::new()
                } else {
                    "authentication failed: invalid credentials".to_string()
                },
            },
        }
        .encode();
        let _ = stream.write_all(&reply).await;
        let _ = stream.flush().await;
        principal = Some(outcome?);
    }
    if let Some(authorizer) = &cluster.authorizer {
        let principal = principal
            .clone()
            .unwrap_or_else(|| crate::authorizer::ANONYMOUS.to_string());
        let session = crate::authorizer::Session::new(&principal, host);
        let image = cluster.image();
        if !authorizer.allows(
            &image.acls,
            &session,
            crate::authorizer::operation::CLUSTER_ACTION,
            crate::authorizer::resource::CLUSTER,
            crate::authorizer::CLUSTER_NAME,
        ) {
            crate::metrics::record_denial(crate::authorizer::resource::CLUSTER);
            return Err(format!(
                "{principal} may not use the controller listener (CLUSTER_ACTION on the cluster)"
            ));
        }
    }
    if let Some(principal) = principal {
        tracing::debug!(%principal, "controller connection admitted");
    }
    Ok(stream)
}

/// Serves one connection; when a broker's heartbeat connection ends, the
/// quorum thread hears of it (a killed broker's kernel closes it at once).
async fn serve_connection(stream: Stream, cluster: &Cluster) -> std::io::Result<()> {
    let mut heartbeats_of = None;
    let served = serve_frames(stream, cluster, &mut heartbeats_of).await;
    if let (Some(broker), Some(inbox)) = (heartbeats_of, cluster.inbox.as_ref()) {
        let _ = inbox.try_send(Input::ConnectionLost(broker));
    }
    served
}

/// An answer the quorum thread gives through `answer`, within
/// [`IO_TIMEOUT`]; `None` when it does not.
async fn asked<T>(
    inbox: &flume::Sender<Input>,
    input: Input,
    answer: flume::Receiver<T>,
) -> Option<T> {
    inbox.send_async(input).await.ok()?;
    glommio::timer::timeout(IO_TIMEOUT, async {
        answer.recv_async().await.map_err(|_| {
            glommio::GlommioError::<()>::IoError(std::io::Error::other(
                "the quorum thread has stopped",
            ))
        })
    })
    .await
    .ok()
}

async fn serve_frames(
    mut stream: Stream,
    cluster: &Cluster,
    heartbeats_of: &mut Option<i32>,
) -> std::io::Result<()> {
    let Some(inbox) = cluster.inbox.as_ref() else {
        return Ok(());
    };
    while let Some(envelope) = read_envelope(&mut stream).await? {
        let ours = cluster.cluster_id();
        let foreign =
            !ours.is_empty() && !envelope.cluster_id.is_empty() && envelope.cluster_id != ours;
        let reply = match envelope.frame {
            // Answered below with our id, so the other side learns it is
            // in the wrong cluster; its Raft messages are never stepped.
            Frame::Raft(_) if foreign => {
                tracing::warn!(
                    theirs = %envelope.cluster_id,
                    ours = %ours,
                    "a voter of another cluster sends Raft messages here: ignored"
                );
                continue;
            }
            Frame::Raft(message) => {
                if message.to != cluster.node_id as u64 {
                    continue;
                }
                // Full: dropped, Raft sends again. The wake-up may be
                // refused by a full inbox: the quorum thread is busy
                // then and takes the message on its next turn.
                if cluster.channel.raft_in.try_send(*message).is_ok() {
                    let _ = inbox.try_send(Input::Arrived);
                }
                continue;
            }
            Frame::Heartbeat(heartbeat) if !foreign => {
                *heartbeats_of = Some(heartbeat.broker.id);
                let (tx, rx) = flume::bounded(1);
                match asked(inbox, Input::Heartbeat(heartbeat, tx), rx).await {
                    Some(reply) => Frame::HeartbeatReply(reply),
                    None => continue,
                }
            }
            Frame::Heartbeat(_) => Frame::HeartbeatReply(wire::HeartbeatReply {
                status: wire::HeartbeatStatus::NotController,
                leader: -1,
                applied: 0,
            }),
            Frame::Fetch { after, wait_ms } if !foreign => {
                let (tx, rx) = flume::bounded(1);
                let fetch = Input::Fetch {
                    after,
                    wait: Duration::from_millis(u64::from(wait_ms)),
                    reply: tx,
                };
                // The quorum thread holds it at most `voter::FETCH_WAIT_MAX`.
                match asked(inbox, fetch, rx).await {
                    Some(Some(reply)) => Frame::FetchReply(reply),
                    _ => continue,
                }
            }
            Frame::AlterPartition(alter) if !foreign => {
                let (tx, rx) = flume::bounded(1);
                let error_code = asked(inbox, Input::AlterPartition(alter, tx), rx)
                    .await
                    .unwrap_or(crate::errors::REQUEST_TIMED_OUT);
                Frame::AlterPartitionReply { error_code }
            }
            Frame::VoterProbe { node_id, directory } if !foreign => {
                let Some(directories) = cluster.directories.get() else {
                    return Ok(());
                };
                Frame::VoterProbeReply(directories.answer(cluster, node_id, &directory))
            }
            other => {
                tracing::debug!(frame = ?std::mem::discriminant(&other), "unexpected frame on the controller listener");
                return Ok(());
            }
        };
        let answer = Envelope {
            cluster_id: ours,
            frame: reply,
        }
        .encode();
        stream.write_all(&answer).await?;
        stream.flush().await?;
    }
    Ok(())
}

// ---- The client listener: Kafka requests between brokers ----

/// Why this node talks to another broker's client listener; it names the
/// connection (its client id) and sets how long an answer may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A follower fetching from its leader (the fetch waits at the leader
    /// up to `wait`).
    Replica { wait: Duration },
    /// A part a load-balanced broker forwards to its leader.
    Forward { timeout: Duration },
    /// An admin request for the active controller.
    Admin { timeout: Duration },
}

/// The client id prefix of a forwarded request: its answerer never
/// forwards it again.
pub const FORWARDED_CLIENT_ID_PREFIX: &str = "strom-forward-";
/// The client id prefix of a follower's fetches.
pub const REPLICA_CLIENT_ID_PREFIX: &str = "strom-replica-";
/// The client id prefix of an admin request for the active controller.
pub const ADMIN_CLIENT_ID_PREFIX: &str = "strom-broker-";

impl Purpose {
    /// The client configuration for this purpose: its client id and
    /// timeout, and the inter-broker listener's TLS and SASL login.
    fn config(self, shard: &Shard) -> ClientConfig {
        let (prefix, request_timeout) = match self {
            Purpose::Replica { wait } => (REPLICA_CLIENT_ID_PREFIX, wait + Duration::from_secs(10)),
            Purpose::Forward { timeout } => (FORWARDED_CLIENT_ID_PREFIX, timeout),
            Purpose::Admin { timeout } => (ADMIN_CLIENT_ID_PREFIX, timeout),
        };
        let inter_broker = &shard.config.inter_broker;
        ClientConfig {
            client_id: format!("{prefix}{}", shard.config.node_id),
            connect_timeout: CONNECT_TIMEOUT,
            request_timeout,
            response_bytes_max: ClientConfig::default()
                .response_bytes_max
                .max(FORWARDED_ANSWER_BYTES_MAX),
            tls: inter_broker.tls.clone(),
            sasl: inter_broker.sasl.clone(),
            ..ClientConfig::default()
        }
    }
}

/// The client listener's address of a registered, unfenced broker.
pub fn broker_address(shard: &Shard, broker: i32) -> Option<String> {
    super::broker_address(&shard.metadata.image(), broker)
}

/// Opens a Kafka connection from this core to `address` (another broker's
/// client listener) for `purpose`.
pub async fn connect_address(
    shard: &Shard,
    address: &str,
    purpose: Purpose,
) -> Result<Connection, String> {
    Connection::connect(address, purpose.config(shard))
        .await
        .map_err(|e| e.to_string())
}

/// Opens a Kafka connection from this core to `broker` for `purpose`.
pub async fn connect_broker(
    shard: &Shard,
    broker: i32,
    purpose: Purpose,
) -> Result<Connection, String> {
    let address = broker_address(shard, broker)
        .ok_or_else(|| format!("broker {broker} is not registered or is fenced"))?;
    connect_address(shard, &address, purpose).await
}

/// Connections to one broker that each carry one exchange at a time:
/// those not in use, and the bound on those in use.
pub(crate) struct Pool {
    idle: RefCell<Vec<Connection>>,
    slots: Rc<Semaphore>,
}

impl Pool {
    pub(crate) fn new(connections: usize) -> Pool {
        Pool {
            idle: RefCell::new(Vec::new()),
            slots: Rc::new(Semaphore::new(connections as u64)),
        }
    }

    /// A slot, and an idle connection to `address` or a new one, whose
    /// requests may take `timeout` each. The caller gives the connection
    /// back ([`Pool::give_back`]) only after a whole exchange: one that
    /// failed may be anywhere in a frame.
    pub(crate) async fn take(
        &self,
        shard: &Rc<Shard>,
        address: &str,
        timeout: Duration,
    ) -> Result<(StaticPermit, Connection), String> {
        let slot = self
            .slots
            .acquire_static_permit(1)
            .await
            .map_err(|e| e.to_string())?;
        // Idle connections the destination hung up (it stopped or
        // restarted since) are dropped here rather than failing the
        // request that would write to them.
        let reusable = loop {
            let Some(mut connection) = self.idle.borrow_mut().pop() else {
                break None;
            };
            if connection.address() == address
                && !connection.is_broken()
                && !connection.peer_closed()
            {
                connection.set_request_timeout(timeout);
                break Some(connection);
            }
        };
        let connection = match reusable {
            Some(connection) => connection,
            None => connect_address(shard, address, Purpose::Forward { timeout }).await?,
        };
        Ok((slot, connection))
    }

    pub(crate) fn give_back(&self, connection: Connection) {
        self.idle.borrow_mut().push(connection);
    }
}

thread_local! {
    static POOLS: RefCell<HashMap<i32, Rc<Pool>>> = RefCell::new(HashMap::new());
}

fn pool(broker: i32) -> Rc<Pool> {
    POOLS.with_borrow_mut(|pools| {
        pools
            .entry(broker)
            .or_insert_with(|| Rc::new(Pool::new(FORWARD_GROUP_CONNECTIONS_MAX)))
            .clone()
    })
}

/// Sends a whole request `frame` to `broker`'s inter-broker listener on a
/// pooled connection of this core and reads its whole answer, within
/// `limit`. At most [`FORWARD_GROUP_CONNECTIONS_MAX`] are in use per
/// destination, so a request that waits long there (a JoinGroup) holds up
/// no other.
pub async fn exchange(
    shard: &Rc<Shard>,
    broker: i32,
    frame: Bytes,
    limit: Duration,
) -> Result<Bytes, String> {
    let address = broker_address(shard, broker)
        .ok_or_else(|| format!("broker {broker} is not registered or is fenced"))?;
    let pool = pool(broker);
    let (_slot, mut connection) = pool.take(shard, &address, limit).await?;
    let answer = round_trip(&mut connection, &frame, limit).await?;
    pool.give_back(connection);
    Ok(answer)
}

/// Sends a whole request `frame` to `address` on a connection of its own
/// and reads the whole answer, within `limit`.
pub async fn exchange_with(
    shard: &Shard,
    address: &str,
    frame: &[u8],
    limit: Duration,
) -> Result<Bytes, String> {
    let mut connection = connect_address(shard, address, Purpose::Admin { timeout: limit }).await?;
    round_trip(&mut connection, frame, limit).await
}

/// Writes one request frame and reads the one response frame to it
/// (returned with its length prefix), within `limit`.
async fn round_trip(
    connection: &mut Connection,
    frame: &[u8],
    limit: Duration,
) -> Result<Bytes, String> {
    glommio::timer::timeout(limit, async {
        connection
            .round_trip(frame)
            .await
            .map_err(|e| glommio::GlommioError::<()>::IoError(std::io::Error::other(e.to_string())))
    })
    .await
    .map_err(|e| e.to_string())
}
