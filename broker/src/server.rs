//! The client listener of one core and the connections it accepts.
//!
//! Each connection is served on the core that accepted it: a reader task
//! decodes frames and spawns one handler task per request; a writer task
//! awaits those tasks in request order and writes their responses, so a
//! slow request (a long-polling Fetch) is never overtaken. At most
//! [`CONNECTION_IN_FLIGHT_MAX`] requests are in flight; beyond that the
//! reader stops reading the socket.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_lite::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter, WriteHalf};
use futures_lite::{AsyncRead, AsyncWrite};
use glommio::channels::local_channel;
use glommio::net::{TcpListener, TcpStream};
use glommio::task::JoinHandle;
use protocol::codec::Encoded;
use protocol::frame::{is_tls_handshake, request_frame_length, LENGTH_PREFIX_BYTES};

use crate::handlers;
use kafka_protocol::messages::ApiKey;

use crate::limits::{
    CONNECTION_IN_FLIGHT_MAX, FRAME_RECEIVE_STEP_BYTES, NON_PRODUCE_FRAME_BYTES_MAX,
    SMALL_FRAME_BYTES_MAX, UNAUTHENTICATED_FRAME_BYTES_MAX,
};
use crate::memory::{Lease, MemoryPool, ResponseBudget};
use crate::shard::Shard;
use crate::sync::Notify;

const SOCKET_BUFFER_BYTES: usize = 64 << 10;
/// A request's api key: the first field after the length prefix.
const API_KEY_BYTES: usize = 2;

pub use crate::errors::ConnectionError;

/// Binds this core's listener (`SO_REUSEPORT`, so every core binds the
/// same address) and accepts until the shard is stopping.
pub fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(address).map_err(|e| std::io::Error::other(e.to_string()))
}

pub async fn accept_loop(
    shard: Rc<Shard>,
    listener: TcpListener,
    config: std::sync::Arc<crate::config::Listener>,
) {
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            shard.stopping.wait().await;
            None
        })
        .await;
        let stream = match accepted {
            None => break,
            Some(Ok(stream)) => stream,
            Some(Err(error)) => {
                tracing::warn!(core = shard.id, %error, "accept failed");
                continue;
            }
        };
        let peer = stream.peer_addr().ok();
        let _ = stream.set_nodelay(true);
        let guard = shard.connections.enter();
        // The keystore in force now: a reload serves the connections after it.
        let tls = config.tls.as_ref().map(|tls| tls.current());
        let shard = shard.clone();
        let listener = config.clone();
        glommio::spawn_local(async move {
            match tls {
                None => serve(shard.clone(), &listener, stream, peer, None).await,
                Some(tls) => {
                    if let Some(stream) = tls_handshake(&shard, tls, stream, peer).await {
                        match certificate_principal(&listener, &stream) {
                            Ok(principal) => {
                                serve(shard.clone(), &listener, stream, peer, principal).await
                            }
                            Err(why) => tracing::warn!(
                                peer = ?peer,
                                reason = %why,
                                "closing connection: no principal for the client certificate"
                            ),
                        }
                    }
                }
            }
            drop(guard);
        })
        .detach();
    }
    tracing::debug!(core = shard.id, listener = %config.name, "listener closed");
}

/// The server side of a TLS handshake on an accepted connection, within
/// `strom.request.receive.timeout.ms` (a client that opens a connection and
/// never finishes its handshake holds it no longer). A failed handshake
/// (a plaintext client on the SSL listener, an untrusted or missing client
/// certificate, no common protocol or suite) is logged once and closes the
/// connection.
async fn tls_handshake(
    shard: &Shard,
    config: std::sync::Arc<rustls::ServerConfig>,
    stream: TcpStream,
    peer: Option<SocketAddr>,
) -> Option<futures_rustls::server::TlsStream<TcpStream>> {
    let peer = peer.map_or_else(|| "unknown".to_string(), |p| p.to_string());
    let limit = Duration::from_millis(shard.config.request_receive_timeout_ms);
    let acceptor = futures_rustls::TlsAcceptor::from(config);
    let handshake =
        futures_lite::future::or(async { Some(acceptor.accept(stream).await) }, async {
            glommio::timer::sleep(limit).await;
            None
        });
    let outcome = futures_lite::future::or(handshake, async {
        shard.stopping.wait().await;
        Some(Err(std::io::Error::other("the broker is stopping")))
    })
    .await;
    match outcome {
        Some(Ok(stream)) => {
            crate::metrics::record_tls_handshake(true);
            Some(stream)
        }
        Some(Err(error)) => {
            crate::metrics::record_tls_handshake(false);
            tracing::warn!(%peer, %error, "closing connection: TLS handshake failed (a PLAINTEXT client on the SSL listener, or a certificate, protocol or suite the two sides do not share)");
            None
        }
        None => {
            crate::metrics::record_tls_handshake(false);
            tracing::warn!(%peer, timeout_ms = limit.as_millis() as u64, "closing connection: TLS handshake not finished in time");
            None
        }
    }
}

type Outcome = Result<Option<Encoded>, ConnectionError>;
/// A request's handler task: its outcome and the response budget its
/// answer holds until it is written.
type Pending = JoinHandle<(Outcome, ResponseBudget)>;

/// Why the broker closed a connection that broke no rule of the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CloseReason {
    /// No byte in either direction and no request in flight for
    /// `connections.max.idle.ms`.
    Idle,
    /// An admitted frame did not arrive within `strom.request.receive.timeout.ms`.
    ReceiveTimeout,
}

/// What the reader, the writer and the timer of one connection share.
struct Connection {
    peer: String,
    /// This connection's answers made and not yet written.
    responses: Rc<MemoryPool>,
    /// Requests read and not yet handled.
    requests_in_flight: Cell<usize>,
    /// When a byte last moved in either direction.
    last_activity: Cell<Instant>,
    /// Since when the frame being read has been coming, while one is (not
    /// counting a wait for request budget).
    receiving_since: Cell<Option<Instant>>,
    /// Bytes of the frame being read so far, and its length.
    receiving: Cell<(usize, usize)>,
    /// Raised when the connection is to close, by either half or the timer.
    closing: Notify,
}

impl Connection {
    fn touch(&self) {
        self.last_activity.set(Instant::now());
    }
}

/// The principal a TLS client's certificate names (`User:` and its
/// subject mapped by `ssl.principal.mapping.rules`), None without a
/// certificate; else why the connection cannot be served.
fn certificate_principal(
    listener: &crate::config::Listener,
    stream: &futures_rustls::server::TlsStream<TcpStream>,
) -> Result<Option<String>, String> {
    crate::principal::of_certificates(
        listener.principal_mapper.as_deref(),
        stream.get_ref().1.peer_certificates(),
    )
}

/// Serves one connection; `principal` is what its TLS client certificate
/// names (SASL's, when the listener has it, replaces it).
async fn serve<S>(
    shard: Rc<Shard>,
    listener: &std::sync::Arc<crate::config::Listener>,
    stream: S,
    peer: Option<SocketAddr>,
    principal: Option<String>,
) where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let (read_half, write_half) = futures_lite::io::split(stream);
    let (queue_tx, queue_rx) = local_channel::new_bounded::<Pending>(CONNECTION_IN_FLIGHT_MAX);
    let connection = Rc::new(Connection {
        peer: peer
            .map(|p| p.to_string())
            .unwrap_or_else(|| "unknown".to_string()),
        responses: MemoryPool::new(shard.config.connection_response_bytes_max),
        requests_in_flight: Cell::new(0),
        last_activity: Cell::new(Instant::now()),
        receiving_since: Cell::new(None),
        receiving: Cell::new((0, 0)),
        closing: Notify::default(),
    });

    let timer = glommio::spawn_local(close_when_stalled(shard.clone(), connection.clone()));
    let writer = glommio::spawn_local(write_responses(connection.clone(), write_half, queue_rx));

    let mut reader = BufReader::with_capacity(SOCKET_BUFFER_BYTES, read_half);
    let limits = FrameLimits {
        frame_bytes_max: shard.config.frame_bytes_max,
        non_produce_frame_bytes_max: NON_PRODUCE_FRAME_BYTES_MAX,
    };
    let mut first_frame = true;
    let sasl = listener.sasl.clone();
    let mut sasl_state = crate::sasl::SaslState::Start;
    // Who asks, for the authorizer (when on): anonymous until SASL says.
    let host = peer.map(|p| p.ip().to_string()).unwrap_or_default();
    let mut session = shard.config.authorizer.as_ref().map(|_| {
        Rc::new(crate::authorizer::Session::new(
            principal.as_deref().unwrap_or(crate::authorizer::ANONYMOUS),
            host.clone(),
        ))
    });
    loop {
        if !responses_allow_reading(&shard, &connection).await {
            break;
        }
        let unauthenticated = sasl.is_some() && sasl_state.principal().is_none();
        let frame_limits = if unauthenticated {
            &FrameLimits {
                frame_bytes_max: UNAUTHENTICATED_FRAME_BYTES_MAX,
                non_produce_frame_bytes_max: UNAUTHENTICATED_FRAME_BYTES_MAX,
            }
        } else {
            &limits
        };
        let next = read_frame(&shard, &connection, &mut reader, frame_limits, first_frame).await;
        first_frame = false;
        let (frame, request_lease) = match next {
            Ok(Some(read)) => read,
            Ok(None) => break,
            Err(ReadError::TlsHandshake) => {
                tracing::warn!(
                    peer = %connection.peer,
                    "closing connection: a TLS handshake on a plaintext listener \
                     (the client is configured for SSL or SASL_SSL; this listener is PLAINTEXT)"
                );
                break;
            }
            Err(ReadError::Io(error)) => {
                tracing::debug!(peer = %connection.peer, %error, "connection closed");
                break;
            }
            Err(ReadError::Frame(error)) => {
                tracing::warn!(peer = %connection.peer, %error, "closing connection: bad frame");
                break;
            }
            Err(ReadError::TooLarge(error)) => {
                tracing::warn!(peer = %connection.peer, %error, "closing connection");
                break;
            }
        };
        let mut budget = ResponseBudget::new(&connection.responses, &shard.response_pool);
        if let Some(config) = &sasl {
            use crate::sasl::Step;
            let credentials = |user: &str, mechanism: protocol::scram::Mechanism| {
                scram_credential(&shard, user, mechanism)
            };
            let asked = sasl_state.mechanism().map(str::to_string);
            let (answer, close) =
                match crate::sasl::step(config, &mut sasl_state, &frame, &credentials) {
                    Step::Serve => (None, None),
                    Step::Answer(answer) => (Some(answer), None),
                    Step::AnswerAndClose(answer, why) => (Some(answer), Some(why)),
                    Step::Close(why) => (None, Some(why)),
                };
            if let crate::sasl::SaslState::Authenticated { principal, .. } = &sasl_state {
                if answer.is_some() {
                    crate::metrics::record_authentication(
                        &listener.name,
                        crate::sasl::mechanism_label(asked.as_deref()),
                        true,
                    );
                    tracing::debug!(peer = %connection.peer, %principal, "authenticated");
                    if session.is_some() {
                        session = Some(Rc::new(crate::authorizer::Session::new(
                            principal.clone(),
                            host.clone(),
                        )));
                    }
                }
            }
            if let Some(answer) = answer {
                drop(request_lease);
                budget.hold(answer.len());
                let ready: Pending =
                    glommio::spawn_local(async move { (Ok(Some(Encoded::from(answer))), budget) })
                        .detach();
                if queue_tx.send(ready).await.is_err() {
                    break;
                }
                if let Some(why) = close {
                    crate::metrics::record_authentication(
                        &listener.name,
                        crate::sasl::mechanism_label(asked.as_deref()),
                        false,
                    );
                    tracing::warn!(peer = %connection.peer, reason = %why, "closing connection: SASL authentication failed");
                    break;
                }
                continue;
            }
            if let Some(why) = close {
                crate::metrics::record_authentication(
                    &listener.name,
                    crate::sasl::mechanism_label(asked.as_deref()),
                    false,
                );
                tracing::warn!(peer = %connection.peer, reason = %why, "closing connection: SASL authentication failed");
                break;
            }
        }
        if frame[..API_KEY_BYTES] == (ApiKey::Fetch as i16).to_be_bytes() {
            // Held from now, not from when the handler first runs: the
            // reader must see it before it reads the next request. The
            // handler gives back what its max_bytes does not need.
            budget.reserve_up_to(usize::MAX);
        }
        let request = crate::metrics::RequestStart::of(&frame);
        connection
            .requests_in_flight
            .set(connection.requests_in_flight.get() + 1);
        let peer_ip = peer.map(|p| p.ip());
        let session = session.clone();
        let task = glommio::spawn_local({
            let shard = shard.clone();
            let connection = connection.clone();
            let listener = listener.clone();
            async move {
                let outcome = request
                    .observe(handlers::handle(
                        shard,
                        frame,
                        &mut budget,
                        peer_ip,
                        session,
                        &listener.name,
                    ))
                    .await;
                drop(request_lease);
                connection
                    .requests_in_flight
                    .set(connection.requests_in_flight.get() - 1);
                // The idle clock starts again when a request ends, so its
                // answer is written before the connection can look idle.
                connection.touch();
                match &outcome {
                    Ok(Some(response)) => budget.hold(response.len()),
                    _ => budget.hold(0),
                }
                (outcome, budget)
            }
        })
        .detach();
        if queue_tx.send(task).await.is_err() {
            // The writer stopped (client gone or a request closed the connection).
            break;
        }
    }
    drop(queue_tx);
    writer.await;
    connection.closing.raise();
    timer.await;
}

/// Waits until this connection may read its next request: its answers
/// waiting to be written are within its bound and, while the core's
/// response budget is used up, it has none waiting (so every connection
/// still gets one answer at a time). False when the connection is to close.
/// A user's SCRAM credential for `mechanism`, from this core's copy of the
/// replicated metadata.
fn scram_credential(
    shard: &Shard,
    user: &str,
    mechanism: protocol::scram::Mechanism,
) -> Option<protocol::scram::Credential> {
    let image = shard.metadata.image();
    let stored = image.scram.get(&(user.to_string(), mechanism.type_id()))?;
    Some(protocol::scram::Credential {
        salt: stored.salt.clone(),
        iterations: stored.iterations,
        keys: protocol::scram::Keys {
            stored_key: stored.stored_key.clone(),
            server_key: stored.server_key.clone(),
        },
    })
}

async fn responses_allow_reading(shard: &Rc<Shard>, connection: &Rc<Connection>) -> bool {
    let core = &shard.response_pool;
    let own = &connection.responses;
    let ready = || own.used() < own.capacity() && (own.used() == 0 || !core.is_exhausted());
    if ready() {
        return true;
    }
    let admitted = futures_lite::future::or(
        async {
            futures_lite::future::or(own.wait_until(ready), core.wait_until(ready)).await;
            true
        },
        async {
            stopped(shard, connection).await;
            false
        },
    )
    .await;
    admitted && !connection.closing.is_raised()
}

/// `work`'s outcome, or `None` if the broker stops or the connection is to
/// close first.
async fn until_stopped<T>(
    shard: &Shard,
    connection: &Connection,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    futures_lite::future::or(async { Some(work.await) }, async {
        stopped(shard, connection).await;
        None
    })
    .await
}

/// Resolves when the broker stops or the connection is to close.
async fn stopped(shard: &Shard, connection: &Connection) {
    futures_lite::future::or(shard.stopping.wait(), connection.closing.wait()).await
}

/// Writes the answers in request order, each as soon as it is done, and
/// gives back the response budget each held.
async fn write_responses<S: AsyncWrite + Unpin>(
    connection: Rc<Connection>,
    write_half: WriteHalf<S>,
    queue_rx: local_channel::LocalReceiver<Pending>,
) {
    let _done = RaiseOnDrop(connection.clone());
    let mut writer = BufWriter::with_capacity(SOCKET_BUFFER_BYTES, write_half);
    let closed = |outcome: Option<(Outcome, ResponseBudget)>| {
        outcome.unwrap_or_else(|| {
            (
                Err(ConnectionError::HandlerGone),
                ResponseBudget::new(&connection.responses, &connection.responses),
            )
        })
    };
    // A response already finished, to be written without waiting.
    let mut done: Option<(Outcome, ResponseBudget)> = None;
    loop {
        let (outcome, budget) = match done.take() {
            Some(finished) => finished,
            None => match queue_rx.recv().await {
                Some(pending) => closed(pending.await),
                None => break,
            },
        };
        match outcome {
            Ok(Some(response)) => {
                for part in response.parts() {
                    if let Err(error) = write_or_close(&connection, writer.write_all(part)).await {
                        tracing::debug!(peer = %connection.peer, %error, "write failed");
                        return;
                    }
                    connection.touch();
                }
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(peer = %connection.peer, %error, "closing connection");
                let _ = write_or_close(&connection, writer.flush()).await;
                return;
            }
        }
        // The next response shares this write only if it is already
        // done. Otherwise this one is flushed now: an answer must not
        // sit in the buffer while a request behind it still runs
        // (with five produce requests in flight the queue was rarely
        // empty, and answers went out in bursts when the last of
        // them was done).
        let mut waiting = None;
        if let Some(Some(mut pending)) = futures_lite::future::poll_once(queue_rx.recv()).await {
            match futures_lite::future::poll_once(&mut pending).await {
                Some(outcome) => {
                    done = Some(closed(outcome));
                    // What is in the write buffer is copied out of the
                    // answer, so its budget can go.
                    drop(budget);
                    continue;
                }
                None => waiting = Some(pending),
            }
        }
        if let Err(error) = write_or_close(&connection, writer.flush()).await {
            tracing::debug!(peer = %connection.peer, %error, "flush failed");
            return;
        }
        connection.touch();
        drop(budget);
        if let Some(pending) = waiting {
            done = Some(closed(pending.await));
        }
    }
    let _ = write_or_close(&connection, writer.flush()).await;
    let _ = writer.close().await;
}

/// A socket write that ends when the connection is to close: a client
/// that never reads must not hold the writer (and its answers' memory).
async fn write_or_close<F: std::future::Future<Output = std::io::Result<()>>>(
    connection: &Connection,
    write: F,
) -> std::io::Result<()> {
    futures_lite::future::or(write, async {
        connection.closing.wait().await;
        Err(std::io::Error::other("connection closed by the broker"))
    })
    .await
}

/// Closes the connection once it has been idle for `connections.max.idle.ms`
/// or an admitted frame has been coming for longer than
/// `strom.request.receive.timeout.ms`; ends when the connection closes.
async fn close_when_stalled(shard: Rc<Shard>, connection: Rc<Connection>) {
    let idle = Duration::from_millis(shard.config.connections_max_idle_ms);
    let receive = Duration::from_millis(shard.config.request_receive_timeout_ms);
    loop {
        let now = Instant::now();
        let idle_at = connection.last_activity.get() + idle;
        let receive_at = connection
            .receiving_since
            .get()
            .map(|since| since + receive);
        let reason = match receive_at {
            Some(at) if now >= at => Some(CloseReason::ReceiveTimeout),
            _ if now >= idle_at && connection.requests_in_flight.get() == 0 => {
                Some(CloseReason::Idle)
            }
            _ => None,
        };
        if let Some(reason) = reason {
            let (received, length) = connection.receiving.get();
            match reason {
                CloseReason::Idle => tracing::info!(
                    peer = %connection.peer,
                    idle_ms = idle.as_millis() as u64,
                    "closing idle connection (connections.max.idle.ms)"
                ),
                CloseReason::ReceiveTimeout => tracing::warn!(
                    peer = %connection.peer,
                    received,
                    length,
                    timeout_ms = receive.as_millis() as u64,
                    "closing connection: request not received in time (strom.request.receive.timeout.ms)"
                ),
            }
            crate::metrics::record_connection_closed(reason == CloseReason::Idle);
            connection.closing.raise();
            return;
        }
        // Deadlines move as bytes arrive and frames start, unseen by this
        // task: it looks again every tick (a quarter of the shorter limit,
        // 10 ms to 1 s), or at the next deadline if that is sooner.
        let tick = (idle.min(receive) / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let next = receive_at
            .map_or(idle_at, |at| at.min(idle_at))
            .clamp(now + Duration::from_millis(10), now + tick);
        if connection
            .closing
            .sleep_unless_raised(next.saturating_duration_since(now))
            .await
        {
            return;
        }
    }
}

/// Marks the connection closing when the writer ends, so the reader stops
/// waiting for frames.
struct RaiseOnDrop(Rc<Connection>);

impl Drop for RaiseOnDrop {
    fn drop(&mut self) {
        self.0.closing.raise();
    }
}

enum ReadError {
    Io(std::io::Error),
    /// The connection's first bytes are a TLS ClientHello.
    TlsHandshake,
    Frame(protocol::frame::FrameError),
    TooLarge(ConnectionError),
}

struct FrameLimits {
    frame_bytes_max: usize,
    non_produce_frame_bytes_max: usize,
}

/// Reads one frame, with the request budget it holds until handled;
/// `Ok(None)` at a clean end of stream between frames or when the
/// connection is to close.
///
/// The length and api key are read first; then the frame waits for request
/// budget (reading nothing more meanwhile), and is received into memory a
/// step at a time, so a frame announced but never sent holds budget, not
/// memory.
async fn read_frame<R: futures_lite::AsyncRead + Unpin>(
    shard: &Rc<Shard>,
    connection: &Rc<Connection>,
    reader: &mut R,
    limits: &FrameLimits,
    first_frame: bool,
) -> Result<Option<(Bytes, Lease)>, ReadError> {
    let mut prefix = [0u8; LENGTH_PREFIX_BYTES];
    let first = match until_stopped(shard, connection, reader.read(&mut prefix[..1])).await {
        None => return Ok(None),
        Some(read) => read.map_err(ReadError::Io)?,
    };
    if first == 0 {
        return Ok(None);
    }
    connection.touch();
    connection.receiving_since.set(Some(Instant::now()));
    match until_stopped(shard, connection, reader.read_exact(&mut prefix[1..])).await {
        None => return Ok(None),
        Some(read) => read.map_err(ReadError::Io)?,
    }
    if first_frame && is_tls_handshake(prefix) {
        return Err(ReadError::TlsHandshake);
    }
    let length = request_frame_length(prefix, limits.frame_bytes_max).map_err(ReadError::Frame)?;
    let mut api_key = [0u8; API_KEY_BYTES];
    match until_stopped(shard, connection, reader.read_exact(&mut api_key)).await {
        None => return Ok(None),
        Some(read) => read.map_err(ReadError::Io)?,
    }
    connection.touch();
    let api_key_code = i16::from_be_bytes(api_key);
    if api_key_code != ApiKey::Produce as i16 && length > limits.non_produce_frame_bytes_max {
        return Err(ReadError::TooLarge(ConnectionError::RequestTooLarge {
            api_key: api_key_code,
            frame_bytes: length,
        }));
    }

    // The first step is read before the frame asks for budget, on the
    // receive clock: a frame announced and never sent holds no budget and
    // is closed at the deadline. Only that step is allocated before
    // admission: a buffer of the whole frame, even untouched, is heap the
    // allocator hands out again, so 100 stalled 8 MiB frames a round grew
    // the broker by ~2.7 MiB of resident memory per round, without end.
    let mut frame = BytesMut::with_capacity(length.min(API_KEY_BYTES + FRAME_RECEIVE_STEP_BYTES));
    frame.extend_from_slice(&api_key);
    receive_step(shard, connection, reader, &mut frame, length).await?;
    if frame.is_empty() {
        return Ok(None);
    }

    // Admission, off the receive clock. A small frame is admitted beyond
    // the budget when this connection has nothing else in flight: large
    // frames waiting for budget must not starve heartbeats and metadata.
    connection.receiving_since.set(None);
    let pool = &shard.request_pool;
    let admitted = || {
        pool.admits(length)
            || (length <= SMALL_FRAME_BYTES_MAX && connection.requests_in_flight.get() == 0)
    };
    if !admitted()
        && until_stopped(shard, connection, pool.wait_until(admitted))
            .await
            .is_none()
    {
        return Ok(None);
    }
    let lease = pool.take_now(length);
    // Admitted: the whole frame is within the budget now.
    frame.reserve(length - frame.len());
    connection.receiving_since.set(Some(Instant::now()));
    while frame.len() < length {
        receive_step(shard, connection, reader, &mut frame, length).await?;
        if frame.is_empty() {
            return Ok(None);
        }
    }
    connection.receiving_since.set(None);
    connection.receiving.set((0, 0));
    Ok(Some((frame.freeze(), lease)))
}

/// Receives up to [`FRAME_RECEIVE_STEP_BYTES`] more of a frame of `length`
/// bytes into `frame`; leaves it empty when the connection is to close.
async fn receive_step<R: futures_lite::AsyncRead + Unpin>(
    shard: &Rc<Shard>,
    connection: &Rc<Connection>,
    reader: &mut R,
    frame: &mut BytesMut,
    length: usize,
) -> Result<(), ReadError> {
    let filled = frame.len();
    connection.receiving.set((filled, length));
    let step = (length - filled).min(FRAME_RECEIVE_STEP_BYTES);
    frame.resize(filled + step, 0);
    match until_stopped(shard, connection, reader.read_exact(&mut frame[filled..])).await {
        None => frame.clear(),
        Some(read) => read.map_err(ReadError::Io)?,
    }
    connection.touch();
    Ok(())
}
