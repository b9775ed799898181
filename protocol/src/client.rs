//! A small async Kafka client connection on glommio: connect with a
//! deadline, negotiate versions with ApiVersions, and exchange requests for
//! their correlated responses, pipelined or one at a time.
//!
//! Nothing here is Strom-specific: the admin CLI and the load generator use
//! it against any Kafka broker. One [`Connection`] lives on one executor;
//! `send` writes a request and returns a [`Pending`] token, `receive` waits
//! for that request's response. Kafka answers a connection's requests in
//! order, so any number of requests may be in flight and received in any
//! order (responses read ahead for a later token are kept until asked for).
//!
//! A timeout or I/O failure in the middle of a frame leaves the stream at an
//! unknown position, so the connection is then marked broken and every
//! later call fails with [`ClientError::Broken`].

use std::collections::{HashMap, VecDeque};
use std::marker::PhantomData;
use std::net::{SocketAddr, ToSocketAddrs};
use std::ops::RangeInclusive;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_lite::io::{AsyncBufRead, AsyncReadExt, AsyncWriteExt, BufReader, ReadHalf, WriteHalf};
use glommio::net::TcpStream;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader};
use kafka_protocol::protocol::{Decodable, HeaderVersion, Request, StrBytes};

use crate::frame::LENGTH_PREFIX_BYTES;

/// The ApiVersions versions this client speaks (v3 is the first flexible).
pub const API_VERSIONS_VERSION_MAX: i16 = 3;
/// Kafka's error code for success (no `ResponseError` stands for it).
pub use crate::error_codes::NONE as ERROR_NONE;
use crate::error_codes::UNSUPPORTED_VERSION;

const READ_BUFFER_BYTES: usize = 64 << 10;

/// How a connection is opened and bounded.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Sent in every request header.
    pub client_id: String,
    /// Name and version sent in ApiVersions v3+ (KIP-511).
    pub software_name: String,
    pub software_version: String,
    pub connect_timeout: Duration,
    /// How long `receive` waits for one response.
    pub request_timeout: Duration,
    /// Largest response frame accepted; larger closes the connection.
    pub response_bytes_max: usize,
    /// TLS (Kafka's SSL security protocol) over each connection, else
    /// plaintext.
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// SASL's mechanism, user and password (SASL_PLAINTEXT or, with
    /// `tls`, SASL_SSL): each connection authenticates after ApiVersions.
    pub sasl: Option<SaslLogin>,
}

/// How a client authenticates with SASL.
#[derive(Clone)]
pub struct SaslLogin {
    /// PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    pub mechanism: String,
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for SaslLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslLogin")
            .field("mechanism", &self.mechanism)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            client_id: "strom-client".to_string(),
            software_name: "strom-client".to_string(),
            software_version: env!("CARGO_PKG_VERSION").to_string(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            response_bytes_max: 256 << 20,
            tls: None,
            sasl: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot resolve broker address {address}: {message}")]
    Resolve { address: String, message: String },
    #[error("broker {address} is unreachable")]
    Unreachable {
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS with broker {address} failed: {message}")]
    Tls { address: String, message: String },
    #[error("SASL authentication with broker {address} failed: {message}")]
    Sasl { address: String, message: String },
    #[error("connecting to broker {address} timed out after {timeout_ms} ms")]
    ConnectTimeout { address: String, timeout_ms: u128 },
    #[error("no response from broker {address} to {api_key:?} within {timeout_ms} ms")]
    Timeout {
        address: String,
        api_key: ApiKey,
        timeout_ms: u128,
    },
    #[error("connection to broker {address} failed")]
    Io {
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error("broker {address} closed the connection")]
    Closed { address: String },
    #[error("connection to broker {address} is unusable after an earlier failure")]
    Broken { address: String },
    #[error(
        "broker {address} does not support {api_key:?} v{ours_min}..=v{ours_max} (it supports {})",
        match broker { Some((min, max)) => format!("v{min}..=v{max}"), None => "none".to_string() }
    )]
    UnsupportedVersion {
        address: String,
        api_key: ApiKey,
        ours_min: i16,
        ours_max: i16,
        broker: Option<(i16, i16)>,
    },
    #[error("{api_key:?} failed: {}{}", error_name(*code), message.as_ref().map(|m| format!(": {m}")).unwrap_or_default())]
    Kafka {
        api_key: ApiKey,
        code: i16,
        message: Option<String>,
    },
    #[error("{api_key:?} of topic {topic} failed: {}", error_name(*code))]
    TopicError {
        api_key: ApiKey,
        topic: String,
        code: i16,
    },
    #[error("{api_key:?} of {topic}-{partition} failed: {}", error_name(*code))]
    PartitionError {
        api_key: ApiKey,
        topic: String,
        partition: i32,
        code: i16,
    },
    #[error("topic {topic} is not in the broker's metadata")]
    TopicMissing { topic: String },
    #[error("topic {topic} has no partitions")]
    NoPartitions { topic: String },
    #[error("topic {topic} partition {partition} has no live leader ({leader})")]
    NoLeader {
        topic: String,
        partition: i32,
        leader: i32,
    },
    #[error("the broker listed no offset for {topic}-{partition}")]
    OffsetMissing { topic: String, partition: i32 },
    #[error("bad {api_key:?} v{version} response from broker {address}: {message}")]
    Decode {
        address: String,
        api_key: ApiKey,
        version: i16,
        message: String,
    },
    #[error("cannot encode {api_key:?} v{version} request: {message}")]
    Encode {
        api_key: ApiKey,
        version: i16,
        message: String,
    },
    #[error("response frame of {length} bytes from broker {address} exceeds the limit of {limit}")]
    FrameTooLarge {
        address: String,
        length: i64,
        limit: usize,
    },
    #[error("broker {address} answered correlation id {got}, expected {expected}")]
    Correlation {
        address: String,
        expected: i32,
        got: i32,
    },
    #[error("{api_key:?} v{version} was sent without expecting a response")]
    NoResponseExpected { api_key: ApiKey, version: i16 },
}

impl ClientError {
    /// The Kafka error the broker answered with, if that is what failed.
    pub fn kafka_error(&self) -> Option<ResponseError> {
        match self {
            ClientError::Kafka { code, .. }
            | ClientError::TopicError { code, .. }
            | ClientError::PartitionError { code, .. } => ResponseError::try_from_code(*code),
            _ => None,
        }
    }

    /// Whether the same request may succeed if sent again soon: the
    /// broker answered an error Kafka calls retriable
    /// (UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
    /// NOT_LEADER_OR_FOLLOWER, NOT_CONTROLLER, REQUEST_TIMED_OUT,
    /// COORDINATOR_LOAD_IN_PROGRESS, ...), or a partition has no live
    /// leader yet. A broker that cannot be reached is not: the caller
    /// decides whether another broker may answer instead.
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::NoLeader { .. } => true,
            _ => self.kafka_error().is_some_and(|e| e.is_retriable()),
        }
    }
}

/// Whether Kafka calls error `code` retriable (see
/// [`ClientError::is_retriable`]); false for 0 and unknown codes.
pub fn is_retriable_code(code: i16) -> bool {
    ResponseError::try_from_code(code).is_some_and(|e| e.is_retriable())
}

/// Kafka's name for an error code, as the Java client prints it
/// (`TOPIC_ALREADY_EXISTS`); `NONE` for 0, `UNKNOWN_ERROR_CODE_<n>` for
/// codes this crate does not know.
pub fn error_name(code: i16) -> String {
    let Some(error) = ResponseError::try_from_code(code) else {
        return "NONE".to_string();
    };
    if let ResponseError::Unknown(code) = error {
        return format!("UNKNOWN_ERROR_CODE_{code}");
    }
    let camel = format!("{error:?}");
    let mut name = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

/// `Ok` for error code 0, else [`ClientError::Kafka`].
pub fn check_error(api_key: ApiKey, code: i16, message: Option<&str>) -> Result<(), ClientError> {
    if code == ERROR_NONE {
        return Ok(());
    }
    Err(ClientError::Kafka {
        api_key,
        code,
        message: message.map(str::to_string).filter(|m| !m.is_empty()),
    })
}

/// The version ranges a broker advertised in ApiVersions.
#[derive(Debug, Clone, Default)]
pub struct BrokerVersions {
    ranges: HashMap<i16, (i16, i16)>,
}

impl BrokerVersions {
    pub fn from_response(response: &ApiVersionsResponse) -> Self {
        BrokerVersions {
            ranges: response
                .api_keys
                .iter()
                .map(|k| (k.api_key, (k.min_version, k.max_version)))
                .collect(),
        }
    }

    pub fn range(&self, api_key: ApiKey) -> Option<(i16, i16)> {
        self.ranges.get(&(api_key as i16)).copied()
    }

    /// The highest version in both `ours` and the broker's range.
    pub fn highest_common(&self, api_key: ApiKey, ours: RangeInclusive<i16>) -> Option<i16> {
        let (min, max) = self.range(api_key)?;
        let high = max.min(*ours.end());
        (high >= min.max(*ours.start())).then_some(high)
    }
}

/// A request written to the connection whose response `T` is still to be
/// received with [`Connection::receive`].
#[must_use = "a pending response must be received, or the connection dropped"]
#[derive(Debug)]
pub struct Pending<T> {
    correlation_id: i32,
    api_key: ApiKey,
    version: i16,
    _response: PhantomData<fn() -> T>,
}

impl<T> Pending<T> {
    pub fn correlation_id(&self) -> i32 {
        self.correlation_id
    }
}

/// One connection to one Kafka broker.
/// The byte stream a connection runs over: TCP, or TLS over TCP.
trait Stream: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin {}
impl<T: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin> Stream for T {}

pub struct Connection {
    address: String,
    config: ClientConfig,
    reader: BufReader<ReadHalf<Box<dyn Stream>>>,
    writer: WriteHalf<Box<dyn Stream>>,
    next_correlation_id: i32,
    /// Correlation ids of requests whose responses were not read yet, in
    /// the order they were sent (the order the broker answers in).
    in_flight: VecDeque<i32>,
    /// Responses read while waiting for a later one, by correlation id.
    arrived: HashMap<i32, Bytes>,
    broken: bool,
    versions: BrokerVersions,
    /// The TCP socket under the stream, to ask the kernel whether the
    /// broker hung up while the connection sat idle.
    socket: RawFd,
}

impl Connection {
    /// Connects to `address` (`host:port`) within the connect timeout and
    /// negotiates versions with ApiVersions.
    pub async fn connect(address: &str, config: ClientConfig) -> Result<Self, ClientError> {
        let candidates: Vec<SocketAddr> = address
            .to_socket_addrs()
            .map_err(|e| ClientError::Resolve {
                address: address.to_string(),
                message: e.to_string(),
            })?
            .collect();
        if candidates.is_empty() {
            return Err(ClientError::Resolve {
                address: address.to_string(),
                message: "no addresses".to_string(),
            });
        }
        let mut last_error = None;
        for candidate in candidates {
            match Self::connect_one(address, candidate, &config).await {
                Ok(stream) => {
                    let socket = stream.as_raw_fd();
                    let stream = Self::secure(address, stream, &config).await?;
                    let mut connection = Self::over(address, stream, socket, config);
                    connection.negotiate().await?;
                    connection.authenticate().await?;
                    return Ok(connection);
                }
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.expect("at least one candidate was tried"))
    }

    async fn connect_one(
        address: &str,
        candidate: SocketAddr,
        config: &ClientConfig,
    ) -> Result<TcpStream, ClientError> {
        let timeout = config.connect_timeout.max(Duration::from_millis(1));
        match TcpStream::connect_timeout(candidate, timeout).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                Ok(stream)
            }
            Err(error) => {
                let error: std::io::Error = error.into();
                if error.kind() == std::io::ErrorKind::TimedOut {
                    Err(ClientError::ConnectTimeout {
                        address: address.to_string(),
                        timeout_ms: timeout.as_millis(),
                    })
                } else {
                    Err(ClientError::Unreachable {
                        address: address.to_string(),
                        source: error,
                    })
                }
            }
        }
    }

    /// The connection's stream: `tcp` itself, or TLS over it when the
    /// config asks for TLS (the broker's certificate checked against the
    /// host of `address`, within the connect timeout).
    async fn secure(
        address: &str,
        tcp: TcpStream,
        config: &ClientConfig,
    ) -> Result<Box<dyn Stream>, ClientError> {
        let Some(tls) = &config.tls else {
            return Ok(Box::new(tcp));
        };
        let failed = |message: String| ClientError::Tls {
            address: address.to_string(),
            message,
        };
        let host = address
            .rsplit_once(':')
            .map_or(address, |(host, _)| host)
            .trim_start_matches('[')
            .trim_end_matches(']');
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|error| failed(format!("{host} is not a server name: {error}")))?;
        let connector = futures_rustls::TlsConnector::from(tls.clone());
        let timeout = config.connect_timeout.max(Duration::from_millis(1));
        let handshake =
            futures_lite::future::or(async { Some(connector.connect(name, tcp).await) }, async {
                glommio::timer::sleep(timeout).await;
                None
            })
            .await;
        match handshake {
            Some(Ok(stream)) => Ok(Box::new(stream)),
            Some(Err(error)) => Err(failed(error.to_string())),
            None => Err(failed(format!(
                "no handshake within {} ms",
                timeout.as_millis()
            ))),
        }
    }

    fn over(address: &str, stream: Box<dyn Stream>, socket: RawFd, config: ClientConfig) -> Self {
        let (read_half, write_half) = futures_lite::io::split(stream);
        Connection {
            address: address.to_string(),
            config,
            reader: BufReader::with_capacity(READ_BUFFER_BYTES, read_half),
            writer: write_half,
            next_correlation_id: 1,
            in_flight: VecDeque::new(),
            arrived: HashMap::new(),
            broken: false,
            versions: BrokerVersions::default(),
            socket,
        }
    }

    /// ApiVersions at our highest version; a broker that does not know it
    /// answers a v0 body with UNSUPPORTED_VERSION and its own range, and we
    /// ask again at the highest version both know.
    /// SASL when the config asks for it: SaslHandshake v1 naming the
    /// mechanism, then SaslAuthenticate with PLAIN's `NUL user NUL
    /// password`, or SCRAM's two client messages (the broker's final one
    /// checked: it proves the broker knows the user's keys); a refusal is
    /// the broker's error (SASL_AUTHENTICATION_FAILED with its message).
    async fn authenticate(&mut self) -> Result<(), ClientError> {
        use kafka_protocol::messages::SaslHandshakeRequest;
        let Some(login) = self.config.sasl.clone() else {
            return Ok(());
        };
        let scram = match login.mechanism.as_str() {
            "PLAIN" => None,
            name => match crate::scram::Mechanism::from_name(name) {
                Some(mechanism) => Some(mechanism),
                None => {
                    return Err(ClientError::Sasl {
                        address: self.address.clone(),
                        message: format!(
                            "mechanism {name} is not served by this client (PLAIN, \
                             SCRAM-SHA-256, SCRAM-SHA-512)"
                        ),
                    })
                }
            },
        };
        let handshake = SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_string(login.mechanism.clone()));
        let version = self.version::<SaslHandshakeRequest>(1..=1)?;
        let answer = self.call(&handshake, version).await?;
        if answer.error_code != 0 {
            return Err(ClientError::Kafka {
                api_key: ApiKey::SaslHandshake,
                code: answer.error_code,
                message: Some(format!(
                    "the broker offers {:?}",
                    answer
                        .mechanisms
                        .iter()
                        .map(|m| m.as_str())
                        .collect::<Vec<_>>()
                )),
            });
        }
        let Some(mechanism) = scram else {
            let mut message = Vec::with_capacity(2 + login.user.len() + login.password.len());
            message.push(0);
            message.extend_from_slice(login.user.as_bytes());
            message.push(0);
            message.extend_from_slice(login.password.as_bytes());
            self.sasl_authenticate(message).await?;
            return Ok(());
        };
        let (mut exchange, first) =
            crate::scram::ClientExchange::start(mechanism, &login.user, &login.password);
        let server_first = self.sasl_authenticate(first).await?;
        let last = exchange
            .respond(&server_first)
            .map_err(|message| ClientError::Sasl {
                address: self.address.clone(),
                message,
            })?;
        let server_final = self.sasl_authenticate(last).await?;
        exchange
            .verify(&server_final)
            .map_err(|message| ClientError::Sasl {
                address: self.address.clone(),
                message,
            })
    }

    /// One SaslAuthenticate: the broker's bytes, or its refusal.
    async fn sasl_authenticate(&mut self, message: Vec<u8>) -> Result<Bytes, ClientError> {
        use kafka_protocol::messages::SaslAuthenticateRequest;
        let version = self.version::<SaslAuthenticateRequest>(0..=2)?;
        let answer = self
            .call(
                &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(message)),
                version,
            )
            .await?;
        if answer.error_code != 0 {
            return Err(ClientError::Kafka {
                api_key: ApiKey::SaslAuthenticate,
                code: answer.error_code,
                message: answer.error_message.map(|m| m.to_string()),
            });
        }
        Ok(answer.auth_bytes)
    }

    async fn negotiate(&mut self) -> Result<(), ClientError> {
        let mut version = API_VERSIONS_VERSION_MAX;
        for _ in 0..2 {
            let request = ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_string(self.config.software_name.clone()))
                .with_client_software_version(StrBytes::from_string(
                    self.config.software_version.clone(),
                ));
            let pending = self.send(&request, version).await?;
            let body = self.receive_frame(&pending).await?;
            let error_code = match body.get(..2) {
                Some(code) => i16::from_be_bytes([code[0], code[1]]),
                None => {
                    return Err(self.decode_error(ApiKey::ApiVersions, version, "empty body"));
                }
            };
            let decode_version = if error_code == UNSUPPORTED_VERSION {
                0
            } else {
                version
            };
            let response =
                self.decode_body::<ApiVersionsResponse>(body, ApiKey::ApiVersions, decode_version)?;
            self.versions = BrokerVersions::from_response(&response);
            if error_code == UNSUPPORTED_VERSION {
                match self
                    .versions
                    .highest_common(ApiKey::ApiVersions, 0..=API_VERSIONS_VERSION_MAX)
                {
                    Some(lower) if lower < version => {
                        version = lower;
                        continue;
                    }
                    _ => {
                        return Err(ClientError::UnsupportedVersion {
                            address: self.address.clone(),
                            api_key: ApiKey::ApiVersions,
                            ours_min: 0,
                            ours_max: API_VERSIONS_VERSION_MAX,
                            broker: self.versions.range(ApiKey::ApiVersions),
                        })
                    }
                }
            }
            return check_error(ApiKey::ApiVersions, error_code, None);
        }
        Err(self.decode_error(
            ApiKey::ApiVersions,
            version,
            "broker refused every ApiVersions version",
        ))
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    /// Whether an earlier failure left the stream at an unknown position:
    /// every later call fails, a new connection is needed.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Whether the broker closed its end (it stopped, or restarted and the
    /// kernel reset the socket), as far as this host knows now; asked of
    /// the kernel without reading or waiting. A connection kept idle for
    /// reuse checks this first: writing to one the broker left fails the
    /// request that finds out.
    pub fn peer_closed(&self) -> bool {
        let mut poll = libc::pollfd {
            fd: self.socket,
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one pollfd, valid for the call; the socket is open for
        // as long as `self` holds its stream. A zero timeout never blocks.
        let ready = unsafe { libc::poll(&mut poll, 1, 0) };
        ready > 0 && poll.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
    }

    /// The settings this connection was opened with (for connections to
    /// other brokers of the same cluster).
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// How long each later request may take from now on (a pooled
    /// connection carries requests that may wait for different times).
    pub fn set_request_timeout(&mut self, timeout: Duration) {
        self.config.request_timeout = timeout;
    }

    pub fn broker_versions(&self) -> &BrokerVersions {
        &self.versions
    }

    /// Requests sent whose responses were not received yet.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len() + self.arrived.len()
    }

    /// The highest version of `R` that both this caller (`ours`) and the
    /// broker support.
    pub fn version<R: Request>(&self, ours: RangeInclusive<i16>) -> Result<i16, ClientError> {
        let api_key = api_key_of::<R>();
        self.versions
            .highest_common(api_key, ours.clone())
            .ok_or_else(|| ClientError::UnsupportedVersion {
                address: self.address.clone(),
                api_key,
                ours_min: *ours.start(),
                ours_max: *ours.end(),
                broker: self.versions.range(api_key),
            })
    }

    /// Sends a request and waits for its response.
    pub async fn call<R: Request>(
        &mut self,
        request: &R,
        version: i16,
    ) -> Result<R::Response, ClientError> {
        let pending = self.send(request, version).await?;
        self.receive(pending).await
    }

    /// Writes a request; its response is received with `receive`.
    pub async fn send<R: Request>(
        &mut self,
        request: &R,
        version: i16,
    ) -> Result<Pending<R::Response>, ClientError> {
        self.send_sharing(request, version, &[]).await
    }

    /// Writes a request whose byte fields that are slices of `shared`
    /// (at least 16 KiB; a forwarded produce's record batches) go to the
    /// socket from those buffers, not copied into the frame.
    pub async fn send_sharing<R: Request>(
        &mut self,
        request: &R,
        version: i16,
        shared: &[Bytes],
    ) -> Result<Pending<R::Response>, ClientError> {
        let correlation_id = self.write_request(request, version, shared).await?;
        self.in_flight.push_back(correlation_id);
        Ok(Pending {
            correlation_id,
            api_key: api_key_of::<R>(),
            version,
            _response: PhantomData,
        })
    }

    /// Writes a request the broker does not answer (Produce with acks=0).
    pub async fn send_without_response<R: Request>(
        &mut self,
        request: &R,
        version: i16,
    ) -> Result<(), ClientError> {
        self.send_without_response_sharing(request, version, &[])
            .await
    }

    /// [`Connection::send_without_response`], sharing as
    /// [`Connection::send_sharing`] does.
    pub async fn send_without_response_sharing<R: Request>(
        &mut self,
        request: &R,
        version: i16,
        shared: &[Bytes],
    ) -> Result<(), ClientError> {
        self.write_request(request, version, shared)
            .await
            .map(|_| ())
    }

    /// Resolves once response bytes are waiting to be read (or the stream
    /// ended or failed, which the next `receive` reports). Cancel-safe:
    /// bytes read stay buffered, so a caller can race this against other
    /// work (new requests to send) and call `receive` when it wins.
    pub async fn readable(&mut self) {
        if !self.arrived.is_empty() {
            return;
        }
        let reader = &mut self.reader;
        futures_lite::future::poll_fn(|cx| {
            std::pin::Pin::new(&mut *reader)
                .poll_fill_buf(cx)
                .map(|_| ())
        })
        .await
    }

    /// Waits for the response to `pending`, within the request timeout.
    pub async fn receive<T: Decodable + HeaderVersion>(
        &mut self,
        pending: Pending<T>,
    ) -> Result<T, ClientError> {
        let body = self.receive_frame(&pending).await?;
        self.decode_body(body, pending.api_key, pending.version)
    }

    /// Sends a whole request `frame` framed elsewhere (its own header and
    /// correlation id; without the length prefix) and reads the one
    /// response frame that answers it, returned with its length prefix,
    /// within the request timeout. Only on a connection with nothing else
    /// in flight: the answer is the next frame to arrive.
    pub async fn round_trip(&mut self, frame: &[u8]) -> Result<Bytes, ClientError> {
        self.usable()?;
        if !self.in_flight.is_empty() || !self.arrived.is_empty() {
            return Err(ClientError::Correlation {
                address: self.address.clone(),
                expected: frame_correlation_id(&frame[4.min(frame.len())..]).unwrap_or(-1),
                got: self.in_flight.front().copied().unwrap_or(-1),
            });
        }
        let timeout = self.config.request_timeout;
        let exchanged = async {
            self.writer
                .write_all(&(frame.len() as u32).to_be_bytes())
                .await
                .map_err(Err)?;
            self.writer.write_all(frame).await.map_err(Err)?;
            self.writer.flush().await.map_err(Err)?;
            self.read_frame().await.map_err(Ok)
        };
        match with_timeout(timeout, exchanged).await {
            Some(Ok(answer)) => {
                let mut framed = BytesMut::with_capacity(LENGTH_PREFIX_BYTES + answer.len());
                framed.extend_from_slice(&(answer.len() as u32).to_be_bytes());
                framed.extend_from_slice(&answer);
                Ok(framed.freeze())
            }
            Some(Err(Ok(error))) => Err(error),
            Some(Err(Err(source))) => {
                self.broken = true;
                Err(ClientError::Io {
                    address: self.address.clone(),
                    source,
                })
            }
            None => {
                self.broken = true;
                Err(ClientError::Timeout {
                    address: self.address.clone(),
                    api_key: frame
                        .get(..2)
                        .and_then(|k| ApiKey::try_from(i16::from_be_bytes([k[0], k[1]])).ok())
                        .unwrap_or(ApiKey::ApiVersions),
                    timeout_ms: timeout.as_millis(),
                })
            }
        }
    }

    async fn write_request<R: Request>(
        &mut self,
        request: &R,
        version: i16,
        shared: &[Bytes],
    ) -> Result<i32, ClientError> {
        self.usable()?;
        let api_key = api_key_of::<R>();
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1).max(1);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_string(self.config.client_id.clone())));
        // Sized up front (a produce request grown from a small buffer
        // copies its batches once per doubling); shared runs not at all.
        let frame = crate::codec::encode_request_sharing(&header, version, request, shared)
            .map_err(|e| ClientError::Encode {
                api_key,
                version,
                message: e.to_string(),
            })?;
        let written = async {
            for part in frame.parts() {
                self.writer.write_all(part).await?;
            }
            self.writer.flush().await
        };
        match with_timeout(self.config.request_timeout, written).await {
            Some(Ok(())) => Ok(correlation_id),
            Some(Err(source)) => {
                self.broken = true;
                Err(ClientError::Io {
                    address: self.address.clone(),
                    source,
                })
            }
            None => {
                self.broken = true;
                Err(ClientError::Timeout {
                    address: self.address.clone(),
                    api_key,
                    timeout_ms: self.config.request_timeout.as_millis(),
                })
            }
        }
    }

    /// Reads frames until the one for `pending` arrives; returns its body
    /// (after the response header, which depends on the type).
    async fn receive_frame<T: HeaderVersion>(
        &mut self,
        pending: &Pending<T>,
    ) -> Result<Bytes, ClientError> {
        let wanted = pending.correlation_id;
        let mut frame = match self.arrived.remove(&wanted) {
            Some(frame) => frame,
            None => {
                if !self.in_flight.contains(&wanted) {
                    return Err(ClientError::Correlation {
                        address: self.address.clone(),
                        expected: wanted,
                        got: wanted,
                    });
                }
                let deadline = self.config.request_timeout;
                let read = async {
                    loop {
                        let frame = self.read_frame().await?;
                        let got = frame_correlation_id(&frame);
                        let expected = self.in_flight.pop_front().expect("a request is in flight");
                        if got != Some(expected) {
                            self.broken = true;
                            return Err(ClientError::Correlation {
                                address: self.address.clone(),
                                expected,
                                got: got.unwrap_or(-1),
                            });
                        }
                        if expected == wanted {
                            return Ok(frame);
                        }
                        self.arrived.insert(expected, frame);
                    }
                };
                match with_timeout(deadline, read).await {
                    Some(result) => result?,
                    None => {
                        self.broken = true;
                        return Err(ClientError::Timeout {
                            address: self.address.clone(),
                            api_key: pending.api_key,
                            timeout_ms: deadline.as_millis(),
                        });
                    }
                }
            }
        };
        // Correlation id, then a tagged-field byte in header v1.
        let header_bytes = 4 + usize::from(T::header_version(pending.version) >= 1);
        if frame.len() < header_bytes {
            return Err(self.decode_error(pending.api_key, pending.version, "short header"));
        }
        if header_bytes == 5 && frame[4] != 0 {
            // Tagged fields in the header: decode them properly.
            let mut header = frame.clone();
            kafka_protocol::messages::ResponseHeader::decode(&mut header, 1)
                .map_err(|e| self.decode_error(pending.api_key, pending.version, &e.to_string()))?;
            return Ok(header);
        }
        let _ = frame.split_to(header_bytes);
        Ok(frame)
    }

    async fn read_frame(&mut self) -> Result<Bytes, ClientError> {
        let io_error = |this: &mut Self, source: std::io::Error| {
            this.broken = true;
            if source.kind() == std::io::ErrorKind::UnexpectedEof {
                ClientError::Closed {
                    address: this.address.clone(),
                }
            } else {
                ClientError::Io {
                    address: this.address.clone(),
                    source,
                }
            }
        };
        let mut prefix = [0u8; LENGTH_PREFIX_BYTES];
        if let Err(e) = self.reader.read_exact(&mut prefix).await {
            return Err(io_error(self, e));
        }
        let length = i32::from_be_bytes(prefix);
        if length < 4 || length as usize > self.config.response_bytes_max {
            self.broken = true;
            return Err(ClientError::FrameTooLarge {
                address: self.address.clone(),
                length: length.into(),
                limit: self.config.response_bytes_max,
            });
        }
        let mut frame = BytesMut::zeroed(length as usize);
        if let Err(e) = self.reader.read_exact(&mut frame).await {
            return Err(io_error(self, e));
        }
        Ok(frame.freeze())
    }

    fn decode_body<T: Decodable>(
        &self,
        mut body: Bytes,
        api_key: ApiKey,
        version: i16,
    ) -> Result<T, ClientError> {
        T::decode(&mut body, version)
            .map_err(|e| self.decode_error(api_key, version, &e.to_string()))
    }

    fn decode_error(&self, api_key: ApiKey, version: i16, message: &str) -> ClientError {
        ClientError::Decode {
            address: self.address.clone(),
            api_key,
            version,
            message: message.to_string(),
        }
    }

    fn usable(&self) -> Result<(), ClientError> {
        if self.broken {
            return Err(ClientError::Broken {
                address: self.address.clone(),
            });
        }
        Ok(())
    }
}

fn api_key_of<R: Request>() -> ApiKey {
    ApiKey::try_from(R::KEY).expect("every Request type has a known api key")
}

fn frame_correlation_id(frame: &[u8]) -> Option<i32> {
    frame
        .get(..4)
        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Runs `future` with a deadline on the current glommio executor; `None`
/// when the deadline passed first.
async fn with_timeout<T>(
    limit: Duration,
    future: impl std::future::Future<Output = T>,
) -> Option<T> {
    futures_lite::future::or(async { Some(future.await) }, async {
        glommio::timer::sleep(limit).await;
        None
    })
    .await
}

/// The Kafka port a broker address without one gets.
pub const PORT_DEFAULT: u16 = 9092;

/// `HOST` → `HOST:9092`, `[V6]` → `[V6]:9092`; `HOST:PORT`, `[V6]:PORT`
/// and a bare IPv6 address are kept as they are (a bare IPv6 address gets
/// brackets and the port).
pub fn with_default_port(address: &str) -> anyhow::Result<String> {
    let address = address.trim();
    if address.is_empty() {
        anyhow::bail!("the broker address is empty");
    }
    if let Some(rest) = address.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((_, "")) => Ok(format!("{address}:{PORT_DEFAULT}")),
            Some((_, port)) if port.starts_with(':') => Ok(address.to_string()),
            _ => anyhow::bail!("bad broker address {address:?}"),
        };
    }
    match address.matches(':').count() {
        0 => Ok(format!("{address}:{PORT_DEFAULT}")),
        1 => Ok(address.to_string()),
        _ if address.parse::<std::net::Ipv6Addr>().is_ok() => {
            Ok(format!("[{address}]:{PORT_DEFAULT}"))
        }
        _ => anyhow::bail!("bad broker address {address:?}"),
    }
}

/// The brokers of a comma-separated bootstrap list, as Kafka's tools take
/// it, each with [`with_default_port`]; an empty entry is an error.
pub fn bootstrap_list(list: &str) -> anyhow::Result<Vec<String>> {
    list.split(',')
        .map(|entry| {
            with_default_port(entry)
                .map_err(|e| anyhow::anyhow!("the bootstrap list {list:?}: {e}"))
        })
        .collect()
}

/// Connects to the first of `addresses` that answers, trying each once in
/// order; every failure when none does.
pub async fn connect_first(
    addresses: &[String],
    config: &ClientConfig,
) -> Result<Connection, Vec<ClientError>> {
    let mut failures = Vec::with_capacity(addresses.len());
    for address in addresses {
        match Connection::connect(address, config.clone()).await {
            Ok(connection) => return Ok(connection),
            Err(error) => failures.push(error),
        }
    }
    Err(failures)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn a_bare_host_gets_kafkas_port() {
        for (given, expected) in [
            ("localhost", "localhost:9092"),
            ("127.0.0.1", "127.0.0.1:9092"),
            ("127.0.0.1:19092", "127.0.0.1:19092"),
            ("[::1]", "[::1]:9092"),
            ("[::1]:19092", "[::1]:19092"),
            ("::1", "[::1]:9092"),
        ] {
            assert_eq!(with_default_port(given).unwrap(), expected, "{given}");
        }
        for bad in ["", "[::1", "a:b:c"] {
            assert!(with_default_port(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bootstrap_lists_split_on_commas_and_refuse_empty_entries() {
        assert_eq!(bootstrap_list("a:1").unwrap(), vec!["a:1"]);
        assert_eq!(
            bootstrap_list("a:1, b,c:3").unwrap(),
            vec!["a:1", "b:9092", "c:3"]
        );
        let empty = bootstrap_list("a:1,,b:2").unwrap_err().to_string();
        assert!(empty.contains("empty"), "{empty}");
        assert!(bootstrap_list("").is_err());
    }

    #[test]
    fn error_names_are_kafkas() {
        assert_eq!(error_name(0), "NONE");
        assert_eq!(error_name(36), "TOPIC_ALREADY_EXISTS");
        assert_eq!(error_name(3), "UNKNOWN_TOPIC_OR_PARTITION");
        assert_eq!(error_name(35), "UNSUPPORTED_VERSION");
        assert_eq!(error_name(-1), "UNKNOWN_SERVER_ERROR");
        assert_eq!(error_name(9999), "UNKNOWN_ERROR_CODE_9999");
    }

    #[test]
    fn highest_common_version() {
        let response = ApiVersionsResponse::default().with_api_keys(vec![
            kafka_protocol::messages::api_versions_response::ApiVersion::default()
                .with_api_key(ApiKey::Fetch as i16)
                .with_min_version(4)
                .with_max_version(12),
        ]);
        let versions = BrokerVersions::from_response(&response);
        assert_eq!(versions.highest_common(ApiKey::Fetch, 0..=17), Some(12));
        assert_eq!(versions.highest_common(ApiKey::Fetch, 4..=4), Some(4));
        assert_eq!(versions.highest_common(ApiKey::Fetch, 0..=3), None);
        assert_eq!(versions.highest_common(ApiKey::Produce, 0..=9), None);
    }

    fn run<T>(future: impl std::future::Future<Output = T>) -> T {
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .io_memory(1 << 20)
            .make()
            .expect("executor")
            .run(future)
    }

    #[test]
    fn refused_connection_is_unreachable() {
        // Bind then drop a listener so the port is very likely closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let address = format!("127.0.0.1:{port}");
        let error = run(Connection::connect(&address, ClientConfig::default()))
            .err()
            .expect("nothing listens");
        assert!(
            matches!(error, ClientError::Unreachable { .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("unreachable"), "{error}");
    }

    #[test]
    fn silent_peer_times_out() {
        // A listener that accepts (kernel backlog) but never answers.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let config = ClientConfig {
            request_timeout: Duration::from_millis(200),
            ..ClientConfig::default()
        };
        let error = run(Connection::connect(&address, config))
            .err()
            .expect("no answer");
        assert!(matches!(error, ClientError::Timeout { .. }), "{error:?}");
        drop(listener);
    }

    /// A broker of one connection on a thread: answers the ApiVersions a
    /// connection opens with, then holds the socket until told to hang up.
    fn answer_api_versions_then_hang_up(
        listener: std::net::TcpListener,
        hang_up: std::sync::mpsc::Receiver<()>,
    ) -> std::thread::JoinHandle<()> {
        use std::io::{Read, Write};
        std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().expect("accept");
            let mut length = [0u8; 4];
            socket.read_exact(&mut length).expect("request length");
            let mut request = vec![0u8; u32::from_be_bytes(length) as usize];
            socket.read_exact(&mut request).expect("request");
            let correlation_id = i32::from_be_bytes(request[4..8].try_into().unwrap());
            let version = i16::from_be_bytes(request[2..4].try_into().unwrap());
            let response = ApiVersionsResponse::default().with_api_keys(vec![
                kafka_protocol::messages::api_versions_response::ApiVersion::default()
                    .with_api_key(ApiKey::ApiVersions as i16)
                    .with_min_version(0)
                    .with_max_version(API_VERSIONS_VERSION_MAX),
            ]);
            let frame =
                crate::codec::encode_response(correlation_id, version, &response).expect("encode");
            socket.write_all(&frame).expect("answer");
            let _ = hang_up.recv_timeout(Duration::from_secs(30));
        })
    }

    #[test]
    fn an_idle_connection_knows_when_its_broker_hung_up() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (hang_up, told) = std::sync::mpsc::channel();
        let broker = answer_api_versions_then_hang_up(listener, told);
        run(async move {
            let connection = Connection::connect(&address, ClientConfig::default())
                .await
                .expect("connects");
            assert!(
                !connection.peer_closed(),
                "a connection whose broker holds it open is not closed"
            );
            hang_up.send(()).unwrap();
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !connection.peer_closed() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the broker's hang-up was not seen within 10 s"
                );
                glommio::timer::sleep(Duration::from_millis(5)).await;
            }
        });
        broker.join().unwrap();
    }

    #[test]
    fn bad_resolution_is_reported() {
        let error = run(Connection::connect(
            "no-such-host.invalid:9092",
            ClientConfig::default(),
        ))
        .err()
        .expect("cannot resolve");
        assert!(matches!(error, ClientError::Resolve { .. }), "{error:?}");
    }
}
