//! The admin and console tools of the `strom` binary (`strom topic`,
//! `strom produce`, `strom consume`, `strom group`, `strom config`), built
//! on `protocol::client` so they work against any Kafka broker. Each runs on
//! one glommio executor on the calling thread; a failure prints one line on
//! stderr and exits 1. Everything they print goes through [`out!`] and
//! [`outln!`], so a reader that goes away (`strom topic list | head -1`)
//! ends the tool quietly, as it ends any Unix tool.

/// `print!` that ends the tool quietly (status 0) when stdout's reader is
/// gone, instead of panicking as `print!` does.
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::write_stdout(format_args!($($arg)*)) };
}

/// `println!` that ends the tool quietly when stdout's reader is gone.
macro_rules! outln {
    () => { $crate::cli::write_stdout(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::cli::write_stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

pub mod config;
pub mod consume;
pub mod group;
pub mod produce;
pub mod repair;
pub mod status;
pub mod topic;

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, BrokerId, ListOffsetsRequest, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use protocol::client::{self, ClientConfig, Connection};

/// Exit code when the broker is unreachable or a request fails.
pub const EXIT_FAILURE: u8 = 1;
/// io memory of the tools' executor: small, so that it fits the memlock
/// limit of an unprivileged user (see docs/broker.md).
const IO_MEMORY_BYTES: usize = 1 << 20;

/// Metadata versions the tools speak (v1+: a null topic list means all).
/// The ListOffsets versions the tools speak.
const LIST_OFFSETS_VERSIONS: std::ops::RangeInclusive<i16> = 1..=7;

pub const METADATA_VERSIONS: std::ops::RangeInclusive<i16> = 1..=12;

/// The environment variable that gives the broker when no flag does.
pub const BOOTSTRAP_ENV: &str = "STROM_BOOTSTRAP";
/// Broker address when neither a flag nor `STROM_BOOTSTRAP` gives one.
const BOOTSTRAP_DEFAULT: &str = "127.0.0.1:9092";
/// Addresses a `--bootstrap` list may hold.
const BOOTSTRAP_ADDRESSES_MAX: usize = 64;
/// Port assumed when the address names only a host, as Kafka's clients do.
const PORT_DEFAULT: u16 = 9092;

/// Writes to stdout and flushes. A reader that went away (EPIPE, e.g.
/// `| head -1`) ends the process quietly with status 0: what was asked is
/// done and nobody reads the rest. Any other write error exits 1.
pub fn write_stdout(text: std::fmt::Arguments) {
    let mut stdout = std::io::stdout().lock();
    let written = stdout.write_fmt(text).and_then(|()| stdout.flush());
    if let Err(error) = written {
        exit_on_stdout_error(&error);
    }
}

/// Ends the process after a failed write to stdout: quietly (status 0)
/// when the reader is gone, else with one line and status 1.
pub fn exit_on_stdout_error(error: &std::io::Error) -> ! {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("strom: cannot write to stdout: {error}");
    std::process::exit(i32::from(EXIT_FAILURE));
}

/// Whether an error is stdout's reader going away (EPIPE).
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[derive(Args, Clone, Debug)]
pub struct ConnectArgs {
    /// Broker to connect to, or a comma-separated list tried in order; a
    /// host alone means port 9092 [default: $STROM_BOOTSTRAP, else
    /// 127.0.0.1:9092].
    #[arg(
        long,
        short = 'b',
        visible_alias = "bootstrap-server",
        value_name = "HOST[:PORT][,...]"
    )]
    pub bootstrap: Option<String>,
    /// How long to wait for the connection and for each response, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub timeout_ms: u64,
}

impl ConnectArgs {
    /// Connect settings for another broker (a group's coordinator).
    pub fn to(&self, address: String) -> ConnectArgs {
        ConnectArgs {
            bootstrap: Some(address),
            timeout_ms: self.timeout_ms,
        }
    }

    /// The brokers to try, in order: the flag, else `STROM_BOOTSTRAP`, else
    /// the default; a comma-separated list as Kafka's tools take; `:9092`
    /// added to a bare host.
    pub fn addresses(&self) -> anyhow::Result<Vec<String>> {
        let given = match &self.bootstrap {
            Some(flag) => flag.clone(),
            None => match std::env::var(BOOTSTRAP_ENV) {
                Ok(value) if !value.trim().is_empty() => value,
                Ok(_) => BOOTSTRAP_DEFAULT.to_string(),
                Err(std::env::VarError::NotPresent) => BOOTSTRAP_DEFAULT.to_string(),
                Err(std::env::VarError::NotUnicode(_)) => {
                    bail!("{BOOTSTRAP_ENV} is not valid UTF-8")
                }
            },
        };
        let addresses = given
            .split(',')
            .map(with_default_port)
            .collect::<anyhow::Result<Vec<String>>>()?;
        if addresses.len() > BOOTSTRAP_ADDRESSES_MAX {
            bail!(
                "at most {BOOTSTRAP_ADDRESSES_MAX} bootstrap addresses, got {}",
                addresses.len()
            );
        }
        Ok(addresses)
    }

    /// Connects to the first of the bootstrap brokers that answers.
    pub async fn connect(&self) -> anyhow::Result<Connection> {
        let timeout = Duration::from_millis(self.timeout_ms.max(1));
        let config = ClientConfig {
            client_id: "strom-cli".to_string(),
            software_name: "strom-cli".to_string(),
            connect_timeout: timeout,
            request_timeout: timeout,
            ..ClientConfig::default()
        };
        let mut failures = Vec::new();
        for address in self.addresses()? {
            match Connection::connect(&address, config.clone()).await {
                Ok(connection) => return Ok(connection),
                Err(error) => failures.push(error),
            }
        }
        match failures.len() {
            1 => Err(failures.remove(0).into()),
            _ => {
                let all: Vec<String> = failures.iter().map(ToString::to_string).collect();
                bail!("no bootstrap broker answered: {}", all.join("; "))
            }
        }
    }
}

/// `HOST` → `HOST:9092`, `[V6]` → `[V6]:9092`; `HOST:PORT`, `[V6]:PORT`
/// and a bare IPv6 address are kept as they are (a bare IPv6 address gets
/// brackets and the port).
pub fn with_default_port(address: &str) -> anyhow::Result<String> {
    let address = address.trim();
    if address.is_empty() {
        bail!("the broker address is empty");
    }
    if let Some(rest) = address.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((_, "")) => Ok(format!("{address}:{PORT_DEFAULT}")),
            Some((_, port)) if port.starts_with(':') => Ok(address.to_string()),
            _ => bail!("bad broker address {address:?}"),
        };
    }
    match address.matches(':').count() {
        0 => Ok(format!("{address}:{PORT_DEFAULT}")),
        1 => Ok(address.to_string()),
        _ if address.parse::<std::net::Ipv6Addr>().is_ok() => {
            Ok(format!("[{address}]:{PORT_DEFAULT}"))
        }
        _ => bail!("bad broker address {address:?}"),
    }
}

/// Runs a tool on a glommio executor on this thread and turns its result
/// into the exit code, printing any error as one line on stderr.
pub fn run<F>(tool: &str, future: F) -> ExitCode
where
    F: Future<Output = anyhow::Result<()>> + 'static,
{
    let executor = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .name("strom-cli")
        .io_memory(IO_MEMORY_BYTES)
        .make();
    let outcome = match executor {
        Ok(executor) => executor.run(future),
        Err(error) => Err(anyhow::anyhow!(
            "cannot start an io_uring executor: {error}"
        )),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("strom {tool}: {error:#}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

pub fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// Metadata for `topics` (`None`: every topic).
pub async fn metadata(
    connection: &mut Connection,
    topics: Option<&[String]>,
    auto_create: bool,
) -> anyhow::Result<MetadataResponse> {
    let version = connection.version::<MetadataRequest>(METADATA_VERSIONS)?;
    let request = MetadataRequest::default()
        .with_topics(topics.map(|names| {
            names
                .iter()
                .map(|name| MetadataRequestTopic::default().with_name(Some(topic_name(name))))
                .collect()
        }))
        .with_allow_auto_topic_creation(auto_create);
    Ok(connection.call(&request, version).await?)
}

/// The partition ids of one topic, sorted; fails with the broker's error
/// (UNKNOWN_TOPIC_OR_PARTITION) when it does not exist.
pub async fn partitions(
    connection: &mut Connection,
    topic: &str,
    auto_create: bool,
) -> anyhow::Result<Vec<i32>> {
    let response = metadata(connection, Some(&[topic.to_string()]), auto_create).await?;
    let Some(found) = response
        .topics
        .iter()
        .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some(topic))
    else {
        bail!("topic {topic} is not in the broker's metadata");
    };
    client::check_error(
        kafka_protocol::messages::ApiKey::Metadata,
        found.error_code,
        None,
    )
    .with_context(|| format!("topic {topic}"))?;
    let mut ids: Vec<i32> = found.partitions.iter().map(|p| p.partition_index).collect();
    ids.sort_unstable();
    if ids.is_empty() {
        bail!("topic {topic} has no partitions");
    }
    Ok(ids)
}

/// ListOffsets for every partition of `topic` at `timestamp` (-1 latest,
/// -2 earliest, else the first offset at or after it; -1 if none).
pub async fn list_offsets(
    connection: &mut Connection,
    topic: &str,
    partitions: &[i32],
    timestamp: i64,
) -> anyhow::Result<BTreeMap<i32, i64>> {
    let version = connection.version::<ListOffsetsRequest>(LIST_OFFSETS_VERSIONS)?;
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(
                partitions
                    .iter()
                    .map(|&p| {
                        ListOffsetsPartition::default()
                            .with_partition_index(p)
                            .with_current_leader_epoch(-1)
                            .with_timestamp(timestamp)
                    })
                    .collect(),
            )]);
    let response = connection.call(&request, version).await?;
    let mut offsets = BTreeMap::new();
    for t in &response.topics {
        for p in &t.partitions {
            client::check_error(ApiKey::ListOffsets, p.error_code, None)
                .with_context(|| format!("cannot list offsets of {topic}-{}", p.partition_index))?;
            offsets.insert(p.partition_index, p.offset);
        }
    }
    for p in partitions {
        if !offsets.contains_key(p) {
            bail!("the broker listed no offset for {topic}-{p}");
        }
    }
    Ok(offsets)
}

/// Parses `KEY=VALUE` (clap value parser).
pub fn key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.to_string()))
        }
        _ => Err(format!("expected KEY=VALUE, got {text:?}")),
    }
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
}
