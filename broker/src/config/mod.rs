//! Broker configuration: embedded defaults, then a TOML file, then command
//! line flags, each overriding the one before. Keys use Kafka's names for
//! Kafka's settings. Every problem is reported naming the key, before
//! anything is opened.

pub mod dynamic;
pub mod effective;
pub mod io_properties;
pub mod reference;

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

use crate::kraft_config::{self, ListenerList, NamedAddress, ProcessRoles, Quorum};
use crate::limits::FRAME_OVERHEAD_BYTES;
use crate::topic_config::{topic_key_for_broker_key, TopicDefaults};

/// glommio's io memory per executor when none is configured.
pub const IO_MEMORY_BYTES_DEFAULT: usize = 10 << 20;

/// Where a setting came from, for error messages.
#[derive(Debug, Clone)]
pub enum Source {
    File(PathBuf),
    Flag,
    /// A check of settings left at their defaults.
    Default,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::File(path) => write!(f, "in {}", path.display()),
            Source::Flag => write!(f, "on the command line"),
            Source::Default => write!(f, "by default"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("config file {path} is not valid TOML: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("unknown config key `{key}` ({origin})")]
    UnknownKey { key: String, origin: Source },
    #[error("invalid value {value:?} for `{key}` ({origin}): {reason}")]
    InvalidValue {
        key: String,
        value: String,
        origin: Source,
        reason: String,
    },
}

/// How the broker writes its log lines (`log.format`, `--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

impl LogFormat {
    /// The format named `name` (`text`, `json`).
    pub fn parse(name: &str) -> Option<Self> {
        [LogFormat::Text, LogFormat::Json]
            .into_iter()
            .find(|format| format.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// A setting as given: key, value and where it came from.
#[derive(Debug, Clone)]
pub struct GivenSetting {
    pub key: String,
    pub value: String,
    pub source: Source,
}

/// Settings given on the command line; `None` leaves the file or default.
#[derive(Debug, Clone, Default)]
pub struct Flags {
    pub config_file: Option<PathBuf>,
    pub data_dir: Option<PathBuf>,
    pub listen: Option<String>,
    pub advertise: Option<String>,
    pub node_id: Option<String>,
    pub cores: Option<String>,
    pub cpuset: Option<String>,
    pub admin_listen: Option<String>,
    /// `--set key=value` pairs, in Kafka's names.
    pub settings: Vec<(String, String)>,
}

/// The validated configuration the broker runs with.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub node_id: i32,
    pub listen: SocketAddr,
    /// The listeners clients and other brokers connect to (every listener
    /// but the controller's), each with its security; the first is the one
    /// `listen` and `advertise_*` name.
    pub listeners: Vec<std::sync::Arc<Listener>>,
    /// How this broker connects to the other brokers' listener named by
    /// `inter.broker.listener.name`.
    pub inter_broker: InterBroker,
    /// The controller listener's security.
    pub controller_security: ControllerSecurity,
    /// Each listener's security protocol, by name.
    pub security_protocols: Vec<(String, String)>,
    /// The built-in authorizer (`authorizer.class.name`), when on.
    pub authorizer: Option<std::sync::Arc<crate::authorizer::Authorizer>>,
    pub advertise_host: String,
    pub advertise_port: u16,
    pub data_dir: PathBuf,
    pub cores: usize,
    /// The CPUs the executors are pinned to, in order (`strom.cpuset`);
    /// empty: CPUs 0..cores.
    pub cpuset: Vec<usize>,
    pub auto_create_topics: bool,
    pub num_partitions: i32,
    /// Replicas of a topic created without a replication factor
    /// (`default.replication.factor`).
    pub default_replication_factor: i16,
    /// Replicas of `__consumer_offsets` in a cluster, capped by the live
    /// brokers when it is created (`offsets.topic.replication.factor`).
    pub offsets_replication_factor: i16,
    pub delete_topic_enable: bool,
    pub message_max_bytes: u32,
    /// Largest request frame accepted, checked before allocating it.
    pub frame_bytes_max: usize,
    /// Request bytes the broker buffers at once, received or being handled
    /// (`queued.max.request.bytes`), shared out evenly among the cores.
    pub queued_request_bytes_max: usize,
    /// Response bytes waiting to be written, for the whole broker
    /// (`strom.queued.max.response.bytes`), shared out evenly among the cores.
    pub queued_response_bytes_max: usize,
    /// Response bytes waiting to be written on one connection
    /// (`strom.connection.queued.max.response.bytes`).
    pub connection_response_bytes_max: usize,
    /// A connection that neither sends nor takes a byte for this long is
    /// closed (`connections.max.idle.ms`).
    pub connections_max_idle_ms: u64,
    /// A request whose frame is not all received this long after it was
    /// admitted closes its connection (`strom.request.receive.timeout.ms`).
    pub request_receive_timeout_ms: u64,
    /// glommio io_memory per executor, if set (`strom.io.memory.bytes`).
    pub io_memory_bytes: Option<usize>,
    /// How long an idle executor polls before it parks
    /// (`strom.spin.before.park.us`).
    pub spin_before_park_us: u64,
    /// The most each of a core's two journal chunks grows to
    /// (`strom.journal.chunk.bytes.max`).
    pub journal_chunk_bytes_max: u64,
    /// How often each core applies retention to its partitions.
    pub retention_check_interval_ms: u64,
    /// The log cleaner of compacted topics (`log.cleaner.*`).
    pub cleaner: CleanerConfig,
    /// The transaction coordinator (`transaction.*`).
    pub transactions: TransactionConfig,
    /// Producers idle this long are dropped from partitions' idempotence
    /// state (`producer.id.expiration.ms`).
    pub producer_id_expiration_ms: i64,
    /// Cluster timing: heartbeats, sessions, elections.
    pub cluster_timing: ClusterTiming,
    /// Bytes of metadata log a voter applies before it snapshots the image
    /// and drops the log behind it (`strom.metadata.snapshot.bytes`).
    pub metadata_snapshot_bytes: u64,
    pub topic_defaults: TopicDefaults,
    /// The admin HTTP listener (metrics, health, status); `None` when off.
    pub admin_listen: Option<SocketAddr>,
    /// Whether `admin.listen` was set explicitly: then failing to bind it
    /// stops the broker; the default address only logs a warning.
    pub admin_listen_required: bool,
    /// What was taken from `io-properties.toml` (`strom-tune iotune`).
    pub io_properties: Option<crate::config::io_properties::Applied>,
    /// Consumer group settings (`group.*`, `offsets.*`).
    pub groups: ::groups::config::GroupConfig,
    /// `log.format`.
    pub log_format: LogFormat,
    /// Per-partition series (a `partition` label) on `/metrics`
    /// (`strom.metrics.partition.labels`); per topic otherwise.
    pub metrics_partition_labels: bool,
    /// Load-balancer mode (`strom.balancer.enable`): clients reach every
    /// broker through one address (`advertised.listeners` names the
    /// balancer), so a request for a partition led elsewhere is forwarded
    /// to its leader instead of refused.
    pub balancer_enable: bool,
    /// In load-balancer mode, list one broker that leads every partition
    /// (`strom.balancer.single.broker`), for clients that keep one
    /// connection per address.
    pub balancer_single_broker: bool,
    /// The address other brokers reach this one at: the client listener's
    /// (127.0.0.1 when it is 0.0.0.0), or `strom.balancer.broker.address`.
    /// In load-balancer mode this is what the broker registers, since the
    /// advertised address is the balancer's.
    pub broker_host: String,
    pub broker_port: u16,
    /// The KRaft settings: roles, voters, named listeners, rack. A single
    /// node without voters only checks them.
    pub quorum: Quorum,
    /// Every setting given, in the order applied (later ones win): for the
    /// effective configuration logged at start.
    pub given: Vec<GivenSetting>,
}

/// How often brokers heartbeat, how long the controller waits before
/// fencing a silent one, and how long voters wait before electing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterTiming {
    /// `broker.session.timeout.ms`: a broker not heard from this long is fenced.
    pub session_timeout_ms: u64,
    /// `broker.heartbeat.interval.ms`.
    pub heartbeat_interval_ms: u64,
    /// `controller.quorum.election.timeout.ms`: a voter that hears no
    /// leader for a random time between this and twice this campaigns.
    pub election_timeout_ms: u64,
    /// `replica.lag.time.max.ms`: a follower not caught up with its leader
    /// for this long leaves the ISR.
    pub replica_lag_time_max_ms: u64,
    /// `auto.leader.rebalance.enable`: the active controller moves
    /// leadership back to each partition's first replica once it is in sync.
    pub auto_leader_rebalance: bool,
    /// `leader.imbalance.check.interval.seconds`, in ms.
    pub leader_imbalance_check_interval_ms: u64,
}

impl Default for ClusterTiming {
    /// Kafka's defaults.
    fn default() -> Self {
        Self {
            session_timeout_ms: 9_000,
            heartbeat_interval_ms: 2_000,
            election_timeout_ms: 1_000,
            replica_lag_time_max_ms: crate::replica::REPLICA_LAG_TIME_MAX_MS_DEFAULT,
            auto_leader_rebalance: true,
            leader_imbalance_check_interval_ms: 300_000,
        }
    }
}

/// A duration setting in milliseconds, between `min` and `max`.
fn parse_ms_between(
    key: &str,
    value: &str,
    source: &Source,
    min: u64,
    max: u64,
) -> Result<u64, ConfigError> {
    let ms: u64 = parse_value(key, value, source)?;
    if !(min..=max).contains(&ms) {
        return Err(invalid(
            key,
            value,
            source,
            format!("must be between {min} and {max} ms"),
        ));
    }
    Ok(ms)
}

pub const LISTEN_DEFAULT: &str = "127.0.0.1:9092";
pub const DATA_DIR_DEFAULT: &str = "./strom-data";
pub const ADMIN_LISTEN_DEFAULT: &str = "127.0.0.1:9644";

/// Online cores, the default executor count.
/// A CPU list as Linux writes it (`0-3,8,10-11`): the CPUs in the order
/// given, each below `online` and named once.
pub fn parse_cpuset(value: &str, online: usize) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in value.split(',').map(str::trim) {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let number = |text: &str| {
            text.parse::<usize>()
                .map_err(|_| format!("`{part}` is not a CPU number or range like 0-3"))
        };
        let (first, last) = (number(first)?, number(last)?);
        if first > last {
            return Err(format!("the range `{part}` runs backwards"));
        }
        for cpu in first..=last {
            if cpu >= online {
                return Err(format!(
                    "CPU {cpu} is not online (this machine has CPUs 0-{})",
                    online - 1
                ));
            }
            if cpus.contains(&cpu) {
                return Err(format!("CPU {cpu} is named twice"));
            }
            cpus.push(cpu);
        }
    }
    Ok(cpus)
}

pub fn online_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

struct Builder {
    node_id: i32,
    listen: SocketAddr,
    advertise: Option<(String, u16)>,
    data_dir: PathBuf,
    cores: usize,
    /// Whether `cores` was set, and where (else a cpuset gives it).
    cores_set: bool,
    cores_source: Source,
    cpuset: Vec<usize>,
    /// `authorizer.class.name` names the built-in authorizer.
    authorizer_enabled: bool,
    super_users: Vec<String>,
    allow_everyone_if_no_acl: bool,
    auto_create_topics: bool,
    num_partitions: i32,
    default_replication_factor: i16,
    offsets_replication_factor: i16,
    delete_topic_enable: bool,
    message_max_bytes: u32,
    frame_bytes_max: Option<usize>,
    queued_request_bytes_max: usize,
    queued_response_bytes_max: usize,
    connection_response_bytes_max: usize,
    connections_max_idle_ms: u64,
    request_receive_timeout_ms: u64,
    io_memory_bytes: Option<usize>,
    spin_before_park_us: u64,
    journal_chunk_bytes_max: u64,
    retention_check_interval_ms: u64,
    cleaner: CleanerConfig,
    transactions: TransactionConfig,
    producer_id_expiration_ms: i64,
    cluster_timing: ClusterTiming,
    metadata_snapshot_bytes: u64,
    topic_defaults: TopicDefaults,
    retention_ms: Option<(i64, u8)>,
    roll_ms: Option<(i64, u8)>,
    admin_listen: Option<SocketAddr>,
    admin_listen_required: bool,
    io_properties_path: Option<PathBuf>,
    io_properties: Option<crate::config::io_properties::Applied>,
    groups: ::groups::config::GroupConfig,
    log_format: LogFormat,
    metrics_partition_labels: bool,
    balancer_enable: bool,
    balancer_single_broker: bool,
    balancer_broker_address: Option<(String, u16)>,
    /// `inter.broker.listener.name` (or the listener of
    /// `security.inter.broker.protocol`'s protocol).
    inter_broker_listener: Option<InterBrokerChoice>,
    /// `sasl.mechanism.inter.broker.protocol`.
    inter_broker_mechanism: Option<String>,
    /// `sasl.mechanism.controller.protocol`.
    controller_mechanism: Option<String>,
    roles: ProcessRoles,
    voters: Vec<kraft_config::Voter>,
    bootstrap_servers: Vec<(String, u16)>,
    /// `listeners` as named; a bare `HOST:PORT` given later replaces the
    /// client listener's address (`client_listen`).
    listeners: Vec<NamedAddress>,
    client_listen: Option<(String, u16)>,
    controller_listener_names: Vec<String>,
    advertised_listeners: Vec<NamedAddress>,
    /// `listener.security.protocol.map`: listener name → protocol
    /// (PLAINTEXT or SSL; the SASL protocols are refused).
    security_protocol_map: Vec<(String, String)>,
    /// TLS settings (`ssl.*`, and `listener.name.<name>.ssl.*` with the
    /// listener's name upper-cased): (listener, key, value).
    ssl_settings: Vec<(Option<String>, String, String)>,
    /// SASL settings: (listener, key, value): `sasl.enabled.mechanisms`
    /// (plain or per listener) and `listener.name.<name>.plain.sasl.jaas.config`.
    sasl_settings: Vec<(Option<String>, String, String)>,
    rack: Option<String>,
    given: Vec<GivenSetting>,
}

/// A listener clients (and other brokers) connect to, with its security.
#[derive(Debug)]
pub struct Listener {
    /// Its name in `listeners` (upper-case).
    pub name: String,
    /// PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
    pub protocol: String,
    pub address: SocketAddr,
    /// The address this broker gives clients of this listener.
    pub advertise_host: String,
    pub advertise_port: u16,
    /// TLS (SSL, SASL_SSL), built and checked at start, shared by every
    /// core, its keystore replaced live.
    pub tls: Option<std::sync::Arc<crate::tls::ServerTls>>,
    /// Its TLS settings as given (`ssl.*`, its own
    /// `listener.name.<name>.ssl.*` over them), for the effective config.
    pub ssl_settings: Vec<(String, String)>,
    /// SASL (SASL_PLAINTEXT, SASL_SSL).
    pub sasl: Option<std::sync::Arc<crate::sasl::SaslConfig>>,
    /// How a TLS client certificate names its principal
    /// (`ssl.principal.mapping.rules`), on a TLS listener.
    pub principal_mapper: Option<std::sync::Arc<crate::principal::PrincipalMapper>>,
}

/// How this broker reaches the others: the listener it uses
/// (`inter.broker.listener.name`) and what it shows there, TLS with its own
/// certificate and the listener's truststore, SASL with the mechanism of
/// `sasl.mechanism.inter.broker.protocol` and the listener's JAAS login.
#[derive(Debug, Clone, Default)]
pub struct InterBroker {
    pub listener: String,
    pub protocol: String,
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    pub sasl: Option<protocol::client::SaslLogin>,
}

/// The controller listener's security (the first name of
/// `controller.listener.names`, by `listener.security.protocol.map`): what
/// a voter serves on it, and what every node shows when it connects to
/// one. SSL is TLS with the listener's keystore and truststore (client
/// certificates required between nodes); SASL is PLAIN (as in Kafka, SCRAM's
/// credentials live in the metadata the quorum itself carries), logging in
/// with `sasl.mechanism.controller.protocol` and the listener's
/// `plain.sasl.jaas.config`.
#[derive(Debug, Clone, Default)]
pub struct ControllerSecurity {
    pub listener: String,
    pub protocol: String,
    /// A voter's TLS on its controller listener.
    pub server_tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    pub principal_mapper: Option<std::sync::Arc<crate::principal::PrincipalMapper>>,
    /// A voter's SASL users on its controller listener.
    pub sasl: Option<std::sync::Arc<crate::sasl::SaslConfig>>,
    /// TLS to a voter's controller listener.
    pub client_tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// PLAIN's login to a voter's controller listener.
    pub login: Option<protocol::client::SaslLogin>,
}

/// Kafka's security protocols, all served on the client listener.
const SECURITY_PROTOCOLS: [&str; 4] = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"];
/// The security protocols a client listener serves.
const SERVED_PROTOCOLS: [&str; 4] = SECURITY_PROTOCOLS;

/// Why a listener of `protocol` is refused.
fn not_served(protocol: &str) -> String {
    format!(
        "security protocol {protocol} is not served: Strom serves PLAINTEXT, SSL, \
         SASL_PLAINTEXT and SASL_SSL client listeners, so a client configured for {protocol} \
         could not connect"
    )
}

/// The security protocol of the listener `name` without an entry in
/// `listener.security.protocol.map`: Kafka's default map names each
/// protocol after itself; any other name is PLAINTEXT in Strom.
fn default_security_protocol(name: &str) -> &'static str {
    SECURITY_PROTOCOLS
        .into_iter()
        .find(|protocol| *protocol == name)
        .unwrap_or("PLAINTEXT")
}

/// Parses `listener.security.protocol.map` (`NAME:PROTOCOL,...`); a
/// protocol not served is refused.
fn parse_security_protocol_map(value: &str) -> Result<Vec<(String, String)>, String> {
    let mut names: Vec<(String, String)> = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((name, protocol)) = entry.split_once(':') else {
            return Err(format!("{entry:?}: expected NAME:PROTOCOL"));
        };
        let name = name.trim().to_ascii_uppercase();
        let protocol = protocol.trim().to_ascii_uppercase();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "{entry:?}: a listener name is letters, digits and _"
            ));
        }
        if !SECURITY_PROTOCOLS.contains(&protocol.as_str()) {
            return Err(format!(
                "{entry:?}: the protocol is one of {}",
                SECURITY_PROTOCOLS.join(", ")
            ));
        }
        if !SERVED_PROTOCOLS.contains(&protocol.as_str()) {
            return Err(format!("{entry:?}: {}", not_served(&protocol)));
        }
        if names.iter().any(|(n, _)| *n == name) {
            return Err(format!(
                "{entry:?}: the listener name {name} is given twice"
            ));
        }
        names.push((name, protocol));
    }
    Ok(names)
}

/// The client listener's TLS configuration, if any, and its settings as
/// given.
type ClientTls = (
    Option<std::sync::Arc<crate::tls::ServerTls>>,
    Vec<(String, String)>,
);

/// A `listener.name.<name>.<key>` setting whose `<key>` `served` takes
/// (an `ssl.*` key, `sasl.enabled.mechanisms`,
/// `plain.sasl.jaas.config`): the listener's name (upper-cased, as
/// listener names are) and the key.
fn listener_key(key: &str, served: impl Fn(&str) -> bool) -> Option<(String, &str)> {
    let rest = key.strip_prefix("listener.name.")?;
    let (name, listener_key) = rest.split_once('.')?;
    served(listener_key).then(|| (name.to_ascii_uppercase(), listener_key))
}

fn is_ssl_key(key: &str) -> bool {
    crate::tls::SSL_KEYS.contains(&key)
}

fn is_sasl_key(key: &str) -> bool {
    matches!(
        key,
        "sasl.enabled.mechanisms" | "plain.sasl.jaas.config" | "connections.max.reauth.ms"
    ) || is_login_key(key)
        || crate::oauth::OAUTH_KEYS.contains(&key)
}

/// The JAAS login a broker authenticates to other brokers with, by
/// mechanism (`<mechanism>.sasl.jaas.config`; PLAIN's is
/// `plain.sasl.jaas.config`, which also lists the listener's users).
fn is_login_key(key: &str) -> bool {
    matches!(
        key,
        "scram-sha-256.sasl.jaas.config" | "scram-sha-512.sasl.jaas.config"
    )
}

/// How `inter.broker.listener.name` or `security.inter.broker.protocol`
/// chose the listener between brokers.
#[derive(Debug, Clone)]
enum InterBrokerChoice {
    Name(String),
    Protocol(String),
}

fn parse_value<T: std::str::FromStr>(
    key: &str,
    value: &str,
    source: &Source,
) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    value
        .trim()
        .parse::<T>()
        .map_err(|e| ConfigError::InvalidValue {
            key: key.to_string(),
            value: value.to_string(),
            origin: source.clone(),
            reason: e.to_string(),
        })
}

/// A byte count of at least `min` (the budgets: a smaller one would admit
/// requests one at a time).
fn parse_at_least(
    key: &str,
    value: &str,
    source: &Source,
    min: usize,
) -> Result<usize, ConfigError> {
    let bytes: usize = parse_value(key, value, source)?;
    if bytes < min {
        return Err(invalid(
            key,
            value,
            source,
            format!("must be at least {min} bytes"),
        ));
    }
    Ok(bytes)
}

fn invalid(key: &str, value: &str, source: &Source, reason: impl Into<String>) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.to_string(),
        value: value.to_string(),
        origin: source.clone(),
        reason: reason.into(),
    }
}

fn parse_host_port(key: &str, value: &str, source: &Source) -> Result<(String, u16), ConfigError> {
    let value_trimmed = value.trim();
    if let Some((scheme, _)) = value_trimmed.split_once("://") {
        let scheme = scheme.to_ascii_uppercase();
        if scheme != "PLAINTEXT" && SECURITY_PROTOCOLS.contains(&scheme.as_str()) {
            return Err(invalid(
                key,
                value,
                source,
                format!(
                    "a bare client address is a PLAINTEXT listener: name a {scheme} one in \
                     `listeners` ({scheme}://HOST:PORT) with its settings"
                ),
            ));
        }
    }
    let address = value_trimmed
        .strip_prefix("PLAINTEXT://")
        .unwrap_or(value_trimmed);
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(invalid(key, value, source, "expected HOST:PORT"));
    };
    let port: u16 = parse_value(key, port, source)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(invalid(
            key,
            value,
            source,
            "expected HOST:PORT with a host",
        ));
    }
    Ok((host.to_string(), port))
}

impl Builder {
    fn new() -> Self {
        Self {
            node_id: 0,
            listen: LISTEN_DEFAULT
                .parse()
                .expect("default listen address parses"),
            advertise: None,
            data_dir: PathBuf::from(DATA_DIR_DEFAULT),
            cores: online_cores(),
            cores_set: false,
            cores_source: Source::Default,
            cpuset: Vec::new(),
            authorizer_enabled: false,
            super_users: Vec::new(),
            allow_everyone_if_no_acl: false,
            auto_create_topics: true,
            num_partitions: 1,
            default_replication_factor: 1,
            offsets_replication_factor: 3,
            delete_topic_enable: true,
            message_max_bytes: 1_048_588,
            frame_bytes_max: None,
            queued_request_bytes_max: crate::limits::QUEUED_REQUEST_BYTES_DEFAULT,
            queued_response_bytes_max: crate::limits::QUEUED_RESPONSE_BYTES_DEFAULT,
            connection_response_bytes_max: crate::limits::CONNECTION_RESPONSE_BYTES_DEFAULT,
            connections_max_idle_ms: crate::limits::CONNECTION_IDLE_MS_DEFAULT,
            request_receive_timeout_ms: crate::limits::REQUEST_RECEIVE_TIMEOUT_MS_DEFAULT,
            io_memory_bytes: None,
            spin_before_park_us: crate::limits::SPIN_BEFORE_PARK_US_DEFAULT,
            journal_chunk_bytes_max: storage::limits::JOURNAL_CHUNK_BYTES_DEFAULT,
            retention_check_interval_ms: 300_000,
            cleaner: CleanerConfig::default(),
            transactions: TransactionConfig::default(),
            producer_id_expiration_ms: crate::limits::PRODUCER_ID_EXPIRATION_MS_DEFAULT,
            cluster_timing: ClusterTiming::default(),
            metadata_snapshot_bytes: replication::quorum::SnapshotPolicy::LOG_BYTES_MAX_DEFAULT,
            topic_defaults: TopicDefaults::new(),
            retention_ms: None,
            roll_ms: None,
            admin_listen: Some(
                ADMIN_LISTEN_DEFAULT
                    .parse()
                    .expect("default admin address parses"),
            ),
            admin_listen_required: false,
            io_properties_path: None,
            io_properties: None,
            groups: ::groups::config::GroupConfig::default(),
            log_format: LogFormat::Text,
            metrics_partition_labels: false,
            balancer_enable: false,
            balancer_single_broker: false,
            balancer_broker_address: None,
            inter_broker_listener: None,
            inter_broker_mechanism: None,
            controller_mechanism: None,
            roles: ProcessRoles::parse(kraft_config::PROCESS_ROLES_DEFAULT)
                .expect("default roles parse"),
            voters: Vec::new(),
            bootstrap_servers: Vec::new(),
            listeners: vec![NamedAddress {
                name: kraft_config::CLIENT_LISTENER_NAME_DEFAULT.to_string(),
                host: "127.0.0.1".to_string(),
                port: 9092,
            }],
            client_listen: None,
            controller_listener_names: vec![
                kraft_config::CONTROLLER_LISTENER_NAMES_DEFAULT.to_string()
            ],
            advertised_listeners: Vec::new(),
            security_protocol_map: Vec::new(),
            ssl_settings: Vec::new(),
            sasl_settings: Vec::new(),
            rack: None,
            given: Vec::new(),
        }
    }

    /// Applies one setting. Time settings in several units keep the most
    /// precise one given, whatever the order, as Kafka does.
    fn apply(&mut self, key: &str, value: &str, source: &Source) -> Result<(), ConfigError> {
        self.given.push(GivenSetting {
            key: key.to_string(),
            value: value.trim().to_string(),
            source: source.clone(),
        });
        match key {
            "log.format" => {
                self.log_format = LogFormat::parse(value.trim())
                    .ok_or_else(|| invalid(key, value, source, "expected text or json"))?
            }
            "strom.metrics.partition.labels" => {
                self.metrics_partition_labels = parse_value(key, value, source)?
            }
            "strom.balancer.enable" => self.balancer_enable = parse_value(key, value, source)?,
            "strom.balancer.single.broker" => {
                self.balancer_single_broker = parse_value(key, value, source)?
            }
            "strom.balancer.broker.address" => {
                self.balancer_broker_address = Some(parse_host_port(key, value, source)?);
            }
            "node.id" | "broker.id" => {
                self.node_id = parse_value(key, value, source)?;
                if self.node_id < 0 {
                    return Err(invalid(key, value, source, "must be 0 or more"));
                }
            }
            "listen" => {
                let (host, port) = parse_host_port(key, value, source)?;
                self.listen = resolve(key, value, source, &host, port)?;
                self.client_listen = Some((host, port));
            }
            "listeners" => {
                match kraft_config::parse_listeners(value)
                    .map_err(|reason| invalid(key, value, source, reason))?
                {
                    ListenerList::Client(host, port) => {
                        self.listen = resolve(key, value, source, &host, port)?;
                        self.client_listen = Some((host, port));
                    }
                    ListenerList::Named(named) => {
                        for listener in &named {
                            resolve(key, value, source, &listener.host, listener.port)?;
                        }
                        self.listeners = named;
                        self.client_listen = None;
                    }
                }
            }
            "controller.listener.names" => {
                self.controller_listener_names = kraft_config::parse_listener_names(value)
                    .map_err(|reason| invalid(key, value, source, reason))?;
            }
            "listener.security.protocol.map" => {
                self.security_protocol_map = parse_security_protocol_map(value)
                    .map_err(|reason| invalid(key, value, source, reason))?;
            }
            "inter.broker.listener.name" => {
                let name = value.trim().to_ascii_uppercase();
                if name.is_empty() {
                    return Err(invalid(key, value, source, "must name a listener"));
                }
                self.inter_broker_listener = Some(InterBrokerChoice::Name(name));
            }
            "security.inter.broker.protocol" => {
                let protocol = value.trim().to_ascii_uppercase();
                if !SECURITY_PROTOCOLS.contains(&protocol.as_str()) {
                    return Err(invalid(
                        key,
                        value,
                        source,
                        format!("the protocol is one of {}", SECURITY_PROTOCOLS.join(", ")),
                    ));
                }
                self.inter_broker_listener = Some(InterBrokerChoice::Protocol(protocol));
            }
            "sasl.mechanism.controller.protocol" => {
                let mechanism = value.trim().to_ascii_uppercase();
                if mechanism != "PLAIN" {
                    return Err(invalid(
                        key,
                        value,
                        source,
                        "nodes authenticate on the controller listener with PLAIN (SCRAM's \
                         credentials live in the metadata the controllers carry)",
                    ));
                }
                self.controller_mechanism = Some(mechanism);
            }
            "sasl.mechanism.inter.broker.protocol" => {
                let mechanism = value.trim().to_ascii_uppercase();
                if !crate::sasl::MECHANISMS_SERVED.contains(&mechanism.as_str()) {
                    return Err(invalid(
                        key,
                        value,
                        source,
                        format!(
                            "brokers authenticate to each other with {}",
                            crate::sasl::MECHANISMS_SERVED.join(", ")
                        ),
                    ));
                }
                self.inter_broker_mechanism = Some(mechanism);
            }
            "sasl.enabled.mechanisms"
            | "connections.max.reauth.ms"
            | "sasl.oauthbearer.jwks.endpoint.url"
            | "sasl.oauthbearer.expected.audience"
            | "sasl.oauthbearer.expected.issuer"
            | "sasl.oauthbearer.sub.claim.name"
            | "sasl.oauthbearer.scope.claim.name"
            | "sasl.oauthbearer.clock.skew.seconds" => {
                self.sasl_settings
                    .push((None, key.to_string(), value.trim().to_string()));
            }
            _ if listener_key(key, is_sasl_key).is_some() => {
                let (listener, sasl_key) = listener_key(key, is_sasl_key).expect("checked");
                self.sasl_settings.push((
                    Some(listener),
                    sasl_key.to_string(),
                    value.trim().to_string(),
                ));
            }
            _ if crate::tls::SSL_KEYS.contains(&key) => {
                self.ssl_settings
                    .push((None, key.to_string(), value.trim().to_string()));
            }
            _ if listener_key(key, is_ssl_key).is_some() => {
                let (listener, ssl_key) = listener_key(key, is_ssl_key).expect("checked");
                self.ssl_settings.push((
                    Some(listener),
                    ssl_key.to_string(),
                    value.trim().to_string(),
                ));
            }
            "process.roles" => {
                self.roles = ProcessRoles::parse(value)
                    .map_err(|reason| invalid(key, value, source, reason))?;
            }
            "controller.quorum.voters" => {
                self.voters = kraft_config::parse_voters(value)
                    .map_err(|reason| invalid(key, value, source, reason))?;
            }
            "controller.quorum.bootstrap.servers" => {
                self.bootstrap_servers = kraft_config::parse_bootstrap_servers(value)
                    .map_err(|reason| invalid(key, value, source, reason))?;
            }
            "broker.rack" => {
                let rack = value.trim();
                self.rack = (!rack.is_empty()).then(|| rack.to_string());
            }
            "admin.listen" => {
                self.admin_listen_required = true;
                self.admin_listen = if value.trim() == "off" {
                    None
                } else {
                    let (host, port) = parse_host_port(key, value, source)?;
                    Some(resolve(key, value, source, &host, port)?)
                };
            }
            crate::config::io_properties::PATH_KEY => {
                if value.trim().is_empty() {
                    return Err(invalid(key, value, source, "must not be empty"));
                }
                self.io_properties_path = Some(PathBuf::from(value.trim()));
            }
            "advertise" => {
                self.advertise = Some(parse_host_port(key, value, source)?);
            }
            "advertised.listeners" => {
                match kraft_config::parse_listeners(value)
                    .map_err(|reason| invalid(key, value, source, reason))?
                {
                    ListenerList::Client(host, port) => self.advertise = Some((host, port)),
                    ListenerList::Named(named) => {
                        self.advertised_listeners = named;
                        self.advertise = None;
                    }
                }
            }
            "data.dir" | "log.dir" | "log.dirs" => {
                if value.contains(',') {
                    return Err(invalid(
                        key,
                        value,
                        source,
                        "only one data directory is supported",
                    ));
                }
                if value.trim().is_empty() {
                    return Err(invalid(key, value, source, "must not be empty"));
                }
                self.data_dir = PathBuf::from(value.trim());
            }
            "cores" => {
                self.cores = parse_value(key, value, source)?;
                if self.cores == 0 || self.cores > 1024 {
                    return Err(invalid(key, value, source, "must be between 1 and 1024"));
                }
                self.cores_set = true;
                self.cores_source = source.clone();
            }
            "strom.cpuset" => {
                self.cpuset = parse_cpuset(value, online_cores())
                    .map_err(|why| invalid(key, value, source, why))?;
            }
            "auto.create.topics.enable" => {
                self.auto_create_topics = parse_value(key, value, source)?
            }
            "authorizer.class.name" => {
                self.authorizer_enabled = match value.trim() {
                    "" => false,
                    name if crate::authorizer::CLASS_NAMES.contains(&name) => true,
                    _ => {
                        return Err(invalid(
                            key,
                            value,
                            source,
                            "the built-in authorizer is named \
                             org.apache.kafka.metadata.authorizer.StandardAuthorizer \
                             (or kafka.security.authorizer.AclAuthorizer); empty: none",
                        ))
                    }
                }
            }
            "super.users" => {
                let mut users = Vec::new();
                for user in value.split(';').map(str::trim).filter(|u| !u.is_empty()) {
                    if !user
                        .split_once(':')
                        .is_some_and(|(k, n)| !k.is_empty() && !n.is_empty())
                    {
                        return Err(invalid(
                            key,
                            value,
                            source,
                            "principals are TYPE:NAME, separated by `;` (User:admin;User:ops)",
                        ));
                    }
                    users.push(user.to_string());
                }
                self.super_users = users;
            }
            "allow.everyone.if.no.acl.found" => {
                self.allow_everyone_if_no_acl = parse_value(key, value, source)?
            }
            "delete.topic.enable" => self.delete_topic_enable = parse_value(key, value, source)?,
            "num.partitions" => {
                self.num_partitions = parse_value(key, value, source)?;
                if self.num_partitions < 1
                    || self.num_partitions > crate::limits::TOPIC_PARTITIONS_MAX
                {
                    return Err(invalid(key, value, source, "must be between 1 and 10000"));
                }
            }
            "default.replication.factor" => {
                let factor: i16 = parse_value(key, value, source)?;
                if factor < 1 {
                    return Err(invalid(key, value, source, "must be at least 1"));
                }
                self.default_replication_factor = factor;
            }
            "offsets.topic.replication.factor" => {
                let factor: i16 = parse_value(key, value, source)?;
                if factor < 1 {
                    return Err(invalid(key, value, source, "must be at least 1"));
                }
                self.offsets_replication_factor = factor;
            }
            "socket.request.max.bytes" => {
                let bytes: usize = parse_value(key, value, source)?;
                if bytes < 1024 {
                    return Err(invalid(key, value, source, "must be at least 1024"));
                }
                self.frame_bytes_max = Some(bytes);
            }
            "queued.max.request.bytes" => {
                self.queued_request_bytes_max =
                    parse_at_least(key, value, source, crate::limits::QUEUED_BYTES_MIN)?;
            }
            "strom.queued.max.response.bytes" => {
                self.queued_response_bytes_max =
                    parse_at_least(key, value, source, crate::limits::QUEUED_BYTES_MIN)?;
            }
            "strom.connection.queued.max.response.bytes" => {
                self.connection_response_bytes_max =
                    parse_at_least(key, value, source, crate::limits::QUEUED_BYTES_MIN)?;
            }
            "connections.max.idle.ms" => {
                self.connections_max_idle_ms = parse_value(key, value, source)?;
                if self.connections_max_idle_ms == 0 {
                    return Err(invalid(key, value, source, "must be positive"));
                }
            }
            "strom.request.receive.timeout.ms" => {
                self.request_receive_timeout_ms = parse_value(key, value, source)?;
                if self.request_receive_timeout_ms == 0 {
                    return Err(invalid(key, value, source, "must be positive"));
                }
            }
            "strom.io.memory.bytes" => {
                self.io_memory_bytes = Some(parse_value(key, value, source)?)
            }
            "strom.spin.before.park.us" => {
                let us: u64 = parse_value(key, value, source)?;
                if us > crate::limits::SPIN_BEFORE_PARK_US_MAX {
                    return Err(invalid(key, value, source, "must be at most 10000"));
                }
                self.spin_before_park_us = us;
            }
            "strom.journal.chunk.bytes.max" => {
                let bytes: u64 = parse_value(key, value, source)?;
                if !(crate::limits::JOURNAL_CHUNK_BYTES_MIN
                    ..=crate::limits::JOURNAL_CHUNK_BYTES_MAX)
                    .contains(&bytes)
                {
                    return Err(invalid(
                        key,
                        value,
                        source,
                        "must be between 1 MiB and 1 GiB",
                    ));
                }
                self.journal_chunk_bytes_max = bytes;
            }
            "producer.id.expiration.ms" => {
                let ms: i64 = parse_value(key, value, source)?;
                if ms < 1 {
                    return Err(invalid(key, value, source, "must be at least 1"));
                }
                self.producer_id_expiration_ms = ms;
            }
            "broker.session.timeout.ms" => {
                self.cluster_timing.session_timeout_ms =
                    parse_ms_between(key, value, source, 100, 3_600_000)?;
            }
            "broker.heartbeat.interval.ms" => {
                self.cluster_timing.heartbeat_interval_ms =
                    parse_ms_between(key, value, source, 10, 600_000)?;
            }
            "strom.metadata.snapshot.bytes" => {
                let bytes: u64 = parse_value(key, value, source)?;
                if !(1024..=(1 << 40)).contains(&bytes) {
                    return Err(invalid(
                        key,
                        value,
                        source,
                        "must be between 1 KiB and 1 TiB",
                    ));
                }
                self.metadata_snapshot_bytes = bytes;
            }
            "auto.leader.rebalance.enable" => {
                self.cluster_timing.auto_leader_rebalance = parse_value(key, value, source)?;
            }
            "leader.imbalance.check.interval.seconds" => {
                let seconds = parse_ms_between(key, value, source, 1, 86_400)?;
                self.cluster_timing.leader_imbalance_check_interval_ms = seconds * 1000;
            }
            "replica.lag.time.max.ms" => {
                self.cluster_timing.replica_lag_time_max_ms =
                    parse_ms_between(key, value, source, 100, 3_600_000)?;
            }
            "controller.quorum.election.timeout.ms" => {
                self.cluster_timing.election_timeout_ms =
                    parse_ms_between(key, value, source, 100, 600_000)?;
            }
            "transaction.state.log.num.partitions" => {
                let count: i32 = parse_value(key, value, source)?;
                if !(1..=crate::limits::TRANSACTION_STATE_PARTITIONS_MAX).contains(&count) {
                    return Err(invalid(key, value, source, "must be between 1 and 1000"));
                }
                self.transactions.state_partitions = count;
            }
            "transaction.state.log.replication.factor" => {
                let factor: i16 = parse_value(key, value, source)?;
                if factor < 1 {
                    return Err(invalid(key, value, source, "must be at least 1"));
                }
                self.transactions.state_replication_factor = factor;
            }
            "transaction.state.log.min.isr" => {
                let isr: i32 = parse_value(key, value, source)?;
                if isr < 1 {
                    return Err(invalid(key, value, source, "must be at least 1"));
                }
                self.transactions.state_min_isr = isr;
            }
            "transaction.max.timeout.ms" => {
                let ms: i32 = parse_value(key, value, source)?;
                if ms < 1 {
                    return Err(invalid(key, value, source, "must be at least 1"));
                }
                self.transactions.max_timeout_ms = ms;
            }
            "transactional.id.expiration.ms" => {
                let ms: i64 = parse_value(key, value, source)?;
                if ms < 1 {
                    return Err(invalid(key, value, source, "must be at least 1"));
                }
                self.transactions.id_expiration_ms = ms;
            }
            "transaction.abort.timed.out.transaction.cleanup.interval.ms" => {
                let ms: u64 = parse_value(key, value, source)?;
                if ms < 1 {
                    return Err(invalid(key, value, source, "must be at least 1"));
                }
                self.transactions.abort_check_ms = ms;
            }
            "log.cleaner.enable" => self.cleaner.enable = parse_value(key, value, source)?,
            "log.cleaner.backoff.ms" => {
                self.cleaner.backoff_ms = parse_value(key, value, source)?;
                if self.cleaner.backoff_ms == 0 {
                    return Err(invalid(key, value, source, "must be positive"));
                }
            }
            "log.cleaner.dedupe.buffer.size" => {
                self.cleaner.dedupe_buffer_bytes = parse_value(key, value, source)?;
                if self.cleaner.dedupe_buffer_bytes < CleanerConfig::DEDUPE_BUFFER_BYTES_MIN {
                    return Err(invalid(key, value, source, "must be at least 1048576"));
                }
            }
            "log.cleaner.io.max.bytes.per.second" => {
                let rate: f64 = parse_value(key, value, source)?;
                if rate.is_nan() || rate <= 0.0 {
                    return Err(invalid(key, value, source, "must be a positive number"));
                }
                self.cleaner.io_bytes_per_second = rate;
            }
            "log.retention.check.interval.ms" => {
                self.retention_check_interval_ms = parse_value(key, value, source)?;
                if self.retention_check_interval_ms == 0 {
                    return Err(invalid(key, value, source, "must be positive"));
                }
            }
            "log.retention.ms" | "log.retention.minutes" | "log.retention.hours" => {
                let (factor, precision) = match key {
                    "log.retention.ms" => (1, 3),
                    "log.retention.minutes" => (60_000, 2),
                    _ => (3_600_000, 1),
                };
                let amount: i64 = parse_value(key, value, source)?;
                let ms = if amount < 0 {
                    -1
                } else {
                    amount.saturating_mul(factor)
                };
                if self.retention_ms.is_none_or(|(_, p)| precision >= p) {
                    self.retention_ms = Some((ms, precision));
                }
            }
            "log.roll.ms" | "log.roll.hours" => {
                let (factor, precision) = if key == "log.roll.ms" {
                    (1, 2)
                } else {
                    (3_600_000, 1)
                };
                let amount: i64 = parse_value(key, value, source)?;
                if amount < 1 {
                    return Err(invalid(key, value, source, "must be positive"));
                }
                if self.roll_ms.is_none_or(|(_, p)| precision >= p) {
                    self.roll_ms = Some((amount.saturating_mul(factor), precision));
                }
            }
            _ if ::groups::config::GROUP_CONFIG_KEYS.contains(&key) => self
                .groups
                .set(key, value)
                .map_err(|reason| invalid(key, value, source, reason))?,
            _ => {
                let Some(topic_key) = topic_key_for_broker_key(key) else {
                    return Err(ConfigError::UnknownKey {
                        key: key.to_string(),
                        origin: source.clone(),
                    });
                };
                self.topic_defaults
                    .set(topic_key, value.trim())
                    .map_err(|reason| invalid(key, value, source, reason))?;
                if key == "message.max.bytes" {
                    self.message_max_bytes = parse_value(key, value, source)?;
                }
            }
        }
        Ok(())
    }

    /// Takes the `[io]` settings of the io properties file as defaults for
    /// every key the config did not set (`explicit`).
    fn apply_io_properties(&mut self, explicit: &[String]) -> Result<(), ConfigError> {
        let configured = self.io_properties_path.clone();
        let Some(path) =
            crate::config::io_properties::locate(configured.as_deref(), &self.data_dir)
        else {
            return Ok(());
        };
        let source = Source::File(path.clone());
        let settings = crate::config::io_properties::read(&path).map_err(|reason| {
            invalid(
                crate::config::io_properties::PATH_KEY,
                &path.display().to_string(),
                &source,
                reason,
            )
        })?;
        let mut applied = crate::config::io_properties::Applied {
            path,
            used: Vec::new(),
            overridden: Vec::new(),
        };
        for (key, value) in settings {
            if explicit.contains(&key) {
                applied.overridden.push(key);
                continue;
            }
            self.apply(&key, &value, &source)?;
            applied.used.push((key, value));
        }
        self.io_properties = Some(applied);
        Ok(())
    }

    fn finish(mut self) -> Result<BrokerConfig, ConfigError> {
        let source = Source::Flag;
        self.groups.check_consumer_bounds().map_err(|reason| {
            let value = self.groups.consumer.session_timeout_ms.to_string();
            invalid("group.consumer.session.timeout.ms", &value, &source, reason)
        })?;
        if let Some((ms, _)) = self.retention_ms {
            self.topic_defaults
                .set("retention.ms", &ms.to_string())
                .map_err(|reason| invalid("log.retention.ms", &ms.to_string(), &source, reason))?;
        }
        if let Some((ms, _)) = self.roll_ms {
            self.topic_defaults
                .set("segment.ms", &ms.to_string())
                .map_err(|reason| invalid("log.roll.ms", &ms.to_string(), &source, reason))?;
        }
        // Before the quorum's checks: a secured listener is the first thing
        // to tell (a second one would otherwise read as a second client
        // listener).
        self.check_protocols(&self.listeners)?;
        let quorum = self.quorum()?;
        let client = quorum.client_listener().clone();
        let security_protocols: Vec<(String, String)> = quorum
            .listeners
            .iter()
            .map(|l| (l.name.clone(), self.security_protocol(&l.name).to_string()))
            .collect();
        let client_value = client.render();
        self.listen = resolve(
            "listeners",
            &client_value,
            &self.origin_of(&["listeners", "listen"]),
            &client.host,
            client.port,
        )?;
        let named_advertise = |name: &str| {
            quorum
                .advertised_listeners
                .iter()
                .find(|a| a.name == name)
                .map(|a| (a.host.clone(), a.port))
        };
        let listener_address = reachable(self.listen);
        let (advertise_host, advertise_port) = self
            .advertise
            .clone()
            .or(named_advertise(&client.name))
            .unwrap_or_else(|| listener_address.clone());
        let (broker_host, broker_port) = self
            .balancer_broker_address
            .clone()
            .unwrap_or(listener_address);
        let mut listeners = Vec::new();
        for named in quorum.client_listeners() {
            let (address, advertised) = if named.name == client.name {
                (self.listen, (advertise_host.clone(), advertise_port))
            } else {
                let address = resolve(
                    "listeners",
                    &named.render(),
                    &self.origin_of(&["listeners"]),
                    &named.host,
                    named.port,
                )?;
                let advertised = named_advertise(&named.name).unwrap_or_else(|| reachable(address));
                (address, advertised)
            };
            listeners.push(std::sync::Arc::new(
                self.listener(named, address, advertised)?,
            ));
        }
        if listeners.iter().all(|l| l.tls.is_none()) && !self.ssl_settings.is_empty() {
            tracing::warn!(
                "ssl.* settings given, but no listener is SSL or SASL_SSL: they are not used"
            );
        }
        let in_cluster = !quorum.roles.controller
            || quorum.voters.iter().any(|v| v.id != self.node_id)
            || !quorum.bootstrap_servers.is_empty();
        let inter_broker = self.inter_broker(&quorum, &listeners, in_cluster)?;
        let controller_security = if in_cluster {
            self.controller_security(&quorum)?
        } else {
            ControllerSecurity::default()
        };
        let frame_bytes_max = self
            .frame_bytes_max
            .unwrap_or(FRAME_OVERHEAD_BYTES + self.message_max_bytes as usize);
        // A cpuset without a core count runs one executor per CPU in it;
        // with one, the executors may not outnumber its CPUs.
        let cores = match (self.cpuset.len(), self.cores_set) {
            (0, _) => self.cores,
            (cpus, false) => cpus,
            (cpus, true) if self.cores > cpus => {
                return Err(invalid(
                    "cores",
                    &self.cores.to_string(),
                    &self.cores_source,
                    format!(
                        "more executors than the {cpus} CPUs of strom.cpuset: each needs a CPU of its own"
                    ),
                ))
            }
            (_, true) => self.cores,
        };
        Ok(BrokerConfig {
            node_id: self.node_id,
            listen: self.listen,
            listeners,
            inter_broker,
            controller_security,
            security_protocols,
            authorizer: self.authorizer_enabled.then(|| {
                std::sync::Arc::new(crate::authorizer::Authorizer {
                    super_users: self.super_users.clone(),
                    allow_if_no_acl: self.allow_everyone_if_no_acl,
                })
            }),
            advertise_host,
            advertise_port,
            data_dir: self.data_dir,
            cores,
            cpuset: self.cpuset,
            auto_create_topics: self.auto_create_topics,
            num_partitions: self.num_partitions,
            default_replication_factor: self.default_replication_factor,
            offsets_replication_factor: self.offsets_replication_factor,
            delete_topic_enable: self.delete_topic_enable,
            message_max_bytes: self.message_max_bytes,
            frame_bytes_max,
            queued_request_bytes_max: self.queued_request_bytes_max,
            queued_response_bytes_max: self.queued_response_bytes_max,
            connection_response_bytes_max: self.connection_response_bytes_max,
            connections_max_idle_ms: self.connections_max_idle_ms,
            request_receive_timeout_ms: self.request_receive_timeout_ms,
            io_memory_bytes: self.io_memory_bytes,
            spin_before_park_us: self.spin_before_park_us,
            journal_chunk_bytes_max: self.journal_chunk_bytes_max,
            retention_check_interval_ms: self.retention_check_interval_ms,
            cleaner: self.cleaner,
            transactions: self.transactions,
            producer_id_expiration_ms: self.producer_id_expiration_ms,
            cluster_timing: self.cluster_timing,
            metadata_snapshot_bytes: self.metadata_snapshot_bytes,
            topic_defaults: self.topic_defaults,
            admin_listen: self.admin_listen,
            admin_listen_required: self.admin_listen_required,
            io_properties: self.io_properties,
            groups: self.groups,
            log_format: self.log_format,
            metrics_partition_labels: self.metrics_partition_labels,
            balancer_enable: self.balancer_enable,
            balancer_single_broker: self.balancer_single_broker,
            broker_host,
            broker_port,
            quorum,
            given: self.given,
        })
    }

    /// Where the last of `keys` was given, for errors of checks that
    /// involve several settings.
    fn origin_of(&self, keys: &[&str]) -> Source {
        self.given
            .iter()
            .rev()
            .find(|g| keys.contains(&g.key.as_str()))
            .map_or(Source::Default, |g| g.source.clone())
    }

    /// The security protocol of listener `name`: by
    /// `listener.security.protocol.map`, else Kafka's default map.
    fn security_protocol(&self, name: &str) -> &str {
        self.security_protocol_map
            .iter()
            .find(|(n, _)| n == name)
            .map_or_else(|| default_security_protocol(name), |(_, p)| p.as_str())
    }

    /// Refuses a listener whose security protocol (by its name, through
    /// `listener.security.protocol.map` or Kafka's default map) is not
    /// served: SASL anywhere, and SSL on a controller listener (the
    /// controller channel is PLAINTEXT).
    fn check_protocols(&self, listeners: &[NamedAddress]) -> Result<(), ConfigError> {
        for listener in listeners {
            let protocol = self.security_protocol(&listener.name);
            let why = if !SERVED_PROTOCOLS.contains(&protocol) {
                not_served(protocol)
            } else {
                continue;
            };
            return Err(invalid(
                "listeners",
                &kraft_config::render_named(listeners),
                &self.origin_of(&["listeners"]),
                format!("the listener {}: {why}", listener.name),
            ));
        }
        Ok(())
    }

    /// One listener clients connect to, with its security.
    fn listener(
        &self,
        named: &NamedAddress,
        address: SocketAddr,
        (advertise_host, advertise_port): (String, u16),
    ) -> Result<Listener, ConfigError> {
        let (tls, ssl_settings) = self.client_tls(named)?;
        let sasl = self.client_sasl(named)?;
        let principal_mapper = match tls {
            Some(_) => Some(self.principal_mapper(&ssl_settings)?),
            None => None,
        };
        Ok(Listener {
            name: named.name.clone(),
            protocol: self.security_protocol(&named.name).to_string(),
            address,
            advertise_host,
            advertise_port,
            tls,
            ssl_settings,
            sasl,
            principal_mapper,
        })
    }

    /// How this broker connects to the others (in a cluster): the listener
    /// `inter.broker.listener.name` (or `security.inter.broker.protocol`)
    /// names, else the first client listener, with TLS and SASL as that
    /// listener asks.
    fn inter_broker(
        &self,
        quorum: &Quorum,
        listeners: &[std::sync::Arc<Listener>],
        in_cluster: bool,
    ) -> Result<InterBroker, ConfigError> {
        let names = || {
            listeners
                .iter()
                .map(|l| l.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let listener = match &self.inter_broker_listener {
            None => &listeners[0],
            Some(InterBrokerChoice::Name(name)) => {
                let key = "inter.broker.listener.name";
                let refuse = |why: String| invalid(key, name, &self.origin_of(&[key]), why);
                if quorum.is_controller_listener(name) {
                    return Err(refuse(format!(
                        "{name} is a controller listener; brokers talk to each other on a \
                         client listener ({})",
                        names()
                    )));
                }
                listeners.iter().find(|l| l.name == *name).ok_or_else(|| {
                    refuse(format!("no listener {name} in listeners ({})", names()))
                })?
            }
            Some(InterBrokerChoice::Protocol(protocol)) => {
                let key = "security.inter.broker.protocol";
                listeners
                    .iter()
                    .find(|l| l.protocol == *protocol)
                    .ok_or_else(|| {
                        invalid(
                            key,
                            protocol,
                            &self.origin_of(&[key]),
                            format!("no {protocol} listener in listeners ({})", names()),
                        )
                    })?
            }
        };
        let mut inter_broker = InterBroker {
            listener: listener.name.clone(),
            protocol: listener.protocol.clone(),
            tls: None,
            sasl: None,
        };
        if !in_cluster {
            return Ok(inter_broker);
        }
        let about = |key: &str, value: &str, why: String| {
            invalid(
                key,
                value,
                &self.origin_of(&[key]),
                format!(
                    "the inter-broker listener {} ({}): {why}",
                    listener.name, listener.protocol
                ),
            )
        };
        if listener.tls.is_some() {
            let settings = crate::tls::TlsSettings {
                values: listener.ssl_settings.clone(),
            };
            let tls = crate::tls::client_config(&settings).map_err(|(key, why)| {
                about(
                    &key,
                    "",
                    format!("a broker checks the others' certificates with it: {why}"),
                )
            })?;
            inter_broker.tls = Some(tls);
        }
        if let Some(sasl) = &listener.sasl {
            let key = "sasl.mechanism.inter.broker.protocol";
            let Some(mechanism) = self.inter_broker_mechanism.clone() else {
                return Err(about(
                    key,
                    "",
                    format!(
                        "name the mechanism brokers authenticate with ({})",
                        sasl.mechanisms.join(", ")
                    ),
                ));
            };
            if !sasl.mechanisms.contains(&mechanism) {
                return Err(about(
                    key,
                    &mechanism,
                    format!(
                        "the listener enables {} only (sasl.enabled.mechanisms)",
                        sasl.mechanisms.join(", ")
                    ),
                ));
            }
            let login = self
                .jaas_login(&listener.name, &mechanism)
                .map_err(|(key, why)| about(&key, "(hidden)", why))?;
            inter_broker.sasl = Some(login);
        }
        Ok(inter_broker)
    }

    /// A TLS listener's principal mapping (`ssl.principal.mapping.rules`
    /// of its settings; Kafka's DEFAULT without).
    fn principal_mapper(
        &self,
        settings: &[(String, String)],
    ) -> Result<std::sync::Arc<crate::principal::PrincipalMapper>, ConfigError> {
        let mapper = match settings
            .iter()
            .rev()
            .find(|(k, _)| k == "ssl.principal.mapping.rules")
        {
            Some((key, rules)) => crate::principal::PrincipalMapper::parse(rules)
                .map_err(|why| invalid(key, rules, &self.origin_of(&[key.as_str()]), why))?,
            None => crate::principal::PrincipalMapper::default(),
        };
        Ok(std::sync::Arc::new(mapper))
    }

    /// The login this node shows on `listener` with `mechanism`: the
    /// username and password of the listener's
    /// `listener.name.<name>.<mechanism>.sasl.jaas.config`; else that key
    /// and why.
    fn jaas_login(
        &self,
        listener: &str,
        mechanism: &str,
    ) -> Result<protocol::client::SaslLogin, (String, String)> {
        let login_key = format!("{}.sasl.jaas.config", mechanism.to_ascii_lowercase());
        let prefixed = format!(
            "listener.name.{}.{login_key}",
            listener.to_ascii_lowercase()
        );
        let jaas = self
            .sasl_settings
            .iter()
            .rev()
            .find(|(l, k, _)| l.as_deref() == Some(listener) && *k == login_key)
            .map(|(_, _, v)| v.as_str())
            .ok_or_else(|| {
                (
                    prefixed.clone(),
                    format!("this node logs in to the others with the username and password of {prefixed}"),
                )
            })?;
        let (user, password) =
            crate::sasl::client_login(jaas).map_err(|why| (prefixed.clone(), why))?;
        Ok(protocol::client::SaslLogin {
            mechanism: mechanism.to_string(),
            user,
            password,
        })
    }

    /// The controller listener's security: served on it by a voter (whose
    /// `listeners` has it), shown to it by every node of the cluster.
    fn controller_security(&self, quorum: &Quorum) -> Result<ControllerSecurity, ConfigError> {
        let name = quorum
            .controller_listener_names
            .first()
            .cloned()
            .unwrap_or_else(|| kraft_config::CONTROLLER_LISTENER_NAMES_DEFAULT.to_string());
        let protocol = self.security_protocol(&name).to_string();
        let named = quorum
            .listeners
            .iter()
            .find(|l| l.name == name)
            .cloned()
            .unwrap_or(NamedAddress {
                name: name.clone(),
                host: String::new(),
                port: 0,
            });
        let serves = quorum.listeners.iter().any(|l| l.name == name);
        let about = |key: &str, value: &str, why: String| {
            invalid(
                key,
                value,
                &self.origin_of(&[key]),
                format!("the controller listener {name} ({protocol}): {why}"),
            )
        };
        let mut security = ControllerSecurity {
            listener: name.clone(),
            protocol: protocol.clone(),
            ..ControllerSecurity::default()
        };
        if matches!(protocol.as_str(), "SSL" | "SASL_SSL") {
            let (server_tls, settings) = self.client_tls(&named)?;
            if serves {
                security.server_tls = server_tls.map(|tls| tls.current());
                security.principal_mapper = Some(self.principal_mapper(&settings)?);
            }
            let client = crate::tls::client_config(&crate::tls::TlsSettings { values: settings })
                .map_err(|(key, why)| {
                about(
                    &key,
                    "",
                    format!("a node checks the voters' certificates with it: {why}"),
                )
            })?;
            security.client_tls = Some(client);
        }
        if protocol.starts_with("SASL_") {
            let key = "sasl.mechanism.controller.protocol";
            if self.controller_mechanism.is_none() {
                return Err(about(
                    key,
                    "",
                    "name the mechanism nodes authenticate with on it: PLAIN".to_string(),
                ));
            }
            if serves {
                let sasl = self.client_sasl(&named)?.expect("a SASL listener");
                if !sasl.mechanisms.iter().any(|m| m == "PLAIN") {
                    return Err(about(
                        "sasl.enabled.mechanisms",
                        &sasl.mechanisms.join(","),
                        "enable PLAIN on it: nodes authenticate with PLAIN there".to_string(),
                    ));
                }
                security.sasl = Some(sasl);
            }
            let login = self
                .jaas_login(&name, "PLAIN")
                .map_err(|(key, why)| about(&key, "(hidden)", why))?;
            security.login = Some(login);
        }
        Ok(security)
    }

    /// The client listener's SASL configuration when its protocol is
    /// SASL_PLAINTEXT or SASL_SSL (its own `listener.name.<name>.` settings
    /// over the plain ones).
    fn client_sasl(
        &self,
        client: &NamedAddress,
    ) -> Result<Option<std::sync::Arc<crate::sasl::SaslConfig>>, ConfigError> {
        let protocol = self.security_protocol(&client.name);
        if !protocol.starts_with("SASL_") {
            return Ok(None);
        }
        let find = |key: &str| {
            let own = self
                .sasl_settings
                .iter()
                .rev()
                .find(|(l, k, _)| l.as_deref() == Some(client.name.as_str()) && k == key);
            let plain = self
                .sasl_settings
                .iter()
                .rev()
                .find(|(l, k, _)| l.is_none() && k == key);
            own.or(plain).map(|(_, _, v)| v.as_str())
        };
        let mut config = crate::sasl::SaslConfig::new(
            find("sasl.enabled.mechanisms"),
            find("plain.sasl.jaas.config"),
            find("connections.max.reauth.ms"),
        );
        if let Ok(sasl) = &mut config {
            if sasl.mechanisms.iter().any(|m| m == "OAUTHBEARER") {
                let validator = crate::oauth::OauthValidator::from_settings(|key| {
                    find(key).map(str::to_string)
                })
                .map_err(|(key, why)| {
                    let shown = if key.ends_with("jaas.config") {
                        "(hidden)".to_string()
                    } else {
                        find(&key).unwrap_or("").to_string()
                    };
                    invalid(
                        &key,
                        &shown,
                        &self.origin_of(&[key.as_str()]),
                        format!("the {protocol} listener {}: {why}", client.name),
                    )
                })?;
                sasl.oauth = Some(std::sync::Arc::new(validator));
            }
        }
        config
            .map(|config| Some(std::sync::Arc::new(config)))
            .map_err(|(key, why)| {
                let key = key.replace("<name>", &client.name.to_ascii_lowercase());
                invalid(
                    &key,
                    if key.ends_with("jaas.config") {
                        "(hidden)"
                    } else {
                        find(&key).or(find("sasl.enabled.mechanisms")).unwrap_or("")
                    },
                    &self.origin_of(&[key.as_str()]),
                    format!("the {protocol} listener {}: {why}", client.name),
                )
            })
    }

    /// The client listener's TLS configuration when its protocol is SSL
    /// (its `ssl.*` settings, its `listener.name.<name>.ssl.*` ones over
    /// them); `None` for PLAINTEXT. TLS settings that no listener uses are
    /// logged as unused.
    fn client_tls(&self, client: &NamedAddress) -> Result<ClientTls, ConfigError> {
        let serves_tls = matches!(self.security_protocol(&client.name), "SSL" | "SASL_SSL");
        let mut settings = crate::tls::TlsSettings::default();
        for (listener, key, value) in &self.ssl_settings {
            match listener {
                None => settings.values.insert(0, (key.clone(), value.clone())),
                Some(name) if *name == client.name => {
                    settings.values.push((key.clone(), value.clone()))
                }
                Some(_) => {}
            }
        }
        if !serves_tls {
            return Ok((None, settings.values));
        }
        crate::tls::ServerTls::new(settings.clone())
            .map(|tls| (Some(std::sync::Arc::new(tls)), settings.values.clone()))
            .map_err(|(key, why)| {
                let value = settings
                    .values
                    .iter()
                    .rev()
                    .find(|(k, _)| *k == key)
                    .map_or(String::new(), |(_, v)| v.clone());
                let shown = if key.contains("key") && !key.ends_with("location") {
                    "(hidden)".to_string()
                } else {
                    value
                };
                invalid(
                    &key,
                    &shown,
                    &self.origin_of(&[key.as_str()]),
                    format!(
                        "the {} listener {}: {why}",
                        self.security_protocol(&client.name),
                        client.name
                    ),
                )
            })
    }

    /// The KRaft settings together, checked: a bare client address given
    /// after named listeners replaces the client listener's.
    fn quorum(&self) -> Result<Quorum, ConfigError> {
        let mut quorum = Quorum {
            roles: self.roles,
            voters: self.voters.clone(),
            bootstrap_servers: self.bootstrap_servers.clone(),
            listeners: self.listeners.clone(),
            controller_listener_names: self.controller_listener_names.clone(),
            advertised_listeners: self.advertised_listeners.clone(),
            rack: self.rack.clone(),
        };
        if let Some((host, port)) = &self.client_listen {
            let client = quorum
                .listeners
                .iter()
                .position(|l| !quorum.is_controller_listener(&l.name));
            let address = NamedAddress {
                name: kraft_config::CLIENT_LISTENER_NAME_DEFAULT.to_string(),
                host: host.clone(),
                port: *port,
            };
            match client {
                Some(i) => {
                    quorum.listeners[i].host = host.clone();
                    quorum.listeners[i].port = *port;
                }
                None => quorum.listeners.insert(0, address),
            }
        }
        quorum.check(self.node_id).map_err(|error| {
            let value = match error.key {
                "listeners" => kraft_config::render_named(&quorum.listeners),
                "advertised.listeners" => kraft_config::render_named(&quorum.advertised_listeners),
                "controller.quorum.voters" => kraft_config::render_voters(&quorum.voters),
                "process.roles" => quorum.roles.render(),
                _ => String::new(),
            };
            let keys: &[&str] = match error.key {
                "listeners" => &["listeners", "listen", "controller.listener.names"],
                other => &[other][..],
            };
            invalid(error.key, &value, &self.origin_of(keys), error.reason)
        })?;
        Ok(quorum)
    }
}

/// The first address `host:port` resolves to; errors name `key`.
/// The address other processes on this host reach `address` at: a
/// wildcard address is reached at 127.0.0.1.
fn reachable(address: SocketAddr) -> (String, u16) {
    let ip = address.ip();
    let host = if ip.is_unspecified() {
        "127.0.0.1".to_string()
    } else {
        ip.to_string()
    };
    (host, address.port())
}

fn resolve(
    key: &str,
    value: &str,
    source: &Source,
    host: &str,
    port: u16,
) -> Result<SocketAddr, ConfigError> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| invalid(key, value, source, e.to_string()))?
        .next()
        .ok_or_else(|| invalid(key, value, source, "resolves to no address"))
}

/// Flattens a TOML table into dotted keys: `log.retention.hours = 1`,
/// `[log.retention] hours = 1` and `"log.retention.hours" = 1` are the same.
fn flatten(
    prefix: &str,
    table: &toml::Table,
    path: &Path,
    out: &mut Vec<(String, String)>,
) -> Result<(), ConfigError> {
    for (key, value) in table {
        let full = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        let text = match value {
            toml::Value::Table(inner) => {
                flatten(&full, inner, path, out)?;
                continue;
            }
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Float(f) => f.to_string(),
            other => {
                return Err(ConfigError::InvalidValue {
                    key: full,
                    value: other.to_string(),
                    origin: Source::File(path.to_path_buf()),
                    reason: "expected a string, number or boolean".to_string(),
                })
            }
        };
        out.push((full, text));
    }
    Ok(())
}

/// Reads the settings of a TOML config file as dotted keys and strings.
pub fn read_file(path: &Path) -> Result<Vec<(String, String)>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    let mut out = Vec::new();
    flatten("", &table, path, &mut out)?;
    Ok(out)
}

/// Builds the configuration: defaults, then the file, then the flags.
pub fn load(flags: &Flags) -> Result<BrokerConfig, ConfigError> {
    let mut builder = Builder::new();
    // Keys set by the file or flags, which io-properties.toml must not override.
    let mut explicit: Vec<String> = flags.settings.iter().map(|(k, _)| k.clone()).collect();
    if let Some(path) = &flags.config_file {
        let source = Source::File(path.clone());
        for (key, value) in read_file(path)? {
            builder.apply(&key, &value, &source)?;
            explicit.push(key);
        }
    }
    let source = Source::Flag;
    let named = [
        (
            "data.dir",
            flags.data_dir.as_ref().map(|p| p.display().to_string()),
        ),
        ("listen", flags.listen.clone()),
        ("advertise", flags.advertise.clone()),
        ("node.id", flags.node_id.clone()),
        ("cores", flags.cores.clone()),
        ("strom.cpuset", flags.cpuset.clone()),
        ("admin.listen", flags.admin_listen.clone()),
    ];
    for (key, value) in named {
        if let Some(value) = value {
            builder.apply(key, &value, &source)?;
        }
    }
    for (key, value) in &flags.settings {
        builder.apply(key, value, &source)?;
    }
    builder.apply_io_properties(&explicit)?;
    builder.finish()
}

/// Default flags plus `--set KEY=VALUE` settings; for this module's tests and
/// the config reference's.
#[cfg(test)]
pub(crate) fn flags_with(settings: &[(&str, &str)]) -> Flags {
    Flags {
        settings: settings
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Flags::default()
    }
}

/// The log cleaner's settings, Kafka's `log.cleaner.*`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CleanerConfig {
    /// `log.cleaner.enable`: clean compacted topics at all.
    pub enable: bool,
    /// `log.cleaner.backoff.ms`: how often each core looks for a log to clean.
    pub backoff_ms: u64,
    /// `log.cleaner.dedupe.buffer.size`: the key map's memory, shared by
    /// the cores (each core's cleaner takes its share).
    pub dedupe_buffer_bytes: u64,
    /// `log.cleaner.io.max.bytes.per.second`: what all cores' cleaners
    /// read and write at most, together.
    pub io_bytes_per_second: f64,
}

impl CleanerConfig {
    pub const DEDUPE_BUFFER_BYTES_MIN: u64 = 1 << 20;
    /// What one key of the map costs: a 16-byte hash, an 8-byte offset
    /// and the hash table's own share.
    pub const KEY_MAP_ENTRY_BYTES: u64 = 40;
}

impl Default for CleanerConfig {
    fn default() -> Self {
        Self {
            enable: true,
            backoff_ms: 15_000,
            dedupe_buffer_bytes: 128 << 20,
            io_bytes_per_second: f64::MAX,
        }
    }
}

/// The transaction coordinator's settings, Kafka's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransactionConfig {
    /// `transaction.state.log.num.partitions`.
    pub state_partitions: i32,
    /// `transaction.state.log.replication.factor` (capped by the live
    /// brokers when `__transaction_state` is created).
    pub state_replication_factor: i16,
    /// `transaction.state.log.min.isr`: the topic's `min.insync.replicas`.
    pub state_min_isr: i32,
    /// `transaction.max.timeout.ms`: the longest `transaction.timeout.ms`
    /// a producer may ask for.
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`: an id idle this long is removed.
    pub id_expiration_ms: i64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`: how
    /// often the coordinator looks for transactions past their timeout.
    pub abort_check_ms: u64,
}

impl Default for TransactionConfig {
    fn default() -> Self {
        Self {
            state_partitions: 50,
            state_replication_factor: 3,
            state_min_isr: 2,
            max_timeout_ms: 900_000,
            id_expiration_ms: 604_800_000,
            abort_check_ms: 10_000,
        }
    }
}

/// Gives each TLS listener of `config` the keystore settings `image` holds
/// for this node (at start, and when they change): a keystore that does
/// not serve is logged and the one in force kept. `force` rereads the
/// files of the listeners named in `only` even if unchanged.
pub fn apply_keystores(
    config: &BrokerConfig,
    image: &crate::metadata::MetadataImage,
    force: bool,
    only: &[String],
) {
    for listener in &config.listeners {
        let Some(tls) = &listener.tls else { continue };
        let forced = force && only.contains(&listener.name);
        let overrides = crate::tls::overrides_for(image, config.node_id, &listener.name);
        match tls.apply(overrides, forced) {
            Ok(true) => {
                tracing::info!(listener = %listener.name, "TLS keystore reloaded: new connections get its certificate")
            }
            Ok(false) => {}
            Err((key, why)) => tracing::error!(
                listener = %listener.name,
                setting = %key,
                reason = %why,
                "the new TLS keystore does not serve: the listener keeps the one in force"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpusets_parse_as_linux_lists_them_and_bad_ones_say_why() {
        assert_eq!(parse_cpuset("0-3,8", 16).unwrap(), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_cpuset(" 5, 1 ", 8).unwrap(), vec![5, 1]);
        assert!(parse_cpuset("8", 8).unwrap_err().contains("not online"));
        assert!(parse_cpuset("3-1", 8).unwrap_err().contains("backwards"));
        assert!(parse_cpuset("1,1", 8).unwrap_err().contains("twice"));
        assert!(parse_cpuset("a", 8)
            .unwrap_err()
            .contains("not a CPU number"));
        assert!(parse_cpuset("", 8).is_err());
    }

    #[test]
    fn a_cpuset_gives_the_core_count_unless_cores_is_set() {
        if online_cores() < 2 {
            eprintln!("SKIPPED: one online CPU: a two-CPU cpuset cannot be named");
            return;
        }
        let config = load(&flags_with(&[("strom.cpuset", "1,0")])).unwrap();
        assert_eq!((config.cores, config.cpuset.clone()), (2, vec![1, 0]));
        let config = load(&flags_with(&[("strom.cpuset", "1,0"), ("cores", "1")])).unwrap();
        assert_eq!(config.cores, 1);
        let error = load(&flags_with(&[("strom.cpuset", "1"), ("cores", "2")]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("more executors"), "{error}");
    }

    #[test]
    fn defaults_start_a_single_node() {
        let config = load(&Flags::default()).unwrap();
        assert_eq!(config.listen.to_string(), LISTEN_DEFAULT);
        assert_eq!(config.advertise_port, 9092);
        assert_eq!(config.data_dir, PathBuf::from(DATA_DIR_DEFAULT));
        assert!(config.auto_create_topics);
        assert_eq!(config.num_partitions, 1);
        assert_eq!(config.frame_bytes_max, FRAME_OVERHEAD_BYTES + 1_048_588);
    }

    #[test]
    fn file_then_flags_override() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("strom.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:19092\"\nnum.partitions = 4\n\"auto.create.topics.enable\" = false\n[log.retention]\nhours = 2\n",
        )
        .unwrap();
        let mut flags = flags_with(&[("num.partitions", "6")]);
        flags.config_file = Some(path);
        flags.node_id = Some("7".to_string());
        let config = load(&flags).unwrap();
        assert_eq!(config.listen.port(), 19092);
        assert_eq!(config.num_partitions, 6);
        assert_eq!(config.node_id, 7);
        assert!(!config.auto_create_topics);
        assert_eq!(
            config.topic_defaults.get("retention.ms").as_deref(),
            Some("7200000")
        );
    }

    #[test]
    fn retention_ms_beats_hours_in_any_order() {
        let config = load(&flags_with(&[
            ("log.retention.ms", "1234"),
            ("log.retention.hours", "5"),
        ]))
        .unwrap();
        assert_eq!(
            config.topic_defaults.get("retention.ms").as_deref(),
            Some("1234")
        );
    }

    #[test]
    fn errors_name_the_key() {
        let error = load(&flags_with(&[("no.such.thing", "1")]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("no.such.thing"), "{error}");
        let error = load(&flags_with(&[("num.partitions", "many")]))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("num.partitions") && error.contains("many"),
            "{error}"
        );
        let error = load(&flags_with(&[("log.segment.bytes", "-5")]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("log.segment.bytes"), "{error}");
        let error = load(&flags_with(&[("listen", "nowhere")]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("listen"), "{error}");
    }

    #[test]
    fn every_security_protocol_is_served_on_the_client_listener_with_its_settings() {
        let check = |settings: &[(&str, &str)], refused_for: Option<&str>| {
            let result = load(&flags_with(settings));
            match refused_for {
                None => {
                    result.unwrap_or_else(|e| panic!("{settings:?}: {e}"));
                }
                Some(wanted) => {
                    let error = result.expect_err("refused").to_string();
                    assert!(error.contains(wanted), "{settings:?}: {error}");
                }
            }
        };
        // SSL needs its key and certificate.
        check(
            &[("listeners", "SSL://127.0.0.1:9093")],
            Some("ssl.keystore.location"),
        );
        check(
            &[
                ("listeners", "CLIENTS://127.0.0.1:9093"),
                ("listener.security.protocol.map", "CLIENTS:SSL"),
                (
                    "listener.name.clients.ssl.keystore.location",
                    "/nonexistent.pem",
                ),
            ],
            Some("/nonexistent.pem"),
        );
        check(
            &[
                ("listeners", "SSL://127.0.0.1:9093"),
                ("ssl.keystore.type", "PKCS12"),
                ("ssl.keystore.location", "/k.p12"),
            ],
            Some("ssl.keystore.type"),
        );
        // SASL needs a mechanism served and its users.
        check(
            &[("listeners", "SASL_PLAINTEXT://127.0.0.1:9093")],
            Some("sasl.enabled.mechanisms"),
        );
        check(
            &[
                ("listeners", "SASL_PLAINTEXT://127.0.0.1:9093"),
                ("sasl.enabled.mechanisms", "GSSAPI"),
            ],
            Some("not served yet"),
        );
        // OAUTHBEARER: unsecured tokens by default, keys from a local file.
        check(
            &[
                ("listeners", "SASL_PLAINTEXT://127.0.0.1:9093"),
                ("sasl.enabled.mechanisms", "OAUTHBEARER"),
            ],
            None,
        );
        check(
            &[
                ("listeners", "SASL_PLAINTEXT://127.0.0.1:9093"),
                ("sasl.enabled.mechanisms", "OAUTHBEARER"),
                (
                    "sasl.oauthbearer.jwks.endpoint.url",
                    "https://idp.example/keys",
                ),
            ],
            Some("only file:// URLs are served"),
        );
        // SCRAM's credentials are in the metadata: nothing more to give.
        check(
            &[
                ("listeners", "SASL_PLAINTEXT://127.0.0.1:9093"),
                ("sasl.enabled.mechanisms", "SCRAM-SHA-512,SCRAM-SHA-256"),
            ],
            None,
        );
        check(
            &[
                ("listeners", "SASL_PLAINTEXT://127.0.0.1:9093"),
                ("sasl.enabled.mechanisms", "PLAIN"),
            ],
            Some("listener.name.sasl_plaintext.plain.sasl.jaas.config"),
        );
        check(
            &[
                ("listeners", "SASL_PLAINTEXT://127.0.0.1:9093"),
                (
                    "listener.name.sasl_plaintext.sasl.enabled.mechanisms",
                    "PLAIN",
                ),
                (
                    "listener.name.sasl_plaintext.plain.sasl.jaas.config",
                    "org.apache.kafka.common.security.plain.PlainLoginModule required \
                     user_alice=\"secret\";",
                ),
            ],
            None,
        );
        // SASL_SSL needs both.
        check(
            &[
                ("listeners", "SASL_SSL://127.0.0.1:9093"),
                ("sasl.enabled.mechanisms", "PLAIN"),
            ],
            Some("ssl.keystore.location"),
        );
        // A controller listener is PLAINTEXT.
        check(
            &[(
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
            )],
            None,
        );
        check(
            &[("listen", "SSL://127.0.0.1:9093")],
            Some("a bare client address is a PLAINTEXT listener"),
        );
        check(
            &[("advertise", "SASL_SSL://broker:9093")],
            Some("a bare client address is a PLAINTEXT listener"),
        );
        // Names map to plaintext by the map or by default.
        check(&[("listeners", "PLAINTEXT://127.0.0.1:9092")], None);
        check(&[("listen", "PLAINTEXT://127.0.0.1:9092")], None);
        check(&[("listeners", "INTERNAL://127.0.0.1:9092")], None);
        check(
            &[
                (
                    "listener.security.protocol.map",
                    "SSL:PLAINTEXT,CONTROLLER:PLAINTEXT",
                ),
                ("listeners", "SSL://127.0.0.1:9092"),
            ],
            None,
        );
        let error = load(&flags_with(&[("listener.security.protocol.map", "A:TLS")]))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
            "{error}"
        );
    }
}
